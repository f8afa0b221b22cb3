// cuda/kernels/gemm.cu — the `gemm` kernel of the CUDA table:
//   C = alpha * op(A) * op(B) + beta * C, row-major, f32, f64, f16 and bf16
//   (16-bit operands are staged and accumulated in f32, C rounded once),
//   op(A): [M, K] (A stored [M, K] with lda >= K, or [K, M] with lda >= M
//   when trans_a), op(B): [K, N] likewise, C: [M, N] with ldc >= N.
//
// f16 and bf16 run on the tensor cores unless EMBER_CUDA_TENSOR_CORES=0:
// on mma.sync (gemm_mma.cu: a cp.async pipeline, ldmatrix from swizzled
// shared memory) when A and B allow 16-byte copies (aligned, leading
// dimensions multiples of 8), else on wmma (gemm_tensor.cuh: 128x128, 64x64
// or 32x32 block tiles of 16x16 fragments, f32 accumulators). f32 takes the
// same mma.sync path on TF32 while set_tf32 is on (cuda_device.h: PyTorch's
// matmul.allow_tf32) and its operands allow 16-byte copies. Otherwise, and for f32 and f64,
// the tile loop is gemm_tiled_kernel (gemm.cuh): 64x64 block tiles with a
// 4x4 register micro-tile per thread (BK = 16), 128x128 tiles with 8x8
// (BK = 8) for big f32 products, or 32x32 tiles with 2x2 when M or N is
// below 64 (with_gemm_tile picks); each of the four transpose combinations is its own
// instantiation (MatrixA/MatrixB loaders with the transpose as a template
// argument), so the loaders read global memory coalesced in each case. The
// store functor applies alpha and beta; beta == 0 never reads C (so NaN or
// garbage in C is overwritten, as in BLAS). As on the CPU, K == 0 or
// alpha == 0 only scales C (C = beta * C, or 0), without reading A or B.
// Every element of C is written by exactly one thread: results are
// deterministic.
#include "cuda/common.cuh"

#include <cstdlib>
#include <string_view>

#include "cuda/cuda_device.h"
#include "cuda/cuda_kernels.h"
#include "cuda/kernels/fast_divmod.cuh"
#include "cuda/kernels/gemm.cuh"
#include "cuda/kernels/gemm_mma.h"

namespace ember::cuda {
namespace {

constexpr unsigned kScaleThreads = 256;  // threads per block of the C = beta * C kernel

// ---------------------------------------------------------------- kernels

// C = beta * C (beta == 0 writes zeros, never reading C)      C: [M, N] (ldc)
template <typename T, typename I, typename Acc = compute_t<T>>
__global__ void scale_c_kernel(int64_t M, IndexDivisor<I> by_N, Acc beta, T* C, int64_t ldc) {
  const int64_t total = M * by_N.value();
  for (int64_t i = grid_thread_index(); i < total; i += grid_thread_count()) {
    I row, col;
    by_N.divmod(I(i), row, col);
    T& c = C[int64_t(row) * ldc + col];
    c = to_storage<T>(beta == Acc(0) ? Acc(0) : beta * to_compute(c));
  }
}

// The gemm epilogue: C[i, j] = alpha * acc + beta * C[i, j] (in compute_t<T>, one rounding to T).
template <typename T, typename Acc = compute_t<T>>
struct StoreAlphaBeta {
  T* c;
  int64_t ldc;
  Acc alpha, beta;
  __device__ __forceinline__ void operator()(int, int64_t i, int64_t j, Acc acc) const {
    T& out = c[i * ldc + j];
    out = to_storage<T>(beta == Acc(0) ? alpha * acc : alpha * acc + beta * to_compute(out));
  }
};

// -------------------------------------------------------------- launchers

template <typename T, bool kTransA, bool kTransB, typename Acc = compute_t<T>>
void gemm_typed(int64_t M, int64_t N, int64_t K, Acc alpha, const T* A, int64_t lda, const T* B, int64_t ldb, Acc beta,
                T* C, int64_t ldc, cudaStream_t stream) {
  launch_gemm_auto<T>(M, N, K, MatrixA<T, kTransA>{A, lda}, MatrixB<T, kTransB>{B, ldb},
                        StoreAlphaBeta<T>{C, ldc, alpha, beta}, stream);
}

template <typename T, typename Acc = compute_t<T>>
void gemm_dispatch(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, Acc alpha, const T* A, int64_t lda,
                   const T* B, int64_t ldb, Acc beta, T* C, int64_t ldc, cudaStream_t stream) {
  if (M <= 0 || N <= 0) return;
  if (K <= 0 || alpha == Acc(0)) {
    with_index_type(M * N, [&](auto index) {
      using I = decltype(index);
      launch(scale_c_kernel<T, I>, dim3(blocks_for(M * N, kScaleThreads)), dim3(kScaleThreads), 0, stream, M,
             IndexDivisor<I>(N), beta, C, ldc);
    });
    return;
  }
  if (!trans_a && !trans_b) gemm_typed<T, false, false>(M, N, K, alpha, A, lda, B, ldb, beta, C, ldc, stream);
  if (!trans_a && trans_b) gemm_typed<T, false, true>(M, N, K, alpha, A, lda, B, ldb, beta, C, ldc, stream);
  if (trans_a && !trans_b) gemm_typed<T, true, false>(M, N, K, alpha, A, lda, B, ldb, beta, C, ldc, stream);
  if (trans_a && trans_b) gemm_typed<T, true, true>(M, N, K, alpha, A, lda, B, ldb, beta, C, ldc, stream);
}

}  // namespace

namespace {
bool tensor_cores_from_environment() {
  const char* v = std::getenv("EMBER_CUDA_TENSOR_CORES");
  return !(v && std::string_view(v) == "0");
}
// A plain bool, not std::atomic: set from the host between launches, and the
// profiler's instrumented copy of this file has no hooks for atomics.
bool g_tensor_cores = tensor_cores_from_environment();
}  // namespace

bool native_tensor_cores() { return g_tensor_cores; }
void set_native_tensor_cores(bool on) { g_tensor_cores = on; }

// The TF32 switch of cuda_device.h, for ember's own kernels (conv_mma.cu,
// gemm_mma.cu) and for cuDNN and cuBLAS (cuda/cudnn/), which ask it on each call.
namespace {
bool g_tf32 = false;  // plain, as g_tensor_cores
}  // namespace
void set_tf32(bool on) { g_tf32 = on; }
bool tf32_enabled() { return g_tf32; }

void gemm(DType dt, bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, double alpha, const void* A,
          int64_t lda, const void* B, int64_t ldb, double beta, void* C, int64_t ldc, Stream stream) {
  const bool empty = M <= 0 || N <= 0 || K <= 0;
  EMBER_CHECK(empty || (ldc >= N && lda >= (trans_a ? M : K) && ldb >= (trans_b ? K : N)),
              "cuda gemm: leading dimensions (", lda, ", ", ldb, ", ", ldc, ") too small for M = ", M, ", N = ", N,
              ", K = ", K);
  if (alpha != 0.0 && gemm_mma_supports(dt, M, N, K, A, lda, B, ldb, C, ldc)) {
    gemm_mma(dt, trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc, stream);
    return;
  }
  dispatch_float_half(dt, "gemm", [&](auto zero) {
    using T = decltype(zero);
    using Acc = compute_t<T>;
    gemm_dispatch<T>(trans_a, trans_b, M, N, K, Acc(alpha), static_cast<const T*>(A), lda, static_cast<const T*>(B),
                     ldb, Acc(beta), static_cast<T*>(C), ldc, as_cuda_stream(stream));
  });
}

}  // namespace ember::cuda
