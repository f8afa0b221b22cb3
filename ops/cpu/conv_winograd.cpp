// ops/cpu/conv_winograd.cpp — F(2x2, 3x3) convolution (conv_winograd.h).
//
// Work is split like the GEMM paths: each thread takes a contiguous share of
// the images and walks its tile rows (image, ti) in batches of about
// kTilesPerBatch tiles (whole images where an image has about that many or
// fewer), in three steps per batch:
//   input transform   V[xi][c][j] = (B^T d_j B)[xi]      j: the batch's tiles
//   16 GEMMs          M[xi][k][j] = U[xi][k][:] . V[xi][:][j]
//   output transform  y tile j = A^T M_j A (2x2, clipped at the border)
// with B^T = [1 0 -1 0; 0 1 1 0; 0 -1 1 0; 0 1 0 -1], G = [1 0 0; .5 .5 .5;
// .5 -.5 .5; 0 0 1], A^T = [1 1 1 0; 0 1 -1 -1]. U = G g G^T is computed once
// per call for every (k, c), packed for the GEMMs, and shared by the
// threads. The transforms of a tile row and the GEMMs' register tiles are
// the kernel set's
// (winograd_micro.h, conv_micro.h: compiled per instruction set); this
// file holds the loops around them. Each channel plane of a batch is
// copied once into zero-padded rows; output rows and output-gradient rows
// are written and read in place where they are whole tile rows.
#include "ops/cpu/conv_winograd.h"

#include <algorithm>
#include <vector>

#include "engine/error.h"
#include "engine/parallel.h"
#include "ops/cpu/conv_grid.h"
#include "ops/cpu/f16_util.h"
#include "ops/cpu/gemm_isa.h"

namespace ember::cpu {
namespace {

constexpr int64_t kTilesPerBatch = 192;
// Values the transforms may read past a buffer's last row (gemm_isa.h), and
// the window tiles past V's last row.
constexpr int64_t kSlack = 64;
// Values the transforms write past a row of V or Z (whole vectors: at most
// 7) and past an output row pair (at most 15): the rows of V and Z are this
// much longer than their tiles, and output rows are written in place only
// where as many values of the plane follow them (written later).
constexpr int64_t kRowSlack = 16;

// local_buffer slots (f16_util.h), distinct from conv.cpp's and gemm_f16.cpp's.
constexpr int kFilterSums = 30, kInputV = 31, kProductM = 32, kRowBuf = 33, kOutRows = 34, kFilterPanels = 35;

// U[xi][k][c] = (G w[k][c] G^T)[xi], written straight into MR-row panels
// for the window tiles: xi's block of KP = ceil(K / MR) * MR rows holds
// (k, c) at (k / MR) * C * MR + c * MR + k % MR; rows k >= K are zeros.
//   w: [K, C, 3, 3]   Upack: [16, KP / MR, C, MR]
template <typename T, typename S>
void transform_filter_packed(const Conv2dGeometry& g, const S* w, int MR, T* Upack) {
  const int64_t KP = conv_grid::ceil_div(g.K, int64_t(MR)) * MR, plane = KP * g.C;
  parallel_for(0, g.K * g.C, 256, [&](int64_t b, int64_t e) {
    for (int64_t kc = b; kc < e; ++kc) {
      const int64_t k = kc / g.C, c = kc % g.C;
      T f[3][3], t[4][3];
      for (int r = 0; r < 3; ++r)
        for (int s = 0; s < 3; ++s) f[r][s] = convert_value<T>(w[kc * 9 + r * 3 + s]);
      for (int s = 0; s < 3; ++s) {  // t = G f
        t[0][s] = f[0][s];
        t[1][s] = T(0.5) * (f[0][s] + f[1][s] + f[2][s]);
        t[2][s] = T(0.5) * (f[0][s] - f[1][s] + f[2][s]);
        t[3][s] = f[2][s];
      }
      T* u = Upack + (k / MR) * g.C * MR + c * MR + k % MR;
      for (int i = 0; i < 4; ++i) {  // U = t G^T
        u[(i * 4 + 0) * plane] = t[i][0];
        u[(i * 4 + 1) * plane] = T(0.5) * (t[i][0] + t[i][1] + t[i][2]);
        u[(i * 4 + 2) * plane] = T(0.5) * (t[i][0] - t[i][1] + t[i][2]);
        u[(i * 4 + 3) * plane] = t[i][2];
      }
    }
  });
  for (int xi = 0; xi < 16; ++xi)  // the last panel's rows past K
    for (int64_t k = g.K; k < KP; ++k)
      for (int64_t c = 0; c < g.C; ++c) Upack[xi * plane + (k / MR) * g.C * MR + c * MR + k % MR] = T(0);
}

struct Tiling {
  int64_t th, tw;  // tile rows and columns per image: ceil(P / 2), ceil(Q / 2)
  int64_t wb;      // width of a padded input row buffer: 2 * tw + 2
};
inline Tiling tiling_of(const Conv2dGeometry& g) {
  const int64_t tw = (g.Q + 1) / 2;
  return Tiling{(g.P + 1) / 2, tw, 2 * tw + 2};
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

// Rows [2 ti0, 2 ti1 + 2) of the zero-padded plane of one channel, the
// input of tile rows [ti0, ti1), as T, in one pass:
//   buf: [2 (ti1 - ti0) + 2, wb], element (i, u) = xc[2 ti0 + i - pad_h, u - pad_w] (0 outside)
template <typename T, typename S>
void load_padded_rows(const Conv2dGeometry& g, const Tiling& tl, const S* xc, int64_t ti0, int64_t ti1, T* buf) {
  const int64_t rows = 2 * (ti1 - ti0) + 2, h0 = 2 * ti0 - g.pad_h;
  const int64_t first = std::clamp<int64_t>(-h0, 0, rows), last = std::clamp<int64_t>(g.H - h0, first, rows);
  const int64_t n = std::min(g.W, tl.wb - g.pad_w);  // columns past the tiles are not needed
  std::fill(buf, buf + first * tl.wb, T(0));
  std::fill(buf + last * tl.wb, buf + rows * tl.wb, T(0));
  if constexpr (std::is_same_v<S, T>) {
    gemm_kernels<T>().copy_rows(xc + (h0 + first) * g.W, g.W, n, buf + first * tl.wb, g.pad_w, tl.wb, last - first, 1, 0);
  } else {
    for (int64_t i = first; i < last; ++i) {
      T* row = buf + i * tl.wb;
      std::fill(row, row + tl.wb, T(0));
      copy_values(xc + (h0 + i) * g.W, row + g.pad_w, n);
    }
  }
}

// Calls f(n, ti0, ti1, j0) for the runs of tile rows [b0, b1) (image *
// th + ti) that lie in one image: tile rows [ti0, ti1) of image n, whose
// first tile is column j0 of the batch.
template <typename F>
void for_each_image_run(const Tiling& tl, int64_t b0, int64_t b1, F&& f) {
  for (int64_t r = b0; r < b1;) {
    const int64_t n = r / tl.th, ti0 = r % tl.th, ti1 = std::min(tl.th, ti0 + (b1 - r));
    f(n, ti0, ti1, (r - b0) * tl.tw);
    r += ti1 - ti0;
  }
}

// V for the tiles of tile rows [b0, b1) of every channel, rows of ldv
// values (>= (b1 - b0) * tw + kRowSlack).
//   x: [N, C, H, W]   buf: padded rows (load_padded_rows)   V: [16, C, ldv]
template <typename T, typename S>
void transform_input_batch(const Conv2dGeometry& g, const Tiling& tl, const S* x, int64_t b0, int64_t b1, T* buf,
                           T* V, int64_t ldv) {
  const int64_t CHW = g.C * g.H * g.W;
  const auto input_row = gemm_kernels<T>().winograd_input_row;
  for_each_image_run(tl, b0, b1, [&](int64_t n, int64_t ti0, int64_t ti1, int64_t j0) {
    for (int64_t c = 0; c < g.C; ++c) {
      load_padded_rows(g, tl, x + n * CHW + c * g.H * g.W, ti0, ti1, buf);
      for (int64_t ti = ti0; ti < ti1; ++ti)
        input_row(buf + 2 * (ti - ti0) * tl.wb, tl.wb, tl.tw, V + c * ldv + j0 + (ti - ti0) * tl.tw, g.C * ldv);
    }
  });
}

// Tile rows per batch: about kTilesPerBatch tiles, rounded to whole images
// when an image has about that many or fewer (so each channel plane is
// loaded once).
inline int64_t tile_rows_per_batch(const Tiling& tl) {
  int64_t rows = std::max<int64_t>(1, kTilesPerBatch / tl.tw);
  if (4 * rows >= 3 * tl.th) rows = std::max(tl.th, (rows + tl.th / 2) / tl.th * tl.th);
  return rows;
}

// The padded rows load_padded_rows writes for a batch of `rows` tile rows,
// and the slack winograd_input_row reads past them.
inline int64_t padded_rows_size(const Tiling& tl, int64_t rows) {
  return (2 * std::min(rows, tl.th) + 2) * tl.wb + kSlack;
}

// The images [n0, n1) of x into y, tile row batch by tile row batch. The
// 16 GEMMs run on the window tiles (conv_micro.h), reading V's rows in
// place: Upack is U packed in MR-row panels, one block of KP rows per xi.
template <typename T, typename S>
void winograd_images(const Conv2dGeometry& g, const Tiling& tl, const T* Upack, const S* x, S* y, int64_t n0,
                     int64_t n1) {
  const GemmKernels<T>& kern = gemm_kernels<T>();
  const int64_t rows_per_batch = tile_rows_per_batch(tl);
  const int64_t max_nt = rows_per_batch * tl.tw;
  T* V = local_buffer<T, kInputV>(16 * g.C * (max_nt + kRowSlack) + kSlack);
  T* M = local_buffer<T, kProductM>(16 * g.K * max_nt + kSlack);
  T* buf = local_buffer<T, kRowBuf>(padded_rows_size(tl, rows_per_batch));
  T* out = local_buffer<T, kOutRows>(4 * tl.tw + kRowSlack);
  std::vector<int64_t> offsets(static_cast<size_t>(g.C));
  const int64_t KPQ = g.K * g.P * g.Q, KP = conv_grid::ceil_div(g.K, int64_t(kern.mr)) * kern.mr;
  // Rows of y written in place: whole tile rows of 2 * tw columns, with
  // kRowSlack values of the plane after them.
  const bool in_place = std::is_same_v<S, T> && g.Q == 2 * tl.tw;
  const int64_t first = n0 * tl.th, last = n1 * tl.th;  // tile rows (image * th + ti) of this share
  for (int64_t b0 = first; b0 < last; b0 += rows_per_batch) {
    const int64_t b1 = std::min(last, b0 + rows_per_batch), nt = (b1 - b0) * tl.tw, ldv = nt + kRowSlack;
    transform_input_batch(g, tl, x, b0, b1, buf, V, ldv);
    // Each MR-row panel of U[xi] (in L1) against every column tile of
    // V[xi] (in L2): U, 16 K C values, is read once a batch.
    for (int64_t c = 0; c < g.C; ++c) offsets[size_t(c)] = c * ldv;
    for (int xi = 0; xi < 16; ++xi)
      for (int64_t i = 0; i < g.K; i += kern.mr)
        for (int64_t j = 0; j < nt; j += kern.nr)
          kern.window_tile(g.C, Upack + (xi * KP + i) * g.C, V + xi * g.C * ldv + j, offsets.data(),
                           M + (xi * g.K + i) * nt + j, nt, T(0), int(std::min<int64_t>(kern.mr, g.K - i)),
                           int(std::min<int64_t>(kern.nr, nt - j)));
    for_each_image_run(tl, b0, b1, [&](int64_t n, int64_t ti0, int64_t ti1, int64_t j0) {
      for (int64_t k = 0; k < g.K; ++k) {
        S* yk = y + n * KPQ + k * g.P * g.Q;
        for (int64_t ti = ti0; ti < ti1; ++ti) {
          const int64_t j = j0 + (ti - ti0) * tl.tw;
          const T* m = M + k * nt + j;
          if (in_place && (g.P - 2 * ti - 2) * g.Q >= kRowSlack) {
            kern.winograd_output_row(m, g.K * nt, tl.tw, reinterpret_cast<T*>(yk + 2 * ti * g.Q));
            continue;
          }
          kern.winograd_output_row(m, g.K * nt, tl.tw, out);
          for (int64_t i = 0; i < 2 && 2 * ti + i < g.P; ++i)
            copy_values(out + i * 2 * tl.tw, yk + (2 * ti + i) * g.Q, g.Q);
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
// sums, the others add).   sums: [16, Cp, ldc] (FilterProducts)
template <typename T, typename S>
void winograd_filter_images(const Conv2dGeometry& g, const Tiling& tl, const FilterProducts& fp, const S* x,
                            const S* gy, T* sums, int64_t n0, int64_t n1) {
  const GemmKernels<T>& kern = gemm_kernels<T>();
  const int MR = kern.mr, NR = kern.nr;
  const auto tile = kern.window_tile_t[fp.g_index];
  const int64_t rows_per_batch = tile_rows_per_batch(tl);
  const int64_t max_nt = rows_per_batch * tl.tw, max_ntz = conv_grid::round_up(max_nt, fp.G);
  T* V = local_buffer<T, kInputV>(16 * g.C * (max_nt + kRowSlack) + kSlack);
  T* Z = local_buffer<T, kProductM>(16 * g.K * (max_ntz + kRowSlack) + kSlack);
  T* bp = local_buffer<T, kFilterPanels>(fp.panels * (max_ntz / fp.G) * NR);
  T* buf = local_buffer<T, kRowBuf>(padded_rows_size(tl, rows_per_batch));
  T* grad_rows = local_buffer<T, kOutRows>(4 * tl.tw);
  std::vector<int64_t> offsets(static_cast<size_t>(fp.Cp));
  const int64_t KPQ = g.K * g.P * g.Q;
  // Rows of gy read in place: whole tile rows of 2 * tw columns.
  const bool in_place = std::is_same_v<S, T> && g.Q == 2 * tl.tw;
  const int64_t first = n0 * tl.th, last = n1 * tl.th;
  for (int64_t b0 = first; b0 < last; b0 += rows_per_batch) {
    const int64_t b1 = std::min(last, b0 + rows_per_batch), nt = (b1 - b0) * tl.tw, ldv = nt + kRowSlack;
    // Z's rows: whole lane groups (ntz tiles, zeros past nt), ldz values apart
    const int64_t ntz = conv_grid::round_up(nt, fp.G), groups = ntz / fp.G, ldz = ntz + kRowSlack;
    transform_input_batch(g, tl, x, b0, b1, buf, V, ldv);
    for_each_image_run(tl, b0, b1, [&](int64_t n, int64_t ti0, int64_t ti1, int64_t j0) {
      for (int64_t k = 0; k < g.K; ++k) {
        const S* gyk = gy + n * KPQ + k * g.P * g.Q;
        for (int64_t ti = ti0; ti < ti1; ++ti) {
          T* z = Z + k * ldz + j0 + (ti - ti0) * tl.tw;
          if (in_place && 2 * ti + 1 < g.P) {
            const T* g0 = reinterpret_cast<const T*>(gyk + 2 * ti * g.Q);
            kern.winograd_grad_row(g0, g0 + g.Q, tl.tw, z, g.K * ldz);
            continue;
          }
          for (int64_t i = 0; i < 2; ++i) {
            T* row = grad_rows + i * 2 * tl.tw;
            std::fill(row, row + 2 * tl.tw, T(0));
            if (2 * ti + i < g.P) copy_values(gyk + (2 * ti + i) * g.Q, row, g.Q);
          }
          kern.winograd_grad_row(grad_rows, grad_rows + 2 * tl.tw, tl.tw, z, g.K * ldz);
        }
      }
    });
    if (ntz > nt)  // the last lane group's missing tiles: zeros
      for (int64_t row = 0; row < 16 * g.K; ++row) std::fill(Z + row * ldz + nt, Z + row * ldz + ntz, T(0));
    for (int64_t c = 0; c < fp.Cp; ++c) offsets[size_t(c)] = std::min(c, g.C - 1) * ldv;  // (rows past C repeat)
    for (int xi = 0; xi < 16; ++xi) {
      for (int64_t pn = 0; pn < fp.panels; ++pn) {
        const int64_t k0 = pn * fp.per_panel;
        kern.pack_transposed(Z + (xi * g.K + k0) * ldz, ldz, int(std::min(fp.per_panel, g.K - k0)), groups, fp.G,
                             bp + pn * groups * NR, NR);
      }
      T* sum = sums + xi * fp.Cp * fp.ldc;
      for (int64_t c0 = 0; c0 < g.C; c0 += MR)
        for (int64_t pn = 0; pn < fp.panels; ++pn)
          tile(nt, V + xi * g.C * ldv, offsets.data() + c0, bp + pn * groups * NR, sum + c0 * fp.ldc + pn * NR, fp.ldc,
               b0 != first);
    }
  }
}

}  // namespace

template <typename S>
void conv_forward_winograd(const Conv2dGeometry& g, const S* x, const S* w, S* y) {
  using T = compute_t<S>;
  EMBER_CHECK(winograd_applies(g), "conv2d: Winograd F(2x2, 3x3) needs a 3x3 filter, stride 1 and padding <= 2");
  const Tiling tl = tiling_of(g);
  const int MR = gemm_kernels<T>().mr;
  T* Upack = local_buffer<T, kFilterPanels>(16 * conv_grid::ceil_div(g.K, int64_t(MR)) * MR * g.C);
  transform_filter_packed(g, w, MR, Upack);
  const ImageShares shares(g.N);
  for_each_share(shares.threads,
                 [&](int t) { winograd_images(g, tl, Upack, x, y, shares.begin(t), shares.end(t)); });
}

template <typename S>
void conv_backward_filter_winograd(const Conv2dGeometry& g, const S* x, const S* gy, S* gw) {
  using T = compute_t<S>;
  EMBER_CHECK(winograd_applies(g), "conv2d: Winograd F(2x2, 3x3) needs a 3x3 filter, stride 1 and padding <= 2");
  const Tiling tl = tiling_of(g);
  const FilterProducts fp = filter_products(g, gemm_kernels<T>());
  const int64_t size = 16 * fp.Cp * fp.ldc;
  // partial[t]: thread t's sums over its share of the images.
  const ImageShares shares(g.N);
  const int threads = shares.threads;
  std::vector<T*> partial(static_cast<size_t>(threads));
  auto share = [&](int t) {
    T* sums = partial[size_t(t)] = local_buffer<T, kFilterSums>(size);
    if (shares.begin(t) >= shares.end(t)) std::fill(sums, sums + size, T(0));  // no images
    winograd_filter_images(g, tl, fp, x, gy, sums, shares.begin(t), shares.end(t));
  };
  for_each_share(threads, share);
  // gw[k][c] = G^T m G, m[xi] = the sum over threads (in order) and over
  // the lane group of output channel k of row c of sums[xi]: per input
  // channel c, the rows c of the 16 sums, read along their lanes.
  const int NR = gemm_kernels<T>().nr;
  parallel_for(0, g.C, 4, [&](int64_t c0, int64_t c1) {
    std::vector<T> m(static_cast<size_t>(g.K * 16));  // m[k][xi]
    for (int64_t c = c0; c < c1; ++c) {
      std::fill(m.begin(), m.end(), T(0));
      for (int t = 0; t < threads; ++t)
        for (int xi = 0; xi < 16; ++xi) {
          const T* row = partial[size_t(t)] + (xi * fp.Cp + c) * fp.ldc;
          for (int64_t k = 0; k < g.K; ++k) {
            const T* lanes = row + (k / fp.per_panel) * NR + (k % fp.per_panel) * fp.G;
            for (int e = 0; e < fp.G; ++e) m[size_t(k * 16 + xi)] += lanes[e];
          }
        }
      for (int64_t k = 0; k < g.K; ++k) {
        const T* mk = m.data() + k * 16;
        T u[3][4];  // u = G^T m
        for (int j = 0; j < 4; ++j) {
          u[0][j] = mk[j] + T(0.5) * (mk[4 + j] + mk[8 + j]);
          u[1][j] = T(0.5) * (mk[4 + j] - mk[8 + j]);
          u[2][j] = T(0.5) * (mk[4 + j] + mk[8 + j]) + mk[12 + j];
        }
        S* gkc = gw + (k * g.C + c) * 9;
        for (int r = 0; r < 3; ++r) {  // (G^T m) G
          gkc[r * 3 + 0] = convert_value<S>(u[r][0] + T(0.5) * (u[r][1] + u[r][2]));
          gkc[r * 3 + 1] = convert_value<S>(T(0.5) * (u[r][1] - u[r][2]));
          gkc[r * 3 + 2] = convert_value<S>(T(0.5) * (u[r][1] + u[r][2]) + u[r][3]);
        }
      }
    }
  });
}

template void conv_forward_winograd<float>(const Conv2dGeometry&, const float*, const float*, float*);
template void conv_forward_winograd<double>(const Conv2dGeometry&, const double*, const double*, double*);
template void conv_forward_winograd<f16>(const Conv2dGeometry&, const f16*, const f16*, f16*);
template void conv_forward_winograd<bf16>(const Conv2dGeometry&, const bf16*, const bf16*, bf16*);
template void conv_backward_filter_winograd<float>(const Conv2dGeometry&, const float*, const float*, float*);
template void conv_backward_filter_winograd<double>(const Conv2dGeometry&, const double*, const double*, double*);
template void conv_backward_filter_winograd<f16>(const Conv2dGeometry&, const f16*, const f16*, f16*);
template void conv_backward_filter_winograd<bf16>(const Conv2dGeometry&, const bf16*, const bf16*, bf16*);

}  // namespace ember::cpu
