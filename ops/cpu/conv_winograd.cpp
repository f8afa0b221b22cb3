// ops/cpu/conv_winograd.cpp — F(2x2, 3x3) convolution (conv_winograd.h).
//
// Work is split like the GEMM paths: each thread takes a contiguous share of
// the images and walks its tile rows (image, ti) in batches of about
// kTilesPerBatch tiles, in three steps per batch:
//   input transform   V[xi][c][j] = (B^T d_j B)[xi]      j: the batch's tiles
//   16 GEMMs          M[xi][k][j] = U[xi][k][:] . V[xi][:][j]
//   output transform  y tile j = A^T M_j A (2x2, clipped at the border)
// with B^T = [1 0 -1 0; 0 1 1 0; 0 -1 1 0; 0 1 0 -1], G = [1 0 0; .5 .5 .5;
// .5 -.5 .5; 0 0 1], A^T = [1 1 1 0; 0 1 -1 -1]. U = G g G^T is computed once
// per call for every (k, c) and shared by the threads.
#include "ops/cpu/conv_winograd.h"

#include <algorithm>
#include <vector>

#include "engine/error.h"
#include "engine/parallel.h"
#include "ops/cpu/f16_util.h"
#include "ops/cpu/gemm.h"

namespace ember::cpu {
namespace {

constexpr int64_t kTilesPerBatch = 192;

// local_buffer slots (f16_util.h), distinct from conv.cpp's and gemm_f16.cpp's.
constexpr int kFilterU = 30, kInputV = 31, kProductM = 32, kRowBuf = 33, kOutRows = 34;

// U[xi][k][c] = (G w[k][c] G^T)[xi].   w: [K, C, 3, 3]   U: [16, K, C]
template <typename T, typename S>
void transform_filter(const Conv2dGeometry& g, const S* w, T* U) {
  const int64_t KC = g.K * g.C;
  parallel_for(0, KC, 256, [&](int64_t b, int64_t e) {
    for (int64_t kc = b; kc < e; ++kc) {
      T f[3][3], t[4][3];
      for (int r = 0; r < 3; ++r)
        for (int s = 0; s < 3; ++s) f[r][s] = convert_value<T>(w[kc * 9 + r * 3 + s]);
      for (int s = 0; s < 3; ++s) {  // t = G f
        t[0][s] = f[0][s];
        t[1][s] = T(0.5) * (f[0][s] + f[1][s] + f[2][s]);
        t[2][s] = T(0.5) * (f[0][s] - f[1][s] + f[2][s]);
        t[3][s] = f[2][s];
      }
      for (int i = 0; i < 4; ++i) {  // U = t G^T
        U[(i * 4 + 0) * KC + kc] = t[i][0];
        U[(i * 4 + 1) * KC + kc] = T(0.5) * (t[i][0] + t[i][1] + t[i][2]);
        U[(i * 4 + 2) * KC + kc] = T(0.5) * (t[i][0] - t[i][1] + t[i][2]);
        U[(i * 4 + 3) * KC + kc] = t[i][2];
      }
    }
  });
}

struct Tiling {
  int64_t th, tw;  // tile rows and columns per image: ceil(P / 2), ceil(Q / 2)
  int64_t wb;      // width of a padded input row buffer: 2 * tw + 2
};

// The 4 input rows of tile row ti of channel c of image x, zero padded, as T:
//   rows: [4, wb], element (r, u) = x[c, 2 ti - pad_h + r, u - pad_w] (0 outside)
template <typename T, typename S>
void load_tile_rows(const Conv2dGeometry& g, const Tiling& tl, const S* xc, int64_t ti, T* rows) {
  for (int r = 0; r < 4; ++r) {
    T* row = rows + r * tl.wb;
    const int64_t h = 2 * ti - g.pad_h + r;
    std::fill(row, row + tl.wb, T(0));
    if (h < 0 || h >= g.H) continue;
    const int64_t u0 = g.pad_w, n = std::min(g.W, tl.wb - u0);  // columns past the tiles are not needed
    copy_values(xc + h * g.W, row + u0, n);
  }
}

// V[xi][c][j0 + tj] for the tw tiles of one tile row, from its 4 input rows.
//   V: [16, C, nt] (ldv = nt)
template <typename T>
void transform_input_row(const Tiling& tl, const T* rows, int64_t c, int64_t C, int64_t nt, int64_t j0, T* V) {
  const T* r0 = rows;
  const T* r1 = rows + tl.wb;
  const T* r2 = rows + 2 * tl.wb;
  const T* r3 = rows + 3 * tl.wb;
  const int64_t plane = C * nt;
  T* v = V + c * nt + j0;
#pragma omp simd
  for (int64_t tj = 0; tj < tl.tw; ++tj) {
    const int64_t u = 2 * tj;
    T t[4][4];  // t = B^T d (rows)
    for (int s = 0; s < 4; ++s) {
      t[0][s] = r0[u + s] - r2[u + s];
      t[1][s] = r1[u + s] + r2[u + s];
      t[2][s] = r2[u + s] - r1[u + s];
      t[3][s] = r1[u + s] - r3[u + s];
    }
    for (int i = 0; i < 4; ++i) {  // (B^T d) B (columns)
      v[(i * 4 + 0) * plane + tj] = t[i][0] - t[i][2];
      v[(i * 4 + 1) * plane + tj] = t[i][1] + t[i][2];
      v[(i * 4 + 2) * plane + tj] = t[i][2] - t[i][1];
      v[(i * 4 + 3) * plane + tj] = t[i][1] - t[i][3];
    }
  }
}

// V for the tiles of tile rows [b0, b1) (image * th + ti) of every channel.
//   x: [N, C, H, W]   rows: [4, wb] scratch   V: [16, C, (b1 - b0) * tw]
template <typename T, typename S>
void transform_input_batch(const Conv2dGeometry& g, const Tiling& tl, const S* x, int64_t b0, int64_t b1, T* rows,
                           T* V) {
  const int64_t CHW = g.C * g.H * g.W, nt = (b1 - b0) * tl.tw;
  for (int64_t c = 0; c < g.C; ++c)
    for (int64_t r = b0; r < b1; ++r) {
      const int64_t n = r / tl.th, ti = r % tl.th;
      load_tile_rows(g, tl, x + n * CHW + c * g.H * g.W, ti, rows);
      transform_input_row(tl, rows, c, g.C, nt, (r - b0) * tl.tw, V);
    }
}

// Output rows 2 ti and 2 ti + 1 of channel k from the tw tiles' products.
//   M: [16, K, nt]   out: [2, 2 * tw] (then clipped to Q columns and P rows)
template <typename T>
void transform_output_row(const Tiling& tl, const T* M, int64_t k, int64_t K, int64_t nt, int64_t j0, T* out) {
  const int64_t plane = K * nt;
  const T* m = M + k * nt + j0;
  T* o0 = out;
  T* o1 = out + 2 * tl.tw;
#pragma omp simd
  for (int64_t tj = 0; tj < tl.tw; ++tj) {
    T x[4][4];
    for (int xi = 0; xi < 16; ++xi) x[xi / 4][xi % 4] = m[xi * plane + tj];
    T t[2][4];  // t = A^T x
    for (int s = 0; s < 4; ++s) {
      t[0][s] = x[0][s] + x[1][s] + x[2][s];
      t[1][s] = x[1][s] - x[2][s] - x[3][s];
    }
    o0[2 * tj] = t[0][0] + t[0][1] + t[0][2];  // (A^T x) A
    o0[2 * tj + 1] = t[0][1] - t[0][2] - t[0][3];
    o1[2 * tj] = t[1][0] + t[1][1] + t[1][2];
    o1[2 * tj + 1] = t[1][1] - t[1][2] - t[1][3];
  }
}

// The images [n0, n1) of x into y, tile row batch by tile row batch.
template <typename T, typename S>
void winograd_images(const Conv2dGeometry& g, const Tiling& tl, const T* U, const S* x, S* y, int64_t n0, int64_t n1) {
  const int64_t rows_per_batch = std::max<int64_t>(1, kTilesPerBatch / tl.tw);
  const int64_t max_nt = rows_per_batch * tl.tw;
  T* V = local_buffer<T, kInputV>(16 * g.C * max_nt);
  T* M = local_buffer<T, kProductM>(16 * g.K * max_nt);
  T* rows = local_buffer<T, kRowBuf>(4 * tl.wb);
  T* out = local_buffer<T, kOutRows>(4 * tl.tw);
  const int64_t KPQ = g.K * g.P * g.Q;
  const int64_t first = n0 * tl.th, last = n1 * tl.th;  // tile rows (image * th + ti) of this share
  for (int64_t b0 = first; b0 < last; b0 += rows_per_batch) {
    const int64_t b1 = std::min(last, b0 + rows_per_batch), nt = (b1 - b0) * tl.tw;
    transform_input_batch(g, tl, x, b0, b1, rows, V);
    for (int xi = 0; xi < 16; ++xi)
      gemm_serial<T>(false, false, g.K, nt, g.C, T(1), U + xi * g.K * g.C, g.C, V + xi * g.C * nt, nt, T(0),
                     M + xi * g.K * nt, nt);
    for (int64_t k = 0; k < g.K; ++k)
      for (int64_t r = b0; r < b1; ++r) {
        const int64_t n = r / tl.th, ti = r % tl.th;
        transform_output_row(tl, M, k, g.K, nt, (r - b0) * tl.tw, out);
        S* yk = y + n * KPQ + k * g.P * g.Q;
        for (int64_t i = 0; i < 2 && 2 * ti + i < g.P; ++i)
          copy_values(out + i * 2 * tl.tw, yk + (2 * ti + i) * g.Q, g.Q);
      }
  }
}

// ------------------------------------------------------ filter gradient

// Z[xi][k][j0 + tj] = (A gy_tile A^T)[xi] for the tw tiles of one tile row
// of channel k, from its 2 output-gradient rows (zero past the output).
//   rows: [2, 2 * tw]   Z: [16, K, nt]
template <typename T>
void transform_grad_row(const Tiling& tl, const T* rows, int64_t k, int64_t K, int64_t nt, int64_t j0, T* Z) {
  const T* g0 = rows;
  const T* g1 = rows + 2 * tl.tw;
  const int64_t plane = K * nt;
  T* z = Z + k * nt + j0;
#pragma omp simd
  for (int64_t tj = 0; tj < tl.tw; ++tj) {
    const T a = g0[2 * tj], b = g0[2 * tj + 1], c = g1[2 * tj], d = g1[2 * tj + 1];
    const T t[4][2] = {{a, b}, {a + c, b + d}, {a - c, b - d}, {-c, -d}};  // t = A gy (rows)
    for (int i = 0; i < 4; ++i) {                                           // (A gy) A^T (columns)
      z[(i * 4 + 0) * plane + tj] = t[i][0];
      z[(i * 4 + 1) * plane + tj] = t[i][0] + t[i][1];
      z[(i * 4 + 2) * plane + tj] = t[i][0] - t[i][1];
      z[(i * 4 + 3) * plane + tj] = -t[i][1];
    }
  }
}

// dU[xi] += Z[xi] V[xi]^T over the tiles of images [n0, n1), tile row batch
// by tile row batch.   dU: [16, K, C]
template <typename T, typename S>
void winograd_filter_images(const Conv2dGeometry& g, const Tiling& tl, const S* x, const S* gy, T* dU, int64_t n0,
                            int64_t n1) {
  const int64_t rows_per_batch = std::max<int64_t>(1, kTilesPerBatch / tl.tw);
  const int64_t max_nt = rows_per_batch * tl.tw;
  T* V = local_buffer<T, kInputV>(16 * g.C * max_nt);
  T* Z = local_buffer<T, kProductM>(16 * g.K * max_nt);
  T* rows = local_buffer<T, kRowBuf>(4 * tl.wb);
  T* grad_rows = local_buffer<T, kOutRows>(4 * tl.tw);
  const int64_t KPQ = g.K * g.P * g.Q;
  const int64_t first = n0 * tl.th, last = n1 * tl.th;
  for (int64_t b0 = first; b0 < last; b0 += rows_per_batch) {
    const int64_t b1 = std::min(last, b0 + rows_per_batch), nt = (b1 - b0) * tl.tw;
    transform_input_batch(g, tl, x, b0, b1, rows, V);
    for (int64_t k = 0; k < g.K; ++k)
      for (int64_t r = b0; r < b1; ++r) {
        const int64_t n = r / tl.th, ti = r % tl.th;
        const S* gyk = gy + n * KPQ + k * g.P * g.Q;
        for (int64_t i = 0; i < 2; ++i) {
          T* row = grad_rows + i * 2 * tl.tw;
          std::fill(row, row + 2 * tl.tw, T(0));
          if (2 * ti + i < g.P) copy_values(gyk + (2 * ti + i) * g.Q, row, g.Q);
        }
        transform_grad_row(tl, grad_rows, k, g.K, nt, (r - b0) * tl.tw, Z);
      }
    for (int xi = 0; xi < 16; ++xi)
      gemm_serial<T>(false, true, g.K, g.C, nt, T(1), Z + xi * g.K * nt, nt, V + xi * g.C * nt, nt, T(1),
                     dU + xi * g.K * g.C, g.C);
  }
}

}  // namespace

template <typename S>
void conv_forward_winograd(const Conv2dGeometry& g, const S* x, const S* w, S* y) {
  using T = compute_t<S>;
  EMBER_CHECK(winograd_applies(g), "conv2d: Winograd F(2x2, 3x3) needs a 3x3 filter, stride 1 and padding <= 2");
  const Tiling tl{(g.P + 1) / 2, (g.Q + 1) / 2, 2 * ((g.Q + 1) / 2) + 2};
  T* U = local_buffer<T, kFilterU>(16 * g.K * g.C);
  transform_filter(g, w, U);
  const int threads = std::max(1, std::min<int>(num_threads(), int(g.N)));
  const int64_t per = (g.N + threads - 1) / threads;
  auto share = [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t)
      winograd_images(g, tl, U, x, y, std::min(g.N, t * per), std::min(g.N, (t + 1) * per));
  };
  if (threads == 1)
    share(0, 1);
  else
    parallel_for(0, threads, 1, share);
}

template <typename S>
void conv_backward_filter_winograd(const Conv2dGeometry& g, const S* x, const S* gy, S* gw) {
  using T = compute_t<S>;
  EMBER_CHECK(winograd_applies(g), "conv2d: Winograd F(2x2, 3x3) needs a 3x3 filter, stride 1 and padding <= 2");
  const Tiling tl{(g.P + 1) / 2, (g.Q + 1) / 2, 2 * ((g.Q + 1) / 2) + 2};
  const int64_t KC = g.K * g.C;
  // partial[t]: thread t's dU over its contiguous share of the images.
  const int threads = std::max(1, std::min<int>(num_threads(), int(g.N)));
  const int64_t per = (g.N + threads - 1) / threads;
  std::vector<T*> partial(static_cast<size_t>(threads));
  auto share = [&](int t) {
    T* dU = partial[size_t(t)] = local_buffer<T, kFilterU>(16 * KC);
    std::fill(dU, dU + 16 * KC, T(0));
    winograd_filter_images(g, tl, x, gy, dU, std::min(g.N, t * per), std::min(g.N, (t + 1) * per));
  };
  for_each_share(threads, share);
  // gw[k][c] = G^T (sum over threads, in order, of dU[.][k][c]) G.
  parallel_for(0, KC, 256, [&](int64_t b, int64_t e) {
    for (int64_t kc = b; kc < e; ++kc) {
      T m[4][4];
      for (int xi = 0; xi < 16; ++xi) {
        T sum = T(0);
        for (int t = 0; t < threads; ++t) sum += partial[size_t(t)][xi * KC + kc];
        m[xi / 4][xi % 4] = sum;
      }
      T u[3][4];  // u = G^T m
      for (int j = 0; j < 4; ++j) {
        u[0][j] = m[0][j] + T(0.5) * (m[1][j] + m[2][j]);
        u[1][j] = T(0.5) * (m[1][j] - m[2][j]);
        u[2][j] = T(0.5) * (m[1][j] + m[2][j]) + m[3][j];
      }
      for (int r = 0; r < 3; ++r) {  // (G^T m) G
        gw[kc * 9 + r * 3 + 0] = convert_value<S>(u[r][0] + T(0.5) * (u[r][1] + u[r][2]));
        gw[kc * 9 + r * 3 + 1] = convert_value<S>(T(0.5) * (u[r][1] - u[r][2]));
        gw[kc * 9 + r * 3 + 2] = convert_value<S>(T(0.5) * (u[r][1] + u[r][2]) + u[r][3]);
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
