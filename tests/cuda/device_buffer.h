// tests/cuda/device_buffer.h — a cudaMalloc'd array for tests that call
// kernels directly (the probes of cuda/lab, the tensor-core convolution):
// filled from a host vector, read back after the device is idle. Works on a
// GPU and on the emulator alike.
#pragma once
#include <doctest/doctest.h>

#include <cuda_runtime.h>

#include <cstddef>
#include <vector>

namespace ember::testing {

template <typename T>
struct DeviceBuffer {
  T* p = nullptr;
  size_t n = 0;
  explicit DeviceBuffer(size_t count) : n(count) {
    REQUIRE(cudaMalloc(reinterpret_cast<void**>(&p), (n ? n : 1) * sizeof(T)) == cudaSuccess);
    REQUIRE(cudaMemset(p, 0, (n ? n : 1) * sizeof(T)) == cudaSuccess);
  }
  explicit DeviceBuffer(const std::vector<T>& v) : DeviceBuffer(v.size()) {
    REQUIRE(cudaMemcpy(p, v.data(), n * sizeof(T), cudaMemcpyHostToDevice) == cudaSuccess);
  }
  ~DeviceBuffer() { cudaFree(p); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  std::vector<T> host() const {
    REQUIRE(cudaDeviceSynchronize() == cudaSuccess);
    std::vector<T> v(n);
    REQUIRE(cudaMemcpy(v.data(), p, n * sizeof(T), cudaMemcpyDeviceToHost) == cudaSuccess);
    return v;
  }
};

}  // namespace ember::testing
