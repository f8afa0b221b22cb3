// tests/cuda/device_buffer.h — for tests that call kernels directly (the
// probes of cuda/lab, the tensor-core convolutions and GEMM): a cudaMalloc'd
// array filled from a host vector and read back after the device is idle,
// and the f16/bf16 bit patterns such operands are built from. Works on a
// GPU and on the emulator alike.
#pragma once
#include <doctest/doctest.h>

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <vector>

#include "engine/bfloat16.h"
#include "engine/dtype.h"
#include "engine/half.h"

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

// A value as f16 or bf16 bits (dt), and back.
inline uint16_t to_bits16(float v, DType dt) { return dt == DType::f16 ? float_to_half(v) : float_to_bf16(v); }
inline double from_bits16(uint16_t b, DType dt) { return dt == DType::f16 ? half_to_float(b) : bf16_to_float(b); }

}  // namespace ember::testing
