// ops/cpu/conv/winograd_micro.h — the tile transforms of the F(2x2, 3x3)
// convolution (conv_winograd.h), written once with GCC vector extensions
// and compiled per instruction set beside the GEMM's (gemm_micro.h
// includes this file; the gemm_kernels_*.cpp files set -march). Internal
// to those files; gemm_isa.h's GemmKernels holds the pointers.
//
// Each transform handles the tw tiles of one tile row, the tiles along the
// vector lanes: tile tj reads image columns 2 tj .. 2 tj + 3, so the four
// columns of a tile are the even and odd lanes of two loads (one pair at
// 2 tj, one at 2 tj + 2), split by shuffles. The vectors are at most 32
// bytes wide (8 f32 tiles): a tile row of a 28x28 image has 14 tiles and
// one of a 7x7 image 4, so wider vectors would mostly carry empty lanes,
// and on CPUs that split 64-byte operations in two (Zen 4) they are no
// faster per lane. Stores are whole vectors (a partial last block writes
// past the row, into slack the caller provides or into values written
// after it), not masked stores, which were the output transform's hottest
// instructions in a profile on a Zen 4.
#pragma once
#include <algorithm>
#include <cstdint>
#include <utility>
#if defined(__AVX__)
#include <immintrin.h>
#endif

namespace ember::cpu::gemm_micro {
namespace {

// Lanes [0, n) from p, zeros above; reads nothing past p[n - 1].
template <typename V, typename T>
inline V load_first(const T* p, int n) {
  constexpr int L = int(sizeof(V) / sizeof(T));
  if (n >= L) return load_vec<V>(p);
#if defined(__AVX512VL__)
  const __mmask8 m = __mmask8((1u << n) - 1);
  if constexpr (sizeof(V) == 32 && sizeof(T) == 4) return reinterpret_cast<V>(_mm256_maskz_loadu_ps(m, p));
  if constexpr (sizeof(V) == 32 && sizeof(T) == 8) return reinterpret_cast<V>(_mm256_maskz_loadu_pd(m, p));
#endif
  V v{};
  for (int i = 0; i < n; ++i) v[i] = p[i];
  return v;
}

// Even / odd lanes of the 2L values a, b (a first).
template <typename V, size_t... Is>
inline V even_lanes(const V& a, const V& b, std::index_sequence<Is...>) {
  return __builtin_shufflevector(a, b, int(2 * Is)...);
}
template <typename V, size_t... Is>
inline V odd_lanes(const V& a, const V& b, std::index_sequence<Is...>) {
  return __builtin_shufflevector(a, b, int(2 * Is + 1)...);
}
// Lanes of e and o interleaved (e0 o0 e1 o1 ...): the low half of the
// result (H = 0) or the high half (H = 1).
template <int H, typename V, size_t... Is>
inline V interleave_half(const V& e, const V& o, std::index_sequence<Is...>) {
  constexpr int L = int(sizeof...(Is));
  return __builtin_shufflevector(e, o, int(H * L / 2 + Is / 2 + (Is % 2) * L)...);
}

// V[(4 i + s) * plane + tj] = (B^T d_tj B)[i][s] for the tw tiles of one
// tile row, d_tj = rows[r * wb + 2 tj + s] (r, s < 4), B^T = [1 0 -1 0;
// 0 1 1 0; 0 -1 1 0; 0 1 0 -1]. Reads up to 2 L + 2 values past each
// row's 2 tw + 2 and writes up to L - 1 past tile tw - 1 of each of v's
// rows (the caller's buffers have that slack).
//   rows: [4, wb]   v: [16, plane], tiles [0, tw)
template <typename T, int VB>
void winograd_input_row(const T* rows, int64_t wb, int64_t tw, T* v, int64_t plane) {
  using V = typename Vec<T, VB>::type;
  constexpr int L = Vec<T, VB>::lanes;
  constexpr auto lanes = std::make_index_sequence<L>{};
  for (int64_t t0 = 0; t0 < tw; t0 += L) {
    V d[4][4];
    for (int r = 0; r < 4; ++r) {
      const T* p = rows + r * wb + 2 * t0;
      const V a = load_vec<V>(p), b = load_vec<V>(p + L), c = load_vec<V>(p + 2), e = load_vec<V>(p + 2 + L);
      d[r][0] = even_lanes(a, b, lanes);
      d[r][1] = odd_lanes(a, b, lanes);
      d[r][2] = even_lanes(c, e, lanes);
      d[r][3] = odd_lanes(c, e, lanes);
    }
    for (int s = 0; s < 4; ++s) {  // t = B^T d (rows), then (B^T d) B (columns)
      const V t0s = d[0][s] - d[2][s], t1s = d[1][s] + d[2][s], t2s = d[2][s] - d[1][s], t3s = d[1][s] - d[3][s];
      d[0][s] = t0s, d[1][s] = t1s, d[2][s] = t2s, d[3][s] = t3s;
    }
    for (int i = 0; i < 4; ++i) {
      T* vi = v + 4 * i * plane + t0;
      store_vec(vi, d[i][0] - d[i][2]);
      store_vec(vi + plane, d[i][1] + d[i][2]);
      store_vec(vi + 2 * plane, d[i][2] - d[i][1]);
      store_vec(vi + 3 * plane, d[i][1] - d[i][3]);
    }
  }
}

// Output rows o0 and o1 = o0 + 2 tw (2 tw values each) of one tile row
// from the tiles' products m[xi * plane + tj]: the tile is A^T m A,
// A^T = [1 1 1 0; 0 1 -1 -1]. Reads up to L - 1 values past each of m's
// rows (the caller's buffer has that slack). Writes up to 2 L - 1 values
// past o1's last: the blocks run last to first, so what a partial last
// block writes past o0 lands in o1's first values and is overwritten.
template <typename T, int VB>
void winograd_output_row(const T* m, int64_t plane, int64_t tw, T* o0) {
  using V = typename Vec<T, VB>::type;
  constexpr int L = Vec<T, VB>::lanes;
  constexpr auto lanes = std::make_index_sequence<L>{};
  for (int64_t t0 = (tw - 1) / L * L; t0 >= 0; t0 -= L) {
    V x[16];
    for (int xi = 0; xi < 16; ++xi) x[xi] = load_vec<V>(m + xi * plane + t0);
    V t[2][4];  // t = A^T x
    for (int s = 0; s < 4; ++s) {
      t[0][s] = x[s] + x[4 + s] + x[8 + s];
      t[1][s] = x[4 + s] - x[8 + s] - x[12 + s];
    }
    for (int i = 0; i < 2; ++i) {  // (A^T x) A: even and odd output columns
      const V e = t[i][0] + t[i][1] + t[i][2], o = t[i][1] - t[i][2] - t[i][3];
      T* out = o0 + i * 2 * tw + 2 * t0;
      store_vec(out, interleave_half<0>(e, o, lanes));
      store_vec(out + L, interleave_half<1>(e, o, lanes));
    }
  }
}

// Z[(4 i + s) * plane + tj] = (A gy_tj A^T)[i][s] for the tw tiles of one
// tile row from its output-gradient rows g0, g1 (2 tw values each, read
// exactly: they may be the caller's tensor). Writes up to L - 1 values
// past tile tw - 1 of each of z's rows (the caller's slack).
template <typename T, int VB>
void winograd_grad_row(const T* g0, const T* g1, int64_t tw, T* z, int64_t plane) {
  using V = typename Vec<T, VB>::type;
  constexpr int L = Vec<T, VB>::lanes;
  constexpr auto lanes = std::make_index_sequence<L>{};
  for (int64_t t0 = 0; t0 < tw; t0 += L) {
    const int n = int(std::min<int64_t>(L, tw - t0));
    const int lo = std::min(L, 2 * n), hi = std::max(0, 2 * n - L);  // (values of each row)
    V a, b, c, d;  // gy tile [[a b]; [c d]], tiles along the lanes
    {
      const V p = load_first<V>(g0 + 2 * t0, lo), q = load_first<V>(g0 + 2 * t0 + L, hi);
      a = even_lanes(p, q, lanes), b = odd_lanes(p, q, lanes);
      const V r = load_first<V>(g1 + 2 * t0, lo), s = load_first<V>(g1 + 2 * t0 + L, hi);
      c = even_lanes(r, s, lanes), d = odd_lanes(r, s, lanes);
    }
    const V t[4][2] = {{a, b}, {a + c, b + d}, {a - c, b - d}, {-c, -d}};  // t = A gy (rows)
    for (int i = 0; i < 4; ++i) {                                        // (A gy) A^T (columns)
      T* zi = z + 4 * i * plane + t0;
      store_vec(zi, t[i][0]);
      store_vec(zi + plane, t[i][0] + t[i][1]);
      store_vec(zi + 2 * plane, t[i][0] - t[i][1]);
      store_vec(zi + 3 * plane, -t[i][1]);
    }
  }
}

}  // namespace
}  // namespace ember::cpu::gemm_micro
