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
// rows [floor(i*H/OH), ceil((i+1)*H/OH)), sums in double.
#include "cuda/common.cuh"

#include <algorithm>
#include <limits>

#include "cuda/cuda_kernels.h"

namespace ember::cuda {
namespace {

constexpr unsigned kPoolThreads = 256;  // threads per block of every pooling kernel

// PyTorch's adaptive bin [start, end) of output i of `out` over `in`.
__device__ __forceinline__ int64_t bin_start(int64_t i, int64_t in, int64_t out) { return (i * in) / out; }
__device__ __forceinline__ int64_t bin_end(int64_t i, int64_t in, int64_t out) {
  return ((i + 1) * in + out - 1) / out;
}

// ---------------------------------------------------------------- kernels

// y, argmax[plane, p, q] = max of x[plane] over the window of (p, q)
//   x: [N*C, H, W]   y, argmax: [N*C, P, Q]
template <typename T>
__global__ void max_pool_forward_kernel(Pool2dGeometry g, const T* x, T* y, int32_t* argmax) {
  const int64_t total = g.N * g.C * g.P * g.Q;
  for (int64_t i = grid_thread_index(); i < total; i += grid_thread_count()) {
    const int64_t q = i % g.Q, p = (i / g.Q) % g.P, plane = i / (g.P * g.Q);
    const T* xp = x + plane * g.H * g.W;
    const int64_t h0 = std::max<int64_t>(0, p * g.stride_h - g.pad_h);
    const int64_t h1 = std::min(g.H, p * g.stride_h - g.pad_h + g.R);
    const int64_t w0 = std::max<int64_t>(0, q * g.stride_w - g.pad_w);
    const int64_t w1 = std::min(g.W, q * g.stride_w - g.pad_w + g.S);
    using Acc = compute_t<T>;
    Acc best = -std::numeric_limits<Acc>::infinity();
    int64_t where = -1;
    for (int64_t h = h0; h < h1; ++h)
      for (int64_t w = w0; w < w1; ++w) {
        const Acc v = to_compute(xp[h * g.W + w]);
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
template <typename T>
__global__ void max_pool_backward_kernel(Pool2dGeometry g, const T* gy, const int32_t* argmax, T* gx) {
  const int64_t total = g.N * g.C * g.H * g.W;
  for (int64_t i = grid_thread_index(); i < total; i += grid_thread_count()) {
    const int64_t w = i % g.W, h = (i / g.W) % g.H, plane = i / (g.H * g.W);
    // windows p with p*sh - ph <= h <= p*sh - ph + R - 1, inside [0, P)
    const int64_t hh = h + g.pad_h, ww = w + g.pad_w;
    const int64_t p0 = hh < g.R ? 0 : (hh - g.R) / g.stride_h + 1, p1 = std::min(g.P - 1, hh / g.stride_h);
    const int64_t q0 = ww < g.S ? 0 : (ww - g.S) / g.stride_w + 1, q1 = std::min(g.Q - 1, ww / g.stride_w);
    const int32_t me = int32_t(h * g.W + w);
    const T* gyp = gy + plane * g.P * g.Q;
    const int32_t* ap = argmax + plane * g.P * g.Q;
    compute_t<T> sum = 0;
    for (int64_t p = p0; p <= p1; ++p)
      for (int64_t q = q0; q <= q1; ++q)
        if (ap[p * g.Q + q] == me) sum += to_compute(gyp[p * g.Q + q]);
    gx[i] = to_storage<T>(sum);
  }
}

// y[plane, i, j] = mean of x[plane] over bin rows(i) x bin cols(j)
//   x: [planes, H, W]   y: [planes, OH, OW]
template <typename T>
__global__ void adaptive_avg_forward_kernel(const T* x, T* y, int64_t planes, int64_t H, int64_t W, int64_t OH,
                                            int64_t OW) {
  const int64_t total = planes * OH * OW;
  for (int64_t o = grid_thread_index(); o < total; o += grid_thread_count()) {
    const int64_t j = o % OW, i = (o / OW) % OH, plane = o / (OH * OW);
    const int64_t h0 = bin_start(i, H, OH), h1 = bin_end(i, H, OH);
    const int64_t w0 = bin_start(j, W, OW), w1 = bin_end(j, W, OW);
    const T* xp = x + plane * H * W;
    double s = 0.0;
    for (int64_t h = h0; h < h1; ++h)
      for (int64_t w = w0; w < w1; ++w) s += double(to_compute(xp[h * W + w]));
    y[o] = to_storage<T>(s / double((h1 - h0) * (w1 - w0)));
  }
}

// gx[plane, h, w] = sum over the bins (i, j) containing (h, w) of gy[plane, i, j] / area(i, j)
//   gy: [planes, OH, OW]   gx: [planes, H, W]
template <typename T>
__global__ void adaptive_avg_backward_kernel(const T* gy, T* gx, int64_t planes, int64_t H, int64_t W, int64_t OH,
                                             int64_t OW) {
  const int64_t total = planes * H * W;
  for (int64_t e = grid_thread_index(); e < total; e += grid_thread_count()) {
    const int64_t w = e % W, h = (e / W) % H, plane = e / (H * W);
    // bins with start(i) <= h < end(i): i in [floor(h*OH/H), ceil((h+1)*OH/H) - 1]
    const int64_t i0 = (h * OH) / H, i1 = std::min(OH - 1, ((h + 1) * OH + H - 1) / H - 1);
    const int64_t j0 = (w * OW) / W, j1 = std::min(OW - 1, ((w + 1) * OW + W - 1) / W - 1);
    const T* gyp = gy + plane * OH * OW;
    using Acc = compute_t<T>;
    Acc sum = 0;
    for (int64_t i = i0; i <= i1; ++i) {
      const int64_t h0 = bin_start(i, H, OH), h1 = bin_end(i, H, OH);
      if (h < h0 || h >= h1) continue;
      for (int64_t j = j0; j <= j1; ++j) {
        const int64_t w0 = bin_start(j, W, OW), w1 = bin_end(j, W, OW);
        if (w < w0 || w >= w1) continue;
        sum += Acc(double(to_compute(gyp[i * OW + j])) / double((h1 - h0) * (w1 - w0)));
      }
    }
    gx[e] = to_storage<T>(sum);
  }
}

// -------------------------------------------------------------- launchers

dim3 grid_for(int64_t n) { return dim3(blocks_for(n, kPoolThreads)); }

}  // namespace

void max_pool2d_forward(DType dt, const Pool2dGeometry& g, const void* x, void* y, int32_t* argmax, Stream stream) {
  dispatch_float_half(dt, "max_pool2d_forward", [&](auto zero) {
    using T = decltype(zero);
    const int64_t total = g.N * g.C * g.P * g.Q;
    if (total <= 0) return;
    launch(max_pool_forward_kernel<T>, grid_for(total), dim3(kPoolThreads), 0, as_cuda_stream(stream), g,
           static_cast<const T*>(x), static_cast<T*>(y), argmax);
  });
}

void max_pool2d_backward(DType dt, const Pool2dGeometry& g, const void*, const void*, const void* gy,
                         const int32_t* argmax, void* gx, Stream stream) {
  dispatch_float_half(dt, "max_pool2d_backward", [&](auto zero) {
    using T = decltype(zero);
    const int64_t total = g.N * g.C * g.H * g.W;
    if (total <= 0) return;
    launch(max_pool_backward_kernel<T>, grid_for(total), dim3(kPoolThreads), 0, as_cuda_stream(stream), g,
           static_cast<const T*>(gy), argmax, static_cast<T*>(gx));
  });
}

void adaptive_avg_pool2d_forward(DType dt, const void* x, void* y, int64_t planes, int64_t H, int64_t W,
                                 int64_t OH, int64_t OW, Stream stream) {
  dispatch_float_half(dt, "adaptive_avg_pool2d_forward", [&](auto zero) {
    using T = decltype(zero);
    const int64_t total = planes * OH * OW;
    if (total <= 0) return;
    launch(adaptive_avg_forward_kernel<T>, grid_for(total), dim3(kPoolThreads), 0, as_cuda_stream(stream),
           static_cast<const T*>(x), static_cast<T*>(y), planes, H, W, OH, OW);
  });
}

void adaptive_avg_pool2d_backward(DType dt, const void* gy, void* gx, int64_t planes, int64_t H, int64_t W,
                                  int64_t OH, int64_t OW, Stream stream) {
  dispatch_float_half(dt, "adaptive_avg_pool2d_backward", [&](auto zero) {
    using T = decltype(zero);
    const int64_t total = planes * H * W;
    if (total <= 0) return;
    launch(adaptive_avg_backward_kernel<T>, grid_for(total), dim3(kPoolThreads), 0, as_cuda_stream(stream),
           static_cast<const T*>(gy), static_cast<T*>(gx), planes, H, W, OH, OW);
  });
}

}  // namespace ember::cuda
