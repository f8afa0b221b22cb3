// ops/cpu/conv/conv_grid.h — the window-row convolution's grid (conv_window.h):
// its layout (stacked images, shared padding, stride phases), filling it
// from images, the offsets of the filter taps' window rows, packing into
// register-tile panels, and splitting images over the threads. Shared by the
// f32/f64 path (conv_window.cpp) and the bf16 one (conv_window_bf16.cpp);
// internal to ops/cpu.
#pragma once
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <type_traits>
#include <vector>

#include "engine/parallel.h"
#include "ops/cpu/f16_util.h"
#include "ops/cpu/gemm/gemm_isa.h"
#include "ops/kernels.h"

namespace ember::cpu::conv_grid {

// Images are stacked until a grid has about this many columns.
inline constexpr int64_t kStackColumns = 512;

inline int64_t round_up(int64_t v, int64_t m) { return (v + m - 1) / m * m; }
inline int64_t ceil_div(int64_t v, int64_t m) { return (v + m - 1) / m; }

// Runs of a row (an image row, a grid row) copied, converted or zeroed.
// (libc's memcpy and memset, which pick AVX-512 moves at run time, measured
// faster here than inline loops in the baseline build's 16-byte vectors.)
template <typename T, typename S>
inline void copy_or_convert_run(const S* src, T* dst, int64_t n) {
  copy_values(src, dst, n);
}
template <typename T>
inline void copy_run(const T* src, T* dst, int64_t n) {
  std::memcpy(static_cast<void*>(dst), src, sizeof(T) * size_t(n));
}
template <typename T>
inline void zero_run(T* dst, int64_t n) {
  std::memset(static_cast<void*>(dst), 0, sizeof(T) * size_t(n));
}
// dst[0, left) = 0, dst[left, left + n) = src[0, n), dst[left + n, total) = 0.
// (AVX-512 masked moves, one or two per row, measured slower than this on
// the Zen 5 machine.)
template <typename T>
inline void copy_padded_row(const T* src, int64_t n, T* dst, int64_t left, int64_t total) {
  zero_run(dst, left);
  copy_run(src, dst + left, n);
  zero_run(dst + left + n, total - left - n);
}

// ----------------------------------------------------------------- layout

// A stack of G images on the grid (conv_window.h), side by side: per
// channel and phase, a plane of `rows` rows of Wrow = G * Wq values, image g
// in columns [g*Wq, (g+1)*Wq) of every row; phase (a, b) holds the padded
// rows a, a + sh, ... and columns b, b + sw, ... of the band.
struct GridLayout {
  int64_t C = 0, H = 0, W = 0;  // channels, image size
  int64_t G = 1;                // images
  int64_t sh = 1, sw = 1;       // stride (phases)
  int64_t top = 0, left = 0;    // first pixel inside an image block, padded coordinates
  int64_t Hb = 0, Wb = 0;       // the band's padded rows; an image block's padded columns (multiples of sh, sw)
  int64_t Hq = 0, Wq = 0;       // the same in phase rows and columns
  int64_t Wrow = 0;             // phase columns of a row: G * Wq
  int64_t rows = 0, plane = 0;  // phase rows per plane (Hq + a margin row); rows * Wrow
  int64_t slack = 0;            // readable zeros after the last plane
  // Only the phases some filter tap reads are stored: slot[a*sw + b] is the
  // place of phase (a, b) among them, or -1.
  int64_t slots = 0;
  std::vector<int64_t> slot;

  int64_t size() const { return slots * C * plane + slack; }
  // Start of the window row of padded offset (r, s) from an output's origin, channel c.
  int64_t offset(int64_t c, int64_t r, int64_t s) const {
    return (slot[size_t((r % sh) * sw + s % sw)] * C + c) * plane + (r / sh) * Wrow + s / sw;
  }
  // Grid column of output (image, row, column).
  int64_t column(int64_t g, int64_t p, int64_t q) const { return p * Wrow + g * Wq + q; }
};

// The rest of a layout from its blocks, for a filter of R x S taps.
inline void finish_layout(GridLayout& L, int64_t R, int64_t S, int NR) {
  L.Hq = L.Hb / L.sh;
  L.Wq = L.Wb / L.sw;
  L.Wrow = L.G * L.Wq;
  L.rows = L.Hq + 1;
  L.plane = L.rows * L.Wrow;
  L.slack = NR + L.Wrow + 64;
  L.slot.assign(size_t(L.sh * L.sw), -1);
  L.slots = 0;
  for (int64_t a = 0; a < std::min(L.sh, R); ++a)
    for (int64_t b = 0; b < std::min(L.sw, S); ++b) L.slot[size_t(a * L.sw + b)] = L.slots++;
}

// The grid of a convolution's input: a band of padded rows deep enough for
// every output row's taps, and image blocks just wide enough that the
// padding between neighbours is shared (Wb >= W + pad) and that outputs of
// one image never read the next one's pixels. (Side by side, an image costs
// P * Wq grid columns for its P * Q outputs: 7x7 3x3 pad 1, 56 for 49;
// stacked one above the other with shared rows it cost (P + 1) * Wq, 64.)
inline GridLayout input_layout(const Conv2dGeometry& g, int64_t G, int NR) {
  GridLayout L;
  L.C = g.C, L.H = g.H, L.W = g.W, L.G = G;
  L.sh = g.stride_h, L.sw = g.stride_w, L.top = g.pad_h, L.left = g.pad_w;
  L.Hb = round_up(std::max(g.H + g.pad_h, (g.P - 1) * g.stride_h + g.R), g.stride_h);
  L.Wb = round_up(std::max({g.W + g.pad_w, (g.Q - 1) * g.stride_w + g.S - g.pad_w, (g.Q - 1) * g.stride_w + 1}),
                  g.stride_w);
  finish_layout(L, g.R, g.S, NR);
  return L;
}

// Window-row offsets of every filter tap (c, r, s), in [C*R*S] order.
inline std::vector<int64_t> tap_offsets(const GridLayout& L, const Conv2dGeometry& g) {
  std::vector<int64_t> off(static_cast<size_t>(g.C * g.R * g.S));
  for (int64_t c = 0; c < g.C; ++c)
    for (int64_t r = 0; r < g.R; ++r)
      for (int64_t s = 0; s < g.S; ++s) off[size_t((c * g.R + r) * g.S + s)] = L.offset(c, r, s);
  return off;
}

// Images per grid: enough for ~kStackColumns columns.
inline int64_t stack_for(const GridLayout& one) {
  return std::clamp<int64_t>(ceil_div(kStackColumns, one.Hq * one.Wq), 1, 16);
}

// Fills the grid of `count` (<= L.G) images: row(img, c, h, dst, w0, sw)
// writes the values of image row h of channel c at columns w0, w0 + sw, ...
// (those < L.W) to dst[0], dst[1], ...; everything else (padding, missing
// images, margin, slack) is zero.
template <typename T, typename Row>
void fill_grid_rows(const GridLayout& L, int64_t count, T* grid, Row&& row) {
  for (int64_t a = 0; a < L.sh; ++a)
    for (int64_t b = 0; b < L.sw; ++b)
      for (int64_t c = 0; c < L.C; ++c) {
        if (L.slot[size_t(a * L.sw + b)] < 0) continue;  // no tap reads this phase
        T* plane = grid + (L.slot[size_t(a * L.sw + b)] * L.C + c) * L.plane;
        // The block's columns that hold pixels: padded column left + w = jj*sw + b.
        const int64_t w0 = std::max<int64_t>(0, ceil_div(std::max<int64_t>(0, L.left - b), L.sw) * L.sw + b - L.left);
        const int64_t first = (L.left + w0) / L.sw, n = w0 < L.W ? ceil_div(L.W - w0, L.sw) : 0;
        for (int64_t i = 0; i < L.rows; ++i) {
          T* dst = plane + i * L.Wrow;
          const int64_t h = i * L.sh + a - L.top;  // image row of padded row i*sh + a
          if (h < 0 || h >= L.H) {
            zero_run(dst, L.Wrow);
            continue;
          }
          for (int64_t img = 0; img < L.G; ++img, dst += L.Wq) {
            if (img >= count) {
              zero_run(dst, L.Wq);
              continue;
            }
            zero_run(dst, first);
            row(img, c, h, dst + first, w0, L.sw);
            zero_run(dst + first + n, L.Wq - first - n);
          }
        }
      }
  std::memset(static_cast<void*>(grid + L.slots * L.C * L.plane), 0, sizeof(T) * size_t(L.slack));
}

// fill_grid for strided columns (any row stride): each image row is laid
// out once with its padding in a row buffer and split into its column
// phases (phase b: padded columns b, b + sw, ...), instead of one strided
// pass over the image row per phase. Stride 2 with both phases read, the
// ResNet case, splits in one deinterleaving loop, which vectorises.
template <typename T, typename S>
void fill_grid_column_phases(const GridLayout& L, const S* x, int64_t count, T* grid) {
  const int64_t HW = L.H * L.W, sw = L.sw;
  std::vector<T> padded(size_t(sw * L.Wq), T(0));  // one padded row of an image block (Wb = sw * Wq)
  T* const pr = padded.data();
  std::vector<T*> phase(static_cast<size_t>(sw));  // this row of each stored column phase, or null
  for (int64_t a = 0; a < L.sh; ++a) {
    if (std::all_of(L.slot.begin() + a * sw, L.slot.begin() + (a + 1) * sw, [](int64_t s) { return s < 0; }))
      continue;  // no tap reads this row phase
    for (int64_t c = 0; c < L.C; ++c)
      for (int64_t i = 0; i < L.rows; ++i) {
        for (int64_t b = 0; b < sw; ++b) {
          const int64_t slot = L.slot[size_t(a * sw + b)];
          phase[size_t(b)] = slot >= 0 ? grid + (slot * L.C + c) * L.plane + i * L.Wrow : nullptr;
        }
        const int64_t h = i * L.sh + a - L.top;  // image row of padded row i*sh + a
        for (int64_t img = 0; img < L.G; ++img) {
          const int64_t o = img * L.Wq;
          if (h < 0 || h >= L.H || img >= count) {
            for (T* d : phase)
              if (d) zero_run(d + o, L.Wq);
            continue;
          }
          copy_or_convert_run(x + (img * L.C + c) * HW + h * L.W, pr + L.left, L.W);  // (the zeros around stay)
          if (sw == 2 && phase[0] && phase[1]) {
            T* even = phase[0] + o;
            T* odd = phase[1] + o;
            for (int64_t j = 0; j < L.Wq; ++j) {
              even[j] = pr[2 * j];
              odd[j] = pr[2 * j + 1];
            }
            continue;
          }
          for (int64_t b = 0; b < sw; ++b)
            if (T* d = phase[size_t(b)])
              for (int64_t j = 0; j < L.Wq; ++j) d[o + j] = pr[j * sw + b];
        }
      }
  }
  std::memset(static_cast<void*>(grid + L.slots * L.C * L.plane), 0, sizeof(T) * size_t(L.slack));
}

// count (<= L.G) images x: [count, C, H, W] -> the grid; 16-bit types converted.
template <typename T, typename S>
void fill_grid(const GridLayout& L, const S* x, int64_t count, T* grid) {
  const int64_t HW = L.H * L.W;
  if constexpr (std::is_same_v<S, T> && (std::is_same_v<T, float> || std::is_same_v<T, double>)) {
    if (L.sh == 1 && L.sw == 1 && count == L.G) {
      // Per plane: the zero rows above, then the image rows, row by row
      // and image by image, as one copy_rows (its rows of Wq values are
      // consecutive: row h of image g is the plane's row top + h, block g),
      // then the zero rows below.
      const auto copy_rows = gemm_kernels<T>().copy_rows;
      for (int64_t c = 0; c < L.C; ++c) {
        T* plane = grid + c * L.plane;
        zero_run(plane, L.top * L.Wrow);
        copy_rows(x + c * HW, L.W, L.W, plane + L.top * L.Wrow, L.left, L.Wq, L.H, L.G, L.C * HW);
        zero_run(plane + (L.top + L.H) * L.Wrow, (L.rows - L.top - L.H) * L.Wrow);
      }
      zero_run(grid + L.C * L.plane, L.slack);
      return;
    }
  }
  if (L.sw > 1) {
    fill_grid_column_phases(L, x, count, grid);
    return;
  }
  fill_grid_rows(L, count, grid, [&](int64_t img, int64_t c, int64_t h, T* dst, int64_t w0, int64_t) {
    copy_or_convert_run(x + (img * L.C + c) * HW + h * L.W + w0, dst, L.W - w0);
  });
}

// ------------------------------------------------------------- packing

// A [M, Kd] (element (i, k) at a(i, k)) -> MR-row panels [ceil(M / MR)][Kd][MR], zero padded.
template <typename T, typename F>
void pack_panels(int64_t M, int64_t Kd, int MR, T* dst, F&& a) {
  for (int64_t i0 = 0; i0 < M; i0 += MR) {
    T* panel = dst + (i0 / MR) * Kd * MR;
    const int rows = int(std::min<int64_t>(MR, M - i0));
    for (int64_t k = 0; k < Kd; ++k) {
      for (int i = 0; i < rows; ++i) panel[k * MR + i] = a(i0 + i, k);
      for (int i = rows; i < MR; ++i) panel[k * MR + i] = T(0);
    }
  }
}

// Multiply-adds of one image's convolution.
inline int64_t conv_flops(const Conv2dGeometry& g) { return g.K * g.C * g.R * g.S * g.P * g.Q; }
inline bool worth_threads(const Conv2dGeometry& g) { return g.N * conv_flops(g) >= (int64_t(1) << 20) && num_threads() > 1; }

// Runs stack(n0, count, parallel_inside) over [0, N) in stacks of at most
// `stack` images: each thread takes a contiguous share of the images when
// there are at least as many images as threads; otherwise the stacks run in
// turn and the work inside each is shared.
template <typename F>
void for_each_stack(const Conv2dGeometry& g, int64_t stack, F&& run) {
  const bool threads_worth = worth_threads(g);
  const int threads = threads_worth ? num_threads() : 1;
  if (threads > 1 && g.N >= threads) {
    const int64_t per = ceil_div(g.N, threads);
    parallel_for(0, threads, 1, [&](int64_t t0, int64_t t1) {
      for (int64_t t = t0; t < t1; ++t) {
        const int64_t end = std::min(g.N, (t + 1) * per);
        for (int64_t n = t * per; n < end; n += stack) run(n, std::min(stack, end - n), false);
      }
    });
    return;
  }
  for (int64_t n = 0; n < g.N; n += stack) run(n, std::min(stack, g.N - n), threads > 1);
}

inline bool is_pointwise(const Conv2dGeometry& g) {
  return g.R == 1 && g.S == 1 && g.stride_h == 1 && g.stride_w == 1 && g.pad_h == 0 && g.pad_w == 0;
}


}  // namespace ember::cpu::conv_grid
