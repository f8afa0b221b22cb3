// cuda/kernels/reduce.cu — the reductions: sum of a whole array (ops::sum,
// the loss mean) and the row-wise argmax (accuracy); the counterparts of
// ops/cpu/reduce.cpp.
//
// sum is deterministic without atomics: pass 1 runs a number of blocks that
// depends only on n; each thread adds a fixed grid-strided subset of x in
// double, block_sum (cuda/kernels/reduce.cuh) combines a block's threads in
// a fixed tree, and the block writes its partial to scratch memory. Pass 2,
// one block, adds the partials the same way and rounds once to the output
// type. The same n therefore always gives the same bits.
//
// argmax_rows gives the first index of the largest value, a NaN counting as
// the largest: each thread scans its columns in increasing order, and the
// threads are combined by argmax's total order (NaN, then value, then the
// smaller index), so the result is exactly the CPU's. f16/bf16 data is compared
// as f32 (exact) and summed in double like the rest. Narrow rows take one
// warp each; rows of kArgmaxBlockMinCols columns or more take one block each.
//
// count_equal (training accuracy: predictions against labels) is one block
// adding into a device total, so the host reads the count only when it logs.
#include <algorithm>

#include "cuda/allocator.h"
#include "cuda/common.cuh"
#include "cuda/cuda_kernels.h"
#include "cuda/kernels/reduce.cuh"

namespace ember::cuda {

namespace {

constexpr unsigned kSumThreads = 256;          // threads per block of both sum passes
constexpr int64_t kSumMaxBlocks = 1024;        // partial sums at most (pass 1 blocks)
constexpr unsigned kArgmaxThreads = 256;       // threads per block of argmax_rows (8 warps)
constexpr int64_t kArgmaxBlockMinCols = 1024;  // rows at least this wide get a block each
constexpr int64_t kMaxRowBlocks = 65535;       // grid cap for the row kernels (they loop beyond)

// ----------------------------------------------------------------- kernels

// partial[b] = sum of this block's grid-strided share of x, in double
//   x: [n]   partial: [gridDim.x]
template <typename T>
__global__ void sum_partials_kernel(const T* __restrict__ x, int64_t n, double* __restrict__ partial) {
  double s = 0.0;
  for (int64_t i = grid_thread_index(); i < n; i += grid_thread_count()) s += double(to_compute(x[i]));
  s = block_sum(s);
  if (threadIdx.x == 0) partial[blockIdx.x] = s;
}

// y[0] = sum of the partials, rounded once       partial: [count]   y: [1]   (one block)
template <typename T>
__global__ void sum_final_kernel(const double* __restrict__ partial, int64_t count, T* __restrict__ y) {
  double s = 0.0;
  for (int64_t i = threadIdx.x; i < count; i += blockDim.x) s += partial[i];
  s = block_sum(s);
  if (threadIdx.x == 0) y[0] = to_storage<T>(s);
}

// idx[r] = first index of the largest x[r, :], one warp per row (warps loop
// over rows; each warp's loop is uniform across its lanes)
//   x: [rows, cols]   idx: [rows]
template <typename T>
__global__ void argmax_rows_warp_kernel(const T* __restrict__ x, int64_t* __restrict__ idx, int64_t rows,
                                        int64_t cols) {
  const int lane = int(threadIdx.x) % kWarpSize;
  const int64_t warps = grid_thread_count() / kWarpSize;
  for (int64_t r = grid_thread_index() / kWarpSize; r < rows; r += warps) {
    const T* row = x + r * cols;
    ArgMax<compute_t<T>> best = argmax_identity<compute_t<T>>();
    for (int64_t c = lane; c < cols; c += kWarpSize) argmax_update(best, to_compute(row[c]), c);
    best = warp_argmax(best);
    if (lane == 0) idx[r] = best.index < cols ? best.index : 0;  // an empty row gives 0, as on the CPU
  }
}

// The same with one block per row (blocks loop over rows, uniformly).
template <typename T>
__global__ void argmax_rows_block_kernel(const T* __restrict__ x, int64_t* __restrict__ idx, int64_t rows,
                                         int64_t cols) {
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const T* row = x + r * cols;
    ArgMax<compute_t<T>> best = argmax_identity<compute_t<T>>();
    for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) argmax_update(best, to_compute(row[c]), c);
    best = block_argmax(best);
    if (threadIdx.x == 0) idx[r] = best.index < cols ? best.index : 0;
  }
}

// acc[0] += number of i with a[i] == b[i], one block (a batch's labels:
// a few thousand at most), so the count is deterministic.
//   a, b: i64 [n]   acc: f64 [1]
__global__ void count_equal_kernel(const int64_t* __restrict__ a, const int64_t* __restrict__ b, int64_t n,
                                   double* __restrict__ acc) {
  double s = 0.0;
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) s += a[i] == b[i] ? 1.0 : 0.0;
  s = block_sum(s);
  if (threadIdx.x == 0) acc[0] += s;
}

}  // namespace

// --------------------------------------------------------------- launchers

// y[0] = sum of x                                           x: [n]  y: [1]
void sum(DType dt, const void* x, void* y, int64_t n, Stream stream) {
  dispatch_float_half(dt, "sum", [&](auto zero) {
    using T = decltype(zero);
    const cudaStream_t s = as_cuda_stream(stream);
    const int64_t m = n < 0 ? 0 : n;
    const int64_t wanted = (m + kSumThreads - 1) / kSumThreads;  // a function of n only: the same tree every run
    const int64_t blocks = wanted < 1 ? 1 : (wanted > kSumMaxBlocks ? kSumMaxBlocks : wanted);
    DeviceBuffer partial(size_t(blocks) * sizeof(double));  // freed after the launches; stream order protects it
    launch(sum_partials_kernel<T>, dim3(unsigned(blocks)), dim3(kSumThreads), 0, s, static_cast<const T*>(x), m,
           partial.as<double>());
    launch(sum_final_kernel<T>, dim3(1), dim3(kSumThreads), 0, s, partial.as<const double>(), blocks,
           static_cast<T*>(y));
  });
}

// idx[r] = first index of the largest x[r, :]               x: [rows, cols]  idx: i64 [rows]
void argmax_rows(DType dt, const void* x, int64_t* idx, int64_t rows, int64_t cols, Stream stream) {
  dispatch_float_half(dt, "argmax_rows", [&](auto zero) {
    using T = decltype(zero);
    if (rows <= 0) return;
    const cudaStream_t s = as_cuda_stream(stream);
    const int64_t c = cols < 0 ? 0 : cols;
    const bool block_rows = c >= kArgmaxBlockMinCols;
    const int64_t rows_per_block = block_rows ? 1 : kArgmaxThreads / kWarpSize;
    const int64_t blocks = std::min((rows + rows_per_block - 1) / rows_per_block, kMaxRowBlocks);
    launch(block_rows ? argmax_rows_block_kernel<T> : argmax_rows_warp_kernel<T>, dim3(unsigned(blocks)),
           dim3(kArgmaxThreads), 0, s, static_cast<const T*>(x), idx, rows, c);
  });
}

//   a, b: i64 [n]   acc: f64 [1]
void count_equal(DType dt, const int64_t* a, const int64_t* b, int64_t n, double* acc, Stream stream) {
  EMBER_CHECK(dt == DType::i64, "count_equal: indices must be i64, got ", dtype_name(dt));
  if (n <= 0) return;
  launch(count_equal_kernel, dim3(1), dim3(kSumThreads), 0, as_cuda_stream(stream), a, b, n, acc);
}

}  // namespace ember::cuda
