// ops/cpu/conv/conv_window_bf16.cpp — the window-row convolution with bf16 data
// on AVX512-BF16 (conv_bf16_kernels.h): the same grids and loops as the
// f32 path (conv_window.cpp), with the operands in bf16 pairs.
//   forward / backward data (stride 1): the grid holds channel pairs, one
//     32-bit (2 x bf16) value per position, so the f32 layout and tap
//     offsets apply unchanged with C/2 "pair channels"; the filter is packed
//     as pairs of the same two channels;
//   filter gradient: the plain bf16 grid (pairs along the grid columns come
//     for free), the output gradient on the grid's columns transposed into
//     lanes of column pairs.
// Products are exact in f32 and accumulate in f32; outputs are rounded to
// bf16 once. Strided backward data (phases) stays on the f32 path.
#include "ops/cpu/conv/conv_window.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include "engine/bfloat16.h"
#include "engine/parallel.h"
#include "ops/cpu/conv/conv_bf16_kernels.h"
#include "ops/cpu/conv/conv_grid.h"
#include "ops/cpu/f16_util.h"

namespace ember::cpu {
namespace {
using namespace conv_grid;

// local_buffer slots (f16_util.h), distinct from the other conv files'.
constexpr int kPairGrid = 50, kOut = 51, kPairFilter = 52, kPlainGrid = 53, kGradGrid = 54, kGradPanels = 55,
              kPartialSums = 56;
// Inner-dimension block of the filter gradient, in lane groups (as conv_window.cpp's).
constexpr int64_t kGroupBlock = 192;

const uint16_t* bits(const bf16* p) { return reinterpret_cast<const uint16_t*>(p); }

// n f32 values rounded to bf16 (engine/bfloat16.h's rounding, inline: the
// output rows are 7 to 56 values, where a call to the bulk converter costs
// more than the conversion).
void to_bf16_run(const float* src, bf16* dst, int64_t n) {
  uint16_t* d = reinterpret_cast<uint16_t*>(dst);
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) d[i] = float_to_bf16(src[i]);
}

// The filter [K, C, R, S] as MR-row panels of pairs (w[k, 2c', r, s],
// w[k, 2c' + 1, r, s]) over (c', r, s) (a zero second channel when C is odd).
//   w: [K, C, RS]   -> [ceil(K / MR)][ceil(C / 2) * RS][MR] pairs
// `flip` packs the backward-data filter instead: output channel c from
// input channels k, (flipped taps): wf[c, k, rs] = w[k, c, RS - 1 - rs].
const uint32_t* pack_pair_filter(const bf16* w, int64_t K, int64_t C, int64_t RS, int MR, bool flip) {
  // As a forward filter: M rows (outputs) x Cin channels.
  const int64_t M = flip ? C : K, Cin = flip ? K : C, pairs = ceil_div(Cin, 2) * RS;
  uint32_t* apack = local_buffer<uint32_t, kPairFilter>(round_up(M, MR) * pairs);
  const uint16_t* wb = bits(w);
  auto at = [&](int64_t m, int64_t ci, int64_t rs) -> uint32_t {
    if (ci >= Cin) return 0;
    return flip ? wb[(ci * C + m) * RS + (RS - 1 - rs)] : wb[(m * C + ci) * RS + rs];
  };
  pack_panels<uint32_t>(M, pairs, MR, apack, [&](int64_t m, int64_t t) {
    const int64_t cp = t / RS, rs = t % RS;
    return at(m, 2 * cp, rs) | at(m, 2 * cp + 1, rs) << 16;
  });
  return apack;
}

// y = conv(x, apack) for a stride-any forward geometry g on channel pairs.
//   x: [N, C, H, W] bf16   y: [N, K, P, Q] bf16
void forward_pairs(const Bf16ConvKernels& kern, const Conv2dGeometry& g, const uint32_t* apack, const bf16* x,
                   bf16* y) {
  const int MR = kern.mr, NR = kern.nr;
  const int64_t Cp = ceil_div(g.C, 2), pairs = Cp * g.R * g.S, CHW = g.C * g.H * g.W, HW = g.H * g.W;
  const int64_t KPQ = g.K * g.P * g.Q;
  Conv2dGeometry gp = g;  // the grid's channels are the pairs
  gp.C = Cp;
  const int64_t stack = stack_for(input_layout(gp, 1, NR));
  auto offsets_for = [&](const GridLayout& L) {
    std::vector<int64_t> off = tap_offsets(L, gp);
    for (auto& o : off) o *= 2;  // in bf16 (the kernel's unit)
    return off;
  };
  const GridLayout full = input_layout(gp, stack, NR);
  const std::vector<int64_t> full_offsets = offsets_for(full);
  for_each_stack(g, stack, [&](int64_t n0, int64_t count, bool par) {
    const GridLayout L = count == stack ? full : input_layout(gp, count, NR);
    const std::vector<int64_t> part = count == stack ? std::vector<int64_t>() : offsets_for(L);
    const std::vector<int64_t>& offsets = count == stack ? full_offsets : part;
    uint32_t* grid = local_buffer<uint32_t, kPairGrid>(L.size());
    const uint16_t* xb = bits(x + n0 * CHW);
    fill_grid_rows(L, count, grid, [&](int64_t img, int64_t cp, int64_t h, uint32_t* dst, int64_t w0, int64_t sw) {
      const uint16_t* lo = xb + (img * g.C + 2 * cp) * HW + h * g.W;
      const uint16_t* hi = 2 * cp + 1 < g.C ? lo + HW : nullptr;
      int64_t i = 0;
      for (int64_t w = w0; w < g.W; w += sw, ++i) dst[i] = uint32_t(lo[w]) | (hi ? uint32_t(hi[w]) << 16 : 0u);
    });
    const int64_t cols = L.column(count - 1, g.P - 1, g.Q - 1) + 1;
    float* out = local_buffer<float, kOut>(g.K * cols);
    const uint16_t* base = reinterpret_cast<const uint16_t*>(grid);
    auto tiles = [&](int64_t t0, int64_t t1) {
      for (int64_t j = t0 * NR; j < std::min(cols, t1 * NR); j += NR)
        for (int64_t i = 0; i < g.K; i += MR)
          kern.window_tile(pairs, apack + (i / MR) * pairs * MR, base + 2 * j, offsets.data(), out + i * cols + j,
                           cols, int(std::min<int64_t>(MR, g.K - i)), int(std::min<int64_t>(NR, cols - j)));
    };
    const int64_t ntiles = ceil_div(cols, NR);
    if (par)
      parallel_for(0, ntiles, 1, tiles);
    else
      tiles(0, ntiles);
    bf16* yn = y + n0 * KPQ;
    for (int64_t i = 0; i < count; ++i)
      for (int64_t k = 0; k < g.K; ++k)
        for (int64_t p = 0; p < g.P; ++p)
          to_bf16_run(out + k * cols + L.column(i, p, 0), yn + ((i * g.K + k) * g.P + p) * g.Q, g.Q);
  });
}

}  // namespace

bool conv_forward_window_bf16(const Conv2dGeometry& g, const bf16* x, const bf16* w, bf16* y) {
  const Bf16ConvKernels* kern = bf16_conv_kernels();
  if (!kern) return false;
  forward_pairs(*kern, g, pack_pair_filter(w, g.K, g.C, g.R * g.S, kern->mr, false), x, y);
  return true;
}

bool conv_backward_data_window_bf16(const Conv2dGeometry& g, const bf16* gy, const bf16* w, bf16* gx) {
  const Bf16ConvKernels* kern = bf16_conv_kernels();
  if (!kern || g.stride_h != 1 || g.stride_w != 1 || g.pad_h > g.R - 1 || g.pad_w > g.S - 1) return false;
  // A stride-1 forward of gy with the flipped, transposed filter (conv_window.cpp).
  const Conv2dGeometry gt =
      make_conv2d_geometry(g.N, g.K, g.P, g.Q, g.C, g.R, g.S, 1, 1, g.R - 1 - g.pad_h, g.S - 1 - g.pad_w);
  forward_pairs(*kern, gt, pack_pair_filter(w, g.K, g.C, g.R * g.S, kern->mr, true), gy, gx);
  return true;
}

bool conv_backward_filter_window_bf16(const Conv2dGeometry& g, const bf16* x, const bf16* gy, bf16* gw) {
  const Bf16ConvKernels* kern = bf16_conv_kernels();
  if (!kern) return false;
  const int MR = kern->mr, NR = kern->nr;
  const int64_t CRS = g.C * g.R * g.S, CRSp = round_up(CRS, MR), CHW = g.C * g.H * g.W, PQ = g.P * g.Q;
  // Lane folds: F column pairs per output channel while the channels fill at most half a tile.
  int F = 1, fi = 0;
  while (F < 4 && g.K * F * 2 <= NR) F *= 2, ++fi;
  const int64_t G = 2 * F, per_panel = NR / F, panels = ceil_div(g.K, per_panel), ldc = panels * NR;
  const int64_t stack = stack_for(input_layout(g, 1, NR));
  const GridLayout full = input_layout(g, stack, NR);
  auto row_offsets = [&](const GridLayout& L) {
    std::vector<int64_t> off = tap_offsets(L, g);
    off.resize(size_t(CRSp), off.back());  // padding rows: ignored
    return off;
  };
  const std::vector<int64_t> full_offsets = row_offsets(full);
  const int threads = worth_threads(g) ? std::max(1, std::min<int>(num_threads(), int(g.N))) : 1;
  std::vector<float*> partial(static_cast<size_t>(threads));
  const int64_t per = ceil_div(g.N, threads);
  auto share = [&](int t) {
    float* acc = partial[size_t(t)] = local_buffer<float, kPartialSums>(CRSp * ldc);
    std::fill(acc, acc + CRSp * ldc, 0.0f);
    const int64_t end = std::min(g.N, (t + 1) * per);
    for (int64_t n0 = t * per; n0 < end; n0 += stack) {
      const int64_t count = std::min(stack, end - n0);
      const GridLayout L = count == stack ? full : input_layout(g, count, NR);
      const std::vector<int64_t> part = count == stack ? std::vector<int64_t>() : row_offsets(L);
      const std::vector<int64_t>& offsets = count == stack ? full_offsets : part;
      uint16_t* grid = local_buffer<uint16_t, kPlainGrid>(L.size());
      fill_grid(L, bits(x + n0 * CHW), count, grid);
      const int64_t cols = L.column(count - 1, g.P - 1, g.Q - 1) + 1;
      // gy on the grid's columns (zeros elsewhere), rows padded to whole groups, then packed.
      const int64_t groups = ceil_div(cols, G), ldg = groups * G;
      uint16_t* gyg = local_buffer<uint16_t, kGradGrid>(g.K * ldg);
      for (int64_t k = 0; k < g.K; ++k) {
        uint16_t* dst = gyg + k * ldg;
        zero_run(dst, ldg);
        for (int64_t img = 0; img < count; ++img)
          for (int64_t p = 0; p < g.P; ++p)
            copy_run(bits(gy + ((n0 + img) * g.K + k) * PQ + p * g.Q), dst + L.column(img, p, 0), g.Q);
      }
      uint32_t* bp = local_buffer<uint32_t, kGradPanels>(panels * groups * NR);
      for (int64_t pn = 0; pn < panels; ++pn) {
        const int64_t k0 = pn * per_panel;
        kern->pack_transposed(gyg + k0 * ldg, ldg, int(std::min(per_panel, g.K - k0)), groups, F,
                              bp + pn * groups * NR, NR);
      }
      for (int64_t kk0 = 0; kk0 < groups; kk0 += kGroupBlock) {
        const int64_t kc = std::min(kGroupBlock * G, cols - kk0 * G);
        for (int64_t pn = 0; pn < panels; ++pn)
          for (int64_t i0 = 0; i0 < CRS; i0 += MR)
            kern->window_tile_t[fi](kc, grid + kk0 * G, offsets.data() + i0, bp + (pn * groups + kk0) * NR,
                                    acc + i0 * ldc + pn * NR, ldc);
      }
    }
  };
  for_each_share(threads, share);
  // gw[k, crs] = sum over threads (in order) and the F lanes of k, rounded
  // once; in blocks of rows of the partial sums (as conv_window.cpp).
  constexpr int64_t kReduceRows = 16;
  parallel_for(0, ceil_div(CRS, kReduceRows), 1, [&](int64_t b0, int64_t b1) {
    float block[kReduceRows];
    for (int64_t b = b0; b < b1; ++b) {
      const int64_t i0 = b * kReduceRows, rows = std::min(kReduceRows, CRS - i0);
      for (int64_t k = 0; k < g.K; ++k) {
        const int64_t lane = (k / per_panel) * NR + (k % per_panel) * F;
        for (int64_t r = 0; r < rows; ++r) {
          float s = 0.0f;
          for (int t = 0; t < threads; ++t)
            for (int e = 0; e < F; ++e) s += partial[size_t(t)][(i0 + r) * ldc + lane + e];
          block[r] = s;
        }
        to_bf16_run(block, gw + k * CRS + i0, rows);
      }
    }
  });
  return true;
}

}  // namespace ember::cpu
