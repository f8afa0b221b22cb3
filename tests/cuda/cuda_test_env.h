// tests/cuda/cuda_test_env.h — set-up shared by the tests of the CUDA backend.
//
// The tests in tests/cuda/ are built twice: into build/test_ember against the
// real CUDA runtime (decorated with kNeedsCudaDevice, they are skipped, with
// the reason printed, when no GPU is present) and into build/test_sim against
// the emulator (cuda/sim), where device 0 is always there, so they run. Each
// compares the CUDA table's kernels with the CPU table's on the same inputs.
#pragma once
#include <doctest/doctest.h>

#include <cstdio>
#include <vector>

#include "cuda/cuda_device.h"
#include "data/image_set.h"
#include "engine/rng.h"
#include "engine/tensor.h"
#include "net/resnet.h"
#include "ops/kernels.h"
#include "tests/support/kernel_coverage.h"
#include "tests/support/skip.h"

namespace ember::testing {

// Registers the native (hand-written) or the cuDNN/cuBLAS table for CUDA
// devices, through the counting wrapper of tests/support/kernel_coverage.h.
inline void select_native_kernels() { install_counting_table(DeviceType::CUDA, cuda::native_kernels()); }
inline void select_cudnn_kernels() { install_counting_table(DeviceType::CUDA, *cuda::cudnn_kernels()); }

// True when device 0 is there: a GPU, or the emulator in build/test_sim.
// Touches no device (a predicate for tests/support/skip.h, called from main()).
inline bool cuda_device_present() {
  static const bool present = cuda::device_count() > 0;
  return present;
}
// The decorator of every test that needs a device:
// TEST_CASE("cuda ..." * ember::testing::kNeedsCudaDevice).
inline constexpr needs kNeedsCudaDevice{"no CUDA device on this machine", cuda_device_present};

// True when a CUDA device (real or emulated) is registered with the engine;
// leaves the native kernels selected. Prints the reason once when there is none.
inline bool cuda_available() {
  static const bool available = [] {
    if (!cuda_device_present()) {
      std::printf("[cuda tests] no CUDA device on this machine: the CUDA backend is not tested\n");
      return false;
    }
    cuda::init(0, cuda::ConvBackend::native);
    std::printf("[cuda tests] device 0: %s\n", cuda::device_name(0).c_str());
    return true;
  }();
  if (available) select_native_kernels();
  return available;
}

// The table currently registered for CUDA devices.
inline const Kernels& cuda_table() { return kernels_for(Device::cuda(0)); }
inline const Kernels& cpu_table() { return cpu_kernels(); }
inline Stream cuda_stream() { return stream_for(Device::cuda(0)); }

// Host values -> a tensor on the device, and back.
inline Tensor to_cuda(const std::vector<double>& values, const Shape& shape, DType dt) {
  return Tensor::from_vector(values, shape, dt, Device::cuda(0));
}
inline std::vector<double> to_host(const Tensor& t) { return t.to_double_vector(); }

// ResNet-8 on 1x10x10 images, 5 classes: small enough for the emulator.
inline net::ResNetConfig tiny_resnet_config(DType dt) {
  net::ResNetConfig c;
  c.num_layers = 8;
  c.num_classes = 5;
  c.in_channels = 1;
  c.image_size = 10;
  c.dtype = dt;
  c.input_norm.channels = 1;
  c.input_norm.mean[0] = 0.3f;
  c.input_norm.inv_std[0] = 3.0f;
  return c;
}

// 48 images of 1x10x10 in 5 classes that a tiny ResNet separates in a few
// steps: class l's pixels are l*50 plus noise below 20.
inline data::ImageSet separable_image_set() {
  data::ImageSet set;
  set.count = 48, set.channels = 1, set.height = 10, set.width = 10, set.num_classes = 5, set.name = "synthetic";
  PhiloxStream rng(5, 6);
  for (int64_t i = 0; i < set.count; ++i) {
    const int64_t label = int64_t(rng.below(5));
    set.labels.push_back(label);
    for (int p = 0; p < 100; ++p) set.pixels.push_back(uint8_t(label * 50 + (rng.next_u32() % 20)));
  }
  return set;
}

}  // namespace ember::testing
