// ops/cpu/gemm/gemm_f16.cpp — f16 (and bf16) operands around the f32 GEMM (see gemm_f16.h).
#include "ops/cpu/gemm/gemm_f16.h"

#include <algorithm>
#include <type_traits>

#include "engine/parallel.h"
#include "ops/cpu/f16_util.h"
#include "ops/cpu/gemm/gemm.h"

namespace ember::cpu {
namespace {

// local_buffer slots (f16_util.h) used here.
constexpr int kA = 20, kB = 21, kC = 22, kChunkA = 23, kChunkB = 24, kChunkC = 25;

// Floats a per-thread working buffer may hold and still sit in L2 with room
// for the packed panels (1 MiB).
constexpr int64_t kCacheFloats = int64_t(1) << 18;

// rows x cols f16 matrix with leading dimension ld -> dense f32 [rows, cols].
template <typename H>
void rows_to_float(const H* src, int64_t ld, int64_t rows, int64_t cols, float* dst) {
  parallel_for(0, rows, std::max<int64_t>(1, 16384 / std::max<int64_t>(1, cols)), [&](int64_t lo, int64_t hi) {
    for (int64_t r = lo; r < hi; ++r) h2f(src + r * ld, dst + r * cols, cols);
  });
}

// PackB from a matrix B [K, N] (ldb) of f16 or f32, converting while
// packing: element (k, j) of the block goes to panel j / NR, row k, lane
// j % NR; lanes past nc are zeros.
template <typename TB>
void pack_b_converting(const TB* B, int64_t ldb, int64_t k0, int64_t kc, int64_t j0, int64_t nc, float* dst) {
  const int NR = gemm_panel_width<float>();
  for (int64_t jp = 0; jp < nc; jp += NR) {
    const int64_t cols = std::min<int64_t>(NR, nc - jp);
    float* panel = dst + jp * kc;
    const TB* src = B + k0 * ldb + j0 + jp;
    for (int64_t k = 0; k < kc; ++k) {
      float* d = panel + k * NR;
      copy_values(src + k * ldb, d, cols);
      for (int64_t j = cols; j < NR; ++j) d[j] = 0.0f;
    }
  }
}

}  // namespace

template <typename H>
void gemm_f16(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha, const H* A, int64_t lda,
              const H* B, int64_t ldb, float beta, H* C, int64_t ldc) {
  if (M <= 0 || N <= 0) return;
  const int64_t a_rows = trans_a ? K : M, a_cols = trans_a ? M : K;
  const int64_t b_rows = trans_b ? N : K, b_cols = trans_b ? K : N;
  // The calling thread's grow-only buffers (no allocation or page faults per call).
  float* af = local_buffer<float, kA>(std::max<int64_t>(1, a_rows * a_cols));
  float* bf = local_buffer<float, kB>(std::max<int64_t>(1, b_rows * b_cols));
  float* cf = local_buffer<float, kC>(M * N);
  if (K > 0) {
    rows_to_float(A, lda, a_rows, a_cols, af);
    rows_to_float(B, ldb, b_rows, b_cols, bf);
  }
  if (beta != 0.0f) rows_to_float(C, ldc, M, N, cf);
  gemm_parallel<float>(trans_a, trans_b, M, N, K, alpha, af, std::max<int64_t>(1, a_cols), bf,
                       std::max<int64_t>(1, b_cols), beta, cf, N);
  parallel_for(0, M, std::max<int64_t>(1, 16384 / N), [&](int64_t lo, int64_t hi) {
    for (int64_t r = lo; r < hi; ++r) f2h(cf + r * N, C + r * ldc, N);
  });
}

template <typename TB, typename TC, typename H>
void gemm_f16a_chunked(bool trans_a, int64_t M, int64_t N, int64_t K, const H* A, int64_t lda, const TB* B,
                       int64_t ldb, TC* C, int64_t ldc, bool parallel) {
  if (M <= 0 || N <= 0) return;
  const int NR = gemm_panel_width<float>();
  // Column chunk: for f16 C, a whole number of panels whose f32 block fits
  // the cache budget, but at least 4 panels (every chunk packs all of A
  // again); f32 C needs no chunks. With `parallel`, small enough that every
  // thread gets one.
  int64_t chunk = std::is_same_v<TC, float> ? N : std::max<int64_t>(4 * NR, kCacheFloats / M / NR * NR);
  if (parallel) chunk = std::min(chunk, std::max<int64_t>(NR, (N / num_threads() + NR - 1) / NR * NR));
  chunk = std::min(chunk, N);
  const int64_t chunks = (N + chunk - 1) / chunk;
  auto run = [&](int64_t c0, int64_t c1) {
    for (int64_t c = c0; c < c1; ++c) {
      const int64_t j0 = c * chunk, nc = std::min(chunk, N - j0);
      // f32 C is written in place; f16 C goes through this thread's chunk buffer.
      float* cf;
      int64_t ldcf;
      if constexpr (std::is_same_v<TC, float>) {
        cf = C + j0, ldcf = ldc;
      } else {
        cf = local_buffer<float, kChunkC>(M * chunk), ldcf = nc;
      }
      if (K <= 0) {
        for (int64_t i = 0; i < M; ++i) std::fill(cf + i * ldcf, cf + i * ldcf + nc, 0.0f);
      } else {
        const PackB<float> pack = [&](int64_t k0, int64_t kc, int64_t jb, int64_t nb, float* dst) {
          pack_b_converting(B + j0, ldb, k0, kc, jb, nb, dst);
        };
        gemm_serial_packed<float, H>(trans_a, M, nc, K, 1.0f, A, lda, pack, 0.0f, cf, ldcf);
      }
      if constexpr (!std::is_same_v<TC, float>)
        for (int64_t i = 0; i < M; ++i) f2h(cf + i * nc, C + i * ldc + j0, nc);
    }
  };
  if (parallel && chunks > 1)
    parallel_for(0, chunks, 1, run);
  else
    run(0, chunks);
}

template <typename H>
void gemm_nt_accumulate_f16(int64_t M, int64_t N, int64_t K, const H* A, int64_t lda, const H* B, int64_t ldb,
                            float* acc, int64_t ldacc) {
  if (M <= 0 || N <= 0 || K <= 0) return;
  // Inner chunk: both converted blocks within the cache budget, but long
  // enough (256) for the dot products to amortise their reductions.
  const int64_t chunk = std::min(K, std::max<int64_t>(256, kCacheFloats / (M + N) / 16 * 16));
  float* af = local_buffer<float, kChunkA>(M * chunk);
  float* bf = local_buffer<float, kChunkB>(N * chunk);
  for (int64_t k0 = 0; k0 < K; k0 += chunk) {
    const int64_t kc = std::min(chunk, K - k0);
    for (int64_t i = 0; i < M; ++i) h2f(A + i * lda + k0, af + i * kc, kc);
    for (int64_t j = 0; j < N; ++j) h2f(B + j * ldb + k0, bf + j * kc, kc);
    gemm_serial<float>(false, true, M, N, kc, 1.0f, af, kc, bf, kc, 1.0f, acc, ldacc);
  }
}

#define EMBER_GEMM_HALF_INSTANTIATE(H)                                                                           \
  template void gemm_f16<H>(bool, bool, int64_t, int64_t, int64_t, float, const H*, int64_t, const H*, int64_t, float, \
                            H*, int64_t);                                                                          \
  template void gemm_f16a_chunked<H, H, H>(bool, int64_t, int64_t, int64_t, const H*, int64_t, const H*, int64_t,  \
                                           H*, int64_t, bool);                                                      \
  template void gemm_f16a_chunked<float, H, H>(bool, int64_t, int64_t, int64_t, const H*, int64_t, const float*,   \
                                               int64_t, H*, int64_t, bool);                                         \
  template void gemm_f16a_chunked<H, float, H>(bool, int64_t, int64_t, int64_t, const H*, int64_t, const H*,       \
                                               int64_t, float*, int64_t, bool);                                     \
  template void gemm_nt_accumulate_f16<H>(int64_t, int64_t, int64_t, const H*, int64_t, const H*, int64_t, float*,  \
                                          int64_t);
EMBER_GEMM_HALF_INSTANTIATE(f16)
EMBER_GEMM_HALF_INSTANTIATE(bf16)
#undef EMBER_GEMM_HALF_INSTANTIATE

}  // namespace ember::cpu
