// ops/cpu/conv/winograd4_micro.h — the tile transforms of the F(4x4, 3x3)
// convolution (conv_winograd.h), beside winograd_micro.h's F(2x2, 3x3)
// ones and built the same way: GCC vector extensions compiled per
// instruction set (gemm_micro.h includes this file after
// winograd_micro.h, whose helpers it uses), the tiles of one tile row along
// the vector lanes, vectors of at most 32 bytes, whole-vector stores.
//
// Lavin & Gray's matrices for the points 0, 1, -1, 2, -2 and infinity:
//   B^T = [4  0 -5  0 1 0;      G = [ 1/4     0     0;     A^T = [1 1  1 1  1 0;
//          0 -4 -4  1 1 0;           -1/6  -1/6  -1/6;            0 1 -1 2 -2 0;
//          0  4 -4 -1 1 0;           -1/6   1/6  -1/6;            0 1  1 4  4 0;
//          0 -2 -1  2 1 0;            1/24  1/12  1/6;            0 1 -1 8 -8 1]
//          0  2 -1 -2 1 0;            1/24 -1/12  1/6;
//          0  4  0 -5 0 1]            0     0     1]
// A tile's 4 columns sit 4 apart in a row, so a row's tiles are split out
// of four loads by two rounds of even/odd shuffles (split_by_four: columns
// 0-3 of each tile), and columns 4 and 5 are columns 0 and 1 moved one lane down with
// the next block's first tile coming in.
#pragma once
#include <algorithm>
#include <cstdint>
#include <utility>

namespace ember::cpu::gemm_micro {
namespace {

// Lanes 1 .. L-1 of a, then lane `first` of b: the vector one tile further on.
template <int First, typename V, size_t... Is>
inline V next_tile(const V& a, const V& b, std::index_sequence<Is...>) {
  constexpr int L = int(sizeof...(Is));
  return __builtin_shufflevector(a, b, (Is + 1 < size_t(L) ? int(Is + 1) : L + First)...);
}

// The 4 L values q[0..3] (consecutive) split by their position in each
// group of four: col[s] lane t = value 4 t + s, i.e. column s of the L
// tiles that start 4 apart. Two rounds of even/odd shuffles.
template <typename V, size_t... Is>
inline void split_by_four(const V (&q)[4], V (&col)[4], std::index_sequence<Is...> lanes) {
  const V ab0 = even_lanes(q[0], q[1], lanes), ab1 = odd_lanes(q[0], q[1], lanes);
  const V ce0 = even_lanes(q[2], q[3], lanes), ce1 = odd_lanes(q[2], q[3], lanes);
  col[0] = even_lanes(ab0, ce0, lanes), col[1] = even_lanes(ab1, ce1, lanes);
  col[2] = odd_lanes(ab0, ce0, lanes), col[3] = odd_lanes(ab1, ce1, lanes);
}

// out = B^T in (one 6-point input transform; in place is fine).
template <typename V>
inline void winograd4_input_points(const V (&in)[6], V (&out)[6]) {
  const V a = in[4] - 4 * in[2], b = in[3] - 4 * in[1];
  const V c = in[4] - in[2], e = in[3] - in[1];
  const V o0 = 4 * in[0] - 5 * in[2] + in[4];
  const V o5 = 4 * in[1] - 5 * in[3] + in[5];
  out[0] = o0, out[1] = a + b, out[2] = a - b, out[3] = c + 2 * e, out[4] = c - 2 * e, out[5] = o5;
}

// V[(6 i + s) * plane + tj] = (B^T d_tj B)[i][s] for the tw tiles of one
// tile row, d_tj = rows[r * wb + 4 tj + s] (r, s < 6). Reads up to 5 L values
// from 4 t0 of each row (at most 4 L + 2 past its 4 tw + 2) and writes up
// to L - 1 past tile tw - 1 of each of v's rows (the caller's slack).
//   rows: [6, wb]   v: [36, plane], tiles [0, tw)
template <typename T, int VB>
void winograd4_input_row(const T* rows, int64_t wb, int64_t tw, T* v, int64_t plane) {
  using V = typename Vec<T, VB>::type;
  constexpr int L = Vec<T, VB>::lanes;
  constexpr auto lanes = std::make_index_sequence<L>{};
  for (int64_t t0 = 0; t0 < tw; t0 += L) {
    V d[6][6];  // d[r][s]: row r, tile column s, tiles along the lanes
    for (int r = 0; r < 6; ++r) {
      const T* p = rows + r * wb + 4 * t0;
      const V q[4] = {load_vec<V>(p), load_vec<V>(p + L), load_vec<V>(p + 2 * L), load_vec<V>(p + 3 * L)};
      const V next = load_vec<V>(p + 4 * L);
      V col[4];
      split_by_four(q, col, lanes);
      const V in[6] = {col[0], col[1], col[2], col[3], next_tile<0>(col[0], next, lanes), next_tile<1>(col[1], next, lanes)};
      winograd4_input_points(in, d[r]);  // d B, along the row
    }
    for (int s = 0; s < 6; ++s) {  // B^T (d B), down the columns
      const V col[6] = {d[0][s], d[1][s], d[2][s], d[3][s], d[4][s], d[5][s]};
      V out[6];
      winograd4_input_points(col, out);
      for (int i = 0; i < 6; ++i) store_vec(v + (6 * i + s) * plane + t0, out[i]);
    }
  }
}

// out = A^T in (6 points to 4).
template <typename V>
inline void winograd4_output_points(const V (&in)[6], V (&out)[4]) {
  const V a = in[1] + in[2], b = in[1] - in[2], c = in[3] + in[4], e = in[3] - in[4];
  out[0] = in[0] + a + c, out[1] = b + 2 * e, out[2] = a + 4 * c, out[3] = b + 8 * e + in[5];
}

// Output rows o0 + i * 4 tw (i < 4; 4 tw values each) of one tile row from
// the tiles' products m[xi * plane + tj]: the tile is A^T m A. Reads up to
// L - 1 values past each of m's rows (the caller's slack). Writes up to
// 4 L - 4 values past the last row's last: the blocks run last to first
// and the rows first to last, so what a partial block writes past a row
// lands in rows written after it.
template <typename T, int VB>
void winograd4_output_row(const T* m, int64_t plane, int64_t tw, T* o0) {
  using V = typename Vec<T, VB>::type;
  constexpr int L = Vec<T, VB>::lanes;
  constexpr auto lanes = std::make_index_sequence<L>{};
  for (int64_t t0 = (tw - 1) / L * L; t0 >= 0; t0 -= L) {
    V t[4][6];  // t = A^T m, down the columns
    for (int s = 0; s < 6; ++s) {
      V col[6], out[4];
      for (int i = 0; i < 6; ++i) col[i] = load_vec<V>(m + (6 * i + s) * plane + t0);
      winograd4_output_points(col, out);
      for (int i = 0; i < 4; ++i) t[i][s] = out[i];
    }
    for (int i = 0; i < 4; ++i) {  // (A^T m) A along the rows: output columns 0-3 of each tile
      V e[4];
      winograd4_output_points(t[i], e);
      // Tiles along the lanes to output columns in order: a 4-way interleave.
      const V x0 = interleave_half<0>(e[0], e[2], lanes), x1 = interleave_half<1>(e[0], e[2], lanes);
      const V y0 = interleave_half<0>(e[1], e[3], lanes), y1 = interleave_half<1>(e[1], e[3], lanes);
      T* out = o0 + i * 4 * tw + 4 * t0;
      store_vec(out, interleave_half<0>(x0, y0, lanes));
      store_vec(out + L, interleave_half<1>(x0, y0, lanes));
      store_vec(out + 2 * L, interleave_half<0>(x1, y1, lanes));
      store_vec(out + 3 * L, interleave_half<1>(x1, y1, lanes));
    }
  }
}

// out = A in (4 points to 6; A = (A^T)^T).
template <typename V>
inline void winograd4_grad_points(const V (&in)[4], V (&out)[6]) {
  const V ev = in[0] + in[2], od = in[1] + in[3];
  const V ev4 = in[0] + 4 * in[2], od2 = 2 * in[1] + 8 * in[3];
  out[0] = in[0], out[1] = ev + od, out[2] = ev - od, out[3] = ev4 + od2, out[4] = ev4 - od2, out[5] = in[3];
}

// Z[(6 i + s) * plane + tj] = (A gy_tj A^T)[i][s] for the tw tiles of one
// tile row from its four output-gradient rows g0 + r * ldg (4 tw values
// each, read exactly: they may be the caller's tensor). Writes up to L - 1
// values past tile tw - 1 of each of z's rows (the caller's slack).
template <typename T, int VB>
void winograd4_grad_row(const T* g0, int64_t ldg, int64_t tw, T* z, int64_t plane) {
  using V = typename Vec<T, VB>::type;
  constexpr int L = Vec<T, VB>::lanes;
  constexpr auto lanes = std::make_index_sequence<L>{};
  for (int64_t t0 = 0; t0 < tw; t0 += L) {
    const int values = int(4 * std::min<int64_t>(L, tw - t0));  // of each row
    V h[4][6];  // h[r] = A gy[r], along the rows
    for (int r = 0; r < 4; ++r) {
      const T* p = g0 + r * ldg + 4 * t0;
      V q[4];
      for (int j = 0; j < 4; ++j) q[j] = load_first<V>(p + j * L, std::clamp(values - j * L, 0, L));
      V in[4];
      split_by_four(q, in, lanes);
      winograd4_grad_points(in, h[r]);
    }
    for (int s = 0; s < 6; ++s) {  // A (gy A^T), down the columns
      const V col[4] = {h[0][s], h[1][s], h[2][s], h[3][s]};
      V out[6];
      winograd4_grad_points(col, out);
      for (int i = 0; i < 6; ++i) store_vec(z + (6 * i + s) * plane + t0, out[i]);
    }
  }
}

}  // namespace
}  // namespace ember::cpu::gemm_micro
