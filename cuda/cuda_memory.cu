// cuda/cuda_memory.cu — the CUDA MemoryBackend (engine/memory.h) and device queries.
#include <cstdio>
#include <mutex>

#include "cuda/cuda_check.h"
#include "cuda/cuda_device.h"
#include "engine/memory.h"

namespace ember::cuda {
namespace {

// Makes `index` the current device of the calling thread.
void use_device(int index) { CUDA_CHECK(cudaSetDevice(index)); }

class CudaMemory final : public MemoryBackend {
 public:
  void* allocate(size_t nbytes, int device) override {
    use_device(device);
    void* p = nullptr;
    if (nbytes == 0) return nullptr;
    CUDA_CHECK(cudaMalloc(&p, nbytes));
    return p;
  }
  void deallocate(void* ptr, size_t, int device) override {
    if (!ptr) return;
    cudaSetDevice(device);
    cudaFree(ptr);  // errors at teardown are not actionable: ignored
  }
  void copy_to_host(void* dst, const void* src, size_t n, int device) override {
    use_device(device);
    CUDA_CHECK(cudaMemcpy(dst, src, n, cudaMemcpyDeviceToHost));
  }
  void copy_from_host(void* dst, const void* src, size_t n, int device) override {
    use_device(device);
    CUDA_CHECK(cudaMemcpy(dst, src, n, cudaMemcpyHostToDevice));
  }
  void copy_on_device(void* dst, const void* src, size_t n, int device) override {
    use_device(device);
    CUDA_CHECK(cudaMemcpy(dst, src, n, cudaMemcpyDeviceToDevice));
  }
  void set_zero(void* dst, size_t n, int device) override {
    use_device(device);
    CUDA_CHECK(cudaMemset(dst, 0, n));
  }
  void synchronize(int device) override {
    use_device(device);
    CUDA_CHECK(cudaDeviceSynchronize());
  }
};

}  // namespace

int device_count() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError();  // clear the sticky error of a machine without a driver
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

void init() {
  static std::once_flag once;
  int n = 0;
  const cudaError_t status = cudaGetDeviceCount(&n);
  EMBER_CHECK(status == cudaSuccess && n > 0, "no usable CUDA device: ",
              status == cudaSuccess ? "the runtime found none" : cudaGetErrorString(status));
  std::call_once(once, [] {
    static CudaMemory memory;
    register_memory_backend(DeviceType::CUDA, &memory);
  });
}

}  // namespace ember::cuda
