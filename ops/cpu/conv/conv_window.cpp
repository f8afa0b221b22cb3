// ops/cpu/conv/conv_window.cpp — the window-row convolution (conv_window.h) in
// f32/f64 (and f16 converted to f32 on the way): packing filters and
// output gradients, and the loops around the register tiles of
// conv_micro.h, on the grids of conv_grid.h.
#include "ops/cpu/conv/conv_window.h"

#include <algorithm>
#include <cstring>
#include <type_traits>
#include <vector>

#include "engine/parallel.h"
#include "ops/cpu/cpu_kernels.h"
#include "ops/cpu/conv/conv_grid.h"
#include "ops/cpu/f16_util.h"
#include "ops/cpu/gemm/gemm_isa.h"

namespace ember::cpu {
namespace {
using namespace conv_grid;

// local_buffer slots (f16_util.h), distinct from the other conv files':
// the grid, the GEMM output on the grid, the packed filter, the packed
// output gradient, the filter gradient's per-thread sums, an edge panel,
// the output gradient on the grid's columns, a gx row assembled from its column phases.
constexpr int kGrid = 40, kGridOut = 41, kFilter = 42, kGradPanels = 43, kPartialSums = 44, kEdgePanel = 45,
              kGradGrid = 46, kPhaseRow = 47;

// Inner-dimension block of the filter gradient, in lane groups: at least
// kGroupBlock, and as many as keep the block's packed output gradient (all
// panels) within kPanelBytes (half of a 1 MiB L2).
constexpr int64_t kGroupBlock = 192, kPanelBytes = 512 * 1024;
// Pointwise convolutions of planes this large read the image in place.
constexpr int64_t kInPlacePlane = 256;

// ------------------------------------------------------------ the GEMMs

// out[M, j0..j1) = A[M, Kd] * window-rows(base, offsets)[Kd, j0..j1) (A
// packed by pack_panels). Each tile runs over the whole inner dimension:
// its rows stream from L2 for each MR block of A (blocking the taps to keep
// them in L1 measured slower on every ResNet layer). Column tiles that
// would read past `safe_end` (an image read in place) are copied into a
// zero-padded panel first. (Storing tiles straight into y through masked
// stores, skipping the copy out of the grid, measured no faster.)
template <typename T>
void window_gemm(const GemmKernels<T>& kern, int64_t M, int64_t Kd, const T* apack, const T* base,
                 const int64_t* offsets, T* out, int64_t ldo, int64_t j0, int64_t j1, int64_t safe_end) {
  const int MR = kern.mr, NR = kern.nr;
  for (int64_t j = j0; j < j1; j += NR) {
    const int nr = int(std::min<int64_t>(NR, j1 - j));
    if (j + NR > safe_end) {
      T* panel = local_buffer<T, kEdgePanel>(Kd * NR);
      for (int64_t k = 0; k < Kd; ++k) {
        const T* src = base + offsets[k] + j;
        for (int c = 0; c < NR; ++c) panel[k * NR + c] = c < nr ? src[c] : T(0);
      }
      for (int64_t i = 0; i < M; i += MR)
        kern.micro_kernel(Kd, apack + (i / MR) * Kd * MR, panel, out + i * ldo + j, ldo, T(1), T(0),
                          int(std::min<int64_t>(MR, M - i)), nr);
      continue;
    }
    for (int64_t i = 0; i < M; i += MR)
      kern.window_tile(Kd, apack + (i / MR) * Kd * MR, base + j, offsets, out + i * ldo + j, ldo, T(0),
                       int(std::min<int64_t>(MR, M - i)), nr);
  }
}

// Runs window_gemm over columns [0, cols), split into NR-aligned shares
// across the threads when `parallel`.
template <typename T>
void window_gemm_columns(const GemmKernels<T>& kern, int64_t M, int64_t Kd, const T* apack, const T* base,
                         const int64_t* offsets, T* out, int64_t ldo, int64_t cols, int64_t safe_end, bool parallel) {
  if (!parallel) {
    window_gemm(kern, M, Kd, apack, base, offsets, out, ldo, 0, cols, safe_end);
    return;
  }
  const int64_t tiles = ceil_div(cols, kern.nr);
  parallel_for(0, tiles, 1, [&](int64_t t0, int64_t t1) {
    window_gemm(kern, M, Kd, apack, base, offsets, out, ldo, t0 * kern.nr, std::min(cols, t1 * kern.nr), safe_end);
  });
}

// ---------------------------------------------------------------- forward

// y = conv(x, apack) where apack is the filter [K, CRS] packed in MR panels.
template <typename S>
void forward_packed(const Conv2dGeometry& g, const compute_t<S>* apack, const S* x, S* y) {
  using T = compute_t<S>;
  const GemmKernels<T>& kern = gemm_kernels<T>();
  const int64_t CRS = g.C * g.R * g.S, CHW = g.C * g.H * g.W, PQ = g.P * g.Q, KPQ = g.K * PQ;
  if constexpr (std::is_same_v<S, T>) {
    if (is_pointwise(g) && g.H * g.W >= kInPlacePlane) {  // the image is its own grid: rows c*HW
      std::vector<int64_t> offsets(static_cast<size_t>(g.C));
      for (int64_t c = 0; c < g.C; ++c) offsets[size_t(c)] = c * PQ;
      for_each_stack(g, 1, [&](int64_t n, int64_t, bool par) {
        window_gemm_columns(kern, g.K, CRS, apack, x + n * CHW, offsets.data(), y + n * KPQ, PQ, PQ, PQ, par);
      });
      return;
    }
  }
  const int64_t stack = stack_for(input_layout(g, 1, kern.nr));
  const GridLayout full = input_layout(g, stack, kern.nr);
  const std::vector<int64_t> full_offsets = tap_offsets(full, g);
  for_each_stack(g, stack, [&](int64_t n0, int64_t count, bool par) {
    // (a partial stack has smaller planes, so other offsets)
    const GridLayout L = count == stack ? full : input_layout(g, count, kern.nr);
    const std::vector<int64_t> part_offsets = count == stack ? std::vector<int64_t>() : tap_offsets(L, g);
    const std::vector<int64_t>& offsets = count == stack ? full_offsets : part_offsets;
    T* grid = local_buffer<T, kGrid>(L.size());
    fill_grid(L, x + n0 * CHW, count, grid);
    const int64_t cols = L.column(count - 1, g.P - 1, g.Q - 1) + 1;
    const bool dense = std::is_same_v<S, T> && count == 1 && L.Wq == g.Q;  // grid columns are y's
    T* out = dense ? reinterpret_cast<T*>(y + n0 * KPQ) : local_buffer<T, kGridOut>(g.K * cols);
    window_gemm_columns(kern, g.K, CRS, apack, grid, offsets.data(), out, cols, cols, L.size() - kern.nr, par);
    if (dense) return;
    S* yn = y + n0 * KPQ;
    for (int64_t i = 0; i < count; ++i) {
      if constexpr (std::is_same_v<S, T>) {
        // an image's K planes in one call: y's row (k, p) is row k of "image" p
        // (out + k * cols + column(i, p, 0)), in y's order
        kern.copy_rows(out + L.column(i, 0, 0), cols, g.Q, yn + i * KPQ, 0, g.Q, g.K, g.P, L.Wrow);
      } else {
        for (int64_t k = 0; k < g.K; ++k)
          for (int64_t p = 0; p < g.P; ++p)
            copy_values(out + k * cols + L.column(i, p, 0), yn + (i * g.K + k) * g.P * g.Q + p * g.Q, g.Q);
      }
    }
  });
}

// The filter [K, C, R, S] as packed panels of [K, CRS] (f16 converted).
template <typename S>
const compute_t<S>* pack_filter(const S* w, int64_t K, int64_t CRS, int MR) {
  using T = compute_t<S>;
  T* apack = local_buffer<T, kFilter>(round_up(K, MR) * CRS);
  pack_panels<T>(K, CRS, MR, apack, [&](int64_t i, int64_t k) { return convert_value<T>(w[i * CRS + k]); });
  return apack;
}

// ---------------------------------------------------------- backward data

// gx by phases (any stride, any padding): gx's padded row sh*i + a takes
// the taps r = a + sh*m, m < Ra, from gy's row i - m (and likewise for
// columns), a stride-1 correlation of gy with that sub-filter.
template <typename S>
void backward_data_phases(const Conv2dGeometry& g, const S* gy, const S* w, S* gx) {
  using T = compute_t<S>;
  const GemmKernels<T>& kern = gemm_kernels<T>();
  const int MR = kern.mr, NR = kern.nr;
  const int64_t sh = g.stride_h, sw = g.stride_w, CHW = g.C * g.H * g.W, KPQ = g.K * g.P * g.Q;
  const int64_t Rmax = ceil_div(g.R, sh), Smax = ceil_div(g.S, sw);
  // Phase rows/columns that cover gx: padded row sh*i + a < pad + H for every a.
  const int64_t Hi = ceil_div(g.H + g.pad_h, sh), Wi = ceil_div(g.W + g.pad_w, sw);
  // gy on a stride-1 grid with Rmax - 1 zero rows above and Smax - 1 zero
  // columns left of each image, blocks large enough for Hi x Wi outputs.
  auto gy_layout = [&](int64_t G) {
    GridLayout L;
    L.C = g.K, L.H = g.P, L.W = g.Q, L.G = G, L.top = Rmax - 1, L.left = Smax - 1;
    L.Hb = std::max(g.P, Hi) + Rmax - 1;
    L.Wb = std::max(g.Q, Wi) + Smax - 1;
    finish_layout(L, Rmax, Smax, NR);
    return L;
  };
  struct Phase {
    int64_t a, b, taps;
    std::vector<int64_t> tap_r, tap_s;  // padded filter offsets (r, s) of each tap, k-major
    const T* apack = nullptr;
  };
  std::vector<Phase> phases;
  std::vector<T> packs;
  for (int64_t a = 0; a < sh; ++a)
    for (int64_t b = 0; b < sw; ++b) {
      const int64_t Ra = a < g.R ? ceil_div(g.R - a, sh) : 0, Sb = b < g.S ? ceil_div(g.S - b, sw) : 0;
      phases.push_back(Phase{a, b, g.K * Ra * Sb, {}, {}, nullptr});
    }
  std::vector<size_t> pack_at;
  size_t total = 0;
  for (const Phase& ph : phases) {
    pack_at.push_back(total);
    total += size_t(round_up(g.C, MR) * ph.taps);
  }
  packs.resize(std::max<size_t>(total, 1));
  for (size_t f = 0; f < phases.size(); ++f) {
    Phase& ph = phases[f];
    if (ph.taps == 0) continue;
    const int64_t Ra = ceil_div(g.R - ph.a, sh), Sb = ceil_div(g.S - ph.b, sw);
    // Tap (k, m, n): filter (a + sh*m, b + sw*n), gy offset (-m, -n) from the
    // output, i.e. padded (Rmax - 1 - m, Smax - 1 - n) on gy's grid.
    T* dst = packs.data() + pack_at[f];
    pack_panels<T>(g.C, ph.taps, MR, dst, [&](int64_t c, int64_t t) {
      const int64_t k = t / (Ra * Sb), m = t / Sb % Ra, n = t % Sb;
      return convert_value<T>(w[((k * g.C + c) * g.R + ph.a + sh * m) * g.S + ph.b + sw * n]);
    });
    ph.apack = dst;
    for (int64_t k = 0; k < g.K; ++k)
      for (int64_t m = 0; m < Ra; ++m)
        for (int64_t n = 0; n < Sb; ++n) {
          ph.tap_r.push_back(Rmax - 1 - m);
          ph.tap_s.push_back(Smax - 1 - n);
        }
  }
  const int64_t stack = stack_for(gy_layout(1));
  // Window-row offsets of every phase's taps on a grid of layout L.
  auto phase_offsets = [&](const GridLayout& L) {
    std::vector<std::vector<int64_t>> offsets(phases.size());
    for (size_t f = 0; f < phases.size(); ++f)
      for (size_t t = 0; t < phases[f].tap_r.size(); ++t)
        offsets[f].push_back(L.offset(int64_t(t) / (phases[f].taps / g.K), phases[f].tap_r[t], phases[f].tap_s[t]));
    return offsets;
  };
  const GridLayout full = gy_layout(stack);
  const std::vector<std::vector<int64_t>> full_offsets = phase_offsets(full);

  for_each_stack(g, stack, [&](int64_t n0, int64_t count, bool par) {
    const GridLayout L = count == stack ? full : gy_layout(count);
    const std::vector<std::vector<int64_t>> part_offsets =
        count == stack ? std::vector<std::vector<int64_t>>() : phase_offsets(L);
    const std::vector<std::vector<int64_t>>& offsets = count == stack ? full_offsets : part_offsets;
    T* grid = local_buffer<T, kGrid>(L.size());
    fill_grid(L, gy + n0 * KPQ, count, grid);
    const int64_t cols = L.column(count - 1, Hi - 1, Wi - 1) + 1;
    // Every phase's products are kept; then each gx row (padded row h + pad
    // = sh*i + a) is assembled from its sw column phases (a, b), whose
    // values are its padded columns b, b + sw, ..., in a row buffer and
    // copied out. Stride 2 with both phases, the ResNet case, interleaves
    // in one loop, which vectorises.
    const int64_t phase_size = g.C * cols;
    T* out_all = local_buffer<T, kGridOut>(phase_size * int64_t(phases.size()));
    for (size_t f = 0; f < phases.size(); ++f)
      if (phases[f].taps > 0)  // (no tap reaches a phase without: zeros)
        window_gemm_columns(kern, g.C, phases[f].taps, phases[f].apack, grid, offsets[f].data(),
                            out_all + int64_t(f) * phase_size, cols, cols, L.size() - NR, par);
    T* row = local_buffer<T, kPhaseRow>(sw * Wi);
    std::vector<const T*> phase(static_cast<size_t>(sw));  // this row of each phase's products, or null
    S* gxn = gx + n0 * CHW;
    for (int64_t img = 0; img < count; ++img)
      for (int64_t c = 0; c < g.C; ++c)
        for (int64_t h = 0; h < g.H; ++h) {
          const int64_t a = (h + g.pad_h) % sh, i = (h + g.pad_h) / sh, at = c * cols + L.column(img, i, 0);
          for (int64_t b = 0; b < sw; ++b) {
            const size_t f = size_t(a * sw + b);
            phase[size_t(b)] = phases[f].taps ? out_all + int64_t(f) * phase_size + at : nullptr;
          }
          if (sw == 2 && phase[0] && phase[1]) {
            for (int64_t j = 0; j < Wi; ++j) {
              row[2 * j] = phase[0][j];
              row[2 * j + 1] = phase[1][j];
            }
          } else {
            for (int64_t b = 0; b < sw; ++b)
              for (int64_t j = 0; j < Wi; ++j) row[j * sw + b] = phase[size_t(b)] ? phase[size_t(b)][j] : T(0);
          }
          copy_values(row + g.pad_w, gxn + ((img * g.C + c) * g.H + h) * g.W, g.W);
        }
  });
}

}  // namespace

// ----------------------------------------------------------------- kernels

template <typename S>
void conv_forward_window(const Conv2dGeometry& g, const S* x, const S* w, S* y) {
  if constexpr (is_bf16_v<S>)
    if (conv_forward_window_bf16(g, x, w, y)) return;
  const int64_t CRS = g.C * g.R * g.S;
  forward_packed(g, pack_filter(w, g.K, CRS, gemm_kernels<compute_t<S>>().mr), x, y);
}

template <typename S>
void conv_backward_data_window(const Conv2dGeometry& g, const S* gy, const S* w, S* gx) {
  if constexpr (is_bf16_v<S>)
    if (conv_backward_data_window_bf16(g, gy, w, gx)) return;
  using T = compute_t<S>;
  if (g.stride_h != 1 || g.stride_w != 1 || g.pad_h > g.R - 1 || g.pad_w > g.S - 1) {
    backward_data_phases(g, gy, w, gx);
    return;
  }
  // gx = conv(gy, flip(w)^T) with padding R-1-pad: a stride-1 forward,
  //   flipped filter (c, k, r, s) = w[k, c, R-1-r, S-1-s]
  const int64_t KRS = g.K * g.R * g.S, RS = g.R * g.S;
  const int MR = gemm_kernels<T>().mr;
  T* apack = local_buffer<T, kFilter>(round_up(g.C, MR) * KRS);
  pack_panels<T>(g.C, KRS, MR, apack, [&](int64_t c, int64_t t) {
    const int64_t k = t / RS, rs = t % RS;
    return convert_value<T>(w[(k * g.C + c) * RS + (RS - 1 - rs)]);
  });
  const Conv2dGeometry gt =
      make_conv2d_geometry(g.N, g.K, g.P, g.Q, g.C, g.R, g.S, 1, 1, g.R - 1 - g.pad_h, g.S - 1 - g.pad_w);
  forward_packed(gt, apack, gy, gx);
}

template <typename S>
void conv_backward_filter_window(const Conv2dGeometry& g, const S* x, const S* gy, S* gw) {
  if constexpr (is_bf16_v<S>)
    if (conv_backward_filter_window_bf16(g, x, gy, gw)) return;
  using T = compute_t<S>;
  const GemmKernels<T>& kern = gemm_kernels<T>();
  const int MR = kern.mr, NR = kern.nr;
  const int64_t CRS = g.C * g.R * g.S, CRSp = round_up(CRS, MR), CHW = g.C * g.H * g.W, PQ = g.P * g.Q;
  // Lane groups: fold G consecutive grid columns into the lanes while the
  // output channels fill at most half of a tile.
  int gl = 1, gl_index = 0;
  while (gl < 4 && g.K * gl * 2 <= NR && kern.window_tile_t[gl_index + 1]) gl *= 2, ++gl_index;
  const auto tile = kern.window_tile_t[gl_index];
  const int64_t per_panel = NR / gl, panels = ceil_div(g.K, per_panel), ldc = panels * NR;

  const bool in_place = std::is_same_v<S, T> && is_pointwise(g) && g.H * g.W >= kInPlacePlane;
  const int64_t stack = in_place ? 1 : stack_for(input_layout(g, 1, NR));
  const GridLayout full = input_layout(g, stack, NR);
  // Window-row offsets on a grid of layout L (rows c*HW of the image read
  // in place), padded to whole tiles by repeating the last (rows ignored).
  auto row_offsets = [&](const GridLayout& L) {
    std::vector<int64_t> offsets(static_cast<size_t>(CRSp));
    if (in_place) {
      for (int64_t c = 0; c < g.C; ++c) offsets[size_t(c)] = c * PQ;
    } else {
      const std::vector<int64_t> taps = tap_offsets(L, g);
      std::copy(taps.begin(), taps.end(), offsets.begin());
    }
    for (int64_t i = CRS; i < CRSp; ++i) offsets[size_t(i)] = offsets[size_t(CRS - 1)];
    return offsets;
  };
  const std::vector<int64_t> full_offsets = row_offsets(full);

  // partial[t]: thread t's sums over its share of the images, [CRSp, panels*NR].
  const int threads = worth_threads(g) ? std::max(1, std::min<int>(num_threads(), int(g.N))) : 1;
  std::vector<T*> partial(static_cast<size_t>(threads));
  const int64_t per = ceil_div(g.N, threads);
  auto share = [&](int t) {
    T* acc = partial[size_t(t)] = local_buffer<T, kPartialSums>(CRSp * ldc);
    std::fill(acc, acc + CRSp * ldc, T(0));
    const int64_t end = std::min(g.N, (t + 1) * per);
    for (int64_t n0 = t * per; n0 < end; n0 += stack) {
      const int64_t count = std::min(stack, end - n0);
      const GridLayout L = count == stack ? full : input_layout(g, count, NR);
      const std::vector<int64_t> part_offsets = count == stack ? std::vector<int64_t>() : row_offsets(L);
      const std::vector<int64_t>& offsets = count == stack ? full_offsets : part_offsets;
      const T* base = nullptr;
      int64_t cols = 0;
      if constexpr (std::is_same_v<S, T>) {
        if (in_place) base = x + n0 * CHW, cols = PQ;
      }
      if (!in_place) {
        T* grid = local_buffer<T, kGrid>(L.size());
        fill_grid(L, x + n0 * CHW, count, grid);
        base = grid;
        cols = L.column(count - 1, g.P - 1, g.Q - 1) + 1;
      }
      // gy on the grid's columns (zeros at padding columns), then packed:
      // panel [groups, NR], lane (k % per_panel) * gl + j % gl at group j / gl.
      // (rows of ldg values: whole groups, and room for the last grid row)
      const int64_t groups = ceil_div(cols, gl);
      const int64_t ldg = in_place ? groups * gl : round_up(std::max(cols, g.P * L.Wrow), gl);
      T* gyg = local_buffer<T, kGradGrid>(g.K * ldg);
      for (int64_t k = 0; k < g.K; ++k) {
        T* dst = gyg + k * ldg;
        int64_t done = 0;  // columns below this one are written
        if (in_place) {
          copy_values(gy + (n0 * g.K + k) * PQ, dst, PQ);
          done = PQ;
        } else {
          const S* src = gy + (n0 * g.K + k) * PQ;
          if constexpr (std::is_same_v<S, T>) {  // every image's rows, side by side, in one call
            kern.copy_rows(src, g.Q, g.Q, dst, 0, L.Wq, g.P, count, g.K * PQ);
          } else {
            for (int64_t p = 0; p < g.P; ++p)
              for (int64_t img = 0; img < count; ++img) {
                T* row = dst + L.column(img, p, 0);
                copy_values(src + img * g.K * PQ + p * g.Q, row, g.Q);
                zero_run(row + g.Q, L.Wq - g.Q);
              }
          }
          done = g.P * L.Wrow;
        }
        zero_run(dst + done, ldg - done);
      }
      T* bp = local_buffer<T, kGradPanels>(panels * groups * NR);
      for (int64_t pn = 0; pn < panels; ++pn) {
        const int64_t k0 = pn * per_panel;
        kern.pack_transposed(gyg + k0 * ldg, ldg, int(std::min(per_panel, g.K - k0)), groups, gl,
                             bp + pn * groups * NR, NR);
      }
      // Per block of columns: each MR rows of A (in L1) against every panel
      // of B (the block's panels stay in L2); the block is as long as that
      // allows, so that the partial sums (large for deep layers) are read
      // and written as few times as possible.
      const int64_t block = std::max(kGroupBlock, kPanelBytes / (panels * NR * int64_t(sizeof(T))));
      for (int64_t kk0 = 0; kk0 < groups; kk0 += block) {
        const int64_t kc = std::min(block * gl, cols - kk0 * gl);
        for (int64_t i0 = 0; i0 < CRS; i0 += MR)
          for (int64_t pn = 0; pn < panels; ++pn)
            tile(kc, base + kk0 * gl, offsets.data() + i0, bp + (pn * groups + kk0) * NR, acc + i0 * ldc + pn * NR,
                 ldc, true);
      }
    }
  };
  for_each_share(threads, share);
  // gw[k, crs] = sum over threads (in order) and lane groups, in blocks of
  // kReduceRows rows of the partial sums (read along their rows; gw written
  // kReduceRows contiguous values per output channel).
  constexpr int64_t kReduceRows = 16;
  parallel_for(0, ceil_div(CRS, kReduceRows), 1, [&](int64_t b0, int64_t b1) {
    T block[kReduceRows];
    for (int64_t b = b0; b < b1; ++b) {
      const int64_t i0 = b * kReduceRows, rows = std::min(kReduceRows, CRS - i0);
      for (int64_t k = 0; k < g.K; ++k) {
        const int64_t lane = (k / per_panel) * NR + (k % per_panel) * gl;
        for (int64_t r = 0; r < rows; ++r) {
          T s = T(0);
          for (int t = 0; t < threads; ++t)
            for (int e = 0; e < gl; ++e) s += partial[size_t(t)][(i0 + r) * ldc + lane + e];
          block[r] = s;
        }
        for (int64_t r = 0; r < rows; ++r) gw[k * CRS + i0 + r] = convert_value<S>(block[r]);
      }
    }
  });
}

#define EMBER_CONV_WINDOW_INSTANTIATE(S)                                                            \
  template void conv_forward_window<S>(const Conv2dGeometry&, const S*, const S*, S*);             \
  template void conv_backward_data_window<S>(const Conv2dGeometry&, const S*, const S*, S*);       \
  template void conv_backward_filter_window<S>(const Conv2dGeometry&, const S*, const S*, S*);
EMBER_CONV_WINDOW_INSTANTIATE(float)
EMBER_CONV_WINDOW_INSTANTIATE(double)
EMBER_CONV_WINDOW_INSTANTIATE(f16)
EMBER_CONV_WINDOW_INSTANTIATE(bf16)
#undef EMBER_CONV_WINDOW_INSTANTIATE

}  // namespace ember::cpu
