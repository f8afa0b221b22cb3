// cuda/kernels/vector_loop.cuh — the one loop behind ember's memory-bound
// elementwise kernels (add, add_relu, axpby, relu forward/backward, the
// pointwise ops):
//
//   y[i] = f(a[i], i)            or      y[i] = f(a[i], b[i], i)      for i < n
//
// A kernel of this kind moves bytes and does almost no arithmetic, so its
// speed is how close its loads and stores come to the memory bandwidth.
// Two things decide that, and both are settled here once:
// - 16-byte accesses. When a, b and y are all 16-byte aligned, each thread
//   moves one Pack per step: 4 floats, 8 halves or bf16s, 2 doubles, one
//   ld/st.global.v4 each (a warp request then covers 512 bytes instead of
//   128, a quarter of the requests). The n % (elements per pack) elements at
//   the end, and every element of an operand that is not aligned (a view at
//   an odd offset), take the scalar loop in the same launch.
// - 32-bit indices. The index type is uint32_t whenever n plus the grid's
//   thread count fits (no overflow on the last stride), int64_t beyond.
//
// f is a small struct with a __device__ call operator taking storage values
// (T) and returning the stored value, so an op decides itself whether it
// rounds through compute_t<T> or passes bits through (relu keeps x's bits).
// y may be exactly a or b (in-place add, gradient accumulation): each
// element, scalar or in a pack, is read and written by one thread.
#pragma once
#include "cuda/common.cuh"
#include "cuda/kernels/pack.cuh"

namespace ember::cuda {

constexpr unsigned kVectorLoopThreads = 256;  // threads per block of every vector-loop kernel

// v when keep, else +0 of T, by masking its bits: no branch on either
// compiler, so every lane makes the same accesses around it (a GPU would
// predicate a select anyway; the host compiler of the emulator may branch,
// which its profiler then sees as two half-warp requests).
template <typename T>
__device__ __forceinline__ T keep_or_zero(bool keep, T v) {
  using Bits = std::conditional_t<sizeof(T) == 2, uint16_t, std::conditional_t<sizeof(T) == 4, uint32_t, uint64_t>>;
  static_assert(sizeof(T) == sizeof(Bits), "keep_or_zero: a 2-, 4- or 8-byte T");
  Bits bits;
  memcpy(&bits, static_cast<const void*>(&v), sizeof bits);
  bits &= Bits(Bits(0) - Bits(keep));
  memcpy(static_cast<void*>(&v), &bits, sizeof bits);
  return v;
}

inline bool is_aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15u) == 0; }

// kInputs = 1: y[i] = f(a[i], i); kInputs = 2: y[i] = f(a[i], b[i], i) (b
// unused and may be null for 1). Packs [0, packs) first, then the elements
// [packs * kPackElements<T>, n) one by one.
//   a, b, y: [n]
template <int kInputs, typename T, typename I, typename F>
__global__ void vector_loop_kernel(const T* a, const T* b, T* y, I n, I packs, F f) {
  constexpr int K = kPackElements<T>;
  const I start = I(blockIdx.x) * I(blockDim.x) + I(threadIdx.x);
  const I stride = I(gridDim.x) * I(blockDim.x);
  EMBER_NO_UNROLL
  for (I p = start; p < packs; p += stride) {
    const Pack<T> va = load_pack(a + p * I(K));
    Pack<T> out;
    if constexpr (kInputs == 1) {
      EMBER_UNROLL
      for (int k = 0; k < K; ++k) out.v[k] = f(va.v[k], int64_t(p) * K + k);
    } else {
      const Pack<T> vb = load_pack(b + p * I(K));
      EMBER_UNROLL
      for (int k = 0; k < K; ++k) out.v[k] = f(va.v[k], vb.v[k], int64_t(p) * K + k);
    }
    store_pack(y + p * I(K), out);
  }
  EMBER_NO_UNROLL
  for (I i = packs * I(K) + start; i < n; i += stride) {
    if constexpr (kInputs == 1)
      y[i] = f(a[i], int64_t(i));
    else
      y[i] = f(a[i], b[i], int64_t(i));
  }
}

// Launches the loop over n elements on `stream` (nothing for n <= 0).
template <int kInputs, typename T, typename F>
void launch_vector_loop(const T* a, const T* b, T* y, int64_t n, F f, cudaStream_t stream) {
  if (n <= 0) return;
  constexpr int64_t K = kPackElements<T>;
  const bool aligned = is_aligned16(a) && is_aligned16(y) && (kInputs == 1 || is_aligned16(b));
  const int64_t packs = aligned ? n / K : 0;
  // one thread per pack; the tail (fewer than K elements) reuses the first threads
  const unsigned blocks = blocks_for(packs > 0 ? packs : n, kVectorLoopThreads);
  const int64_t threads = int64_t(blocks) * kVectorLoopThreads;
  if (n + threads <= int64_t(UINT32_MAX))
    launch(vector_loop_kernel<kInputs, T, uint32_t, F>, dim3(blocks), dim3(kVectorLoopThreads), 0, stream, a, b, y,
           uint32_t(n), uint32_t(packs), f);
  else
    launch(vector_loop_kernel<kInputs, T, int64_t, F>, dim3(blocks), dim3(kVectorLoopThreads), 0, stream, a, b, y, n,
           packs, f);
}

}  // namespace ember::cuda
