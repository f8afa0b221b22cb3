// cuda/kernels/gemm_mma.cu — the f16/bf16 GEMM on the mma.sync main loop of
// mma_tile.cuh (the one the channels-last convolutions run on), and the f32
// one on TF32 while set_tf32 is on:
//   C [M, N] = alpha * op(A) [M, K] * op(B) [K, N] + beta * C, row-major,
//   f32 accumulators, C rounded once.
// gemm.cu hands it every 16-bit product whose operands allow 16-byte copies
// (gemm_mma_supports): base pointers 16-byte aligned and leading dimensions
// multiples of 16 bytes. Edges need no alignment: a chunk of 16 bytes that
// runs past M, N or K is copied in part and zero-filled by cp.async (its
// source size), so any M, N and K work.
//
// The four transposes pick the staged layouts (mma_tile.cuh):
//   A [M, K] (no transpose): rows of A, chunks along k: K-major, ldmatrix
//   A stored [K, M] (trans_a): rows of k, chunks along m: MN-major, .trans
//   B stored [K, N] (no transpose): MN-major, .trans
//   B stored [N, K] (trans_b): K-major
// so every copy reads 16 contiguous bytes of global memory.
#include "cuda/common.cuh"

#include "cuda/cuda_device.h"
#include "cuda/cuda_kernels.h"
#include "cuda/kernels/gemm_mma.h"
#include "cuda/kernels/mma_tile.cuh"

namespace ember::cuda {
namespace {

// Copies chunk `chunk` of row `row` of one staged operand of reduction step
// `step`. K-major: row = an index of M (or N) from `outer0`, the chunk's
// values run along k; MN-major: row = a k of the step, the chunk's values
// run along M (or N) from outer0. `outer` is M (or N); the operand is
// stored with leading dimension ld, its contiguous index being k (K-major)
// or the outer index (MN-major).
template <typename T, bool KMajor, int Extent>
__device__ __forceinline__ void copy_chunk(unsigned char* tile, const T* p, int64_t ld, int outer0, int outer, int K,
                                           int step, int row, int chunk) {
  constexpr int kChunk = kChunkValues<T>, kStep = kStepValues<T>;
  int major, minor, minor_end;  // the stored row, the first value along it, and where it ends
  if constexpr (KMajor) {
    major = outer0 + row, minor = step * kStep + chunk * kChunk, minor_end = K;
    if (major >= outer) minor_end = minor;  // past the last row: nothing to read
  } else {
    major = step * kStep + row, minor = outer0 + chunk * kChunk, minor_end = outer;
    if (major >= K) minor_end = minor;
  }
  const int left = minor_end - minor;
  const int bytes = left >= kChunk ? 16 : left > 0 ? left * int(sizeof(T)) : 0;
  const T* src = bytes > 0 ? p + int64_t(major) * ld + minor : p;
  const uint32_t at = KMajor ? k_major_offset(row, chunk) : mn_major_offset<T, Extent>(row, chunk);
  ptx::cp_async<16>(tile + at, src, bytes);
}

// C = alpha * acc + beta * C, one rounding; beta == 0 never reads C. N may be odd.
template <typename T>
struct StoreAlphaBetaPairs {
  T* c;
  int64_t ldc;
  int N;
  float alpha, beta;
  __device__ __forceinline__ void operator()(int m, int n, float v0, float v1) const {
    T* p = c + int64_t(m) * ldc + n;
    if (beta == 0.0f && n + 1 < N && ldc % 2 == 0) {  // aligned pair: one store
      store_pair(p, alpha * v0, alpha * v1);
      return;
    }
    p[0] = to_storage<T>(beta == 0.0f ? alpha * v0 : alpha * v0 + beta * to_compute(p[0]));
    if (n + 1 < N) p[1] = to_storage<T>(beta == 0.0f ? alpha * v1 : alpha * v1 + beta * to_compute(p[1]));
  }
};

// C [M, N] = alpha * op(A) op(B) + beta * C.
template <typename T, typename Cfg, bool kTransA, bool kTransB>
__global__ void __launch_bounds__(Cfg::kThreads) gemm_mma_kernel(int M, int N, int K, const T* A, int64_t lda,
                                                                  const T* B, int64_t ldb, StoreAlphaBetaPairs<T> out) {
  EMBER_DYNAMIC_SHARED(unsigned char, stages);
  constexpr bool kAKMajor = !kTransA, kBKMajor = kTransB;
  const int tid = int(threadIdx.x);
  const int m0 = int(blockIdx.x) * Cfg::BM, n0 = int(blockIdx.y) * Cfg::BN;
  // Chunk i = tid + j * kThreads of each operand: K-major tiles have 4
  // chunks a row, MN-major ones Extent / kChunkValues<T>.
  const auto copy = [&](int stage, int step) {
    unsigned char* a_tile = stages + stage * Cfg::kStageBytes;
    unsigned char* b_tile = a_tile + Cfg::kABytes;
    EMBER_UNROLL
    for (int j = 0; j < Cfg::kChunksPerThreadA; ++j) {
      const int i = tid + j * Cfg::kThreads;
      constexpr int kPerRow = kAKMajor ? 4 : Cfg::BM / kChunkValues<T>;
      copy_chunk<T, kAKMajor, Cfg::BM>(a_tile, A, lda, m0, M, K, step, i / kPerRow, i % kPerRow);
    }
    EMBER_UNROLL
    for (int j = 0; j < Cfg::kChunksPerThreadB; ++j) {
      const int i = tid + j * Cfg::kThreads;
      constexpr int kPerRow = kBKMajor ? 4 : Cfg::BN / kChunkValues<T>;
      copy_chunk<T, kBKMajor, Cfg::BN>(b_tile, B, ldb, n0, N, K, step, i / kPerRow, i % kPerRow);
    }
  };
  float acc[Cfg::kFragM][Cfg::kFragN][4];
  zero_accumulators<Cfg>(acc);
  main_loop<T, Cfg, kAKMajor, kBKMajor>(acc, stages, 0, (K + kStepValues<T> - 1) / kStepValues<T>, copy);
  store_tile<Cfg>(acc, m0, n0, M, N, out);
}

template <typename T, typename Cfg, bool kTransA, bool kTransB>
void launch_typed(int M, int N, int K, const T* A, int64_t lda, const T* B, int64_t ldb, StoreAlphaBetaPairs<T> out,
                  cudaStream_t stream) {
  const dim3 grid(unsigned((M + Cfg::BM - 1) / Cfg::BM), unsigned((N + Cfg::BN - 1) / Cfg::BN));
  launch(gemm_mma_kernel<T, Cfg, kTransA, kTransB>, grid, dim3(Cfg::kThreads), size_t(Cfg::kSharedBytes), stream, M, N,
         K, A, lda, B, ldb, out);
}

template <typename T, typename Cfg>
void launch_transposes(bool trans_a, bool trans_b, int M, int N, int K, const T* A, int64_t lda, const T* B,
                       int64_t ldb, StoreAlphaBetaPairs<T> out, cudaStream_t s) {
  if (!trans_a && !trans_b) launch_typed<T, Cfg, false, false>(M, N, K, A, lda, B, ldb, out, s);
  if (!trans_a && trans_b) launch_typed<T, Cfg, false, true>(M, N, K, A, lda, B, ldb, out, s);
  if (trans_a && !trans_b) launch_typed<T, Cfg, true, false>(M, N, K, A, lda, B, ldb, out, s);
  if (trans_a && trans_b) launch_typed<T, Cfg, true, true>(M, N, K, A, lda, B, ldb, out, s);
}

constexpr int64_t kLargeTileMinBlocks = 264;  // the 128x128 tile while it gives two waves of blocks

bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

}  // namespace

bool gemm_mma_supports(DType dt, int64_t M, int64_t N, int64_t K, const void* A, int64_t lda, const void* B,
                       int64_t ldb, const void* C, int64_t ldc) {
  if (!native_tensor_cores()) return false;
  const bool tf32 = dt == DType::f32 && tf32_enabled();
  if (dt != DType::f16 && dt != DType::bf16 && !tf32) return false;
  const int64_t limit = int64_t(1) << 31;
  if (M <= 0 || N <= 0 || K <= 0 || M >= limit || N >= limit || K >= limit) return false;
  const int64_t chunk = tf32 ? 4 : 8, pair_bytes = tf32 ? 8 : 4;  // values in 16 bytes; bytes of two values of C
  return aligned16(A) && aligned16(B) && lda % chunk == 0 && ldb % chunk == 0 &&
         reinterpret_cast<uintptr_t>(C) % pair_bytes == 0 && ldc > 0;
}

void gemm_mma(DType dt, bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, double alpha, const void* A,
              int64_t lda, const void* B, int64_t ldb, double beta, void* C, int64_t ldc, Stream stream,
              MmaGemmTileChoice tile) {
  EMBER_CHECK(gemm_mma_supports(dt, M, N, K, A, lda, B, ldb, C, ldc),
              "gemm_mma: not a 16-bit (or TF32) product with 16-byte aligned operands and leading dimensions "
              "multiples of 16 bytes");
  const cudaStream_t s = as_cuda_stream(stream);
  const bool large = tile == MmaGemmTileChoice::automatic
                         ? ((M + 127) / 128) * ((N + 127) / 128) >= kLargeTileMinBlocks
                         : tile == MmaGemmTileChoice::large;
  const auto run = [&](auto t) {
    using T = decltype(t);
    const StoreAlphaBetaPairs<T> out{static_cast<T*>(C), ldc, int(N), float(alpha), float(beta)};
    const T* a = static_cast<const T*>(A);
    const T* b = static_cast<const T*>(B);
    if (large)
      launch_transposes<T, MmaTileLarge>(trans_a, trans_b, int(M), int(N), int(K), a, lda, b, ldb, out, s);
    else
      launch_transposes<T, MmaTileSmall>(trans_a, trans_b, int(M), int(N), int(K), a, lda, b, ldb, out, s);
  };
  if (dt == DType::f16)
    run(__half{});
  else if (dt == DType::bf16)
    run(__nv_bfloat16{});
  else
    run(float{});
}

}  // namespace ember::cuda
