// ops/cpu/conv.cpp — im2col/col2im and the three convolution kernels on the CPU.
//
// Convolution is lowered to GEMM one image at a time (Caffe's scheme):
//   forward          y[n]  [K, PQ]   = w [K, CRS] * col(x[n]) [CRS, PQ]
//   backward data    gx[n] [C, H, W] = col2im( w^T [CRS, K] * gy[n] [K, PQ] )
//   backward filter  gw    [K, CRS] += gy[n] [K, PQ] * col(x[n])^T [PQ, CRS]
// Images are spread over the OpenMP threads, each with its own column
// buffer (and its own gw partial, summed in a fixed order so results do not
// depend on scheduling). A 1x1, stride-1, unpadded convolution skips
// im2col: the image itself is the column matrix.
#include <algorithm>
#include <cstring>
#include <vector>

#include "engine/parallel.h"
#include "ops/cpu/cpu_kernels.h"
#include "ops/cpu/gemm.h"

#if defined(_OPENMP)
#include <omp.h>
#endif

namespace ember::cpu {
namespace {

bool is_pointwise(const Conv2dGeometry& g) {
  return g.R == 1 && g.S == 1 && g.stride_h == 1 && g.stride_w == 1 && g.pad_h == 0 && g.pad_w == 0;
}

// Output columns q whose input column q*sw - pw + s lies inside [0, W): [lo, hi).
inline void valid_q_range(const Conv2dGeometry& g, int64_t s, int64_t& lo, int64_t& hi) {
  // q*sw - pw + s >= 0  <=>  q >= ceil((pw - s) / sw)
  const int64_t a = g.pad_w - s;
  lo = a <= 0 ? 0 : (a + g.stride_w - 1) / g.stride_w;
  // q*sw - pw + s <= W - 1  <=>  q <= floor((W - 1 + pw - s) / sw)
  const int64_t b = g.W - 1 + g.pad_w - s;
  hi = b < 0 ? 0 : std::min(g.Q, b / g.stride_w + 1);
  lo = std::min(lo, hi);
}

// x: [C, H, W] -> col: [C*R*S, P*Q]
template <typename T>
void im2col_image(const Conv2dGeometry& g, const T* __restrict x, T* __restrict col) {
  const int64_t PQ = g.P * g.Q;
  for (int64_t c = 0; c < g.C; ++c)
    for (int64_t r = 0; r < g.R; ++r)
      for (int64_t s = 0; s < g.S; ++s) {
        T* row = col + ((c * g.R + r) * g.S + s) * PQ;
        int64_t q_lo, q_hi;
        valid_q_range(g, s, q_lo, q_hi);
        for (int64_t p = 0; p < g.P; ++p) {
          T* out = row + p * g.Q;
          const int64_t h = p * g.stride_h - g.pad_h + r;
          if (h < 0 || h >= g.H) {
            std::memset(out, 0, sizeof(T) * size_t(g.Q));
            continue;
          }
          const T* in = x + (c * g.H + h) * g.W - g.pad_w + s;
          for (int64_t q = 0; q < q_lo; ++q) out[q] = T(0);
          if (g.stride_w == 1)
            std::memcpy(out + q_lo, in + q_lo, sizeof(T) * size_t(q_hi - q_lo));
          else
            for (int64_t q = q_lo; q < q_hi; ++q) out[q] = in[q * g.stride_w];
          for (int64_t q = q_hi; q < g.Q; ++q) out[q] = T(0);
        }
      }
}

// col: [C*R*S, P*Q] -> x: [C, H, W] (sum of every column entry at its position)
template <typename T>
void col2im_image(const Conv2dGeometry& g, const T* __restrict col, T* __restrict x) {
  const int64_t PQ = g.P * g.Q;
  std::memset(x, 0, sizeof(T) * size_t(g.C * g.H * g.W));
  for (int64_t c = 0; c < g.C; ++c)
    for (int64_t r = 0; r < g.R; ++r)
      for (int64_t s = 0; s < g.S; ++s) {
        const T* row = col + ((c * g.R + r) * g.S + s) * PQ;
        int64_t q_lo, q_hi;
        valid_q_range(g, s, q_lo, q_hi);
        for (int64_t p = 0; p < g.P; ++p) {
          const int64_t h = p * g.stride_h - g.pad_h + r;
          if (h < 0 || h >= g.H) continue;
          const T* in = row + p * g.Q;
          T* out = x + (c * g.H + h) * g.W - g.pad_w + s;
          if (g.stride_w == 1)
            for (int64_t q = q_lo; q < q_hi; ++q) out[q] += in[q];
          else
            for (int64_t q = q_lo; q < q_hi; ++q) out[q * g.stride_w] += in[q];
        }
      }
}

// One column buffer per thread, grown on demand.
template <typename T>
T* column_buffer(size_t n) {
  static thread_local std::vector<T> buf;
  if (buf.size() < n) buf.resize(n);
  return buf.data();
}

// Runs image(n, parallel_gemm) for every image: images spread over the
// threads when there are enough of them, else one at a time with the GEMM
// itself parallel.
template <typename F>
void for_each_image(int64_t N, F&& image) {
  if (N >= num_threads()) {
    parallel_for(0, N, 1, [&](int64_t b, int64_t e) {
      for (int64_t n = b; n < e; ++n) image(n, false);
    });
  } else {
    for (int64_t n = 0; n < N; ++n) image(n, true);
  }
}

template <typename T>
void conv_forward(const Conv2dGeometry& g, const T* x, const T* w, T* y) {
  const int64_t CRS = g.col_rows(), PQ = g.col_cols(), CHW = g.C * g.H * g.W;
  for_each_image(g.N, [&](int64_t n, bool parallel_gemm) {
    const T* col = x + n * CHW;
    if (!is_pointwise(g)) {
      T* buf = column_buffer<T>(size_t(CRS * PQ));
      im2col_image(g, x + n * CHW, buf);
      col = buf;
    }
    auto mm = parallel_gemm ? gemm_parallel<T> : gemm_serial<T>;
    mm(false, false, g.K, PQ, CRS, T(1), w, CRS, col, PQ, T(0), y + n * g.K * PQ, PQ);
  });
}

template <typename T>
void conv_backward_data(const Conv2dGeometry& g, const T* gy, const T* w, T* gx) {
  const int64_t CRS = g.col_rows(), PQ = g.col_cols(), CHW = g.C * g.H * g.W;
  for_each_image(g.N, [&](int64_t n, bool parallel_gemm) {
    auto mm = parallel_gemm ? gemm_parallel<T> : gemm_serial<T>;
    if (is_pointwise(g)) {  // gx[n] = w^T gy[n] directly
      mm(true, false, g.C, PQ, g.K, T(1), w, CRS, gy + n * g.K * PQ, PQ, T(0), gx + n * CHW, PQ);
      return;
    }
    T* dcol = column_buffer<T>(size_t(CRS * PQ));
    mm(true, false, CRS, PQ, g.K, T(1), w, CRS, gy + n * g.K * PQ, PQ, T(0), dcol, PQ);
    col2im_image(g, dcol, gx + n * CHW);
  });
}

template <typename T>
void conv_backward_filter(const Conv2dGeometry& g, const T* x, const T* gy, T* gw) {
  const int64_t CRS = g.col_rows(), PQ = g.col_cols(), CHW = g.C * g.H * g.W, KCRS = g.K * CRS;
  const int threads = std::max(1, std::min<int>(num_threads(), int(g.N)));
  // partial[t]: thread t's sum over its contiguous share of the images.
  std::vector<std::vector<T>> partial(static_cast<size_t>(threads));
  auto accumulate = [&](int t, int64_t n0, int64_t n1) {
    std::vector<T>& acc = partial[size_t(t)];
    acc.assign(size_t(KCRS), T(0));
    for (int64_t n = n0; n < n1; ++n) {
      const T* col = x + n * CHW;
      if (!is_pointwise(g)) {
        T* buf = column_buffer<T>(size_t(CRS * PQ));
        im2col_image(g, x + n * CHW, buf);
        col = buf;
      }
      gemm_serial<T>(false, true, g.K, CRS, PQ, T(1), gy + n * g.K * PQ, PQ, col, PQ, T(1), acc.data(), CRS);
    }
  };
  const int64_t per = (g.N + threads - 1) / threads;
#if defined(_OPENMP)
#pragma omp parallel for num_threads(threads) schedule(static, 1)
#endif
  for (int t = 0; t < threads; ++t) accumulate(t, std::min(g.N, t * per), std::min(g.N, (t + 1) * per));
  // Fixed-order reduction of the partials.
  parallel_for(0, KCRS, 4096, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) {
      T s = partial[0][size_t(i)];
      for (int t = 1; t < threads; ++t) s += partial[size_t(t)][size_t(i)];
      gw[i] = s;
    }
  });
}

}  // namespace

void im2col(DType dt, const Conv2dGeometry& g, const void* x, void* col, Stream) {
  dispatch_float(dt, "im2col", [&](auto zero) {
    using T = decltype(zero);
    im2col_image(g, static_cast<const T*>(x), static_cast<T*>(col));
  });
}

void col2im(DType dt, const Conv2dGeometry& g, const void* col, void* x, Stream) {
  dispatch_float(dt, "col2im", [&](auto zero) {
    using T = decltype(zero);
    col2im_image(g, static_cast<const T*>(col), static_cast<T*>(x));
  });
}

void conv2d_forward(DType dt, const Conv2dGeometry& g, const void* x, const void* w, void* y, Stream) {
  dispatch_float(dt, "conv2d_forward", [&](auto zero) {
    using T = decltype(zero);
    conv_forward(g, static_cast<const T*>(x), static_cast<const T*>(w), static_cast<T*>(y));
  });
}

void conv2d_backward_data(DType dt, const Conv2dGeometry& g, const void* gy, const void* w, void* gx, Stream) {
  dispatch_float(dt, "conv2d_backward_data", [&](auto zero) {
    using T = decltype(zero);
    conv_backward_data(g, static_cast<const T*>(gy), static_cast<const T*>(w), static_cast<T*>(gx));
  });
}

void conv2d_backward_filter(DType dt, const Conv2dGeometry& g, const void* x, const void* gy, void* gw, Stream) {
  dispatch_float(dt, "conv2d_backward_filter", [&](auto zero) {
    using T = decltype(zero);
    conv_backward_filter(g, static_cast<const T*>(x), static_cast<const T*>(gy), static_cast<T*>(gw));
  });
}

}  // namespace ember::cpu
