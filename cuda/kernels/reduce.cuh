// cuda/kernels/reduce.cuh — warp and block reductions for ember's kernels:
// sum, max and argmax (value with its index), as __device__ helpers that any
// .cu file can include after cuda/common.cuh, and the in-block thread-index
// helpers they use (the grid-stride ones are in cuda/common.cuh).
//
// Warp level: a butterfly of __shfl_xor_sync over the 32 lanes (full mask, so
// all 32 lanes must call it together). Every combine used here is symmetric
// (a + b == b + a; max and argmax are defined by a total order), so all lanes
// end with the very same value.
// Block level: each warp reduces its lanes, lane 0 stores the warp's value in
// shared memory, and after a barrier every warp reduces those (at most 32)
// values again, so every thread of the block returns the same result.
// Blocks may be 1-, 2- or 3-D; threads are numbered x fastest (as CUDA forms
// warps) and the block must hold a multiple of 32 threads, at most 1024.
//
// Determinism: the order of the combines depends only on the block shape,
// never on timing, so a kernel that reduces with a fixed block size and a
// fixed assignment of elements to threads gives the same bits on every run.
//
// Rules for callers: block_* contain __syncthreads(), so every thread of the
// block must call them, the same number of times (no early return before,
// no call under a thread-dependent condition). They end with a barrier, so
// they may be called back to back.
#pragma once
#include <cstdint>
#include <limits>

#include "cuda/common.cuh"

namespace ember::cuda {

constexpr int kWarpSize = 32;
constexpr unsigned kFullWarpMask = 0xffffffffu;
constexpr int kMaxBlockThreads = 1024;

// ------------------------------------------------------------ thread index

// Linear index of this thread in its block (x fastest) and the block's size.
__device__ __forceinline__ int block_thread_index() {
  return int(threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z));
}
__device__ __forceinline__ int block_thread_count() { return int(blockDim.x * blockDim.y * blockDim.z); }
__device__ __forceinline__ int lane_index() { return block_thread_index() % kWarpSize; }
__device__ __forceinline__ int warp_index() { return block_thread_index() / kWarpSize; }

// ---------------------------------------------------------------- combines

// max that propagates NaN (as PyTorch's max does) and is symmetric:
// max_nan(a, b) and max_nan(b, a) are the same number (+0 wins over -0).
template <typename T>
__host__ __device__ __forceinline__ T max_nan(T a, T b) {
  if (a != a) return a;
  if (b != b) return b;
  if (a > b) return a;
  if (b > a) return b;
  return a == T(0) ? a + b : a;  // equal: -0 + +0 is +0, so the sign does not depend on the order
}

// A value and its index; the better of two is the NaN, else the larger value,
// and between equal values (or two NaNs) the smaller index: "first index of
// the largest", with NaN as the largest (ops/kernels.h). This is a total
// order, so the reduction's result does not depend on the combine order.
template <typename T>
struct ArgMax {
  T value;
  int64_t index;
};

template <typename T>
__host__ __device__ __forceinline__ bool argmax_better(T av, int64_t ai, T bv, int64_t bi) {
  const bool a_nan = av != av, b_nan = bv != bv;
  if (a_nan != b_nan) return a_nan;
  if (!a_nan && av != bv) return av > bv;
  return ai < bi;
}

// The identity of the argmax reduction: loses to every element of an array.
template <typename T>
__host__ __device__ __forceinline__ ArgMax<T> argmax_identity() {
  return {-std::numeric_limits<T>::infinity(), std::numeric_limits<int64_t>::max()};
}

// Folds element (v, i) into a running argmax. A thread that scans its
// elements in increasing index keeps the first of equal values.
template <typename T>
__host__ __device__ __forceinline__ void argmax_update(ArgMax<T>& acc, T v, int64_t i) {
  if (argmax_better(v, i, acc.value, acc.index)) {
    acc.value = v;
    acc.index = i;
  }
}

// ------------------------------------------------------------- warp level
// All 32 lanes of the warp must call these together; each returns the result
// of the whole warp in every lane.

template <typename T>
__device__ __forceinline__ T warp_sum(T v) {
  for (int mask = kWarpSize / 2; mask > 0; mask /= 2) v += __shfl_xor_sync(kFullWarpMask, v, mask);
  return v;
}

template <typename T>
__device__ __forceinline__ T warp_max(T v) {
  for (int mask = kWarpSize / 2; mask > 0; mask /= 2) v = max_nan(v, __shfl_xor_sync(kFullWarpMask, v, mask));
  return v;
}

template <typename T>
__device__ __forceinline__ ArgMax<T> warp_argmax(ArgMax<T> a) {
  for (int mask = kWarpSize / 2; mask > 0; mask /= 2) {
    const T v = __shfl_xor_sync(kFullWarpMask, a.value, mask);
    const int64_t i = __shfl_xor_sync(kFullWarpMask, a.index, mask);
    argmax_update(a, v, i);
  }
  return a;
}

// ------------------------------------------------------------ block level
// Every thread of the block must call these (see the rules at the top); each
// returns the result of the whole block in every thread.

// block_sum and block_max: warp_reduce (warp_sum or warp_max) over each
// warp, then over the warps' results (`identity` in the lanes past the last
// warp).
template <typename T, typename WarpReduce>
__device__ T block_reduce(T v, T identity, WarpReduce warp_reduce) {
  __shared__ T warp_partial[kMaxBlockThreads / kWarpSize];
  const int lane = lane_index(), warp = warp_index(), warps = block_thread_count() / kWarpSize;
  v = warp_reduce(v);
  if (lane == 0) warp_partial[warp] = v;
  __syncthreads();
  v = warp_reduce(lane < warps ? warp_partial[lane] : identity);
  __syncthreads();  // warp_partial is free again for the next call
  return v;
}

template <typename T>
__device__ T block_sum(T v) {
  return block_reduce(v, T(0), [](T x) { return warp_sum(x); });
}

template <typename T>
__device__ T block_max(T v) {
  return block_reduce(v, -std::numeric_limits<T>::infinity(), [](T x) { return warp_max(x); });
}

template <typename T>
__device__ ArgMax<T> block_argmax(ArgMax<T> a) {
  __shared__ T warp_value[kMaxBlockThreads / kWarpSize];
  __shared__ int64_t warp_index_of[kMaxBlockThreads / kWarpSize];
  const int lane = lane_index(), warp = warp_index(), warps = block_thread_count() / kWarpSize;
  a = warp_argmax(a);
  if (lane == 0) {
    warp_value[warp] = a.value;
    warp_index_of[warp] = a.index;
  }
  __syncthreads();
  a = lane < warps ? ArgMax<T>{warp_value[lane], warp_index_of[lane]} : argmax_identity<T>();
  a = warp_argmax(a);
  __syncthreads();
  return a;
}

}  // namespace ember::cuda
