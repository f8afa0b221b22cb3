// ops/cpu/pooling.cpp — max pooling and adaptive average pooling on the CPU,
// forward and backward (ops/pooling.cpp calls them).
//
// Every kernel works on independent [H, W] planes (one per image and
// channel), so threads take whole planes and the backward scatters need no
// atomics. Max pooling records, for each output, the index h*W + w of the
// winner inside its input plane: windows only visit real pixels (padding is
// never selected), the first maximum in row-major scan order wins ties, and
// a NaN wins over numbers (as in PyTorch). f16/bf16 planes are converted to f32
// (thread-local buffers), processed in f32 and rounded once on store.
#include <algorithm>
#include <cmath>
#include <limits>

#include "engine/parallel.h"
#include "ops/cpu/cpu_kernels.h"
#include "ops/cpu/f16_util.h"

namespace ember::cpu {

namespace {
constexpr int64_t kGrain = 1 << 14;  // elements below which a kernel runs on one thread
int64_t grain_for(int64_t per_item) { return std::max<int64_t>(1, kGrain / std::max<int64_t>(1, per_item)); }

// PyTorch's adaptive pooling bin [start, end) of output i of `out` over `in`.
inline int64_t bin_start(int64_t i, int64_t in, int64_t out) { return (i * in) / out; }
inline int64_t bin_end(int64_t i, int64_t in, int64_t out) { return ((i + 1) * in + out - 1) / out; }
}  // namespace

// Whether v replaces best as a window's maximum: larger, or the first NaN
// (NaN wins over numbers; once best is NaN nothing replaces it).
template <typename T>
inline bool replaces(T v, T best) {
  return (v > best) | ((v != v) & (best == best));
}

// One output row p of one plane, outputs [q0, q1) whose windows lie
// inside the plane's columns, rows [h0, h1): each output's window is scanned
// in row-major order (the first maximum, or the first NaN, wins), but the
// loop over outputs is innermost, so that the outputs are independent
// lanes the compiler vectorises (the scan of one window is a chain of
// dependent compares: one output at a time was ~10 cycles an element).
//   xp: [H, W]   yrow, arow: [Q]
template <typename T>
void max_pool_row_interior(const Pool2dGeometry& g, const T* xp, int64_t h0, int64_t h1, int64_t q0, int64_t q1,
                           T* yrow, int32_t* arow) {
  const int64_t W = g.W, sw = g.stride_w, left = -g.pad_w;
  for (int64_t q = q0; q < q1; ++q) {
    const int64_t at = h0 * W + q * sw + left;
    yrow[q] = xp[at];
    arow[q] = int32_t(at);
  }
  for (int64_t h = h0; h < h1; ++h)
    for (int64_t s = h == h0 ? 1 : 0; s < g.S; ++s) {
      const int64_t base = h * W + s + left;
      for (int64_t q = q0; q < q1; ++q) {
        const T v = xp[base + q * sw];
        const bool take = replaces(v, yrow[q]);
        yrow[q] = take ? v : yrow[q];
        arow[q] = take ? int32_t(base + q * sw) : arow[q];
      }
    }
}

// One output (p, q) whose window may be clipped by the plane's edges (or
// hold no real pixel: -inf and -1).
template <typename T>
void max_pool_one(const Pool2dGeometry& g, const T* xp, int64_t h0, int64_t h1, int64_t q, T* yrow, int32_t* arow) {
  const int64_t w0 = std::max<int64_t>(0, q * g.stride_w - g.pad_w);
  const int64_t w1 = std::min(g.W, q * g.stride_w - g.pad_w + g.S);
  T best = -std::numeric_limits<T>::infinity();
  int64_t where = -1;
  for (int64_t h = h0; h < h1; ++h)
    for (int64_t w = w0; w < w1; ++w) {
      const T v = xp[h * g.W + w];
      if (where < 0 || replaces(v, best)) best = v, where = h * g.W + w;
    }
  yrow[q] = best;
  arow[q] = int32_t(where);
}

//   x: [N, C, H, W]   y, argmax (i32): [N, C, P, Q]
void max_pool2d_forward(DType dt, const Pool2dGeometry& g, const void* x, void* y, int32_t* argmax, Stream) {
  if (g.channels_last) return max_pool2d_forward_channels_last(dt, g, x, y, argmax);
  dispatch_storage(dt, "max_pool2d_forward", [&](auto zero) {
    using S = decltype(zero);
    using T = compute_t<S>;
    const S* sx = static_cast<const S*>(x);
    S* sy = static_cast<S*>(y);
    const int64_t H = g.H, W = g.W, P = g.P, Q = g.Q;
    // Outputs [qa, qb) have windows inside columns [0, W).
    const int64_t qa = std::min(Q, (g.pad_w + g.stride_w - 1) / g.stride_w);
    const int64_t last_start = W + g.pad_w - g.S;  // the largest q * stride_w that fits (negative: none)
    const int64_t qb = last_start < 0 ? qa : std::max(qa, std::min(Q, last_start / g.stride_w + 1));
    parallel_for(0, g.N * g.C, grain_for(H * W + P * Q), [&](int64_t lo, int64_t hi) {
      for (int64_t plane = lo; plane < hi; ++plane) {
        const T* xp = load<0>(sx + plane * H * W, H * W);
        T* yp = out_ptr<1>(sy + plane * P * Q, P * Q);
        int32_t* ap = argmax + plane * P * Q;
        for (int64_t p = 0; p < P; ++p) {
          const int64_t h0 = std::max<int64_t>(0, p * g.stride_h - g.pad_h);
          const int64_t h1 = std::min(H, p * g.stride_h - g.pad_h + g.R);
          T* yrow = yp + p * Q;
          int32_t* arow = ap + p * Q;
          if (h0 >= h1) {  // no real row in the window
            for (int64_t q = 0; q < Q; ++q) yrow[q] = -std::numeric_limits<T>::infinity(), arow[q] = -1;
            continue;
          }
          for (int64_t q = 0; q < qa; ++q) max_pool_one(g, xp, h0, h1, q, yrow, arow);
          max_pool_row_interior(g, xp, h0, h1, qa, qb, yrow, arow);
          for (int64_t q = qb; q < Q; ++q) max_pool_one(g, xp, h0, h1, q, yrow, arow);
        }
        store(yp, sy + plane * P * Q, P * Q);
      }
    });
  });
}

// gx = scatter-add of gy to the argmax positions (overwrites gx); x and y
// are not needed here (they are for cuDNN).
//   gy, argmax: [N, C, P, Q]   gx: [N, C, H, W]
void max_pool2d_backward(DType dt, const Pool2dGeometry& g, const void*, const void*, const void* gy,
                         const int32_t* argmax, void* gx, Stream) {
  if (g.channels_last) return max_pool2d_backward_channels_last(dt, g, gy, argmax, gx);
  dispatch_storage(dt, "max_pool2d_backward", [&](auto zero) {
    using S = decltype(zero);
    using T = compute_t<S>;
    const S* sgy = static_cast<const S*>(gy);
    S* sgx = static_cast<S*>(gx);
    const int64_t HW = g.H * g.W, PQ = g.P * g.Q;
    parallel_for(0, g.N * g.C, grain_for(HW + PQ), [&](int64_t lo, int64_t hi) {
      for (int64_t plane = lo; plane < hi; ++plane) {
        T* gxp = out_ptr<0>(sgx + plane * HW, HW);
        const T* gyp = load<1>(sgy + plane * PQ, PQ);
        const int32_t* ap = argmax + plane * PQ;
        std::fill(gxp, gxp + HW, T(0));
        for (int64_t j = 0; j < PQ; ++j)
          if (ap[j] >= 0) gxp[ap[j]] += gyp[j];
        store(gxp, sgx + plane * HW, HW);
      }
    });
  });
}

// y[p, i, j] = mean of x[p] over rows [start(i), end(i)) and columns [start(j), end(j)).
//   x: [planes, H, W]   y: [planes, OH, OW]
void adaptive_avg_pool2d_forward(DType dt, const void* x, void* y, int64_t planes, int64_t H, int64_t W, int64_t OH,
                                 int64_t OW, Stream) {
  dispatch_storage(dt, "adaptive_avg_pool2d_forward", [&](auto zero) {
    using S = decltype(zero);
    using T = compute_t<S>;
    const S* sx = static_cast<const S*>(x);
    S* sy = static_cast<S*>(y);
    parallel_for(0, planes, grain_for(H * W + OH * OW), [&](int64_t lo, int64_t hi) {
      for (int64_t plane = lo; plane < hi; ++plane) {
        const T* xp = load<0>(sx + plane * H * W, H * W);
        T* yp = out_ptr<1>(sy + plane * OH * OW, OH * OW);
        if (OH == 1 && OW == 1) {  // global average pooling (the ResNet head)
          double s = 0.0;
#pragma omp simd reduction(+ : s)
          for (int64_t i = 0; i < H * W; ++i) s += xp[i];
          yp[0] = T(s / double(H * W));
          store(yp, sy + plane, 1);
          continue;
        }
        for (int64_t i = 0; i < OH; ++i) {
          const int64_t h0 = bin_start(i, H, OH), h1 = bin_end(i, H, OH);
          for (int64_t j = 0; j < OW; ++j) {
            const int64_t w0 = bin_start(j, W, OW), w1 = bin_end(j, W, OW);
            double s = 0.0;
            for (int64_t h = h0; h < h1; ++h)
              for (int64_t w = w0; w < w1; ++w) s += xp[h * W + w];
            yp[i * OW + j] = T(s / double((h1 - h0) * (w1 - w0)));
          }
        }
        store(yp, sy + plane * OH * OW, OH * OW);
      }
    });
  });
}

// gx = the adjoint: each bin spreads gy / (bin area) over its pixels; bins may
// overlap, so contributions add (overwrites gx).
//   gy: [planes, OH, OW]   gx: [planes, H, W]
void adaptive_avg_pool2d_backward(DType dt, const void* gy, void* gx, int64_t planes, int64_t H, int64_t W,
                                  int64_t OH, int64_t OW, Stream) {
  dispatch_storage(dt, "adaptive_avg_pool2d_backward", [&](auto zero) {
    using S = decltype(zero);
    using T = compute_t<S>;
    const S* sgy = static_cast<const S*>(gy);
    S* sgx = static_cast<S*>(gx);
    parallel_for(0, planes, grain_for(H * W + OH * OW), [&](int64_t lo, int64_t hi) {
      for (int64_t plane = lo; plane < hi; ++plane) {
        T* gxp = out_ptr<0>(sgx + plane * H * W, H * W);
        const T* gyp = load<1>(sgy + plane * OH * OW, OH * OW);
        if (OH == 1 && OW == 1) {
          const T v = T(double(gyp[0]) / double(H * W));
          for (int64_t i = 0; i < H * W; ++i) gxp[i] = v;
          store(gxp, sgx + plane * H * W, H * W);
          continue;
        }
        std::fill(gxp, gxp + H * W, T(0));
        for (int64_t i = 0; i < OH; ++i) {
          const int64_t h0 = bin_start(i, H, OH), h1 = bin_end(i, H, OH);
          for (int64_t j = 0; j < OW; ++j) {
            const int64_t w0 = bin_start(j, W, OW), w1 = bin_end(j, W, OW);
            const T v = T(double(gyp[i * OW + j]) / double((h1 - h0) * (w1 - w0)));
            for (int64_t h = h0; h < h1; ++h)
              for (int64_t w = w0; w < w1; ++w) gxp[h * W + w] += v;
          }
        }
        store(gxp, sgx + plane * H * W, H * W);
      }
    });
  });
}

}  // namespace ember::cpu
