// tests/cuda/test_cuda_memory.cpp — tensors on a CUDA device: allocation, copies
// and zeroing round-trip through the CUDA memory backend. Runs only in CUDA
// builds, and only when a device is present (skipped, with the reason,
// otherwise: CPU-only machines and CI).
#include <doctest/doctest.h>

#include "engine/tensor.h"

#if defined(EMBER_CUDA)
#include "cuda/cuda_device.h"
#include "tests/cuda/cuda_test_env.h"

TEST_CASE("cuda memory: host -> device -> host round trip, zero, device copy" * ember::testing::kNeedsCudaDevice) {
  using namespace ember;
  REQUIRE(testing::cuda_device_present());
  cuda::init();
  MESSAGE("device 0: " << cuda::device_name(0));
  std::vector<double> values(1000);
  for (size_t i = 0; i < values.size(); ++i) values[i] = double(i) * 0.5 - 7.0;
  const Tensor host = Tensor::from_vector(values, {10, 100});
  const Tensor dev = host.to(Device::cuda(0));
  CHECK(dev.device() == Device::cuda(0));
  CHECK(dev.to_double_vector() == values);
  const Tensor copy = dev.clone();
  CHECK(copy.raw_data() != dev.raw_data());
  CHECK(copy.to_double_vector() == values);
  Tensor z = Tensor::zeros({3, 5}, DType::f32, Device::cuda(0));
  for (double v : z.to_double_vector()) CHECK(v == 0.0);
}
#endif
