// ops/cpu/conv/conv_winograd.cpp — F(2x2, 3x3) and F(4x4, 3x3) convolution
// (conv_winograd.h), one set of loops for both tile sizes (M = 2 or 4
// outputs a side; a = M + 2 input points a side, a^2 products a tile).
//
// Work is split like the GEMM paths: each thread takes a contiguous share of
// the images and walks its tile rows (image, ti) in batches of about
// tiles_per_batch tiles (whole images where an image has about that many or
// fewer), in three steps per batch:
//   input transform   V[xi][c][j] = (B^T d_j B)[xi]      j: the batch's tiles
//   a^2 GEMMs         M[xi][k][j] = U[xi][k][:] . V[xi][:][j]
//   output transform  y tile j = A^T M_j A (M x M, clipped at the border)
// with the matrices of winograd_matrices.h. U = G g G^T is computed once
// per call for every (k, c), packed for the GEMMs, and shared
// by the threads. The transforms of a tile row and the GEMMs' register
// tiles are the kernel set's (winograd_micro.h, winograd4_micro.h,
// conv_micro.h: compiled per instruction set); this file holds the loops
// around them. Each channel plane of a batch is copied once into
// zero-padded rows; output rows and output-gradient rows are written and
// read in place where they are whole tile rows.
#include "ops/cpu/conv/conv_winograd.h"

#include <algorithm>
#include <vector>

#include "engine/error.h"
#include "engine/parallel.h"
#include "ops/cpu/conv/conv_grid.h"
#include "ops/cpu/f16_util.h"
#include "ops/cpu/gemm/gemm_isa.h"
#include "ops/cpu/conv/winograd_matrices.h"

namespace ember::cpu {
namespace {

// Tiles a batch holds, for F(2x2, 3x3) and F(4x4, 3x3) (measured on a Zen
// 4: 96 4x4 tiles beat 48 and 192 on ResNet-20's layers; a batch's V and M
// then stay within the 1 MB L2 for up to about 32 channels).
constexpr int64_t kTilesPerBatch2 = 192, kTilesPerBatch4 = 96;
// Values the transforms may read past a buffer's last row (gemm_isa.h), and
// the window tiles past V's last row.
constexpr int64_t kSlack = 64;
// Values the transforms write past a row of V or Z (whole vectors: at most
// 7): the rows of V and Z are this much longer than their tiles.
constexpr int64_t kRowSlack = 16;
// Values the output transform writes past a tile row's last output row (at
// most 15 for M = 2, 28 for M = 4): output rows are written in place only
// where as many values of the plane follow them (written later).
constexpr int64_t kOutSlack = 32;

// local_buffer slots (f16_util.h), distinct from conv.cpp's and gemm_f16.cpp's.
constexpr int kFilterSums = 30, kInputV = 31, kProductM = 32, kRowBuf = 33, kOutRows = 34, kFilterPanels = 35;

// The tile transforms of one tile row for tile size M (gemm_isa.h).
template <typename T, int M>
struct RowTransforms {
  void (*input)(const T* rows, int64_t wb, int64_t tw, T* v, int64_t plane);
  void (*output)(const T* m, int64_t plane, int64_t tw, T* o0);
  const GemmKernels<T>* kern;
  // Z for the tile row whose M output-gradient rows start at g0, ldg apart.
  void grad(const T* g0, int64_t ldg, int64_t tw, T* z, int64_t plane) const {
    if constexpr (M == 2) kern->winograd_grad_row(g0, g0 + ldg, tw, z, plane);
    else kern->winograd4_grad_row(g0, ldg, tw, z, plane);
  }
};
template <typename T, int M>
RowTransforms<T, M> row_transforms() {
  const GemmKernels<T>& k = gemm_kernels<T>();
  if constexpr (M == 2) return {k.winograd_input_row, k.winograd_output_row, &k};
  else return {k.winograd4_input_row, k.winograd4_output_row, &k};
}

// U[xi][k][c] = (G w[k][c] G^T)[xi], written straight into MR-row panels
// for the window tiles: xi's block of KP = ceil(K / MR) * MR rows holds
// (k, c) at (k / MR) * C * MR + c * MR + k % MR; rows k >= K are zeros.
//   w: [K, C, 3, 3]   Upack: [a^2, KP / MR, C, MR]
template <int M, typename T, typename S>
void transform_filter_packed(const Conv2dGeometry& g, const S* w, int MR, T* Upack) {
  using Mat = WinogradMatrices<M>;
  constexpr int A = Mat::points;
  const int64_t KP = conv_grid::ceil_div(g.K, int64_t(MR)) * MR, plane = KP * g.C;
  // Blocks of B output channels of one input channel: B filters transformed
  // at once, their values consecutive in a panel (where MR is a multiple of
  // B). A block's input channels in order: w's rows of the block's B output
  // channels are read and each panel of U is written front to back (U is
  // 16/9 (F(2x2)) or 36/9 (F(4x4)) times the filter's size: 17 MB for
  // F(2x2) at 512 channels, so the order decides whether this is a stream
  // or cache misses).
  constexpr int B = 8;
  const int64_t blocks = conv_grid::ceil_div(g.K, int64_t(B));
  parallel_for(0, blocks * g.C, 32, [&](int64_t b, int64_t e) {
    for (int64_t bc = b; bc < e; ++bc) {
      const int64_t c = bc % g.C, k0 = bc / g.C * B, n = std::min<int64_t>(B, g.K - k0);
      T f[9][B] = {}, u[A * A][B];
      for (int64_t p = 0; p < n; ++p)
        for (int rs = 0; rs < 9; ++rs) f[rs][p] = convert_value<T>(w[((k0 + p) * g.C + c) * 9 + rs]);
      winograd_filter_transform<M, B>(f, u);
      T* block = Upack + (k0 / MR) * g.C * MR + c * MR + k0 % MR;
      if (n == B && MR % B == 0) {  // the block's B values of each xi are consecutive
        for (int xi = 0; xi < A * A; ++xi)
          for (int p = 0; p < B; ++p) block[xi * plane + p] = u[xi][p];
        continue;
      }
      for (int xi = 0; xi < A * A; ++xi)
        for (int64_t p = 0; p < n; ++p) {
          const int64_t k = k0 + p;
          Upack[xi * plane + (k / MR) * g.C * MR + c * MR + k % MR] = u[xi][p];
        }
    }
  });
  for (int xi = 0; xi < A * A; ++xi)  // the last panel's rows past K
    for (int64_t k = g.K; k < KP; ++k)
      for (int64_t c = 0; c < g.C; ++c) Upack[xi * plane + (k / MR) * g.C * MR + c * MR + k % MR] = T(0);
}

// The transforms put a tile row's tiles along the vector lanes (8 f32). A
// small image has fewer tiles a row (a 7x7 output: 2 of 4x4, 4 of 2x2), so
// there G images sit side by side in a strip: row i of the strip's padded
// rows holds image g's padded row i at columns [g S, g S + S), S = M tw,
// and a tile row is the G tw tiles of tile row ti of every image of the
// strip. This needs image g's padded row to fit in its S columns (pad_w +
// W <= S: its right padding column is the next image's left one), which
// also keeps image g's outputs from reading image g + 1's values (the
// last, Q - 1, reads up to padded column Q + 1 = pad_w + W). The
// last tile of an image then covers output columns past Q that read the
// next image's first values: those outputs are dropped, but in floating
// point the transforms mix them into the tile's kept outputs, so values
// that are not finite in one image reach its neighbour's outputs (as NaN).
constexpr int64_t kTileLanes = 8;
struct Tiling {
  int64_t th, tw;  // tile rows and columns per image: ceil(P / M), ceil(Q / M)
  int64_t G;       // images side by side in a strip
  int64_t S;       // columns of one image in a strip's rows: M tw
  int64_t trow;    // tiles a tile row: G tw
  int64_t wb;      // width of a padded input row buffer: S + 2 alone, G S in strips
  // The images of strip `strip` of a share starting at image n0 and ending before n1.
  int64_t first_image(int64_t n0, int64_t strip) const { return n0 + strip * G; }
  int64_t images(int64_t n0, int64_t n1, int64_t strip) const { return std::min(G, n1 - first_image(n0, strip)); }
  int64_t tile_rows(int64_t n0, int64_t n1) const { return (n1 - n0 + G - 1) / G * th; }
};
template <int M>
Tiling tiling_of(const Conv2dGeometry& g) {
  const int64_t tw = (g.Q + M - 1) / M, S = M * tw;
  const bool strips = tw < kTileLanes && g.pad_w + g.W <= S;
  const int64_t G = strips ? std::max<int64_t>(1, kTileLanes / tw) : 1;
  return Tiling{(g.P + M - 1) / M, tw, G, S, G * tw, G == 1 ? S + 2 : G * S};
}

// The threads' contiguous shares of the images: share t is images
// [begin(t), end(t)) (possibly empty), at most one share per image.
struct ImageShares {
  int threads;
  int64_t N, per;
  explicit ImageShares(int64_t n) : threads(std::max(1, std::min<int>(num_threads(), int(n)))), N(n),
                                    per((n + threads - 1) / threads) {}
  int64_t begin(int t) const { return std::min(N, t * per); }
  int64_t end(int t) const { return std::min(N, (t + 1) * per); }
};

// Rows [M ti0, M ti1 + 2) of the zero-padded planes of one channel of the
// `images` images of a strip (CHW values apart), the input of tile rows
// [ti0, ti1), as T, in one pass:
//   buf: [M (ti1 - ti0) + 2, wb], element (i, g S + u) = image g's
//        xc[M ti0 + i - pad_h, u - pad_w] (0 outside it and past the images)
// In strips (wb = G S) the last image's last tile reads 2 columns past its
// row: the next row's first two (image 0's padding and first value), past
// the last row 2 zeros after it; like the columns it reads of the next
// image, they reach only outputs past Q.
template <int M, typename T, typename S>
void load_padded_rows(const Conv2dGeometry& g, const Tiling& tl, const S* xc, int64_t images, int64_t ti0,
                      int64_t ti1, T* buf) {
  const int64_t rows = M * (ti1 - ti0) + 2, h0 = M * ti0 - g.pad_h, CHW = g.C * g.H * g.W;
  const int64_t first = std::clamp<int64_t>(-h0, 0, rows), last = std::clamp<int64_t>(g.H - h0, first, rows);
  const int64_t n = std::min(g.W, tl.S + 2 - g.pad_w);  // columns past the tiles are not needed
  std::fill(buf, buf + first * tl.wb, T(0));
  std::fill(buf + last * tl.wb, buf + rows * tl.wb, T(0));
  if constexpr (std::is_same_v<S, T>) {
    const auto copy_rows = gemm_kernels<T>().copy_rows;
    if (tl.G == 1) {
      copy_rows(xc + (h0 + first) * g.W, g.W, n, buf + first * tl.wb, g.pad_w, tl.wb, last - first, 1, 0);
      return;
    }
    std::fill(buf + rows * tl.wb, buf + rows * tl.wb + 2, T(0));
    if (images == tl.G) {  // the strip's images side by side, S columns each: row i of image g is row i G + g
      copy_rows(xc + (h0 + first) * g.W, g.W, n, buf + first * tl.wb, g.pad_w, tl.S, last - first, images, CHW);
      return;
    }
    for (int64_t i = first; i < last; ++i) {  // a part-filled strip: row by row, zeros past the images
      T* row = buf + i * tl.wb;
      copy_rows(xc + (h0 + i) * g.W, g.W, n, row, g.pad_w, tl.S, 1, images, CHW);
      std::fill(row + images * tl.S, row + tl.wb, T(0));
    }
  } else {
    if (tl.G > 1) std::fill(buf + rows * tl.wb, buf + rows * tl.wb + 2, T(0));
    for (int64_t i = first; i < last; ++i) {
      T* row = buf + i * tl.wb;
      std::fill(row, row + tl.wb, T(0));
      for (int64_t im = 0; im < images; ++im) copy_values(xc + im * CHW + (h0 + i) * g.W, row + im * tl.S + g.pad_w, n);
    }
  }
}

// Calls f(strip, ti0, ti1, j0) for the runs of tile rows [b0, b1) (strip
// * th + ti) that lie in one strip: tile rows [ti0, ti1) of strip
// `strip`, whose first tile is column j0 of the batch.
template <typename F>
void for_each_strip_run(const Tiling& tl, int64_t b0, int64_t b1, F&& f) {
  for (int64_t r = b0; r < b1;) {
    const int64_t strip = r / tl.th, ti0 = r % tl.th, ti1 = std::min(tl.th, ti0 + (b1 - r));
    f(strip, ti0, ti1, (r - b0) * tl.trow);
    r += ti1 - ti0;
  }
}

// V for the tiles of tile rows [b0, b1) of every channel of the share of
// images [n0, n1), rows of ldv values (>= (b1 - b0) * trow + kRowSlack).
//   x: [N, C, H, W]   buf: padded rows (load_padded_rows)   V: [a^2, C, ldv]
template <int M, typename T, typename S>
void transform_input_batch(const Conv2dGeometry& g, const Tiling& tl, const S* x, int64_t n0, int64_t n1, int64_t b0,
                           int64_t b1, T* buf, T* V, int64_t ldv) {
  const int64_t CHW = g.C * g.H * g.W;
  const auto input_row = row_transforms<T, M>().input;
  for_each_strip_run(tl, b0, b1, [&](int64_t strip, int64_t ti0, int64_t ti1, int64_t j0) {
    const S* xs = x + tl.first_image(n0, strip) * CHW;
    const int64_t images = tl.images(n0, n1, strip);
    for (int64_t c = 0; c < g.C; ++c) {
      load_padded_rows<M>(g, tl, xs + c * g.H * g.W, images, ti0, ti1, buf);
      for (int64_t ti = ti0; ti < ti1; ++ti)
        input_row(buf + M * (ti - ti0) * tl.wb, tl.wb, tl.trow, V + c * ldv + j0 + (ti - ti0) * tl.trow, g.C * ldv);
    }
  });
}

// Tile rows per batch: about tiles_per_batch tiles, rounded to whole
// strips when a strip has about that many or fewer (so each channel plane
// is loaded once).
template <int M>
int64_t tile_rows_per_batch(const Tiling& tl) {
  const int64_t tiles = M == 2 ? kTilesPerBatch2 : kTilesPerBatch4;
  int64_t rows = std::max<int64_t>(1, tiles / tl.trow);
  if (4 * rows >= 3 * tl.th) rows = std::max(tl.th, (rows + tl.th / 2) / tl.th * tl.th);
  return rows;
}

// The padded rows load_padded_rows writes for a batch of `rows` tile rows,
// and the slack the input transform reads past them.
template <int M>
int64_t padded_rows_size(const Tiling& tl, int64_t rows) {
  return (M * std::min(rows, tl.th) + 2) * tl.wb + kSlack;
}

// The images [n0, n1) of x into y, tile row batch by tile row batch. The
// a^2 GEMMs run on the window tiles (conv_micro.h), reading V's rows in
// place: Upack is U packed in MR-row panels, one block of KP rows per xi.
template <int M, typename T, typename S>
void winograd_images(const Conv2dGeometry& g, const Tiling& tl, const T* Upack, const S* x, S* y, int64_t n0,
                     int64_t n1) {
  constexpr int XI = WinogradMatrices<M>::points * WinogradMatrices<M>::points;
  const GemmKernels<T>& kern = gemm_kernels<T>();
  const auto output_row = row_transforms<T, M>().output;
  const int64_t rows_per_batch = tile_rows_per_batch<M>(tl);
  const int64_t max_nt = rows_per_batch * tl.trow;
  T* V = local_buffer<T, kInputV>(XI * g.C * (max_nt + kRowSlack) + kSlack);
  T* Mp = local_buffer<T, kProductM>(XI * g.K * max_nt + kSlack);
  T* buf = local_buffer<T, kRowBuf>(padded_rows_size<M>(tl, rows_per_batch));
  T* out = local_buffer<T, kOutRows>(M * tl.G * tl.S + kOutSlack);
  std::vector<int64_t> offsets(static_cast<size_t>(g.C));
  const int64_t KPQ = g.K * g.P * g.Q, KP = conv_grid::ceil_div(g.K, int64_t(kern.mr)) * kern.mr;
  // Rows of y written in place: one image's whole tile rows of M tw
  // columns, with kOutSlack values after them that are written later (see
  // below).
  const bool in_place = std::is_same_v<S, T> && tl.G == 1 && g.Q == M * tl.tw;
  const int64_t last = tl.tile_rows(n0, n1);  // tile rows (strip * th + ti) of this share
  for (int64_t b0 = 0; b0 < last; b0 += rows_per_batch) {
    const int64_t b1 = std::min(last, b0 + rows_per_batch), nt = (b1 - b0) * tl.trow, ldv = nt + kRowSlack;
    transform_input_batch<M>(g, tl, x, n0, n1, b0, b1, buf, V, ldv);
    // Each MR-row panel of U[xi] (in L1) against every column tile of
    // V[xi] (in L2): U, a^2 K C values, is read once a batch.
    for (int64_t c = 0; c < g.C; ++c) offsets[size_t(c)] = c * ldv;
    for (int xi = 0; xi < XI; ++xi)
      for (int64_t i = 0; i < g.K; i += kern.mr)
        for (int64_t j = 0; j < nt; j += kern.nr)
          kern.window_tile(g.C, Upack + (xi * KP + i) * g.C, V + xi * g.C * ldv + j, offsets.data(),
                           Mp + (xi * g.K + i) * nt + j, nt, T(0), int(std::min<int64_t>(kern.mr, g.K - i)),
                           int(std::min<int64_t>(kern.nr, nt - j)));
    for_each_strip_run(tl, b0, b1, [&](int64_t strip, int64_t ti0, int64_t ti1, int64_t j0) {
      S* ys = y + tl.first_image(n0, strip) * KPQ;
      const int64_t images = tl.images(n0, n1, strip);
      for (int64_t k = 0; k < g.K; ++k) {
        S* yk = ys + k * g.P * g.Q;
        for (int64_t ti = ti0; ti < ti1; ++ti) {
          const T* m = Mp + k * nt + j0 + (ti - ti0) * tl.trow;
          // Values of the image after the tile row that this thread writes
          // later: the rest of plane k, and the later planes when this run
          // started at their first tile row.
          const int64_t after = (g.P - M * ti - M) * g.Q + (ti0 == 0 ? (g.K - 1 - k) * g.P * g.Q : 0);
          if (in_place && after >= kOutSlack) {
            output_row(m, g.K * nt, tl.trow, reinterpret_cast<T*>(yk + M * ti * g.Q));
            continue;
          }
          output_row(m, g.K * nt, tl.trow, out);
          const int64_t rows = std::min<int64_t>(M, g.P - M * ti);
          for (int64_t im = 0; im < images; ++im) {
            S* dst = yk + im * KPQ + M * ti * g.Q;
            if constexpr (std::is_same_v<S, T>)
              kern.copy_rows(out + im * tl.S, tl.G * tl.S, g.Q, dst, 0, g.Q, rows, 1, 0);
            else
              for (int64_t i = 0; i < rows; ++i) copy_values(out + i * tl.G * tl.S + im * tl.S, dst + i * g.Q, g.Q);
          }
        }
      }
    });
  }
}

// ------------------------------------------------------ filter gradient

// How the filter gradient's products are laid out for the window tiles'
// filter-gradient form (conv_micro.h's window_tile_t): dL/dU^T[xi] [C, K]
// += V[xi] [C, tiles] * Z[xi] [K, tiles]^T, V's rows read in place (the
// tile's MR rows: input channels), Z packed with output channels along
// the lanes, G consecutive tiles folded into the lanes while the output
// channels fill at most half a tile (per_panel = NR / G channels a panel);
// the G lanes of a channel are added at the end.
struct FilterProducts {
  int G = 1, g_index = 0;
  int64_t per_panel = 0, panels = 0, ldc = 0;  // ldc = panels * NR: a row of the sums
  int64_t Cp = 0;                              // C rounded up to whole tiles (MR)
};

template <typename T>
FilterProducts filter_products(const Conv2dGeometry& g, const GemmKernels<T>& kern) {
  FilterProducts fp;
  while (fp.G < 4 && g.K * fp.G * 2 <= kern.nr && kern.window_tile_t[fp.g_index + 1]) fp.G *= 2, ++fp.g_index;
  fp.per_panel = kern.nr / fp.G;
  fp.panels = conv_grid::ceil_div(g.K, fp.per_panel);
  fp.ldc = fp.panels * kern.nr;
  fp.Cp = conv_grid::round_up(g.C, kern.mr);
  return fp;
}

// sums[xi] = V[xi] Z[xi]^T over the tiles of images [n0, n1) (n0 < n1),
// tile row batch by tile row batch (the first batch stores every element of
// sums, the others add).   sums: [a^2, Cp, ldc] (FilterProducts)
template <int M, typename T, typename S>
void winograd_filter_images(const Conv2dGeometry& g, const Tiling& tl, const FilterProducts& fp, const S* x,
                            const S* gy, T* sums, int64_t n0, int64_t n1) {
  constexpr int XI = WinogradMatrices<M>::points * WinogradMatrices<M>::points;
  const GemmKernels<T>& kern = gemm_kernels<T>();
  const RowTransforms<T, M> rt = row_transforms<T, M>();
  const int MR = kern.mr, NR = kern.nr;
  const auto tile = kern.window_tile_t[fp.g_index];
  const int64_t rows_per_batch = tile_rows_per_batch<M>(tl);
  const int64_t max_nt = rows_per_batch * tl.trow, max_ntz = conv_grid::round_up(max_nt, fp.G);
  T* V = local_buffer<T, kInputV>(XI * g.C * (max_nt + kRowSlack) + kSlack);
  T* Z = local_buffer<T, kProductM>(XI * g.K * (max_ntz + kRowSlack) + kSlack);
  T* bp = local_buffer<T, kFilterPanels>(fp.panels * (max_ntz / fp.G) * NR);
  T* buf = local_buffer<T, kRowBuf>(padded_rows_size<M>(tl, rows_per_batch));
  T* grad_rows = local_buffer<T, kOutRows>(M * tl.G * tl.S);
  std::vector<int64_t> offsets(static_cast<size_t>(fp.Cp));
  const int64_t KPQ = g.K * g.P * g.Q;
  // Rows of gy read in place: one image's whole tile rows of M tw columns.
  const bool in_place = std::is_same_v<S, T> && tl.G == 1 && g.Q == M * tl.tw;
  const int64_t last = tl.tile_rows(n0, n1);
  for (int64_t b0 = 0; b0 < last; b0 += rows_per_batch) {
    const int64_t b1 = std::min(last, b0 + rows_per_batch), nt = (b1 - b0) * tl.trow, ldv = nt + kRowSlack;
    // Z's rows: whole lane groups (ntz tiles, zeros past nt), ldz values apart
    const int64_t ntz = conv_grid::round_up(nt, fp.G), groups = ntz / fp.G, ldz = ntz + kRowSlack;
    transform_input_batch<M>(g, tl, x, n0, n1, b0, b1, buf, V, ldv);
    for_each_strip_run(tl, b0, b1, [&](int64_t strip, int64_t ti0, int64_t ti1, int64_t j0) {
      const S* gys = gy + tl.first_image(n0, strip) * KPQ;
      const int64_t images = tl.images(n0, n1, strip), ldg = tl.G * tl.S;
      for (int64_t k = 0; k < g.K; ++k) {
        const S* gyk = gys + k * g.P * g.Q;
        for (int64_t ti = ti0; ti < ti1; ++ti) {
          T* z = Z + k * ldz + j0 + (ti - ti0) * tl.trow;
          if (in_place && M * ti + M - 1 < g.P) {
            rt.grad(reinterpret_cast<const T*>(gyk + M * ti * g.Q), g.Q, tl.trow, z, g.K * ldz);
            continue;
          }
          // The strip's rows side by side, zeros past each image's Q columns and P rows.
          const int64_t rows = std::min<int64_t>(M, g.P - M * ti);
          if constexpr (std::is_same_v<S, T>) {
            for (int64_t i = 0; i < rows; ++i) {  // (one row a call: the images of a row side by side)
              T* row = grad_rows + i * ldg;
              kern.copy_rows(reinterpret_cast<const T*>(gyk + (M * ti + i) * g.Q), g.Q, g.Q, row, 0, tl.S, 1, images, KPQ);
              std::fill(row + images * tl.S, row + ldg, T(0));
            }
            std::fill(grad_rows + rows * ldg, grad_rows + M * ldg, T(0));
          } else {
            std::fill(grad_rows, grad_rows + M * ldg, T(0));
            for (int64_t im = 0; im < images; ++im)
              for (int64_t i = 0; i < rows; ++i)
                copy_values(gyk + im * KPQ + (M * ti + i) * g.Q, grad_rows + i * ldg + im * tl.S, g.Q);
          }
          rt.grad(grad_rows, ldg, tl.trow, z, g.K * ldz);
        }
      }
    });
    if (ntz > nt)  // the last lane group's missing tiles: zeros
      for (int64_t row = 0; row < XI * g.K; ++row) std::fill(Z + row * ldz + nt, Z + row * ldz + ntz, T(0));
    for (int64_t c = 0; c < fp.Cp; ++c) offsets[size_t(c)] = std::min(c, g.C - 1) * ldv;  // (rows past C repeat)
    for (int xi = 0; xi < XI; ++xi) {
      for (int64_t pn = 0; pn < fp.panels; ++pn) {
        const int64_t k0 = pn * fp.per_panel;
        kern.pack_transposed(Z + (xi * g.K + k0) * ldz, ldz, int(std::min(fp.per_panel, g.K - k0)), groups, fp.G,
                             bp + pn * groups * NR, NR);
      }
      T* sum = sums + xi * fp.Cp * fp.ldc;
      for (int64_t c0 = 0; c0 < g.C; c0 += MR)
        for (int64_t pn = 0; pn < fp.panels; ++pn)
          tile(nt, V + xi * g.C * ldv, offsets.data() + c0, bp + pn * groups * NR, sum + c0 * fp.ldc + pn * NR, fp.ldc,
               b0 != 0);
    }
  }
}

template <int M, typename S>
void forward_tiles(const Conv2dGeometry& g, const S* x, const S* w, S* y) {
  using T = compute_t<S>;
  constexpr int XI = WinogradMatrices<M>::points * WinogradMatrices<M>::points;
  const Tiling tl = tiling_of<M>(g);
  const int MR = gemm_kernels<T>().mr;
  T* Upack = local_buffer<T, kFilterPanels>(XI * conv_grid::ceil_div(g.K, int64_t(MR)) * MR * g.C);
  transform_filter_packed<M>(g, w, MR, Upack);
  const ImageShares shares(g.N);
  for_each_share(shares.threads,
                 [&](int t) { winograd_images<M>(g, tl, Upack, x, y, shares.begin(t), shares.end(t)); });
}

template <int M, typename S>
void filter_gradient_tiles(const Conv2dGeometry& g, const S* x, const S* gy, S* gw) {
  using T = compute_t<S>;
  using Mat = WinogradMatrices<M>;
  constexpr int A = Mat::points, XI = A * A;
  const Tiling tl = tiling_of<M>(g);
  const FilterProducts fp = filter_products(g, gemm_kernels<T>());
  const int64_t size = XI * fp.Cp * fp.ldc;
  // partial[t]: thread t's sums over its share of the images.
  const ImageShares shares(g.N);
  const int threads = shares.threads;
  std::vector<T*> partial(static_cast<size_t>(threads));
  auto share = [&](int t) {
    T* sums = partial[size_t(t)] = local_buffer<T, kFilterSums>(size);
    if (shares.begin(t) >= shares.end(t)) std::fill(sums, sums + size, T(0));  // no images
    winograd_filter_images<M>(g, tl, fp, x, gy, sums, shares.begin(t), shares.end(t));
  };
  for_each_share(threads, share);
  // gw[k][c] = G^T m G, m[xi] = the sum over threads (in order) and over
  // the lane group of output channel k of row c of sums[xi]: per input
  // channel c, the rows c of the a^2 sums, read along their lanes.
  const int NR = gemm_kernels<T>().nr;
  parallel_for(0, g.C, 4, [&](int64_t c0, int64_t c1) {
    std::vector<T> m(static_cast<size_t>(g.K * XI));  // m[k][xi]
    for (int64_t c = c0; c < c1; ++c) {
      std::fill(m.begin(), m.end(), T(0));
      for (int t = 0; t < threads; ++t)
        for (int xi = 0; xi < XI; ++xi) {
          const T* row = partial[size_t(t)] + (xi * fp.Cp + c) * fp.ldc;
          for (int64_t k = 0; k < g.K; ++k) {
            const T* lanes = row + (k / fp.per_panel) * NR + (k % fp.per_panel) * fp.G;
            for (int e = 0; e < fp.G; ++e) m[size_t(k * XI + xi)] += lanes[e];
          }
        }
      for (int64_t k = 0; k < g.K; ++k) {
        double mk[A][A], gk[3][3];
        for (int i = 0; i < A; ++i)
          for (int j = 0; j < A; ++j) mk[i][j] = double(m[size_t(k * XI + i * A + j)]);
        winograd_filter_gradient_transform<M>(mk, gk);
        S* gkc = gw + (k * g.C + c) * 9;
        for (int r = 0; r < 3; ++r)
          for (int s = 0; s < 3; ++s) gkc[r * 3 + s] = convert_value<S>(T(gk[r][s]));
      }
    }
  });
}

// What both entry points take: a layer Winograd applies to, m = 2 or 4.
void check_winograd(const Conv2dGeometry& g, int m) {
  EMBER_CHECK(winograd_applies(g), "conv2d: Winograd F(m x m, 3x3) needs a 3x3 filter, stride 1 and padding <= 2");
  EMBER_CHECK(m == 2 || m == 4, "conv2d: Winograd output tiles are 2x2 or 4x4, not " + std::to_string(m));
}

}  // namespace

template <typename S>
void conv_forward_winograd(const Conv2dGeometry& g, const S* x, const S* w, S* y, int m) {
  check_winograd(g, m);
  if (m == 2) forward_tiles<2>(g, x, w, y);
  else forward_tiles<4>(g, x, w, y);
}

template <typename S>
void conv_backward_filter_winograd(const Conv2dGeometry& g, const S* x, const S* gy, S* gw, int m) {
  check_winograd(g, m);
  if (m == 2) filter_gradient_tiles<2>(g, x, gy, gw);
  else filter_gradient_tiles<4>(g, x, gy, gw);
}

template void conv_forward_winograd<float>(const Conv2dGeometry&, const float*, const float*, float*, int);
template void conv_forward_winograd<double>(const Conv2dGeometry&, const double*, const double*, double*, int);
template void conv_forward_winograd<f16>(const Conv2dGeometry&, const f16*, const f16*, f16*, int);
template void conv_forward_winograd<bf16>(const Conv2dGeometry&, const bf16*, const bf16*, bf16*, int);
template void conv_backward_filter_winograd<float>(const Conv2dGeometry&, const float*, const float*, float*, int);
template void conv_backward_filter_winograd<double>(const Conv2dGeometry&, const double*, const double*, double*, int);
template void conv_backward_filter_winograd<f16>(const Conv2dGeometry&, const f16*, const f16*, f16*, int);
template void conv_backward_filter_winograd<bf16>(const Conv2dGeometry&, const bf16*, const bf16*, bf16*, int);

}  // namespace ember::cpu
