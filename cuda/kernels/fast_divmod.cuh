// cuda/kernels/fast_divmod.cuh — quotient and remainder by a divisor fixed at
// launch, without a division instruction in the kernel.
//
// GPUs have no integer divider: `n / d` with a run-time d compiles to a
// ~20-instruction sequence for 32 bits and a call of ~70 for 64 bits, and
// the convolution loaders decode an (n, c, h, w)-style index per gathered
// element. FastDivmod precomputes, on the host, a multiplier m and a shift l
// with n / d == (mulhi(n, m) + n) >> l for every 0 <= n < 2^31 (Granlund and
// Montgomery, "Division by invariant integers using multiplication", 1994:
// l = ceil(log2 d), m = floor(2^32 (2^l - d) / d) + 1; the 33-bit sum of the
// paper cannot overflow 32 bits because n < 2^31). The kernel then spends a
// wide multiply, an add and a shift. tests/sim/test_fast_divmod.cpp checks
// it against `/` and `%` on the host, where the same code runs, and
// tests/cuda/test_cuda_ptx.cpp that the hot kernels' PTX divides in no loop.
//
// IndexDivisor<I> is what the kernels hold: FastDivmod for 32-bit indices
// (every tensor under 2^31 elements, the usual case), plain `/` and `%` for
// 64-bit ones.
#pragma once
#include <cstdint>

#include "cuda/common.cuh"

namespace ember::cuda {

class FastDivmod {
 public:
  FastDivmod() = default;
  // divisor in [1, 2^31]
  explicit FastDivmod(uint32_t divisor) : d_(divisor) {
    while ((uint64_t(1) << shift_) < divisor) ++shift_;
    m_ = uint32_t(((uint64_t(1) << 32) * ((uint64_t(1) << shift_) - divisor)) / divisor + 1);
  }
  // n / d for 0 <= n < 2^31.
  __host__ __device__ __forceinline__ uint32_t div(uint32_t n) const {
    return (uint32_t((uint64_t(n) * m_) >> 32) + n) >> shift_;
  }
  __host__ __device__ __forceinline__ void divmod(uint32_t n, uint32_t& q, uint32_t& r) const {
    q = div(n);
    r = n - q * d_;
  }
  __host__ __device__ __forceinline__ uint32_t divisor() const { return d_; }

 private:
  uint32_t d_ = 1, m_ = 1, shift_ = 0;
};

template <typename I>
struct IndexDivisor;

// A divisor of 0 (an empty dimension, whose indices are never decoded) acts as 1.
// 32-bit indices: by multiplication.
template <>
struct IndexDivisor<int32_t> {
  FastDivmod f;
  IndexDivisor() = default;
  explicit IndexDivisor(int64_t d) : f(uint32_t(d > 0 ? d : 1)) {}
  __host__ __device__ __forceinline__ int32_t value() const { return int32_t(f.divisor()); }
  // q = n / d, r = n % d for 0 <= n < 2^31
  __host__ __device__ __forceinline__ void divmod(int32_t n, int32_t& q, int32_t& r) const {
    uint32_t uq, ur;
    f.divmod(uint32_t(n), uq, ur);
    q = int32_t(uq);
    r = int32_t(ur);
  }
};

// 64-bit indices (a tensor of 2^31 elements or more): the hardware sequence.
template <>
struct IndexDivisor<int64_t> {
  int64_t d = 1;
  IndexDivisor() = default;
  explicit IndexDivisor(int64_t divisor) : d(divisor > 0 ? divisor : 1) {}
  __host__ __device__ __forceinline__ int64_t value() const { return d; }
  __host__ __device__ __forceinline__ void divmod(int64_t n, int64_t& q, int64_t& r) const {
    q = n / d;
    r = n - q * d;
  }
};

// Calls f(I{}) with I = int32_t when every index is below `n` < 2^31, else int64_t.
// The emulator compiles the 32-bit kernels only: a tensor of 2^31 elements
// or more (8 GiB in f32) is a GPU's case, and every kernel's 64-bit copy
// doubled the emulator builds' compile time (the slowest part of CI: the
// ASan build compiles cuda/kernels/conv.cu for minutes) without a test ever
// reaching it. nvcc still compiles both (tests/cuda/test_cuda_ptx.cpp reads
// the 64-bit ones).
template <typename F>
void with_index_type(int64_t n, F&& f) {
#if defined(EMBER_CUDASIM)
  EMBER_CHECK(n < (int64_t(1) << 31), "cudasim: an index space of ", n,
              " elements needs the 64-bit index kernels, which only the GPU build compiles");
  f(int32_t{});
#else
  if (n < (int64_t(1) << 31))
    f(int32_t{});
  else
    f(int64_t{});
#endif
}

}  // namespace ember::cuda
