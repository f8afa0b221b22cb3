// ops/cpu/elementwise.cpp — the elementwise and per-channel broadcast CPU
// kernels: add, axpby, relu forward/backward, bias add and its gradient.
//
// All of them are memory-bound, so each is one pass over its arrays, split
// into contiguous chunks across threads, with an inner loop GCC vectorises.
// An output may be the very same array as an input (in-place add, relu or
// gradient accumulation); `#pragma omp simd` states that this is safe (each
// element is read before it is written) without a runtime aliasing check.
// Partially overlapping arrays are not supported.
#include <algorithm>
#include <vector>

#include "engine/parallel.h"
#include "ops/cpu/cpu_kernels.h"

namespace ember::cpu {

namespace {
constexpr int64_t kGrain = 1 << 15;  // elements below which a loop runs on one thread

// Grain in items for a parallel_for whose items cost `per_item` elements each.
int64_t grain_for(int64_t per_item) { return std::max<int64_t>(1, kGrain / std::max<int64_t>(1, per_item)); }
}  // namespace

// y = a + b                                                 a, b, y: [n]
void add(DType dt, const void* a, const void* b, void* y, int64_t n, Stream) {
  dispatch_float(dt, "add", [&](auto zero) {
    using T = decltype(zero);
    const T* pa = static_cast<const T*>(a);
    const T* pb = static_cast<const T*>(b);
    T* py = static_cast<T*>(y);
    parallel_for(0, n, kGrain, [&](int64_t lo, int64_t hi) {
#pragma omp simd
      for (int64_t i = lo; i < hi; ++i) py[i] = pa[i] + pb[i];
    });
  });
}

// y = alpha * x + beta * y; beta == 0 never reads y        x, y: [n]
void axpby(DType dt, double alpha, const void* x, double beta, void* y, int64_t n, Stream) {
  dispatch_float(dt, "axpby", [&](auto zero) {
    using T = decltype(zero);
    const T* px = static_cast<const T*>(x);
    T* py = static_cast<T*>(y);
    const T a = static_cast<T>(alpha), bt = static_cast<T>(beta);
    parallel_for(0, n, kGrain, [&](int64_t lo, int64_t hi) {
      if (beta == 0.0) {
#pragma omp simd
        for (int64_t i = lo; i < hi; ++i) py[i] = a * px[i];
      } else if (alpha == 1.0 && beta == 1.0) {  // gradient accumulation
#pragma omp simd
        for (int64_t i = lo; i < hi; ++i) py[i] += px[i];
      } else {
#pragma omp simd
        for (int64_t i = lo; i < hi; ++i) py[i] = a * px[i] + bt * py[i];
      }
    });
  });
}

// y = max(x, 0); NaN stays NaN (as in PyTorch)              x, y: [n]
void relu_forward(DType dt, const void* x, void* y, int64_t n, Stream) {
  dispatch_float(dt, "relu_forward", [&](auto zero) {
    using T = decltype(zero);
    const T* px = static_cast<const T*>(x);
    T* py = static_cast<T*>(y);
    parallel_for(0, n, kGrain, [&](int64_t lo, int64_t hi) {
#pragma omp simd
      for (int64_t i = lo; i < hi; ++i) py[i] = px[i] < T(0) ? T(0) : px[i];
    });
  });
}

// gx = y > 0 ? gy : 0  (y is relu's output)                 y, gy, gx: [n]
void relu_backward(DType dt, const void* y, const void* gy, void* gx, int64_t n, Stream) {
  dispatch_float(dt, "relu_backward", [&](auto zero) {
    using T = decltype(zero);
    const T* py = static_cast<const T*>(y);
    const T* pgy = static_cast<const T*>(gy);
    T* pgx = static_cast<T*>(gx);
    parallel_for(0, n, kGrain, [&](int64_t lo, int64_t hi) {
#pragma omp simd
      for (int64_t i = lo; i < hi; ++i) {
        const T g = pgy[i];  // loaded unconditionally so the select vectorises
        pgx[i] = py[i] > T(0) ? g : T(0);
      }
    });
  });
}

// y[o, c, i] += b[c]                         y: [outer, channels, inner]  b: [channels]
void bias_add(DType dt, void* y, const void* b, int64_t outer, int64_t channels, int64_t inner, Stream) {
  dispatch_float(dt, "bias_add", [&](auto zero) {
    using T = decltype(zero);
    T* __restrict py = static_cast<T*>(y);
    const T* __restrict pb = static_cast<const T*>(b);
    if (inner == 1) {  // y: [outer, channels] (linear layers): vectorise along channels
      parallel_for(0, outer, grain_for(channels), [&](int64_t lo, int64_t hi) {
        for (int64_t o = lo; o < hi; ++o) {
          T* row = py + o * channels;
          for (int64_t c = 0; c < channels; ++c) row[c] += pb[c];
        }
      });
      return;
    }
    // one plane y[o, c, :] per item
    parallel_for(0, outer * channels, grain_for(inner), [&](int64_t lo, int64_t hi) {
      for (int64_t p = lo; p < hi; ++p) {
        T* plane = py + p * inner;
        const T v = pb[p % channels];
        for (int64_t i = 0; i < inner; ++i) plane[i] += v;
      }
    });
  });
}

// gb[c] = sum over o, i of gy[o, c, i] (accumulated in double)
//   gy: [outer, channels, inner]   gb: [channels]
void bias_backward(DType dt, const void* gy, void* gb, int64_t outer, int64_t channels, int64_t inner, Stream) {
  dispatch_float(dt, "bias_backward", [&](auto zero) {
    using T = decltype(zero);
    const T* __restrict pgy = static_cast<const T*>(gy);
    T* __restrict pgb = static_cast<T*>(gb);
    if (inner == 1) {  // gy: [outer, channels]: each thread sums a range of columns down the rows
      parallel_for(0, channels, grain_for(outer), [&](int64_t lo, int64_t hi) {
        std::vector<double> acc(size_t(hi - lo), 0.0);
        double* __restrict pa = acc.data();
        for (int64_t o = 0; o < outer; ++o) {
          const T* row = pgy + o * channels + lo;
          for (int64_t c = 0; c < hi - lo; ++c) pa[c] += row[c];
        }
        for (int64_t c = lo; c < hi; ++c) pgb[c] = static_cast<T>(pa[c - lo]);
      });
      return;
    }
    parallel_for(0, channels, grain_for(outer * inner), [&](int64_t lo, int64_t hi) {
      for (int64_t c = lo; c < hi; ++c) {
        double s = 0.0;
        for (int64_t o = 0; o < outer; ++o) {
          const T* plane = pgy + (o * channels + c) * inner;
#pragma omp simd reduction(+ : s)
          for (int64_t i = 0; i < inner; ++i) s += plane[i];
        }
        pgb[c] = static_cast<T>(s);
      }
    });
  });
}

}  // namespace ember::cpu
