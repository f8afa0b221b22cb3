// ops/cpu/elementwise.cpp — the elementwise and per-channel broadcast CPU
// kernels: add, add + relu, axpby, relu forward/backward, the pointwise ops
// of ops/pointwise.h, bias add and its gradient.
//
// All of them are memory-bound, so each is one pass over its arrays, split
// into contiguous chunks across threads, with an inner loop GCC vectorises.
// An output may be the very same array as an input (in-place add, relu or
// gradient accumulation); `#pragma omp simd` states that this is safe (each
// element is read before it is written) without a runtime aliasing check.
// Partially overlapping arrays are not supported. f16 and bf16 run the same
// loops in f32 over converted chunks (ops/cpu/f16_util.h), rounding once on store;
// add, gradient accumulation and relu run in f16 arithmetic instead where
// the CPU has AVX512-FP16, which gives the same bits (ops/cpu/f16_native.h);
// bf16 add, add + relu and relu's gradient run as one fused AVX-512 pass
// where the CPU has it, with the same bits too (ops/cpu/elementwise_bf16.h).
#include <algorithm>
#include <atomic>
#include <vector>

#include "engine/parallel.h"
#include "ops/cpu/cpu_kernels.h"
#include "ops/cpu/elementwise_bf16.h"
#include "ops/cpu/f16_native.h"
#include "ops/cpu/f16_util.h"
#include "ops/cpu/gemm/gemm_isa.h"
#include "ops/pointwise.h"

namespace ember::cpu {

namespace {
constexpr int64_t kGrain = 1 << 15;  // elements below which a loop runs on one thread

// Grain in items for a parallel_for whose items cost `per_item` elements each.
int64_t grain_for(int64_t per_item) { return std::max<int64_t>(1, kGrain / std::max<int64_t>(1, per_item)); }

// Runs body(lo, len) over [0, n) on the threads, in chunks of chunk_for<S>.
template <typename S, typename F>
void for_chunks(int64_t n, F&& body) {
  parallel_for(0, n, kGrain, [&](int64_t lo, int64_t hi) {
    const int64_t step = chunk_for<S>(hi - lo);
    for (int64_t b = lo; b < hi; b += step) body(b, std::min(step, hi - b));
  });
}

// y[i] = f(a[i], b[i]) for i in [0, n), in the compute type of dt's storage.
template <typename F>
void binary_elementwise(DType dt, const char* kernel, const void* a, const void* b, void* y, int64_t n, F&& f) {
  dispatch_storage(dt, kernel, [&](auto zero) {
    using S = decltype(zero);
    using T = compute_t<S>;
    for_chunks<S>(n, [&](int64_t o, int64_t m) {
      const T* pa = load<0>(static_cast<const S*>(a) + o, m);
      const T* pb = load<1>(static_cast<const S*>(b) + o, m);
      T* py = out_ptr<2>(static_cast<S*>(y) + o, m);
#pragma omp simd
      for (int64_t i = 0; i < m; ++i) py[i] = f(pa[i], pb[i]);
      store(py, static_cast<S*>(y) + o, m);
    });
  });
}

// With f16 data and f16 arithmetic available and on, runs body(lo, len)
// over [0, n) on the threads and returns true; else returns false.
template <typename F>
bool native_f16_chunks(DType dt, int64_t n, F&& body) {
  if (dt != DType::f16 || !native_f16()) return false;
  parallel_for(0, n, kGrain, [&](int64_t lo, int64_t hi) { body(lo, hi - lo); });
  return true;
}
std::atomic<bool>& bf16_vector_wanted() {
  static std::atomic<bool> on{true};
  return on;
}

// With bf16 data and the fused AVX-512 loop available, runs op over [0, n)
// on the threads and returns true; else returns false.
bool bf16_binary(DType dt, Bf16Binary op, const void* a, const void* b, void* y, int64_t n) {
  if (dt != DType::bf16) return false;
  const Bf16BinaryFn fn = bf16_binary_kernel();
  if (!fn) return false;
  const auto* pa = static_cast<const uint16_t*>(a);
  const auto* pb = static_cast<const uint16_t*>(b);
  auto* py = static_cast<uint16_t*>(y);
  parallel_for(0, n, kGrain, [&](int64_t lo, int64_t hi) { fn(op, pa + lo, pb + lo, py + lo, hi - lo); });
  return true;
}

template <typename P>
const f16* f16_at(const P* p, int64_t offset) {
  return static_cast<const f16*>(p) + offset;
}
template <typename P>
f16* f16_at(P* p, int64_t offset) {
  return static_cast<f16*>(p) + offset;
}
}  // namespace

#if defined(__x86_64__)
void bf16_binary_avx512(Bf16Binary op, const uint16_t* a, const uint16_t* b, uint16_t* y, int64_t n);
#endif

Bf16BinaryFn bf16_binary_kernel() {
#if defined(__x86_64__)
  // (the AVX-512 set -march=x86-64-v4, which that file is compiled for, assumes)
  static const bool supported = gemm_isa_supported(GemmIsa::avx512);
  if (supported && bf16_vector_wanted().load(std::memory_order_relaxed)) return &bf16_binary_avx512;
#endif
  return nullptr;
}

void set_bf16_binary_vector(bool on) { bf16_vector_wanted().store(on); }

// y = a + b                                                 a, b, y: [n]
void add(DType dt, const void* a, const void* b, void* y, int64_t n, Stream) {
#if defined(__AVX512FP16__)
  if (native_f16_chunks(dt, n, [&](int64_t o, int64_t m) { native::add(f16_at(a, o), f16_at(b, o), f16_at(y, o), m); }))
    return;
#endif
  if (bf16_binary(dt, Bf16Binary::add, a, b, y, n)) return;
  binary_elementwise(dt, "add", a, b, y, n, [](auto x, auto z) { return x + z; });
}

// y = max(a + b, 0): the residual add and the relu after it, one pass.
//   a, b, y: [n]
void add_relu(DType dt, const void* a, const void* b, void* y, int64_t n, Stream) {
  if (bf16_binary(dt, Bf16Binary::add_relu, a, b, y, n)) return;
  binary_elementwise(dt, "add_relu", a, b, y, n, [](auto x, auto z) {
    const auto v = x + z;
    return v < decltype(v)(0) ? decltype(v)(0) : v;
  });
}

// y = alpha * x + beta * y; beta == 0 never reads y        x, y: [n]
void axpby(DType dt, double alpha, const void* x, double beta, void* y, int64_t n, Stream) {
#if defined(__AVX512FP16__)
  if (alpha == 1.0 && beta == 1.0 &&  // gradient accumulation: y += x
      native_f16_chunks(dt, n, [&](int64_t o, int64_t m) { native::add(f16_at(y, o), f16_at(x, o), f16_at(y, o), m); }))
    return;
#endif
  dispatch_storage(dt, "axpby", [&](auto zero) {
    using S = decltype(zero);
    using T = compute_t<S>;
    const T a = static_cast<T>(alpha), bt = static_cast<T>(beta);
    for_chunks<S>(n, [&](int64_t o, int64_t m) {
      const T* px = load<0>(static_cast<const S*>(x) + o, m);
      T* py;
      if (beta == 0.0) {
        py = out_ptr<1>(static_cast<S*>(y) + o, m);
#pragma omp simd
        for (int64_t i = 0; i < m; ++i) py[i] = a * px[i];
      } else {
        py = const_cast<T*>(load<1>(static_cast<const S*>(y) + o, m));
        if (alpha == 1.0 && beta == 1.0) {  // gradient accumulation
#pragma omp simd
          for (int64_t i = 0; i < m; ++i) py[i] += px[i];
        } else {
#pragma omp simd
          for (int64_t i = 0; i < m; ++i) py[i] = a * px[i] + bt * py[i];
        }
      }
      store(py, static_cast<S*>(y) + o, m);
    });
  });
}

// y = max(x, 0); NaN stays NaN (as in PyTorch)              x, y: [n]
void relu_forward(DType dt, const void* x, void* y, int64_t n, Stream) {
#if defined(__AVX512FP16__)
  if (native_f16_chunks(dt, n, [&](int64_t o, int64_t m) { native::relu_forward(f16_at(x, o), f16_at(y, o), m); }))
    return;
#endif
  dispatch_storage(dt, "relu_forward", [&](auto zero) {
    using S = decltype(zero);
    using T = compute_t<S>;
    for_chunks<S>(n, [&](int64_t o, int64_t m) {
      const T* px = load<0>(static_cast<const S*>(x) + o, m);
      T* py = out_ptr<1>(static_cast<S*>(y) + o, m);
#pragma omp simd
      for (int64_t i = 0; i < m; ++i) py[i] = px[i] < T(0) ? T(0) : px[i];
      store(py, static_cast<S*>(y) + o, m);
    });
  });
}

// gx = y > 0 ? gy : 0  (y is relu's output)                 y, gy, gx: [n]
void relu_backward(DType dt, const void* y, const void* gy, void* gx, int64_t n, Stream) {
#if defined(__AVX512FP16__)
  if (native_f16_chunks(dt, n, [&](int64_t o, int64_t m) {
        native::relu_backward(f16_at(y, o), f16_at(gy, o), f16_at(gx, o), m);
      }))
    return;
#endif
  if (bf16_binary(dt, Bf16Binary::relu_backward, y, gy, gx, n)) return;
  // g is read unconditionally (an argument) so the select vectorises.
  binary_elementwise(dt, "relu_backward", y, gy, gx, n,
                     [](auto out, auto g) { return out > decltype(out)(0) ? g : decltype(out)(0); });
}

// The ops of ops/pointwise.h: one loop each way, instantiated per op.
//   y[i] = Op::forward(x[i], i, args)                          x, y: [n]
void pointwise_forward(DType dt, PointwiseOp op, const void* x, void* y, int64_t n, const PointwiseArgs& args,
                       Stream) {
  with_pointwise_fn(op, [&](auto fn) {
    using Op = decltype(fn);
    dispatch_storage(dt, pointwise_name(op), [&](auto zero) {
      using S = decltype(zero);
      using T = compute_t<S>;
      for_chunks<S>(n, [&](int64_t o, int64_t m) {
        const T* px = load<0>(static_cast<const S*>(x) + o, m);
        T* py = out_ptr<1>(static_cast<S*>(y) + o, m);
        for (int64_t i = 0; i < m; ++i) py[i] = Op::forward(px[i], o + i, args);
        store(py, static_cast<S*>(y) + o, m);
      });
    });
  });
}

//   gx[i] = gy[i] * Op::derivative(x[i], i, args)              x, gy, gx: [n]
void pointwise_backward(DType dt, PointwiseOp op, const void* x, const void* gy, void* gx, int64_t n,
                        const PointwiseArgs& args, Stream) {
  with_pointwise_fn(op, [&](auto fn) {
    using Op = decltype(fn);
    EMBER_CHECK(x != nullptr || !Op::backward_reads_x, "cpu pointwise_backward: ", pointwise_name(op), " needs x");
    dispatch_storage(dt, pointwise_name(op), [&](auto zero) {
      using S = decltype(zero);
      using T = compute_t<S>;
      for_chunks<S>(n, [&](int64_t o, int64_t m) {
        const T* px = Op::backward_reads_x ? load<0>(static_cast<const S*>(x) + o, m) : nullptr;
        const T* pg = load<1>(static_cast<const S*>(gy) + o, m);
        T* pgx = out_ptr<2>(static_cast<S*>(gx) + o, m);
        for (int64_t i = 0; i < m; ++i)
          pgx[i] = pg[i] * Op::derivative(Op::backward_reads_x ? px[i] : T(0), o + i, args);
        store(pgx, static_cast<S*>(gx) + o, m);
      });
    });
  });
}

// y[o, c, i] += b[c]                         y: [outer, channels, inner]  b: [channels]
void bias_add(DType dt, void* y, const void* b, int64_t outer, int64_t channels, int64_t inner, Stream) {
  dispatch_storage(dt, "bias_add", [&](auto zero) {
    using S = decltype(zero);
    using T = compute_t<S>;
    S* sy = static_cast<S*>(y);
    std::vector<T> bias(static_cast<size_t>(channels));  // b in the compute type
    if constexpr (is_half_v<S>) {
      h2f(static_cast<const S*>(b), bias.data(), channels);
    } else {
      std::copy(static_cast<const S*>(b), static_cast<const S*>(b) + channels, bias.begin());
    }
    const T* __restrict pb = bias.data();
    if (inner == 1) {  // y: [outer, channels] (linear layers): vectorise along channels
      parallel_for(0, outer, grain_for(channels), [&](int64_t lo, int64_t hi) {
        for (int64_t o = lo; o < hi; ++o) {
          T* row = const_cast<T*>(load<0>(sy + o * channels, channels));
          for (int64_t c = 0; c < channels; ++c) row[c] += pb[c];
          store(row, sy + o * channels, channels);
        }
      });
      return;
    }
    // one plane y[o, c, :] per item
    parallel_for(0, outer * channels, grain_for(inner), [&](int64_t lo, int64_t hi) {
      for (int64_t p = lo; p < hi; ++p) {
        T* plane = const_cast<T*>(load<0>(sy + p * inner, inner));
        const T v = pb[p % channels];
        for (int64_t i = 0; i < inner; ++i) plane[i] += v;
        store(plane, sy + p * inner, inner);
      }
    });
  });
}

// gb[c] = sum over o, i of gy[o, c, i] (accumulated in double)
//   gy: [outer, channels, inner]   gb: [channels]
void bias_backward(DType dt, const void* gy, void* gb, int64_t outer, int64_t channels, int64_t inner, Stream) {
  dispatch_storage(dt, "bias_backward", [&](auto zero) {
    using S = decltype(zero);
    using T = compute_t<S>;
    const S* sgy = static_cast<const S*>(gy);
    S* __restrict pgb = static_cast<S*>(gb);
    auto put = [&](int64_t c, double v) {
      if constexpr (is_half_v<S>) {
        pgb[c] = double_to_half<S>(v);
      } else {
        pgb[c] = static_cast<S>(v);
      }
    };
    if (inner == 1) {  // gy: [outer, channels]: each thread sums a range of columns down the rows
      parallel_for(0, channels, grain_for(outer), [&](int64_t lo, int64_t hi) {
        std::vector<double> acc(size_t(hi - lo), 0.0);
        double* __restrict pa = acc.data();
        for (int64_t o = 0; o < outer; ++o) {
          const T* row = load<0>(sgy + o * channels + lo, hi - lo);
          for (int64_t c = 0; c < hi - lo; ++c) pa[c] += row[c];
        }
        for (int64_t c = lo; c < hi; ++c) put(c, pa[c - lo]);
      });
      return;
    }
    parallel_for(0, channels, grain_for(outer * inner), [&](int64_t lo, int64_t hi) {
      for (int64_t c = lo; c < hi; ++c) {
        double s = 0.0;
        for (int64_t o = 0; o < outer; ++o) {
          const T* plane = load<0>(sgy + (o * channels + c) * inner, inner);
#pragma omp simd reduction(+ : s)
          for (int64_t i = 0; i < inner; ++i) s += plane[i];
        }
        put(c, s);
      }
    });
  });
}

}  // namespace ember::cpu
