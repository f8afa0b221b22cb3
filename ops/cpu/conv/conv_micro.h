// ops/cpu/conv/conv_micro.h — the register tiles of the window-row convolution
// (conv_window.h), written once with GCC vector extensions and compiled per
// instruction set beside the GEMM's (gemm_micro.h includes this file; the
// gemm_kernels_*.cpp files set -march). Internal to those files.
//
// A convolution is a GEMM whose operand rows are windows of the zero-padded
// image: row (c, r, s) of the column matrix is a contiguous run of the image
// grid starting at a fixed offset. These tiles read such rows in place,
// through a table of offsets, instead of from packed panels:
//
//   window_tile  (forward, backward data) acc[MR x NR] += a[k][i] * B_k[j]
//                where B_k = base + offsets[k]: vectors along the image row,
//                the (packed) filter value broadcast.
//   window_tile_t (filter gradient) acc[MR x NR] += A_i[k] * b[k][j] where
//                A_i = base + offsets[i]: the image value broadcast, vectors
//                along output channels (b: the output gradient packed
//                [k, NR], output channels along the lanes).
//
// Filter gradients of layers with few output channels (16 on a 32-lane
// tile) fold G consecutive k into the lanes: lane l of b holds output
// channel l / G at k = G*kk + l % G, and A is broadcast G values at a time
// (one 8-byte or 16-byte broadcast), so every lane does useful work; the
// caller adds each group of G lanes at the end.
#pragma once
#include <cstdint>
#include <cstring>
#include <type_traits>
#include <algorithm>
#include <utility>
#if defined(__AVX__)
#include <immintrin.h>
#endif

#include "ops/cpu/gemm/gemm_isa.h"

namespace ember::cpu::gemm_micro {
namespace {

// acc -> C on the valid (mr x nr) corner: C = acc + beta * C (beta 0 or 1).
template <typename T, int VB, int MR, int NV, typename V>
inline void store_tile(const V (&acc)[MR][NV], T* C, int64_t ldc, T beta, int mr, int nr) {
  constexpr int L = int(VB / sizeof(T));
  constexpr int NR = NV * L;
  if (mr == MR && nr == NR) {
    for (int i = 0; i < MR; ++i)
      for (int v = 0; v < NV; ++v) {
        T* c = C + i * ldc + v * L;
        store_vec(c, beta == T(0) ? acc[i][v] : acc[i][v] + load_vec<V>(c));
      }
    return;
  }
  alignas(64) T tile[MR * NR];
  for (int i = 0; i < MR; ++i)
    for (int v = 0; v < NV; ++v) store_vec(tile + i * NR + v * L, acc[i][v]);
  for (int i = 0; i < mr; ++i)
    for (int j = 0; j < nr; ++j) {
      T& c = C[i * ldc + j];
      c = beta == T(0) ? tile[i * NR + j] : tile[i * NR + j] + c;
    }
}

// The window tile's arithmetic: acc[MR][NV] = sum over k of a[k][i] * B_k.
template <typename T, int VB, int MR, int NV>
inline void window_accumulate(int64_t kc, const T* __restrict a, const T* base, const int64_t* __restrict offsets,
                              typename Vec<T, VB>::type (&acc)[MR][NV]) {
  using V = typename Vec<T, VB>::type;
  constexpr int L = Vec<T, VB>::lanes;
  for (int i = 0; i < MR; ++i)
    for (int v = 0; v < NV; ++v) acc[i][v] = V{};
#pragma GCC unroll 4
  for (int64_t k = 0; k < kc; ++k) {
    const T* b = base + offsets[k];
    V bv[NV];
    for (int v = 0; v < NV; ++v) bv[v] = load_vec<V>(b + v * L);
#pragma GCC unroll 16
    for (int i = 0; i < MR; ++i) {
      const T ai = a[k * MR + i];
      for (int v = 0; v < NV; ++v) acc[i][v] += ai * bv[v];
    }
  }
}

// Forward tile. a: packed [kc, MR]; row k of B is base + offsets[k], read
// for columns [0, NR) (all of them, whatever nr is: the caller's rows have
// at least NR readable values past every start, the grid's slack) .
//   C: [mr, nr] with row stride ldc; C = acc + beta * C
template <typename T, int VB, int MR, int NV>
void window_tile(int64_t kc, const T* __restrict a, const T* base, const int64_t* __restrict offsets, T* C,
                 int64_t ldc, T beta, int mr, int nr) {
  typename Vec<T, VB>::type acc[MR][NV];
  window_accumulate<T, VB, MR, NV>(kc, a, base, offsets, acc);
  store_tile<T, VB, MR, NV>(acc, C, ldc, beta, mr, nr);
}

// {a, b} -> {a, b, a, b, ...} (N lanes).
template <size_t... Is>
inline auto repeat_pair(typename Vec<uint64_t, 16>::type two, std::index_sequence<Is...>) {
  return __builtin_shufflevector(two, two, int(Is % 2)...);
}

template <typename T, int VB, int G>
inline typename Vec<T, VB>::type broadcast_group(const T* p) {
  using V = typename Vec<T, VB>::type;
  constexpr int bytes = G * int(sizeof(T));
  if constexpr (G == 1) {
    return V{} + *p;
  } else if constexpr (bytes == 4 || bytes == 8) {
    using E = std::conditional_t<bytes == 4, uint32_t, uint64_t>;
    E e;
    std::memcpy(&e, p, bytes);
    return reinterpret_cast<V>(typename Vec<E, VB>::type{} + e);
  } else {
    static_assert(bytes == 16, "lane groups of 4, 8 or 16 bytes");
#if defined(__AVX512F__)
    // (the maskz form: GCC 12 warns falsely about the unmasked one)
    if constexpr (VB == 64) return reinterpret_cast<V>(_mm512_maskz_broadcast_f32x4(0xffff, _mm_loadu_ps(reinterpret_cast<const float*>(p))));
#endif
#if defined(__AVX__)
    if constexpr (VB == 32) return reinterpret_cast<V>(_mm256_broadcast_ps(reinterpret_cast<const __m128*>(p)));
#endif
    typename Vec<uint64_t, 16>::type two;  // (GCC goes through memory here)
    std::memcpy(&two, p, 16);
    return reinterpret_cast<V>(repeat_pair(two, std::make_index_sequence<VB / 8>{}));
  }
}

// Filter-gradient tile. Row i of A is base + offsets[i] (offsets has MR
// entries; rows past mr repeat a valid one), read along k in groups of G;
// b: packed [ceil(kc / G), NR], lanes as above. kc need not be a multiple of
// G: the last group reads only the values that exist (zero for the rest).
//   C: [MR, NR] with row stride ldc (whole tile; the caller's buffer has
//   rows up to a multiple of MR); C = acc + (accumulate ? C : 0)
template <typename T, int VB, int MR, int NV, int G>
void window_tile_t(int64_t kc, const T* base, const int64_t* offsets, const T* __restrict b, T* __restrict C,
                   int64_t ldc, bool accumulate) {
  using V = typename Vec<T, VB>::type;
  constexpr int L = Vec<T, VB>::lanes;
  constexpr int NR = NV * L;
  static_assert(L % G == 0, "a lane group must divide the vector");
  const T* ap[MR];
  for (int i = 0; i < MR; ++i) ap[i] = base + offsets[i];
  V acc[MR][NV];
  for (int i = 0; i < MR; ++i)
    for (int v = 0; v < NV; ++v) acc[i][v] = V{};
  const int64_t groups = kc / G;
#pragma GCC unroll 2
  for (int64_t kk = 0; kk < groups; ++kk) {
    V bv[NV];
    for (int v = 0; v < NV; ++v) bv[v] = load_vec<V>(b + kk * NR + v * L);
#pragma GCC unroll 16
    for (int i = 0; i < MR; ++i) {
      const V ai = broadcast_group<T, VB, G>(ap[i] + kk * G);
      for (int v = 0; v < NV; ++v) acc[i][v] += ai * bv[v];
    }
  }
  if (const int rest = int(kc - groups * G); rest > 0) {  // a partial last group: zero-filled
    V bv[NV];
    for (int v = 0; v < NV; ++v) bv[v] = load_vec<V>(b + groups * NR + v * L);
    for (int i = 0; i < MR; ++i) {
      T part[G] = {};
      std::memcpy(part, ap[i] + groups * G, sizeof(T) * size_t(rest));
      const V ai = broadcast_group<T, VB, G>(part);
      for (int v = 0; v < NV; ++v) acc[i][v] += ai * bv[v];
    }
  }
  for (int i = 0; i < MR; ++i)
    for (int v = 0; v < NV; ++v) {
      T* c = C + i * ldc + v * L;
      store_vec(c, accumulate ? acc[i][v] + load_vec<V>(c) : acc[i][v]);
    }
}

// ------------------------------------------------------------ row copies

// Copies rows of `images` images into contiguous rows of `width` values,
// row by row and image by image: dst row i * images + g gets zeros on
// [0, left), row i of image g (src + i * ldsrc + g * ldimage) on
// [left, left + n), zeros on [left + n, width). (One image: a plane's rows
// into a padded grid or back; several: images side by side on a grid.)
// The AVX-512 version moves whole vectors without masks (a few moves per
// row instead of three library calls, for images of 7 to 56 columns): a
// row's vector moves may read past its n source values and write past its
// width, into the following rows, which are written after it; only rows
// whose vectors stay within the last row's end (and, reading, within the
// last image's last row, the highest source address) take that path, the
// rest are copied exactly. So nothing outside the rows' span is read or
// written.
template <typename T, int VB>
void copy_rows(const T* src, int64_t ldsrc, int64_t n, T* dst, int64_t left, int64_t width, int64_t rows,
               int64_t images, int64_t ldimage) {
  const int64_t lddst = width, total = rows * images;
  int64_t i = 0;
#if defined(__AVX512F__)
  if constexpr (VB == 64 && sizeof(T) == 4) {
    constexpr int64_t L = 16;
    auto up = [](int64_t v) { return (v + L - 1) / L * L; };
    // Furthest a row's stores / loads reach from its start.
    const int64_t reach_dst = std::max({up(left), left + up(n), left + n + up(width - left - n)});
    const int64_t reach_src = up(n);
    const int64_t end_dst = (total - 1) * lddst + width, end_src = (rows - 1) * ldsrc + (images - 1) * ldimage + n;
    const __m512 zero = _mm512_setzero_ps();
    for (; i < total && i * lddst + reach_dst <= end_dst; ++i) {
      const int64_t at = (i / images) * ldsrc + (i % images) * ldimage;
      if (at + reach_src > end_src) break;
      const float* s = reinterpret_cast<const float*>(src + at);
      float* d = reinterpret_cast<float*>(dst + i * lddst);
      for (int64_t o = 0; o < left; o += L) _mm512_storeu_ps(d + o, zero);
      for (int64_t o = 0; o < n; o += L) _mm512_storeu_ps(d + left + o, _mm512_loadu_ps(s + o));
      for (int64_t o = left + n; o < width; o += L) _mm512_storeu_ps(d + o, zero);
    }
  }
#endif
  for (; i < total; ++i) {
    T* d = dst + i * lddst;
    std::memset(static_cast<void*>(d), 0, sizeof(T) * size_t(left));
    std::memcpy(static_cast<void*>(d + left), src + (i / images) * ldsrc + (i % images) * ldimage,
                sizeof(T) * size_t(n));
    std::memset(static_cast<void*>(d + left + n), 0, sizeof(T) * size_t(width - left - n));
  }
}

// ------------------------------------------------------------ packing

// Transposes `rows` rows of E-byte elements (src, row stride lds elements of
// T) into dst rows of NR values: element jj of row r (the G = E / sizeof(T)
// values src[r*lds + jj*G ..]) goes to dst[jj*NR + r*G ..]. E is 4, 8 or 16
// bytes; in 8 x 8 blocks of 4-byte elements (4 x 4 of 8, 2 x 2 of 16) with
// AVX shuffles where the build has them, element by element elsewhere.
template <int E>
struct Elem {
  char b[E];
};

#if defined(__AVX__)
// 8 rows of 8 floats -> 8 columns.   in[r] = row r; out[c] = column c.
inline void transpose8x8(__m256 (&v)[8]) {
  const __m256 t0 = _mm256_unpacklo_ps(v[0], v[1]), t1 = _mm256_unpackhi_ps(v[0], v[1]);
  const __m256 t2 = _mm256_unpacklo_ps(v[2], v[3]), t3 = _mm256_unpackhi_ps(v[2], v[3]);
  const __m256 t4 = _mm256_unpacklo_ps(v[4], v[5]), t5 = _mm256_unpackhi_ps(v[4], v[5]);
  const __m256 t6 = _mm256_unpacklo_ps(v[6], v[7]), t7 = _mm256_unpackhi_ps(v[6], v[7]);
  const __m256 u0 = _mm256_shuffle_ps(t0, t2, 0x44), u1 = _mm256_shuffle_ps(t0, t2, 0xEE);
  const __m256 u2 = _mm256_shuffle_ps(t1, t3, 0x44), u3 = _mm256_shuffle_ps(t1, t3, 0xEE);
  const __m256 u4 = _mm256_shuffle_ps(t4, t6, 0x44), u5 = _mm256_shuffle_ps(t4, t6, 0xEE);
  const __m256 u6 = _mm256_shuffle_ps(t5, t7, 0x44), u7 = _mm256_shuffle_ps(t5, t7, 0xEE);
  v[0] = _mm256_permute2f128_ps(u0, u4, 0x20), v[1] = _mm256_permute2f128_ps(u1, u5, 0x20);
  v[2] = _mm256_permute2f128_ps(u2, u6, 0x20), v[3] = _mm256_permute2f128_ps(u3, u7, 0x20);
  v[4] = _mm256_permute2f128_ps(u0, u4, 0x31), v[5] = _mm256_permute2f128_ps(u1, u5, 0x31);
  v[6] = _mm256_permute2f128_ps(u2, u6, 0x31), v[7] = _mm256_permute2f128_ps(u3, u7, 0x31);
}
// 4 rows of 4 doubles -> 4 columns.
inline void transpose4x4(__m256d (&v)[4]) {
  const __m256d t0 = _mm256_unpacklo_pd(v[0], v[1]), t1 = _mm256_unpackhi_pd(v[0], v[1]);
  const __m256d t2 = _mm256_unpacklo_pd(v[2], v[3]), t3 = _mm256_unpackhi_pd(v[2], v[3]);
  v[0] = _mm256_permute2f128_pd(t0, t2, 0x20), v[1] = _mm256_permute2f128_pd(t1, t3, 0x20);
  v[2] = _mm256_permute2f128_pd(t0, t2, 0x31), v[3] = _mm256_permute2f128_pd(t1, t3, 0x31);
}
// 2 rows of 2 16-byte elements -> 2 columns.
inline void transpose2x2(__m256 (&v)[2]) {
  const __m256 a = _mm256_permute2f128_ps(v[0], v[1], 0x20), b = _mm256_permute2f128_ps(v[0], v[1], 0x31);
  v[0] = a, v[1] = b;
}
#endif

template <typename T, int E>
void pack_transposed_e(const T* src, int64_t lds, int rows, int64_t n, T* dst, int NR) {
  using X = Elem<E>;
  constexpr int G = E / int(sizeof(T));
  const int64_t ldx = lds / G, ldd = NR / G;  // strides in elements
  const X* s = reinterpret_cast<const X*>(src);
  X* d = reinterpret_cast<X*>(dst);
  int64_t jj = 0;
#if defined(__AVX__)
  constexpr int B = E == 4 ? 8 : E == 8 ? 4 : 2;  // block: B x B elements, one ymm per row
  if (lds % G == 0 && NR % G == 0) {
    for (; jj + B <= n; jj += B) {
      int r = 0;
      for (; r + B <= rows; r += B) {
        if constexpr (E == 4) {
          __m256 v[8];
          for (int i = 0; i < 8; ++i) v[i] = _mm256_loadu_ps(reinterpret_cast<const float*>(s + (r + i) * ldx + jj));
          transpose8x8(v);
          for (int i = 0; i < 8; ++i) _mm256_storeu_ps(reinterpret_cast<float*>(d + (jj + i) * ldd + r), v[i]);
        } else if constexpr (E == 8) {
          __m256d v[4];
          for (int i = 0; i < 4; ++i) v[i] = _mm256_loadu_pd(reinterpret_cast<const double*>(s + (r + i) * ldx + jj));
          transpose4x4(v);
          for (int i = 0; i < 4; ++i) _mm256_storeu_pd(reinterpret_cast<double*>(d + (jj + i) * ldd + r), v[i]);
        } else {
          __m256 v[2];
          for (int i = 0; i < 2; ++i) v[i] = _mm256_loadu_ps(reinterpret_cast<const float*>(s + (r + i) * ldx + jj));
          transpose2x2(v);
          for (int i = 0; i < 2; ++i) _mm256_storeu_ps(reinterpret_cast<float*>(d + (jj + i) * ldd + r), v[i]);
        }
      }
      for (; r < rows; ++r)
        for (int e = 0; e < B; ++e) d[(jj + e) * ldd + r] = s[r * ldx + jj + e];
      if (rows < ldd)
        for (int e = 0; e < B; ++e)
          std::memset(static_cast<void*>(d + (jj + e) * ldd + rows), 0, size_t(E) * size_t(ldd - rows));
    }
  }
#endif
  for (; jj < n; ++jj) {
    for (int r = 0; r < rows; ++r) d[jj * ldd + r] = s[r * ldx + jj];
    if (rows < ldd) std::memset(static_cast<void*>(d + jj * ldd + rows), 0, size_t(E) * size_t(ldd - rows));
  }
}

// See GemmKernels::pack_transposed.
template <typename T>
void pack_transposed(const T* src, int64_t lds, int rows, int64_t groups, int G, T* dst, int NR) {
  switch (G * int(sizeof(T))) {
    case 4: return pack_transposed_e<T, 4>(src, lds, rows, groups, dst, NR);
    case 8: return pack_transposed_e<T, 8>(src, lds, rows, groups, dst, NR);
    case 16: return pack_transposed_e<T, 16>(src, lds, rows, groups, dst, NR);
    default: break;  // (no such lane group is registered)
  }
}

}  // namespace
}  // namespace ember::cpu::gemm_micro
