// cuda/kernels/pooling.cu — max pooling (with argmax) and adaptive average
// pooling, forward and backward, f32, f64, f16 and bf16 (16-bit values are
// compared and summed in f32 or double and rounded once on the store).
//
// Forward kernels run one thread per output element and scan its window.
// Backward kernels are GATHERS, one thread per input pixel: it visits the
// few windows (or adaptive bins) that contain it and adds their gradients
// in the CPU's order (row-major over the outputs), so every gx element is
// written exactly once — deterministic, no atomics, no zero-fill pass.
// Semantics follow ops/cpu/pooling.cpp: argmax is h*W + w inside the input
// plane; padding is never selected (windows only visit real pixels); a NaN
// wins over numbers; ties go to the first maximum in scan order; a window
// with no real pixel gives -inf and argmax -1. Adaptive bins are PyTorch's:
// rows [floor(i*H/OH), ceil((i+1)*H/OH)), sums in double. Index decodes and
// bin bounds divide by multiplication (fast_divmod.cuh) when every index and
// bin product is below 2^31.
#include "cuda/common.cuh"

#include <algorithm>
#include <limits>

#include "cuda/cuda_kernels.h"
#include "cuda/kernels/fast_divmod.cuh"

namespace ember::cuda {
namespace {

constexpr unsigned kPoolThreads = 256;  // threads per block of every pooling kernel

// The divisors of one pooling: by_a, by_b are the two inner extents of the
// plane a kernel walks (Q and P, W and H, OW and OH); by_u, by_v the
// strides (max pooling) or the other plane's extents (adaptive bins).
// by_c divides by C for channels-last max pooling.
template <typename I>
struct PoolDivisors {
  IndexDivisor<I> by_a, by_b, by_u, by_v, by_c;
};

// PyTorch's adaptive bin [start, end) of output i of `out` over `in` (by_out divides by out).
template <typename I>
__device__ __forceinline__ int64_t bin_start(I i, I in, const IndexDivisor<I>& by_out) {
  I q, r;
  by_out.divmod(i * in, q, r);
  return q;
}
template <typename I>
__device__ __forceinline__ int64_t bin_end(I i, I in, const IndexDivisor<I>& by_out) {
  I q, r;
  by_out.divmod((i + 1) * in + by_out.value() - 1, q, r);
  return q;
}

// ---------------------------------------------------------------- kernels

// y, argmax[plane, p, q] = max of x[plane] over the window of (p, q)
//   x: [N*C, H, W]   y, argmax: [N*C, P, Q]     by: Q, P (and C)
// Channels-last: x: [N, H, W, C], y, argmax: [N, P, Q, C]; thread i still
// takes output element i, and the pixels of its plane lie C apart.
template <typename T, typename I>
__global__ void max_pool_forward_kernel(Pool2dGeometry g, PoolDivisors<I> by, const T* x, T* y, int32_t* argmax) {
  const int64_t total = g.N * g.C * g.P * g.Q;
  for (int64_t i = grid_thread_index(); i < total; i += grid_thread_count()) {
    I q, p, rest;
    int64_t base, pixel;  // plane (n, c)'s pixel (h, w) is x[base + (h*W + w) * pixel]
    if (g.channels_last) {
      I npq, c, np, n;
      by.by_c.divmod(I(i), npq, c);
      by.by_a.divmod(npq, np, q);
      by.by_b.divmod(np, n, p);
      base = int64_t(n) * g.H * g.W * g.C + c, pixel = g.C;
    } else {
      by.by_a.divmod(I(i), rest, q);
      by.by_b.divmod(rest, rest, p);
      base = int64_t(rest) * g.H * g.W, pixel = 1;
    }
    const T* xp = x + base;
    const int64_t h0 = std::max<int64_t>(0, p * g.stride_h - g.pad_h);
    const int64_t h1 = std::min(g.H, p * g.stride_h - g.pad_h + g.R);
    const int64_t w0 = std::max<int64_t>(0, q * g.stride_w - g.pad_w);
    const int64_t w1 = std::min(g.W, q * g.stride_w - g.pad_w + g.S);
    using Acc = compute_t<T>;
    Acc best = -std::numeric_limits<Acc>::infinity();
    int64_t where = -1;
    for (int64_t h = h0; h < h1; ++h)
      for (int64_t w = w0; w < w1; ++w) {
        const Acc v = to_compute(xp[(h * g.W + w) * pixel]);
        // v != v: v is NaN (a NaN wins, and the first NaN stays)
        if (where < 0 || v > best || (v != v && best == best)) {
          best = v;
          where = h * g.W + w;
        }
      }
    y[i] = to_storage<T>(best);
    argmax[i] = int32_t(where);
  }
}

// gx[plane, h, w] = sum of gy[plane, p, q] over the windows (p, q) containing
// (h, w) whose argmax is h*W + w     gy, argmax: [N*C, P, Q]   gx: [N*C, H, W]
//   by: W, H, stride_h, stride_w (and C)
// Channels-last: gy, argmax: [N, P, Q, C], gx: [N, H, W, C].
template <typename T, typename I>
__global__ void max_pool_backward_kernel(Pool2dGeometry g, PoolDivisors<I> by, const T* gy, const int32_t* argmax,
                                         T* gx) {
  const int64_t total = g.N * g.C * g.H * g.W;
  for (int64_t i = grid_thread_index(); i < total; i += grid_thread_count()) {
    I w, h, rest;
    int64_t base, pixel;  // plane (n, c)'s output (p, q) is gy[base + (p*Q + q) * pixel]
    if (g.channels_last) {
      I nhw, c, nh, n;
      by.by_c.divmod(I(i), nhw, c);
      by.by_a.divmod(nhw, nh, w);
      by.by_b.divmod(nh, n, h);
      base = int64_t(n) * g.P * g.Q * g.C + c, pixel = g.C;
    } else {
      by.by_a.divmod(I(i), rest, w);
      by.by_b.divmod(rest, rest, h);
      base = int64_t(rest) * g.P * g.Q, pixel = 1;
    }
    // windows p with p*sh - ph <= h <= p*sh - ph + R - 1, inside [0, P)
    const I hh = h + I(g.pad_h), ww = w + I(g.pad_w);
    I hq, wq, lo, rem;
    by.by_u.divmod(hh, hq, rem);
    by.by_v.divmod(ww, wq, rem);
    int64_t p0 = 0, q0 = 0;
    if (hh >= I(g.R)) {
      by.by_u.divmod(hh - I(g.R), lo, rem);
      p0 = int64_t(lo) + 1;
    }
    if (ww >= I(g.S)) {
      by.by_v.divmod(ww - I(g.S), lo, rem);
      q0 = int64_t(lo) + 1;
    }
    const int64_t p1 = std::min<int64_t>(g.P - 1, hq), q1 = std::min<int64_t>(g.Q - 1, wq);
    const int32_t me = int32_t(int64_t(h) * g.W + w);
    const T* gyp = gy + base;
    const int32_t* ap = argmax + base;
    compute_t<T> sum = 0;
    for (int64_t p = p0; p <= p1; ++p)
      for (int64_t q = q0; q <= q1; ++q)
        if (ap[(p * g.Q + q) * pixel] == me) sum += to_compute(gyp[(p * g.Q + q) * pixel]);
    gx[i] = to_storage<T>(sum);
  }
}

// y[plane, i, j] = mean of x[plane] over bin rows(i) x bin cols(j)
//   x: [planes, H, W]   y: [planes, OH, OW]     by: OW, OH
template <typename T, typename I>
__global__ void adaptive_avg_forward_kernel(const T* x, T* y, int64_t planes, int64_t H, int64_t W,
                                            PoolDivisors<I> by) {
  const int64_t OH = by.by_b.value(), OW = by.by_a.value();
  const int64_t total = planes * OH * OW;
  for (int64_t o = grid_thread_index(); o < total; o += grid_thread_count()) {
    I plane_i, j, plane, i;
    by.by_a.divmod(I(o), plane_i, j);
    by.by_b.divmod(plane_i, plane, i);
    const int64_t h0 = bin_start(i, I(H), by.by_b), h1 = bin_end(i, I(H), by.by_b);
    const int64_t w0 = bin_start(j, I(W), by.by_a), w1 = bin_end(j, I(W), by.by_a);
    const T* xp = x + int64_t(plane) * H * W;
    double s = 0.0;
    for (int64_t h = h0; h < h1; ++h)
      for (int64_t w = w0; w < w1; ++w) s += double(to_compute(xp[h * W + w]));
    y[o] = to_storage<T>(s / double((h1 - h0) * (w1 - w0)));
  }
}

// gx[plane, h, w] = sum over the bins (i, j) containing (h, w) of gy[plane, i, j] / area(i, j)
//   gy: [planes, OH, OW]   gx: [planes, H, W]     by: W, H, OW, OH
template <typename T, typename I>
__global__ void adaptive_avg_backward_kernel(const T* gy, T* gx, int64_t planes, PoolDivisors<I> by) {
  const I W = by.by_a.value(), H = by.by_b.value(), OW = by.by_u.value(), OH = by.by_v.value();
  const int64_t total = planes * H * W;
  for (int64_t e = grid_thread_index(); e < total; e += grid_thread_count()) {
    I plane_h, w, plane, h;
    by.by_a.divmod(I(e), plane_h, w);
    by.by_b.divmod(plane_h, plane, h);
    // bins with start(i) <= h < end(i): i in [floor(h*OH/H), ceil((h+1)*OH/H) - 1]
    const int64_t i0 = bin_start(h, OH, by.by_b), i1 = std::min<int64_t>(OH - 1, bin_end(h, OH, by.by_b) - 1);
    const int64_t j0 = bin_start(w, OW, by.by_a), j1 = std::min<int64_t>(OW - 1, bin_end(w, OW, by.by_a) - 1);
    const T* gyp = gy + int64_t(plane) * OH * OW;
    using Acc = compute_t<T>;
    Acc sum = 0;
    for (int64_t i = i0; i <= i1; ++i) {
      const int64_t h0 = bin_start(I(i), H, by.by_v), h1 = bin_end(I(i), H, by.by_v);
      if (h < h0 || h >= h1) continue;
      for (int64_t j = j0; j <= j1; ++j) {
        const int64_t w0 = bin_start(I(j), W, by.by_u), w1 = bin_end(I(j), W, by.by_u);
        if (w < w0 || w >= w1) continue;
        sum += Acc(double(to_compute(gyp[i * OW + j])) / double((h1 - h0) * (w1 - w0)));
      }
    }
    gx[e] = to_storage<T>(sum);
  }
}

// -------------------------------------------------------------- launchers

dim3 grid_for(int64_t n) { return dim3(blocks_for(n, kPoolThreads)); }

// The index type for `total` elements and bins of `out` over `in` along both axes.
template <typename F>
void with_pool_index_type(int64_t total, int64_t in_h, int64_t out_h, int64_t in_w, int64_t out_w, F&& f) {
  with_index_type(std::max({total, (in_h + 1) * (out_h + 1), (in_w + 1) * (out_w + 1)}), f);
}

}  // namespace

void max_pool2d_forward(DType dt, const Pool2dGeometry& g, const void* x, void* y, int32_t* argmax, Stream stream) {
  dispatch_float_half(dt, "max_pool2d_forward", [&](auto zero) {
    using T = decltype(zero);
    const int64_t total = g.N * g.C * g.P * g.Q;
    if (total <= 0) return;
    with_index_type(std::max(total, g.N * g.C * g.H * g.W), [&](auto index) {
      using I = decltype(index);
      const PoolDivisors<I> by{IndexDivisor<I>(g.Q), IndexDivisor<I>(g.P), {}, {}, IndexDivisor<I>(g.C)};
      launch(max_pool_forward_kernel<T, I>, grid_for(total), dim3(kPoolThreads), 0, as_cuda_stream(stream), g, by,
             static_cast<const T*>(x), static_cast<T*>(y), argmax);
    });
  });
}

void max_pool2d_backward(DType dt, const Pool2dGeometry& g, const void*, const void*, const void* gy,
                         const int32_t* argmax, void* gx, Stream stream) {
  dispatch_float_half(dt, "max_pool2d_backward", [&](auto zero) {
    using T = decltype(zero);
    const int64_t total = g.N * g.C * g.H * g.W;
    if (total <= 0) return;
    with_index_type(std::max(total, g.N * g.C * g.P * g.Q), [&](auto index) {
      using I = decltype(index);
      const PoolDivisors<I> by{IndexDivisor<I>(g.W), IndexDivisor<I>(g.H), IndexDivisor<I>(g.stride_h),
                               IndexDivisor<I>(g.stride_w), IndexDivisor<I>(g.C)};
      launch(max_pool_backward_kernel<T, I>, grid_for(total), dim3(kPoolThreads), 0, as_cuda_stream(stream), g, by,
             static_cast<const T*>(gy), argmax, static_cast<T*>(gx));
    });
  });
}

void adaptive_avg_pool2d_forward(DType dt, const void* x, void* y, int64_t planes, int64_t H, int64_t W,
                                 int64_t OH, int64_t OW, Stream stream) {
  dispatch_float_half(dt, "adaptive_avg_pool2d_forward", [&](auto zero) {
    using T = decltype(zero);
    const int64_t total = planes * OH * OW;
    if (total <= 0) return;
    with_pool_index_type(std::max(total, planes * H * W), H, OH, W, OW, [&](auto index) {
      using I = decltype(index);
      const PoolDivisors<I> by{IndexDivisor<I>(OW), IndexDivisor<I>(OH), {}, {}, {}};
      launch(adaptive_avg_forward_kernel<T, I>, grid_for(total), dim3(kPoolThreads), 0, as_cuda_stream(stream),
             static_cast<const T*>(x), static_cast<T*>(y), planes, H, W, by);
    });
  });
}

void adaptive_avg_pool2d_backward(DType dt, const void* gy, void* gx, int64_t planes, int64_t H, int64_t W,
                                  int64_t OH, int64_t OW, Stream stream) {
  dispatch_float_half(dt, "adaptive_avg_pool2d_backward", [&](auto zero) {
    using T = decltype(zero);
    const int64_t total = planes * H * W;
    if (total <= 0) return;
    with_pool_index_type(std::max(total, planes * OH * OW), H, OH, W, OW, [&](auto index) {
      using I = decltype(index);
      const PoolDivisors<I> by{IndexDivisor<I>(W), IndexDivisor<I>(H), IndexDivisor<I>(OW), IndexDivisor<I>(OH), {}};
      launch(adaptive_avg_backward_kernel<T, I>, grid_for(total), dim3(kPoolThreads), 0, as_cuda_stream(stream),
             static_cast<const T*>(gy), static_cast<T*>(gx), planes, by);
    });
  });
}

}  // namespace ember::cuda
