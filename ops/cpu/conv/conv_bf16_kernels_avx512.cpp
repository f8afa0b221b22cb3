// ops/cpu/conv/conv_bf16_kernels_avx512.cpp — the bf16 window-row tiles
// (conv_bf16_kernels.h) in AVX512-BF16; the Makefile compiles this file with
// -march=x86-64-v4 -mavx512bf16, and conv_bf16_kernels.cpp calls it only on
// CPUs that have the instructions. An 8 x 32 tile: 16 zmm accumulators of
// 16 f32 lanes, each vdpbf16ps doing 32 multiplies.
#include "ops/cpu/conv/conv_bf16_kernels.h"

#if defined(__AVX512BF16__)  // (other builds never call this file's function)
#include <immintrin.h>

#include <cstring>

#include "ops/cpu/gemm/gemm_micro.h"

namespace ember::cpu {
namespace {

constexpr int kMR = 8, kNV = 2, kL = 16, kNR = kNV * kL;

inline __m512bh as_bh(__m512i v) { return reinterpret_cast<__m512bh>(v); }

// Stores acc (f32) to C on the (mr x nr) corner; accumulate: C += acc.
inline void store_acc(const __m512 (&acc)[kMR][kNV], float* C, int64_t ldc, int mr, int nr, bool accumulate) {
  if (mr == kMR && nr == kNR) {
    for (int i = 0; i < kMR; ++i)
      for (int v = 0; v < kNV; ++v) {
        float* c = C + i * ldc + v * kL;
        _mm512_storeu_ps(c, accumulate ? _mm512_add_ps(acc[i][v], _mm512_loadu_ps(c)) : acc[i][v]);
      }
    return;
  }
  alignas(64) float tile[kMR * kNR];
  for (int i = 0; i < kMR; ++i)
    for (int v = 0; v < kNV; ++v) _mm512_store_ps(tile + i * kNR + v * kL, acc[i][v]);
  for (int i = 0; i < mr; ++i)
    for (int j = 0; j < nr; ++j) C[i * ldc + j] = accumulate ? C[i * ldc + j] + tile[i * kNR + j] : tile[i * kNR + j];
}

//   a: packed [kpairs, MR] pairs   row kp of B: base + offsets[kp], 2*NR bf16   C: [mr, nr] (ldc)
void window_tile(int64_t kpairs, const uint32_t* a, const uint16_t* base, const int64_t* offsets, float* C,
                 int64_t ldc, int mr, int nr) {
  __m512 acc[kMR][kNV];
  for (int i = 0; i < kMR; ++i)
    for (int v = 0; v < kNV; ++v) acc[i][v] = _mm512_setzero_ps();
#pragma GCC unroll 2
  for (int64_t kp = 0; kp < kpairs; ++kp) {
    const uint16_t* b = base + offsets[kp];
    __m512bh bv[kNV];
    for (int v = 0; v < kNV; ++v) bv[v] = as_bh(_mm512_loadu_si512(b + v * 2 * kL));
#pragma GCC unroll 8
    for (int i = 0; i < kMR; ++i) {
      const __m512bh ai = as_bh(_mm512_set1_epi32(int(a[kp * kMR + i])));
      for (int v = 0; v < kNV; ++v) acc[i][v] = _mm512_dpbf16_ps(acc[i][v], ai, bv[v]);
    }
  }
  store_acc(acc, C, ldc, mr, nr, false);
}

// 2F consecutive bf16 from p, repeated across the vector (one broadcast).
template <int F>
inline __m512i broadcast_pairs(const uint16_t* p) {
  if constexpr (F == 1) {
    uint32_t v;
    std::memcpy(&v, p, 4);
    return _mm512_set1_epi32(int(v));
  } else if constexpr (F == 2) {
    uint64_t v;
    std::memcpy(&v, p, 8);
    return _mm512_set1_epi64(int64_t(v));
  } else {
    // (the maskz form: GCC 12 warns falsely about the unmasked one)
    return _mm512_maskz_broadcast_i32x4(0xffff, _mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  }
}

//   row i of A: base + offsets[i], kc bf16   b: [ceil(kc / 2F), NR] lanes of 2 bf16   C: [MR, NR] (ldc), += acc
template <int F>
void window_tile_t(int64_t kc, const uint16_t* base, const int64_t* offsets, const uint32_t* b, float* C,
                   int64_t ldc) {
  constexpr int G = 2 * F;  // bf16 per broadcast group
  const uint16_t* ap[kMR];
  for (int i = 0; i < kMR; ++i) ap[i] = base + offsets[i];
  __m512 acc[kMR][kNV];
  for (int i = 0; i < kMR; ++i)
    for (int v = 0; v < kNV; ++v) acc[i][v] = _mm512_setzero_ps();
  const int64_t groups = kc / G;
#pragma GCC unroll 2
  for (int64_t jj = 0; jj < groups; ++jj) {
    __m512bh bv[kNV];
    for (int v = 0; v < kNV; ++v) bv[v] = as_bh(_mm512_loadu_si512(b + jj * kNR + v * kL));
#pragma GCC unroll 8
    for (int i = 0; i < kMR; ++i) {
      const __m512bh ai = as_bh(broadcast_pairs<F>(ap[i] + jj * G));
      for (int v = 0; v < kNV; ++v) acc[i][v] = _mm512_dpbf16_ps(acc[i][v], ai, bv[v]);
    }
  }
  if (const int rest = int(kc - groups * G); rest > 0) {  // a partial last group: zero-filled
    __m512bh bv[kNV];
    for (int v = 0; v < kNV; ++v) bv[v] = as_bh(_mm512_loadu_si512(b + groups * kNR + v * kL));
    for (int i = 0; i < kMR; ++i) {
      uint16_t part[G] = {};
      std::memcpy(part, ap[i] + groups * G, sizeof(uint16_t) * size_t(rest));
      const __m512bh ai = as_bh(broadcast_pairs<F>(part));
      for (int v = 0; v < kNV; ++v) acc[i][v] = _mm512_dpbf16_ps(acc[i][v], ai, bv[v]);
    }
  }
  store_acc(acc, C, ldc, kMR, kNR, true);
}

void pack_transposed(const uint16_t* src, int64_t lds, int rows, int64_t groups, int F, uint32_t* dst, int NR) {
  // 4F-byte elements (2F bf16) of rows r -> dst row jj, element r; NR lanes = 2 NR bf16 per dst row.
  uint16_t* d = reinterpret_cast<uint16_t*>(dst);
  switch (F) {
    case 1: return gemm_micro::pack_transposed_e<uint16_t, 4>(src, lds, rows, groups, d, 2 * NR);
    case 2: return gemm_micro::pack_transposed_e<uint16_t, 8>(src, lds, rows, groups, d, 2 * NR);
    case 4: return gemm_micro::pack_transposed_e<uint16_t, 16>(src, lds, rows, groups, d, 2 * NR);
    default: break;  // (no such fold is registered)
  }
}

// Independent vdpbf16ps chains held in registers, as many as the tile has
// accumulators (gemm_micro::fma_peak_loop's twin): the CPU's bf16 pair-dot
// rate, which decides whether the tiles above pay (conv_bf16_kernels.cpp).
double dot_peak_loop(int64_t iters, float* sink) {
  constexpr int kChains = kMR * kNV;
  __m512 acc[kChains];
  for (int c = 0; c < kChains; ++c) acc[c] = _mm512_set1_ps(float(c) * 1e-3f);
  __m512i m = _mm512_set1_epi32(0x3f803f80), a = _mm512_set1_epi32(0x3f803f80);  // pairs of bf16 1.0
  for (int64_t i = 0; i < iters; ++i) {
#pragma GCC unroll 16
    for (int c = 0; c < kChains; ++c) acc[c] = _mm512_dpbf16_ps(acc[c], as_bh(m), as_bh(a));
    __asm__ volatile("" : "+x"(m));  // m unknown to the optimiser: no folding of the chains
  }
  __m512 total = _mm512_setzero_ps();
  for (int c = 0; c < kChains; ++c) total = _mm512_add_ps(total, acc[c]);
  alignas(64) float lanes[kL];  // (not _mm512_reduce_add_ps: GCC 12 warns inside it)
  _mm512_store_ps(lanes, total);
  float sum = 0;
  for (float v : lanes) sum += v;
  *sink = sum;
  return 4.0 * double(iters) * kChains * kL;  // 2 multiplies and 2 adds per lane
}

}  // namespace

Bf16ConvKernels bf16_conv_kernels_avx512bf16() {
  Bf16ConvKernels k;
  k.mr = kMR;
  k.nr = kNR;
  k.window_tile = &window_tile;
  k.window_tile_t[0] = &window_tile_t<1>;
  k.window_tile_t[1] = &window_tile_t<2>;
  k.window_tile_t[2] = &window_tile_t<4>;
  k.pack_transposed = &pack_transposed;
  k.dot_peak_loop = &dot_peak_loop;
  return k;
}

}  // namespace ember::cpu
#endif  // __AVX512BF16__
