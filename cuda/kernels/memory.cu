// cuda/kernels/memory.cu — the CUDA kernels that only move or convert values:
// fill (every dtype), cast (between f32, f64, f16 and bf16), copy_2d (a
// strided block of any dtype: ops::concat and its backward) and
// transpose_batched (the NCHW <-> NHWC conversion of ops::to_memory_format).
//
// Each is one grid-stride pass over its elements. They give the same bits as
// ops/cpu/memory_kernels.cpp:
// - fill converts the value once on the host, as the CPU does (integers
//   truncate; f16 and bf16 go double -> float rounded to odd -> 16 bits);
// - cast f64 -> f16/bf16 rounds once: the double is narrowed to float with
//   round-to-odd, then __float2half_rn / __float2bfloat16_rn rounds to
//   nearest even, which equals a direct correct rounding of the double (the
//   CPU uses the same trick); f16/bf16 -> f32/f64 and f32 -> f64 are exact,
//   every other cast rounds to nearest even once (f16 <-> bf16 through f32).
// A cast to the same dtype is a device-to-device copy on the stream.
#include <algorithm>
#include <cstring>

#include "cuda/common.cuh"
#include "cuda/cuda_kernels.h"
#include "cuda/kernels/fast_divmod.cuh"

namespace ember::cuda {

namespace {

constexpr unsigned kMemoryThreads = 256;  // threads per block of fill and cast

// ------------------------------------------------------------- conversions

// (double_to_float_odd is in cuda/common.cuh.)

// One element from type S to type D: through compute_t (exact for the
// 16-bit types), then one rounding (to_storage: round to nearest even, an
// f64 narrowed to odd first).
template <typename S, typename D>
struct Convert {
  __device__ __forceinline__ static D apply(S x) {
    const auto v = to_compute(x);  // float for f16/bf16, else x itself
    if constexpr (std::is_same_v<D, float> || std::is_same_v<D, double>)
      return static_cast<D>(v);
    else
      return to_storage<D>(v);
  }
};

// ----------------------------------------------------------------- kernels

// y[i] = value                                                y: [n]
template <typename T>
__global__ void fill_kernel(T* __restrict__ y, int64_t n, T value) {
  for (int64_t i = grid_thread_index(); i < n; i += grid_thread_count()) y[i] = value;
}

// y[i] = (D) x[i]                                             x, y: [n]
template <typename S, typename D>
__global__ void cast_kernel(const S* __restrict__ x, D* __restrict__ y, int64_t n) {
  for (int64_t i = grid_thread_index(); i < n; i += grid_thread_count()) y[i] = Convert<S, D>::apply(x[i]);
}

// y[r * ldy + c] = x[r * ldx + c]; T is an unsigned integer of the element's
// size (the bits are moved)                 x: [rows, ldx]  y: [rows, ldy]
template <typename T, typename I>
__global__ void copy_2d_kernel(const T* __restrict__ x, int64_t ldx, T* __restrict__ y, int64_t ldy, int64_t rows,
                               IndexDivisor<I> by_cols) {
  const int64_t n = rows * by_cols.value();
  for (int64_t i = grid_thread_index(); i < n; i += grid_thread_count()) {
    I r, c;
    by_cols.divmod(I(i), r, c);
    y[r * ldy + c] = x[r * ldx + c];
  }
}

// y[b, j, i] = x[b, i, j]; T as in copy_2d. A 32x32 tile goes through shared
// memory (padded against bank conflicts) so that both the reads and the
// writes of a warp are consecutive; blocks stride over tiles and batches.
//   x: [batch, rows, cols]   y: [batch, cols, rows]   block: 32 x 8 threads
constexpr int kTransposeTile = 32, kTransposeRows = 8;
template <typename T>
__global__ void transpose_batched_kernel(const T* __restrict__ x, T* __restrict__ y, int64_t batch, int64_t rows,
                                         int64_t cols) {
  __shared__ T tile[kTransposeTile][kTransposeTile + 1];
  const int64_t row_tiles = (rows + kTransposeTile - 1) / kTransposeTile;
  const int64_t col_tiles = (cols + kTransposeTile - 1) / kTransposeTile;
  const int tx = int(threadIdx.x), ty = int(threadIdx.y);
  for (int64_t b = blockIdx.z; b < batch; b += gridDim.z)
    for (int64_t rt = blockIdx.y; rt < row_tiles; rt += gridDim.y)
      for (int64_t ct = blockIdx.x; ct < col_tiles; ct += gridDim.x) {
        const T* in = x + b * rows * cols;
        T* out = y + b * rows * cols;
        const int64_t i0 = rt * kTransposeTile, j0 = ct * kTransposeTile;
        for (int k = ty; k < kTransposeTile; k += kTransposeRows)
          if (i0 + k < rows && j0 + tx < cols) tile[k][tx] = in[(i0 + k) * cols + j0 + tx];
        __syncthreads();
        for (int k = ty; k < kTransposeTile; k += kTransposeRows)
          if (j0 + k < cols && i0 + tx < rows) out[(j0 + k) * rows + i0 + tx] = tile[tx][k];
        __syncthreads();
      }
}

// Calls f(U{}) with U the unsigned integer of dt's size: the kernels that
// only move bits (copy_2d, transpose_batched) run once per element size.
template <typename F>
void with_bits(DType dt, const char* kernel, F&& f) {
  switch (dtype_size(dt)) {
    case 1: return f(uint8_t{});
    case 2: return f(uint16_t{});
    case 4: return f(uint32_t{});
    case 8: return f(uint64_t{});
  }
  fail(cat("cuda ", kernel, ": unsupported dtype ", dtype_name(dt)));
}

template <typename T>
void launch_fill(void* y, int64_t n, T value, cudaStream_t stream) {
  launch(fill_kernel<T>, dim3(blocks_for(n, kMemoryThreads)), dim3(kMemoryThreads), 0, stream, static_cast<T*>(y), n,
         value);
}

template <typename S, typename D>
void launch_cast(const void* x, void* y, int64_t n, cudaStream_t stream) {
  launch(cast_kernel<S, D>, dim3(blocks_for(n, kMemoryThreads)), dim3(kMemoryThreads), 0, stream,
         static_cast<const S*>(x), static_cast<D*>(y), n);
}

}  // namespace

// --------------------------------------------------------------- launchers

// y[i] = value, converted once as the CPU does              y: [n]
void fill(DType dt, void* y, int64_t n, double value, Stream stream) {
  if (n <= 0) return;
  const cudaStream_t s = as_cuda_stream(stream);
  switch (dt) {
    case DType::f32: return launch_fill(y, n, static_cast<float>(value), s);
    case DType::f64: return launch_fill(y, n, value, s);
    case DType::f16: return launch_fill(y, n, __float2half_rn(double_to_float_odd(value)), s);
    case DType::i32: return launch_fill(y, n, static_cast<int32_t>(value), s);
    case DType::i64: return launch_fill(y, n, static_cast<int64_t>(value), s);
    case DType::u8: return launch_fill(y, n, static_cast<uint8_t>(value), s);
    case DType::bf16: return launch_fill(y, n, __float2bfloat16_rn(double_to_float_odd(value)), s);
  }
  fail(cat("cuda fill: unsupported dtype ", dtype_name(dt)));
}

// y[i] = (dst_dt) x[i]                                      x, y: [n]
void cast(DType src_dt, const void* x, DType dst_dt, void* y, int64_t n, Stream stream) {
  EMBER_CHECK(is_floating(src_dt) && is_floating(dst_dt), "cuda cast: unsupported dtypes ", dtype_name(src_dt),
              " -> ", dtype_name(dst_dt), " (f32, f64, f16, bf16 only)");
  if (n <= 0) return;
  const cudaStream_t s = as_cuda_stream(stream);
  if (src_dt == dst_dt) {
    if (x != y) {
      CUDA_CHECK(cudaMemcpyAsync(y, x, size_t(n) * dtype_size(src_dt), cudaMemcpyDeviceToDevice, s));
      count_device_work(DeviceWork::copy);
    }
    return;
  }
  dispatch_float_half(src_dt, "cast", [&](auto src) {
    dispatch_float_half(dst_dt, "cast", [&](auto dst) { launch_cast<decltype(src), decltype(dst)>(x, y, n, s); });
  });
}

// y[r * ldy + c] = x[r * ldx + c], the bits of any dtype     x: [rows, ldx]  y: [rows, ldy]
void copy_2d(DType dt, const void* x, int64_t ldx, void* y, int64_t ldy, int64_t rows, int64_t cols, Stream stream) {
  EMBER_CHECK(rows >= 0 && cols >= 0 && cols <= ldx && cols <= ldy, "cuda copy_2d: a block of ", rows, "x", cols,
              " does not fit row strides ", ldx, " and ", ldy);
  if (rows == 0 || cols == 0) return;
  const cudaStream_t s = as_cuda_stream(stream);
  const int64_t n = rows * cols;
  with_bits(dt, "copy_2d", [&](auto bits) {
    using T = decltype(bits);
    with_index_type(n, [&](auto index) {
      using I = decltype(index);
      launch(copy_2d_kernel<T, I>, dim3(blocks_for(n, kMemoryThreads)), dim3(kMemoryThreads), 0, s,
             static_cast<const T*>(x), ldx, static_cast<T*>(y), ldy, rows, IndexDivisor<I>(cols));
    });
  });
}

// y[b, j, i] = x[b, i, j], the bits of any dtype      x: [batch, rows, cols]  y: [batch, cols, rows]
void transpose_batched(DType dt, const void* x, void* y, int64_t batch, int64_t rows, int64_t cols, Stream stream) {
  EMBER_CHECK(batch >= 0 && rows >= 0 && cols >= 0, "cuda transpose_batched: negative size ", batch, "x", rows, "x",
              cols);
  if (batch == 0 || rows == 0 || cols == 0) return;
  const int64_t row_tiles = (rows + kTransposeTile - 1) / kTransposeTile;
  const int64_t col_tiles = (cols + kTransposeTile - 1) / kTransposeTile;
  const dim3 grid(unsigned(std::min<int64_t>(col_tiles, 65535)), unsigned(std::min<int64_t>(row_tiles, 65535)),
                  unsigned(std::min<int64_t>(batch, 65535)));
  const dim3 block(kTransposeTile, kTransposeRows);
  const cudaStream_t s = as_cuda_stream(stream);
  with_bits(dt, "transpose_batched", [&](auto bits) {
    using T = decltype(bits);
    launch(transpose_batched_kernel<T>, grid, block, 0, s, static_cast<const T*>(x), static_cast<T*>(y), batch,
           rows, cols);
  });
}

}  // namespace ember::cuda
