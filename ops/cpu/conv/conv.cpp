// ops/cpu/conv/conv.cpp — the three convolution kernels of the CPU table, and
// the GEMM lowerings, one of the algorithms they choose from.
//
// Which algorithm runs each pass is conv_policy.h's choice: the window-row
// direct convolution (conv_window.h, the default), Winograd F(2x2, 3x3)
// (conv_winograd.h), or the GEMM lowerings below, which run convolution as
// a packed GEMM one image (or stack of images) at a time:
//
// Stride 1 ("padded grid", no im2col): zero-pad the image to [C, Hp, Wp] and
// compute the output on the padded width, y'[k, p*Wp + q] for q < Wp, of
// which the first Q columns of each row are the real output. On that grid,
// row (c, r, s) of the column matrix is a contiguous window of the padded
// image starting at c*Hp*Wp + r*Wp + s, so the GEMM packs its B panels
// straight from the image, and the filter gradient reads its rows in place:
//   forward          y'   [K, P*Wp]  = w [K, CRS] * window-rows(xpad)
//   backward data    a forward convolution of gy with the flipped,
//                    transposed filter and padding R-1-pad (no col2im)
//   backward filter  gw  [K, CRS]  += gy' [K, P*Wp] * window-rows(xpad)^T
// The extra Wp - Q columns cost (Wp - Q) / Q more arithmetic (7% at 28x28).
//
// Other strides (Caffe's scheme, im2col.h):
//   forward          y[n]  [K, PQ]   = w [K, CRS] * col(x[n]) [CRS, PQ]
//   backward data    gx[n] [C, H, W] = col2im( w^T [CRS, K] * gy[n] [K, PQ] )
//   backward filter  gw    [K, CRS] += gy[n] [K, PQ] * col(x[n])^T
//
// 3x3 stride-1 passes (forward, so backward data, and the filter gradient)
// may instead run by Winograd's F(2x2, 3x3) (conv_winograd.h);
// conv_policy.cpp decides which runs.
//
// Images are spread over the OpenMP threads, each with its own buffers (and
// its own gw partial, summed in a fixed order so results do not depend on
// scheduling).
//
// f16: the GEMMs run in f32, and no operand makes a separate conversion pass
// through memory: f16 weights are converted as the GEMM packs them, the
// padded grid and im2col convert while they copy, pointwise convolutions
// convert the image while packing it and compute the output in cache-sized
// chunks, and the pointwise filter gradient converts its operands chunk by
// chunk (ops/cpu/gemm/gemm_f16.h). Each output is rounded into f16 once. bf16
// takes the same paths (the helpers are templates over the 16-bit type).
#include <algorithm>
#include <cstring>
#include <type_traits>
#include <vector>

#include "engine/parallel.h"
#include "ops/cpu/conv/conv_policy.h"
#include "ops/cpu/conv/conv_window.h"
#include "ops/cpu/conv/conv_winograd.h"
#include "ops/cpu/cpu_kernels.h"
#include "ops/cpu/f16_util.h"
#include "ops/cpu/gemm/gemm.h"
#include "ops/cpu/gemm/gemm_f16.h"
#include "ops/cpu/conv/im2col.h"

namespace ember::cpu {
namespace {

bool is_pointwise(const Conv2dGeometry& g) {
  return g.R == 1 && g.S == 1 && g.stride_h == 1 && g.stride_w == 1 && g.pad_h == 0 && g.pad_w == 0;
}
bool is_stride1(const Conv2dGeometry& g) { return g.stride_h == 1 && g.stride_w == 1; }

// local_buffer slots (f16_util.h), one per buffer live at the same time:
// f16 images converted to / from f32, the calling thread's flipped weights,
// the padded image, the GEMM output on the padded grid, the column matrix,
// the filter gradient's per-thread partial sums and window-row pointers,
// a stack of output gradients side by side.
constexpr int kF16In = 10, kF16Out = 12, kFlipped = 14, kImage = 15, kOutput = 16, kColumn = 17, kPartial = 18,
              kRows = 19, kStackedGrad = 11;
// Columns a strided (im2col) GEMM gets at least, images stacked side by
// side: one image of a 7x7 or 14x14 output alone ran at 35-50% of peak on
// ResNet-50's strided layers (every pass: few columns for the micro-tiles,
// and the whole filter packed, or the whole filter gradient read and
// written, once per image).
constexpr int64_t kStackedColumns = 384;

// ------------------------------------------------------------ padded grid

// The padded image of G stacked images and the offsets of its window rows.
//   xpad: [C, G*Hp, Wp] (image g in rows g*Hp .. g*Hp + Hp - 1 of every
//   channel) followed by `slack` zeros, so that windows of the last rows may
//   be read a whole panel past the end. Grid rows p = g*Hp + p' with p' < P
//   are image g's output rows; the R-1 rows between images are junk.
template <typename T>
struct PaddedGrid {
  int64_t G, Hp, Wp, rows, cols;    // rows = G*Hp - R + 1 grid rows; cols = rows * Wp GEMM columns
  std::vector<int64_t> row_offset;  // [C*R*S]: start of window row (c, r, s)

  PaddedGrid(const Conv2dGeometry& g, int64_t stack)
      : G(stack), Hp(g.H + 2 * g.pad_h), Wp(g.W + 2 * g.pad_w), rows(stack * (g.H + 2 * g.pad_h) - g.R + 1),
        cols(rows * Wp), row_offset(static_cast<size_t>(g.col_rows())) {
    for (int64_t c = 0; c < g.C; ++c)
      for (int64_t r = 0; r < g.R; ++r)
        for (int64_t s = 0; s < g.S; ++s)
          row_offset[size_t((c * g.R + r) * g.S + s)] = (c * G * Hp + r) * Wp + s;
  }
  size_t padded_size(const Conv2dGeometry& g) const {
    return size_t(g.C * G * Hp * Wp + g.S + 64);  // slack >= a panel (NR <= 32) and a vector (16)
  }

  // count (<= G) images x: [count, C, H, W] -> xpad (zero border, slack, and zero missing images);
  // f16 images are converted to f32 on the way.
  template <typename Src>
  void pad(const Conv2dGeometry& g, const Src* x, int64_t count, T* xpad) const {
    const size_t total = padded_size(g);
    if (G == 1 && g.pad_h == 0 && g.pad_w == 0) {
      copy_values(x, xpad, g.C * g.H * g.W);
      std::memset(xpad + g.C * g.H * g.W, 0, sizeof(T) * (total - size_t(g.C * g.H * g.W)));
      return;
    }
    if (g.pad_h == 0 && g.pad_w == 0) {  // stacked planes: one copy per (image, channel), zero only the rest
      for (int64_t i = 0; i < count; ++i)
        for (int64_t c = 0; c < g.C; ++c) copy_values(x + (i * g.C + c) * g.H * g.W, xpad + (c * G + i) * Hp * Wp, g.H * g.W);
      for (int64_t c = 0; c < g.C; ++c)
        std::memset(xpad + (c * G + count) * Hp * Wp, 0, sizeof(T) * size_t((G - count) * Hp * Wp));
      std::memset(xpad + g.C * G * Hp * Wp, 0, sizeof(T) * (total - size_t(g.C * G * Hp * Wp)));
      return;
    }
    std::memset(xpad, 0, sizeof(T) * total);
    for (int64_t i = 0; i < count; ++i)
      for (int64_t c = 0; c < g.C; ++c)
        for (int64_t h = 0; h < g.H; ++h)
          copy_values(x + ((i * g.C + c) * g.H + h) * g.W, xpad + ((c * G + i) * Hp + h + g.pad_h) * Wp + g.pad_w,
                      g.W);
  }

  // B panels of the window rows [k0, k0 + kc) x grid columns [j0, j0 + nc).
  // Columns of the last panel past nc are read from the slack / following
  // rows: their products land in accumulator lanes the GEMM never stores.
  void pack(const T* xpad, int64_t k0, int64_t kc, int64_t j0, int64_t nc, T* dst) const {
    switch (gemm_panel_width<T>()) {  // the panel width of the active GEMM kernels, as a constant
      case 32: return pack_panels<32>(xpad, k0, kc, j0, nc, dst);
      case 16: return pack_panels<16>(xpad, k0, kc, j0, nc, dst);
      case 8: return pack_panels<8>(xpad, k0, kc, j0, nc, dst);
      case 4: return pack_panels<4>(xpad, k0, kc, j0, nc, dst);
      default: EMBER_CHECK(false, "conv2d: no packer for GEMM panels of ", gemm_panel_width<T>(), " columns");
    }
  }
  template <int NR>
  void pack_panels(const T* xpad, int64_t k0, int64_t kc, int64_t j0, int64_t nc, T* dst) const {
    for (int64_t jp = 0; jp < nc; jp += NR) {
      T* panel = dst + jp * kc;
      for (int64_t k = 0; k < kc; ++k)
        std::memcpy(panel + k * NR, xpad + row_offset[size_t(k0 + k)] + j0 + jp, sizeof(T) * NR);
    }
  }
};

// y for `count` stacked images (count <= grid.G) on the padded grid (stride
// 1); x, w and y in the storage type S (f16 is converted while padding,
// while packing w and while extracting the output rows).
//   x: [count, C, H, W]  w: [K, CRS]  y: [count, K, P, Q]
template <typename T, typename S>
void forward_grid(const Conv2dGeometry& g, const PaddedGrid<T>& grid, const S* x, int64_t count, const S* w, S* y) {
  T* xpad = local_buffer<T, kImage>(int64_t(grid.padded_size(g)));
  grid.pad(g, x, count, xpad);
  const bool dense = std::is_same_v<S, T> && grid.G == 1 && grid.Wp == g.Q;  // no extra columns: write y directly
  T* out = dense ? reinterpret_cast<T*>(y) : local_buffer<T, kOutput>(g.K * grid.cols);
  const PackB<T> pack = [&](int64_t k0, int64_t kc, int64_t j0, int64_t nc, T* dst) {
    grid.pack(xpad, k0, kc, j0, nc, dst);
  };
  gemm_serial_packed<T, S>(false, g.K, grid.cols, g.col_rows(), T(1), w, g.col_rows(), pack, T(0), out, grid.cols);
  if (dense) return;
  for (int64_t i = 0; i < count; ++i)
    for (int64_t k = 0; k < g.K; ++k) {
      if (grid.Wp == g.Q) {  // no extra columns: the image's rows are one block
        copy_values(out + k * grid.cols + i * grid.Hp * grid.Wp, y + (i * g.K + k) * g.P * g.Q, g.P * g.Q);
        continue;
      }
      for (int64_t p = 0; p < g.P; ++p)
        copy_values(out + k * grid.cols + (i * grid.Hp + p) * grid.Wp, y + ((i * g.K + k) * g.P + p) * g.Q, g.Q);
    }
}

// Pointwise convolutions of planes smaller than this many pixels stack
// images on the grid too (ResNet-50's 1x1 layers at 7x7 and 14x14: a GEMM
// of 49 columns per image wastes most of each packed panel).
constexpr int64_t kStackPointwiseBelow = 256;
bool stacks_images(const Conv2dGeometry& g) {
  return is_stride1(g) && (!is_pointwise(g) || g.H * g.W < kStackPointwiseBelow);
}

// Images stacked per padded-grid GEMM so that its N dimension (the grid's
// columns) reaches ~512: small images (7x7, 14x14) would otherwise pay the
// packing of the filter and the call overheads for a few dozen columns.
int64_t grid_stack(const Conv2dGeometry& g) {
  const int64_t plane = (g.H + 2 * g.pad_h) * (g.W + 2 * g.pad_w);
  return std::clamp<int64_t>((512 + plane - 1) / plane, 1, 16);
}

// Runs chunk(n0, count) over [0, N) in chunks of at most `stack` images:
// each thread takes a contiguous share of the images and steps through it
// (so shares stay equal whatever the stack), one thread when the work is
// too small to share.
template <typename F>
void for_each_stack(int64_t N, int64_t stack, int64_t flops_per_image, F&& chunk) {
  const bool small = N * flops_per_image < (int64_t(1) << 20);
  const int threads = small ? 1 : std::max(1, std::min<int>(num_threads(), int(N)));
  const int64_t per = (N + threads - 1) / threads;
  auto share = [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) {
      const int64_t end = std::min(N, (t + 1) * per);
      for (int64_t n = t * per; n < end; n += stack) chunk(n, std::min(stack, end - n));
    }
  };
  if (threads == 1)
    share(0, 1);
  else
    parallel_for(0, threads, 1, share);
}

// ------------------------------------------------------------- im2col path

// The column matrix [CRS, PQ] of image x in the compute type: an f32/f64
// pointwise image is its own; otherwise x is unfolded (f16 converted) into
// the thread's column buffer.
template <typename S>
const compute_t<S>* columns(const Conv2dGeometry& g, const S* x) {
  if constexpr (!is_half_v<S>)
    if (is_pointwise(g)) return x;
  compute_t<S>* col = local_buffer<compute_t<S>, kColumn>(g.col_rows() * g.col_cols());
  im2col_image(g, x, col);
  return col;
}

// x, w, y in the storage type S (f16 x is converted while unfolding).
//   x: [C, H, W]  w: [K, CRS]  y: [K, P, Q]
template <typename S>
void forward_image_im2col(const Conv2dGeometry& g, const S* x, const S* w, S* y, bool parallel_gemm) {
  using T = compute_t<S>;
  const int64_t CRS = g.col_rows(), PQ = g.col_cols();
  const T* col = columns(g, x);
  if constexpr (is_half_v<S>) {
    gemm_f16a_chunked(false, g.K, PQ, CRS, w, CRS, col, PQ, y, PQ, parallel_gemm);
  } else {
    auto mm = parallel_gemm ? gemm_parallel<T> : gemm_serial<T>;
    mm(false, false, g.K, PQ, CRS, T(1), w, CRS, col, PQ, T(0), y, PQ);
  }
}

// Multiply-adds of one image's convolution (any of the three passes).
int64_t conv_flops(const Conv2dGeometry& g) { return g.K * g.col_rows() * g.col_cols(); }

// Images per stack on the im2col paths: enough for kStackedColumns columns.
int64_t stacked_columns(const Conv2dGeometry& g) {
  return std::clamp<int64_t>((kStackedColumns + g.col_cols() - 1) / g.col_cols(), 1, 16);
}

// count images' [rows, PQ] planes side by side, and back (converting where
// the types differ):
//   images: [count, rows, PQ]   stacked: [rows, count * PQ]
template <typename S, typename T>
void place_side_by_side(const S* images, int64_t count, int64_t rows, int64_t PQ, T* stacked) {
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t i = 0; i < count; ++i) copy_values(images + (i * rows + r) * PQ, stacked + (r * count + i) * PQ, PQ);
}
template <typename S>
void split_side_by_side(const S* stacked, int64_t count, int64_t rows, int64_t PQ, S* images) {
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t i = 0; i < count; ++i) copy_values(stacked + (r * count + i) * PQ, images + (i * rows + r) * PQ, PQ);
}

// Runs image(n, parallel_gemm) for every image: images spread over the
// threads when there are enough of them, else one at a time with the GEMM
// itself parallel (the padded-grid path then runs serially).
template <typename F>
void for_each_image(int64_t N, int64_t flops_per_image, F&& image) {
  if (N * flops_per_image < (int64_t(1) << 20)) {  // too little to share: no parallel region
    for (int64_t n = 0; n < N; ++n) image(n, false);
  } else if (N >= num_threads()) {
    parallel_for(0, N, 1, [&](int64_t b, int64_t e) {
      for (int64_t n = b; n < e; ++n) image(n, false);
    });
  } else {
    for (int64_t n = 0; n < N; ++n) image(n, true);
  }
}

// ----------------------------------------------------------------- kernels

// x, w, y in the storage type S (f16, f32, f64).
template <typename S>
void conv_forward_gemm(const Conv2dGeometry& g, const S* x, const S* w, S* y) {
  using T = compute_t<S>;
  const int64_t CHW = g.C * g.H * g.W, PQ = g.col_cols(), KPQ = g.K * PQ;
  if (stacks_images(g) && g.N >= num_threads()) {
    // Stacked images on the padded grid (converts while padding and while storing rows).
    const int64_t stack = grid_stack(g);
    const PaddedGrid<T> grid(g, stack);
    for_each_stack(g.N, stack, conv_flops(g), [&](int64_t n0, int64_t count) {
      const S* xn = x + n0 * CHW;
      S* yn = y + n0 * KPQ;
      if (count == stack) {
        forward_grid(g, grid, xn, count, w, yn);
      } else {
        forward_grid(g, PaddedGrid<T>(g, count), xn, count, w, yn);
      }
    });
    return;
  }
  if (!is_stride1(g) && stacked_columns(g) > 1 && g.N >= num_threads()) {
    // Strided, small outputs: a stack of images' columns side by side, one
    // GEMM for the stack (as backward data below), then y's rows out.
    //   col: [CRS, count * PQ]   out: [K, count * PQ]
    const int64_t CRS = g.col_rows();
    for_each_stack(g.N, stacked_columns(g), conv_flops(g), [&](int64_t n0, int64_t count) {
      const int64_t cols = count * PQ;
      T* col = local_buffer<T, kColumn>(CRS * cols);
      for (int64_t i = 0; i < count; ++i) im2col_image(g, x + (n0 + i) * CHW, col + i * PQ, cols);
      S* out = local_buffer<S, kOutput>(g.K * cols);  // (16-bit: rounded once, by the GEMM)
      if constexpr (is_half_v<S>) {
        gemm_f16a_chunked(false, g.K, cols, CRS, w, CRS, col, cols, out, cols, false);
      } else {
        gemm_serial<T>(false, false, g.K, cols, CRS, T(1), w, CRS, col, cols, T(0), out, cols);
      }
      split_side_by_side(out, count, g.K, PQ, y + n0 * KPQ);
    });
    return;
  }
  const PaddedGrid<T> grid(g, 1);
  for_each_image(g.N, conv_flops(g), [&](int64_t n, bool par) {
    const S* xn = x + n * CHW;
    S* yn = y + n * KPQ;
    if (is_pointwise(g)) {  // the image is the column matrix
      if constexpr (is_half_v<S>) {
        gemm_f16a_chunked(false, g.K, PQ, g.C, w, g.C, xn, PQ, yn, PQ, par);
      } else {
        auto mm = par ? gemm_parallel<T> : gemm_serial<T>;
        mm(false, false, g.K, PQ, g.C, T(1), w, g.C, xn, PQ, T(0), yn, PQ);
      }
    } else if (is_stride1(g)) {  // converts while padding and while storing rows
      forward_grid(g, grid, xn, 1, w, yn);
    } else {
      forward_image_im2col(g, xn, w, yn, par);
    }
  });
}

// The filter flipped and transposed for backward data as a forward convolution:
//   wf[c, k, r, s] = w[k, c, R-1-r, S-1-s]     (moves f16 bits: exact)
template <typename S>
const S* flipped_filter(const Conv2dGeometry& g, const S* w) {
  S* wf = local_buffer<S, kFlipped>(g.K * g.col_rows());
  parallel_for(0, g.C, 1, [&](int64_t c0, int64_t c1) {
    for (int64_t c = c0; c < c1; ++c)
      for (int64_t k = 0; k < g.K; ++k)
        for (int64_t r = 0; r < g.R; ++r)
          for (int64_t s = 0; s < g.S; ++s)
            wf[((c * g.K + k) * g.R + r) * g.S + s] = w[((k * g.C + c) * g.R + (g.R - 1 - r)) * g.S + (g.S - 1 - s)];
  });
  return wf;
}
// The forward geometry of backward data (stride 1): gy convolved with the
// flipped filter, padding R-1-pad.
Conv2dGeometry flipped_geometry(const Conv2dGeometry& g) {
  return make_conv2d_geometry(g.N, g.K, g.P, g.Q, g.C, g.R, g.S, 1, 1, g.R - 1 - g.pad_h, g.S - 1 - g.pad_w);
}

template <typename S>
void conv_backward_data_gemm(const Conv2dGeometry& g, const S* gy, const S* w, S* gx) {
  using T = compute_t<S>;
  const int64_t CRS = g.col_rows(), PQ = g.col_cols(), CHW = g.C * g.H * g.W, KPQ = g.K * PQ;
  if (is_pointwise(g) && !stacks_images(g)) {  // gx[n] = w^T gy[n] (else: the transposed filter's forward, below)
    for_each_image(g.N, conv_flops(g), [&](int64_t n, bool par) {
      if constexpr (is_half_v<S>) {
        gemm_f16a_chunked(true, g.C, PQ, g.K, w, CRS, gy + n * KPQ, PQ, gx + n * CHW, PQ, par);
      } else {
        auto mm = par ? gemm_parallel<T> : gemm_serial<T>;
        mm(true, false, g.C, PQ, g.K, T(1), w, CRS, gy + n * KPQ, PQ, T(0), gx + n * CHW, PQ);
      }
    });
    return;
  }
  if (is_stride1(g) && g.pad_h <= g.R - 1 && g.pad_w <= g.S - 1) {
    // gx = conv(gy, flip(w)^T) with padding R-1-pad: a stride-1 forward.
    conv_forward_gemm(flipped_geometry(g), gy, flipped_filter(g, w), gx);
    return;
  }
  // Strided: a stack of images at a time, their gy side by side as the
  // GEMM's columns (kStackedColumns).
  //   gys: [K, count * PQ]   dcol: [CRS, count * PQ]
  const int64_t stack = stacked_columns(g);
  auto images = [&](int64_t n0, int64_t count, bool par) {
    const int64_t cols = count * PQ;
    const S* b = gy + n0 * KPQ;
    int64_t ldb = PQ;
    if (count > 1) {
      S* gys = local_buffer<S, kStackedGrad>(g.K * cols);
      place_side_by_side(gy + n0 * KPQ, count, g.K, PQ, gys);
      b = gys, ldb = cols;
    }
    T* dcol = local_buffer<T, kColumn>(CRS * cols);
    if constexpr (is_half_v<S>) {
      gemm_f16a_chunked(true, CRS, cols, g.K, w, CRS, b, ldb, dcol, cols, par);
    } else {
      auto mm = par ? gemm_parallel<T> : gemm_serial<T>;
      mm(true, false, CRS, cols, g.K, T(1), w, CRS, b, ldb, T(0), dcol, cols);
    }
    for (int64_t i = 0; i < count; ++i) {
      const int64_t n = n0 + i;
      T* gxn = out_ptr<kF16Out>(gx + n * CHW, CHW);
      col2im_image(g, dcol + i * PQ, gxn, cols);
      store(gxn, gx + n * CHW, CHW);
    }
  };
  if (g.N >= num_threads() || g.N * conv_flops(g) < (int64_t(1) << 20)) {
    for_each_stack(g.N, stack, conv_flops(g), [&](int64_t n0, int64_t count) {
      images(n0, count, false);
    });
  } else {  // fewer images than threads: one image at a time, the GEMM itself parallel
    for (int64_t n = 0; n < g.N; ++n) images(n, 1, true);
  }
}

template <typename S>
void conv_backward_filter_gemm(const Conv2dGeometry& g, const S* x, const S* gy, S* gw) {
  using T = compute_t<S>;
  const int64_t CRS = g.col_rows(), PQ = g.col_cols(), CHW = g.C * g.H * g.W, KCRS = g.K * CRS;
  const bool grid_path = is_stride1(g) && !is_pointwise(g);
  // Small images are stacked so each dot product of the GEMM runs over
  // at least ~512 grid columns.
  const int64_t plane = (g.H + 2 * g.pad_h) * (g.W + 2 * g.pad_w);
  const int64_t stack = grid_path ? std::clamp<int64_t>((512 + plane - 1) / plane, 1, 16) : stacked_columns(g);
  const PaddedGrid<T> grid(g, stack);

  // acc += sum over images [n0, n0 + count) of gy[n] * col(x[n])^T.
  auto images = [&](int64_t n0, int64_t count, T* acc) {
    if (grid_path) {  // reads x and gy in the storage type, converting while copying to the grid
      const S* gyn = gy + n0 * g.K * PQ;
      T* xpad = local_buffer<T, kImage>(int64_t(grid.padded_size(g)));
      grid.pad(g, x + n0 * CHW, count, xpad);
      // gy on the grid: junk rows and extra columns are zero so they add
      // nothing. Rows are padded with zeros to L, a multiple of 16 values,
      // so the dot products run in whole vectors (the window rows of xpad
      // may then read up to 15 values past the grid: the slack).
      const int64_t L = (grid.cols + 15) / 16 * 16;
      T* gyg = local_buffer<T, kOutput>(g.K * L);
      std::memset(gyg, 0, sizeof(T) * size_t(g.K * L));
      for (int64_t i = 0; i < count; ++i)
        for (int64_t k = 0; k < g.K; ++k)
          for (int64_t p = 0; p < g.P; ++p)
            copy_values(gyn + ((i * g.K + k) * g.P + p) * g.Q, gyg + k * L + (i * grid.Hp + p) * grid.Wp, g.Q);
      const T** rows = local_buffer<const T*, kRows>(CRS);
      for (int64_t r = 0; r < CRS; ++r) rows[r] = xpad + grid.row_offset[size_t(r)];
      gemm_nt_rows<T>(g.K, CRS, L, T(1), gyg, L, rows, T(1), acc, CRS);
      return;
    }
    if constexpr (is_half_v<S>) {
      if (is_pointwise(g)) {  // converts gy and x in chunks along PQ
        for (int64_t i = 0; i < count; ++i)
          gemm_nt_accumulate_f16(g.K, CRS, PQ, gy + (n0 + i) * g.K * PQ, PQ, x + (n0 + i) * CHW, PQ, acc, CRS);
        return;
      }
    }
    if (count == 1) {
      const T* gyn = load<kF16In>(gy + n0 * g.K * PQ, g.K * PQ);
      gemm_serial<T>(false, true, g.K, CRS, PQ, T(1), gyn, PQ, columns(g, x + n0 * CHW), PQ, T(1), acc, CRS);
      return;
    }
    // A stack's gy and columns side by side (kStackedColumns):
    //   gys: [K, count * PQ]   col: [CRS, count * PQ]
    const int64_t cols = count * PQ;
    T* gys = local_buffer<T, kStackedGrad>(g.K * cols);
    T* col = local_buffer<T, kColumn>(CRS * cols);
    place_side_by_side(gy + n0 * g.K * PQ, count, g.K, PQ, gys);
    for (int64_t i = 0; i < count; ++i) im2col_image(g, x + (n0 + i) * CHW, col + i * PQ, cols);
    gemm_serial<T>(false, true, g.K, CRS, cols, T(1), gys, cols, col, cols, T(1), acc, CRS);
  };

  // partial[t]: thread t's sum over its contiguous share of the images.
  const bool small = g.N * conv_flops(g) < (int64_t(1) << 20);  // not worth a parallel region
  const int threads = small ? 1 : std::max(1, std::min<int>(num_threads(), int(g.N)));
  // (each in its thread's grow-only buffer: no allocation or page faults per call)
  std::vector<T*> partial(static_cast<size_t>(threads));
  const int64_t per = (g.N + threads - 1) / threads;
  for_each_share(threads, [&](int t) {
    T* acc = partial[size_t(t)] = local_buffer<T, kPartial>(KCRS);
    std::fill(acc, acc + KCRS, T(0));
    const int64_t end = std::min(g.N, (t + 1) * per);
    for (int64_t n = t * per; n < end; n += stack) images(n, std::min(stack, end - n), acc);
  });
  // Fixed-order reduction of the partials.
  T* out = out_ptr<kF16Out>(gw, KCRS);
  parallel_for(0, KCRS, 4096, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) {
      T s = partial[0][size_t(i)];
      for (int t = 1; t < threads; ++t) s += partial[size_t(t)][size_t(i)];
      out[i] = s;
    }
  });
  store(out, gw, KCRS);
}

// ------------------------------------------------------ the policy's choice

template <typename S>
void conv_forward(const Conv2dGeometry& g, const S* x, const S* w, S* y) {
  run_conv_pass(ConvPass::forward, g, dtype_of<S>::value, [&](ConvAlgo a) {
    if (a == ConvAlgo::window) return conv_forward_window(g, x, w, y);
    if (a == ConvAlgo::winograd) return conv_forward_winograd(g, x, w, y, 2);
    if (a == ConvAlgo::winograd4) return conv_forward_winograd(g, x, w, y, 4);
    conv_forward_gemm(g, x, w, y);
  });
}

template <typename S>
void conv_backward_data(const Conv2dGeometry& g, const S* gy, const S* w, S* gx) {
  run_conv_pass(ConvPass::backward_data, g, dtype_of<S>::value, [&](ConvAlgo a) {
    if (a == ConvAlgo::window) return conv_backward_data_window(g, gy, w, gx);
    if (a == ConvAlgo::winograd || a == ConvAlgo::winograd4)
      return conv_forward_winograd(flipped_geometry(g), gy, flipped_filter(g, w), gx, a == ConvAlgo::winograd ? 2 : 4);
    conv_backward_data_gemm(g, gy, w, gx);
  });
}

template <typename S>
void conv_backward_filter(const Conv2dGeometry& g, const S* x, const S* gy, S* gw) {
  run_conv_pass(ConvPass::backward_filter, g, dtype_of<S>::value, [&](ConvAlgo a) {
    if (a == ConvAlgo::window) return conv_backward_filter_window(g, x, gy, gw);
    if (a == ConvAlgo::winograd) return conv_backward_filter_winograd(g, x, gy, gw, 2);
    if (a == ConvAlgo::winograd4) return conv_backward_filter_winograd(g, x, gy, gw, 4);
    conv_backward_filter_gemm(g, x, gy, gw);
  });
}

}  // namespace

void conv2d_forward(DType dt, const Conv2dGeometry& g, const void* x, const void* w, void* y, Stream) {
  if (g.channels_last) return conv2d_forward_channels_last(dt, g, x, w, y);
  dispatch_storage(dt, "conv2d_forward", [&](auto zero) {
    using S = decltype(zero);
    conv_forward(g, static_cast<const S*>(x), static_cast<const S*>(w), static_cast<S*>(y));
  });
}

void conv2d_backward_data(DType dt, const Conv2dGeometry& g, const void* gy, const void* w, void* gx, Stream) {
  if (g.channels_last) return conv2d_backward_data_channels_last(dt, g, gy, w, gx);
  dispatch_storage(dt, "conv2d_backward_data", [&](auto zero) {
    using S = decltype(zero);
    conv_backward_data(g, static_cast<const S*>(gy), static_cast<const S*>(w), static_cast<S*>(gx));
  });
}

void conv2d_backward_filter(DType dt, const Conv2dGeometry& g, const void* x, const void* gy, void* gw, Stream) {
  if (g.channels_last) return conv2d_backward_filter_channels_last(dt, g, x, gy, gw);
  dispatch_storage(dt, "conv2d_backward_filter", [&](auto zero) {
    using S = decltype(zero);
    conv_backward_filter(g, static_cast<const S*>(x), static_cast<const S*>(gy), static_cast<S*>(gw));
  });
}

}  // namespace ember::cpu
