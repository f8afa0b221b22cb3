// cuda/device.cu — device discovery, the CUDA MemoryBackend, and init().
#include <cstdio>
#include <mutex>

#include "cuda/allocator.h"
#include "cuda/common.cuh"
#include "cuda/cuda_device.h"
#include "engine/memory.h"

namespace ember::cuda {
namespace {

// Tensors on the device: memory from the caching allocator, copies ordered
// on the compute stream (device-to-host copies wait for it).
class CudaMemory final : public MemoryBackend {
 public:
  void* allocate(size_t nbytes, int) override { return nbytes ? device_allocate(nbytes) : nullptr; }
  void deallocate(void* ptr, size_t nbytes, int) override { device_deallocate(ptr, nbytes); }
  void copy_to_host(void* dst, const void* src, size_t n, int) override {
    CUDA_CHECK(cudaMemcpyAsync(dst, src, n, cudaMemcpyDeviceToHost, compute_stream()));
    CUDA_CHECK(cudaStreamSynchronize(compute_stream()));
  }
  void copy_from_host(void* dst, const void* src, size_t n, int) override {
    // A DMA when src is page-locked (init's pinned_host). Waiting for it lets
    // the caller free or reuse the host block at once.
    CUDA_CHECK(cudaMemcpyAsync(dst, src, n, cudaMemcpyHostToDevice, compute_stream()));
    CUDA_CHECK(cudaStreamSynchronize(compute_stream()));
  }
  void copy_on_device(void* dst, const void* src, size_t n, int) override {
    CUDA_CHECK(cudaMemcpyAsync(dst, src, n, cudaMemcpyDeviceToDevice, compute_stream()));
  }
  void set_zero(void* dst, size_t n, int) override { CUDA_CHECK(cudaMemsetAsync(dst, 0, n, compute_stream())); }
  void synchronize(int) override { CUDA_CHECK(cudaStreamSynchronize(compute_stream())); }
};

void* pinned_allocate(size_t n) {
  void* p = nullptr;
  return cudaMallocHost(&p, n) == cudaSuccess ? p : nullptr;
}
void pinned_release(void* p) { cudaFreeHost(p); }

Stream stream_getter(int) { return compute_stream(); }

}  // namespace

int device_count() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError();  // clear the error of a machine without a driver
    return 0;
  }
  return n;
}

std::string device_name(int index) {
  cudaDeviceProp prop;
  CUDA_CHECK(cudaGetDeviceProperties(&prop, index));
  char buf[320];
  std::snprintf(buf, sizeof(buf), "%s (sm_%d%d, %.1f GiB)", prop.name, prop.major, prop.minor,
                double(prop.totalGlobalMem) / double(1ull << 30));
  return buf;
}

bool is_simulated() {
#if defined(EMBER_CUDASIM)
  return true;
#else
  return false;
#endif
}

ConvBackend parse_conv_backend(const std::string& name) {
  if (name == "native") return ConvBackend::native;
  if (name == "cudnn") return ConvBackend::cudnn;
  fail(cat("unknown --conv '", name, "' (native or cudnn)"));
}

const char* conv_backend_name(ConvBackend b) { return b == ConvBackend::native ? "native" : "cudnn"; }

void init(int device_index, ConvBackend conv, bool pinned_host) {
  const int n = device_count();
  EMBER_CHECK(n > 0, "no usable CUDA device (no driver, no device, or CUDA_VISIBLE_DEVICES hides them)");
  EMBER_CHECK(device_index >= 0 && device_index < n, "--gpus ", device_index, ": this machine has ", n,
              " CUDA device(s)");
  EMBER_CHECK(device_index == 0, "--gpus ", device_index,
              ": one process drives device 0 (use CUDA_VISIBLE_DEVICES to pick another)");
  CUDA_CHECK(cudaSetDevice(device_index));
  const Kernels* table = conv == ConvBackend::cudnn ? cudnn_kernels() : &native_kernels();
  EMBER_CHECK(table, "--conv cudnn: this build has no cuDNN (", is_simulated() ? "the CUDA emulator" : "cuDNN not found",
              "); use --conv native");
  static CudaMemory memory;
  register_memory_backend(DeviceType::CUDA, &memory);
  register_stream_getter(DeviceType::CUDA, stream_getter);
  register_kernels(DeviceType::CUDA, table);
  if (pinned_host) set_host_block_source(pinned_allocate, pinned_release);
}

}  // namespace ember::cuda
