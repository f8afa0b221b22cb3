// ops/cpu/batch_norm.cpp — the batch-norm CPU kernels (ops/batch_norm.cpp
// calls them): training forward with running-statistic update, inference
// forward, and the gradients of both; and the training pair fused with the
// relu that follows (the output pass applies max(., 0); the gradient passes
// mask gy by the output), which saves relu's own passes over memory.
//
// Layout x: [N, C, HW]; channel c is N planes of HW contiguous values. The
// training kernels split the work across threads by planes (memory order)
// or by whole channels (a channel stays in the core's caches between the
// statistics pass and the output pass); which, and why, is at
// backward_by_planes below. Sums are accumulated in double, taken around
// a shift (the channel's first value in forward, the mean in backward) so a
// large mean does not cancel the variance away; each run of up to 1024 values
// is summed in the compute type first (kChunk). Per-element work is a
// subtraction and one or two FMAs with per-channel coefficients computed in
// double: outputs are always formed from x - mean, never as x * scale + shift,
// which cancels in f32 when |mean| >> std.
//
// Parameters and statistics (gamma, beta, running and saved stats, ggamma,
// gbeta) have type P: f32 for f16, bf16 and f32 activations, f64 for f64
// (ops/kernels.h). f16/bf16 planes are converted to f32 into thread-local buffers
// (ops/cpu/f16_util.h) and outputs rounded once on store; bf16 planes go
// through the fused AVX-512 loops of batch_norm_bf16.h instead where the CPU
// has them (the plane_* functions below choose).
#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include <unistd.h>

#include "engine/parallel.h"
#include "ops/cpu/batch_norm_bf16.h"
#include "ops/cpu/cpu_kernels.h"
#include "ops/cpu/f16_util.h"
#include "ops/cpu/gemm/gemm_isa.h"
#include "ops/cpu/vector_clones.h"

namespace ember::cpu {

namespace {
constexpr int64_t kGrain = 1 << 15;  // elements below which a kernel runs on one thread
int64_t grain_for(int64_t per_item) { return std::max<int64_t>(1, kGrain / std::max<int64_t>(1, per_item)); }

// Values summed in the compute type T before the partial sum joins the
// double total: short enough that f32 rounding stays near 1e-7 relative,
// long enough that the double adds (2 lanes wide on SSE, 8 on AVX-512) cost
// nothing next to the f32 vector loop.
constexpr int64_t kChunk = kBatchNormChunk;

// The per-element loops, as plain functions: the f32 ones are compiled per
// vector width (vector_clones.h), the templates serve f64.

// s += sum (x[i] - shift), ss += sum (x[i] - shift)^2 over n values.
// (Always inlined, so that each clone of the f32 functions gets its own
// vector code instead of calling one baseline copy.)
template <typename T>
[[gnu::always_inline]] inline void add_shifted_sums(const T* x, int64_t n, T shift, double& s, double& ss) {
  for (int64_t i0 = 0; i0 < n; i0 += kChunk) {
    const int64_t i1 = std::min(n, i0 + kChunk);
    T cs = T(0), css = T(0);
#pragma omp simd reduction(+ : cs, css)
    for (int64_t i = i0; i < i1; ++i) {
      const T d = x[i] - shift;
      cs += d;
      css += d * d;
    }
    s += double(cs);
    ss += double(css);
  }
}

// s1 += sum g[i], s2 += sum g[i] * (x[i] - mean) over n values.
template <typename T>
[[gnu::always_inline]] inline void add_gradient_sums(const T* x, const T* g, int64_t n, T mean, double& s1,
                                                     double& s2) {
  for (int64_t i0 = 0; i0 < n; i0 += kChunk) {
    const int64_t i1 = std::min(n, i0 + kChunk);
    T c1 = T(0), c2 = T(0);
#pragma omp simd reduction(+ : c1, c2)
    for (int64_t i = i0; i < i1; ++i) {
      c1 += g[i];
      c2 += g[i] * (x[i] - mean);
    }
    s1 += double(c1);
    s2 += double(c2);
  }
}
// y = (x - m) * a + b over n values.
template <typename T>
[[gnu::always_inline]] inline void affine(const T* x, T* y, int64_t n, T m, T a, T b) {
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) y[i] = (x[i] - m) * a + b;
}

// out = a * g + (b * (x - mean) + d) over n values (the training gradient).
template <typename T>
[[gnu::always_inline]] inline void gradient_apply(const T* x, const T* g, T* out, int64_t n, T mean, T a, T b, T d) {
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) out[i] = a * g[i] + (b * (x[i] - mean) + d);
}

// y = max((x - m) * a + b, 0) over n values (NaN propagates, as relu's).
template <typename T>
[[gnu::always_inline]] inline void affine_relu(const T* x, T* y, int64_t n, T m, T a, T b) {
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) {
    const T v = (x[i] - m) * a + b;
    y[i] = v < T(0) ? T(0) : v;
  }
}

// The gradient sums and apply with gy masked by relu's output: g = y > 0 ? gy : 0.
template <typename T>
[[gnu::always_inline]] inline void add_masked_gradient_sums(const T* x, const T* y, const T* g, int64_t n, T mean,
                                                            double& s1, double& s2) {
  for (int64_t i0 = 0; i0 < n; i0 += kChunk) {
    const int64_t i1 = std::min(n, i0 + kChunk);
    T c1 = T(0), c2 = T(0);
#pragma omp simd reduction(+ : c1, c2)
    for (int64_t i = i0; i < i1; ++i) {
      const T gv = g[i];  // read unconditionally, so the select vectorises (a blend, no masked load)
      const T gi = y[i] > T(0) ? gv : T(0);
      c1 += gi;
      c2 += gi * (x[i] - mean);
    }
    s1 += double(c1);
    s2 += double(c2);
  }
}
template <typename T>
[[gnu::always_inline]] inline void masked_gradient_apply(const T* x, const T* y, const T* g, T* out, int64_t n, T mean,
                                                         T a, T b, T d) {
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) {
    const T gv = g[i];  // (unconditional read: see add_masked_gradient_sums)
    out[i] = a * (y[i] > T(0) ? gv : T(0)) + (b * (x[i] - mean) + d);
  }
}

EMBER_VECTOR_CLONES void affine_relu_f32(const float* x, float* y, int64_t n, float m, float a, float b) {
  affine_relu<float>(x, y, n, m, a, b);
}
EMBER_VECTOR_CLONES void masked_gradient_sums_f32(const float* x, const float* y, const float* g, int64_t n,
                                                  float mean, double& s1, double& s2) {
  add_masked_gradient_sums<float>(x, y, g, n, mean, s1, s2);
}
EMBER_VECTOR_CLONES void masked_gradient_apply_f32(const float* x, const float* y, const float* g, float* out,
                                                   int64_t n, float mean, float a, float b, float d) {
  masked_gradient_apply<float>(x, y, g, out, n, mean, a, b, d);
}
void apply_affine_relu(const float* x, float* y, int64_t n, float m, float a, float b) { affine_relu_f32(x, y, n, m, a, b); }
void apply_affine_relu(const double* x, double* y, int64_t n, double m, double a, double b) { affine_relu(x, y, n, m, a, b); }
void masked_gradient_sums(const float* x, const float* y, const float* g, int64_t n, float mean, double& s1,
                          double& s2) {
  masked_gradient_sums_f32(x, y, g, n, mean, s1, s2);
}
void masked_gradient_sums(const double* x, const double* y, const double* g, int64_t n, double mean, double& s1,
                          double& s2) {
  add_masked_gradient_sums(x, y, g, n, mean, s1, s2);
}
void apply_masked_gradient(const float* x, const float* y, const float* g, float* out, int64_t n, float mean, float a,
                           float b, float d) {
  masked_gradient_apply_f32(x, y, g, out, n, mean, a, b, d);
}
void apply_masked_gradient(const double* x, const double* y, const double* g, double* out, int64_t n, double mean,
                           double a, double b, double d) {
  masked_gradient_apply(x, y, g, out, n, mean, a, b, d);
}

EMBER_VECTOR_CLONES void shifted_sums_f32(const float* x, int64_t n, float shift, double& s, double& ss) {
  add_shifted_sums<float>(x, n, shift, s, ss);
}
EMBER_VECTOR_CLONES void gradient_sums_f32(const float* x, const float* g, int64_t n, float mean, double& s1,
                                           double& s2) {
  add_gradient_sums<float>(x, g, n, mean, s1, s2);
}
EMBER_VECTOR_CLONES void affine_f32(const float* x, float* y, int64_t n, float m, float a, float b) {
  affine<float>(x, y, n, m, a, b);
}
EMBER_VECTOR_CLONES void gradient_apply_f32(const float* x, const float* g, float* out, int64_t n, float mean,
                                            float a, float b, float d) {
  gradient_apply<float>(x, g, out, n, mean, a, b, d);
}

// The loops by compute type: the cloned f32 functions, the templates for f64.
void shifted_sums(const float* x, int64_t n, float shift, double& s, double& ss) { shifted_sums_f32(x, n, shift, s, ss); }
void shifted_sums(const double* x, int64_t n, double shift, double& s, double& ss) { add_shifted_sums(x, n, shift, s, ss); }
void gradient_sums(const float* x, const float* g, int64_t n, float mean, double& s1, double& s2) {
  gradient_sums_f32(x, g, n, mean, s1, s2);
}
void gradient_sums(const double* x, const double* g, int64_t n, double mean, double& s1, double& s2) {
  add_gradient_sums(x, g, n, mean, s1, s2);
}
void apply_affine(const float* x, float* y, int64_t n, float m, float a, float b) { affine_f32(x, y, n, m, a, b); }
void apply_affine(const double* x, double* y, int64_t n, double m, double a, double b) { affine(x, y, n, m, a, b); }
void apply_gradient(const float* x, const float* g, float* out, int64_t n, float mean, float a, float b, float d) {
  gradient_apply_f32(x, g, out, n, mean, a, b, d);
}
void apply_gradient(const double* x, const double* g, double* out, int64_t n, double mean, double a, double b,
                    double d) {
  gradient_apply(x, g, out, n, mean, a, b, d);
}

std::atomic<bool>& bf16_vector_wanted() {
  static std::atomic<bool> on{true};
  return on;
}

// The per-plane steps on storage type S, n values of each operand: the
// fused bf16 loops where there are some, else the compute-type loops on
// load<>ed copies (f32 and f64: the storage itself). relu_y == nullptr: no
// relu mask. Outputs may alias inputs.
const uint16_t* bits_of(const bf16* p) { return reinterpret_cast<const uint16_t*>(p); }
uint16_t* bits_of(bf16* p) { return reinterpret_cast<uint16_t*>(p); }

template <typename S>
void plane_shifted_sums(const S* x, int64_t n, compute_t<S> shift, double& s, double& ss) {
  if constexpr (is_bf16_v<S>)
    if (const Bf16BatchNormLoops* k = bf16_batch_norm_loops()) return k->shifted_sums(bits_of(x), n, shift, s, ss);
  shifted_sums(load<0>(x, n), n, shift, s, ss);
}

template <typename S, typename T = compute_t<S>>
void plane_affine(const S* x, S* y, int64_t n, T m, T a, T b, bool relu) {
  if constexpr (is_bf16_v<S>)
    if (const Bf16BatchNormLoops* k = bf16_batch_norm_loops()) return k->affine(bits_of(x), bits_of(y), n, m, a, b, relu);
  const T* xp = load<0>(x, n);
  T* yp = out_ptr<1>(y, n);
  if (relu)
    apply_affine_relu(xp, yp, n, m, a, b);
  else
    apply_affine(xp, yp, n, m, a, b);
  store(yp, y, n);
}

template <typename S, typename T = compute_t<S>>
void plane_gradient_sums(const S* x, const S* relu_y, const S* g, int64_t n, T mean, double& s1, double& s2) {
  if constexpr (is_bf16_v<S>)
    if (const Bf16BatchNormLoops* k = bf16_batch_norm_loops())
      return k->gradient_sums(bits_of(x), relu_y ? bits_of(relu_y) : nullptr, bits_of(g), n, mean, s1, s2);
  const T* xp = load<0>(x, n);
  const T* gp = load<1>(g, n);
  if (relu_y)
    masked_gradient_sums(xp, load<3>(relu_y, n), gp, n, mean, s1, s2);
  else
    gradient_sums(xp, gp, n, mean, s1, s2);
}

template <typename S, typename T = compute_t<S>>
void plane_gradient_apply(const S* x, const S* relu_y, const S* g, S* out, int64_t n, T mean, T a, T b, T d) {
  if constexpr (is_bf16_v<S>)
    if (const Bf16BatchNormLoops* k = bf16_batch_norm_loops())
      return k->gradient_apply(bits_of(x), relu_y ? bits_of(relu_y) : nullptr, bits_of(g), bits_of(out), n, mean, a, b,
                               d);
  const T* xp = load<0>(x, n);
  const T* gp = load<1>(g, n);
  T* op = out_ptr<2>(out, n);
  if (relu_y)
    apply_masked_gradient(xp, load<3>(relu_y, n), gp, op, n, mean, a, b, d);
  else
    apply_gradient(xp, gp, op, n, mean, a, b, d);
  store(op, out, n);
}

}  // namespace

#if defined(__x86_64__)
extern const Bf16BatchNormLoops kBf16BatchNormLoopsAvx512;  // batch_norm_bf16_avx512.cpp
#endif

const Bf16BatchNormLoops* bf16_batch_norm_loops() {
#if defined(__x86_64__)
  // (the AVX-512 set -march=x86-64-v4, which that file is compiled for, assumes)
  static const bool supported = gemm_isa_supported(GemmIsa::avx512);
  if (supported && bf16_vector_wanted().load(std::memory_order_relaxed)) return &kBf16BatchNormLoopsAvx512;
#endif
  return nullptr;
}

void set_bf16_batch_norm_vector(bool on) { bf16_vector_wanted().store(on); }

namespace {
// Two orders of work. By planes: the (n, c) planes in memory order, split
// across the threads; each plane's sums are kept and added per channel in
// n order afterwards (for planes of up to kChunk values the same additions
// in the same order as one channel's loop). By channels: each thread takes
// whole channels, whose planes lie N*C*HW... apart; a channel read twice
// (sums, then outputs) stays in the core's L2 in between.
// The forward always goes by planes: by channels, its ResNet-20 layers (7x7
// to 28x28 planes, batch 128) and ResNet-50's (up to 256 channels of 56x56,
// batch 16) measured 1.2-2x slower: planes of 49-196 values are one to
// three cache lines, too short for the hardware prefetchers, and the
// statistics pass gains nothing from order. The backward reads three
// tensors twice: by planes while they fit in the last-level cache
// together, or while planes are that short; by channels otherwise (ResNet-50's
// 512-channel 28x28 and 256-channel 56x56 layers at batch 16: 25-51 MB
// tensors, 10-25% faster by channels). set_batch_norm_order (and
// EMBER_CPU_BN_ORDER=planes|channels) overrides the rule.
constexpr int64_t kShortPlane = 256;
BatchNormOrder initial_order() {
  const char* env = std::getenv("EMBER_CPU_BN_ORDER");
  if (!env || !*env || std::strcmp(env, "auto") == 0) return BatchNormOrder::automatic;
  if (std::strcmp(env, "planes") == 0) return BatchNormOrder::planes;
  if (std::strcmp(env, "channels") == 0) return BatchNormOrder::channels;
  std::fprintf(stderr, "warning: EMBER_CPU_BN_ORDER=%s: expected auto, planes or channels; using auto\n", env);
  return BatchNormOrder::automatic;
}
std::atomic<BatchNormOrder>& order_state() {
  static std::atomic<BatchNormOrder> order{initial_order()};
  return order;
}
int64_t last_level_cache_bytes() {
  static const int64_t bytes = [] {
    const long l3 = sysconf(_SC_LEVEL3_CACHE_SIZE);
    return l3 > 0 ? int64_t(l3) : int64_t(16) << 20;
  }();
  return bytes;
}
bool backward_by_planes(int64_t N, int64_t C, int64_t HW, int64_t value_bytes) {
  switch (order_state().load()) {
    case BatchNormOrder::planes: return true;
    case BatchNormOrder::channels: return false;
    default: return HW < kShortPlane || 3 * N * C * HW * value_bytes <= last_level_cache_bytes();
  }
}

// A channel's mean, invstd (saved), running statistics (updated) and
// output coefficients y = (x - mean) * scale + shift, from sums of x -
// shift0 over M values.
struct Coefficients {
  double mean, scale, shift;
};
template <typename P>
Coefficients forward_coefficients(double shift0, double s, double ss, int64_t M, double momentum, double eps, P gamma,
                                  P beta, P& save_mean, P& save_invstd, P& running_mean, P& running_var) {
  const double dmean = M > 0 ? s / double(M) : 0.0;
  const double mean = shift0 + dmean;
  const double var = M > 0 ? std::max(0.0, ss / double(M) - dmean * dmean) : 0.0;
  const double invstd = 1.0 / std::sqrt(var + eps);
  save_mean = P(mean);
  save_invstd = P(invstd);
  const double var_unbiased = M > 1 ? var * double(M) / double(M - 1) : var;
  running_mean = P((1.0 - momentum) * double(running_mean) + momentum * mean);
  running_var = P((1.0 - momentum) * double(running_var) + momentum * var_unbiased);
  return {mean, double(gamma) * invstd, double(beta)};
}

// Training forward, y = bn(x) or (kRelu) relu(bn(x)).
// x, y: [N, C, HW]   gamma, beta, running_mean, running_var, save_mean, save_invstd: [C]
template <bool kRelu>
void forward_train(DType dt, const char* kernel, const void* x, const void* gamma, const void* beta, void* y,
                   void* save_mean, void* save_invstd, void* running_mean, void* running_var, int64_t N, int64_t C,
                   int64_t HW, double momentum, double eps) {
  dispatch_storage(dt, kernel, [&](auto zero) {
    using S = decltype(zero);
    using T = compute_t<S>;
    using P = T;  // parameter type (f32 for f16, bf16 and f32, f64 for f64)
    const S* sx = static_cast<const S*>(x);
    S* sy = static_cast<S*>(y);
    const P* pg = static_cast<const P*>(gamma);
    const P* pb = static_cast<const P*>(beta);
    P* psm = static_cast<P*>(save_mean);
    P* psi = static_cast<P*>(save_invstd);
    P* prm = static_cast<P*>(running_mean);
    P* prv = static_cast<P*>(running_var);
    const int64_t M = N * HW;  // values per channel
    // pass 1: each plane's shifted sums, in memory order; then per channel in n order
    std::vector<double> s(size_t(N * C)), ss(size_t(N * C));
    std::vector<T> shift(static_cast<size_t>(C));
    for (int64_t c = 0; c < C; ++c) shift[size_t(c)] = M > 0 ? load<0>(sx + c * HW, 1)[0] : T(0);
    parallel_for(0, N * C, grain_for(HW), [&](int64_t lo, int64_t hi) {
      for (int64_t p = lo; p < hi; ++p) {
        double ps = 0.0, pss = 0.0;
        plane_shifted_sums(sx + p * HW, HW, shift[size_t(p % C)], ps, pss);
        s[size_t(p)] = ps, ss[size_t(p)] = pss;
      }
    });
    std::vector<T> m(static_cast<size_t>(C)), a(static_cast<size_t>(C)), b(static_cast<size_t>(C));
    for (int64_t c = 0; c < C; ++c) {
      double sc = 0.0, ssc = 0.0;
      for (int64_t n = 0; n < N; ++n) sc += s[size_t(n * C + c)], ssc += ss[size_t(n * C + c)];
      const Coefficients k = forward_coefficients(double(shift[size_t(c)]), sc, ssc, M, momentum, eps, pg[c], pb[c],
                                                  psm[c], psi[c], prm[c], prv[c]);
      m[size_t(c)] = T(k.mean), a[size_t(c)] = T(k.scale), b[size_t(c)] = T(k.shift);
    }
    // pass 2: y = (x - mean) * scale + beta (then relu), plane by plane
    parallel_for(0, N * C, grain_for(HW), [&](int64_t lo, int64_t hi) {
      for (int64_t p = lo; p < hi; ++p) {
        const size_t c = size_t(p % C);
        plane_affine(sx + p * HW, sy + p * HW, HW, m[c], a[c], b[c], kRelu);
      }
    });
  });
}
}  // namespace

void set_batch_norm_order(BatchNormOrder order) { order_state().store(order); }
BatchNormOrder batch_norm_order() { return order_state().load(); }

void batch_norm_forward_train(DType dt, const void* x, const void* gamma, const void* beta, void* y,
                              void* save_mean, void* save_invstd, void* running_mean, void* running_var, int64_t N,
                              int64_t C, int64_t HW, double momentum, double eps, Stream) {
  forward_train<false>(dt, "batch_norm_forward_train", x, gamma, beta, y, save_mean, save_invstd, running_mean,
                       running_var, N, C, HW, momentum, eps);
}

// y = relu(batch norm of x): the same statistics, one output pass.
void batch_norm_relu_forward_train(DType dt, const void* x, const void* gamma, const void* beta, void* y,
                                   void* save_mean, void* save_invstd, void* running_mean, void* running_var,
                                   int64_t N, int64_t C, int64_t HW, double momentum, double eps, Stream) {
  forward_train<true>(dt, "batch_norm_relu_forward_train", x, gamma, beta, y, save_mean, save_invstd, running_mean,
                      running_var, N, C, HW, momentum, eps);
}

// y = (x - running_mean) / sqrt(running_var + eps) * gamma + beta      x, y: [N, C, HW]
void batch_norm_forward_eval(DType dt, const void* x, const void* gamma, const void* beta,
                             const void* running_mean, const void* running_var, void* y, int64_t N, int64_t C,
                             int64_t HW, double eps, Stream) {
  dispatch_storage(dt, "batch_norm_forward_eval", [&](auto zero) {
    using S = decltype(zero);
    using T = compute_t<S>;
    using P = T;
    const S* sx = static_cast<const S*>(x);
    S* sy = static_cast<S*>(y);
    const P* pg = static_cast<const P*>(gamma);
    const P* pb = static_cast<const P*>(beta);
    const P* prm = static_cast<const P*>(running_mean);
    const P* prv = static_cast<const P*>(running_var);
    // per channel y = (x - m[c]) * a[c] + b[c]
    std::vector<T> m(static_cast<size_t>(C)), a(static_cast<size_t>(C)), b(static_cast<size_t>(C));
    for (int64_t c = 0; c < C; ++c) {
      m[size_t(c)] = T(prm[c]);
      a[size_t(c)] = T(double(pg[c]) / std::sqrt(double(prv[c]) + eps));
      b[size_t(c)] = T(pb[c]);
    }
    // one plane x[n, c, :] per item
    parallel_for(0, N * C, grain_for(HW), [&](int64_t lo, int64_t hi) {
      for (int64_t p = lo; p < hi; ++p) {
        const T mc = m[size_t(p % C)], ac = a[size_t(p % C)], bc = b[size_t(p % C)];
        const T* xp = load<0>(sx + p * HW, HW);
        T* yp = out_ptr<1>(sy + p * HW, HW);
#pragma omp simd
        for (int64_t i = 0; i < HW; ++i) yp[i] = (xp[i] - mc) * ac + bc;
        store(yp, sy + p * HW, HW);
      }
    });
  });
}

// With xhat = (x - mean) * invstd and M = N*HW values per channel:
//   gbeta = sum gy,  ggamma = sum gy * xhat,
//   gx = gamma * invstd / M * (M * gy - gbeta - xhat * ggamma)
//      = A * gy + B * (x - mean) + D   with per-channel A, B, D.
// With relu's output y (relu_y != nullptr), gy is first masked: y > 0 ? gy : 0.
//   x, gy, gx: [N, C, HW]   gamma, save_mean, save_invstd, ggamma, gbeta: [C]
namespace {
// A channel's gbeta and ggamma (stored) and gx = a * gy + b * (x - mean) + d,
// from s1 = sum gy and s2 = sum gy * (x - mean) over M values.
struct GradientCoefficients {
  double a, b, d;
};
template <typename P>
GradientCoefficients gradient_coefficients(double s1, double s2, int64_t M, P gamma, P save_invstd, P& gbeta,
                                           P& ggamma) {
  const double invstd = double(save_invstd);
  const double gb = s1, gg = s2 * invstd;
  gbeta = P(gb);
  ggamma = P(gg);
  const double A = double(gamma) * invstd;
  const double inv_m = M > 0 ? 1.0 / double(M) : 0.0;
  return {A, -A * invstd * gg * inv_m, -A * gb * inv_m};
}

void backward_train(DType dt, const char* kernel, const void* x, const void* relu_y, const void* gy,
                    const void* gamma, const void* save_mean, const void* save_invstd, void* gx, void* ggamma,
                    void* gbeta, int64_t N, int64_t C, int64_t HW) {
  dispatch_storage(dt, kernel, [&](auto zero) {
    using S = decltype(zero);
    using T = compute_t<S>;
    using P = T;
    const S* sx = static_cast<const S*>(x);
    const S* sgy = static_cast<const S*>(gy);
    const S* sy = static_cast<const S*>(relu_y);
    S* sgx = static_cast<S*>(gx);
    const P* pg = static_cast<const P*>(gamma);
    const P* psm = static_cast<const P*>(save_mean);
    const P* psi = static_cast<const P*>(save_invstd);
    P* pgg = static_cast<P*>(ggamma);
    P* pgb = static_cast<P*>(gbeta);
    const int64_t M = N * HW;
    if (backward_by_planes(N, C, HW, int64_t(sizeof(S)))) {
      // pass 1: each plane's sums, in memory order; then per channel in n order
      std::vector<double> s1(size_t(N * C)), s2(size_t(N * C));
      parallel_for(0, N * C, grain_for(HW), [&](int64_t lo, int64_t hi) {
        for (int64_t p = lo; p < hi; ++p) {
          const T mean = T(psm[p % C]);
          double a1 = 0.0, a2 = 0.0;
          plane_gradient_sums(sx + p * HW, sy ? sy + p * HW : nullptr, sgy + p * HW, HW, mean, a1, a2);
          s1[size_t(p)] = a1, s2[size_t(p)] = a2;
        }
      });
      std::vector<T> ca(static_cast<size_t>(C)), cb(static_cast<size_t>(C)), cd(static_cast<size_t>(C));
      for (int64_t c = 0; c < C; ++c) {
        double t1 = 0.0, t2 = 0.0;
        for (int64_t n = 0; n < N; ++n) t1 += s1[size_t(n * C + c)], t2 += s2[size_t(n * C + c)];
        const GradientCoefficients k = gradient_coefficients(t1, t2, M, pg[c], psi[c], pgb[c], pgg[c]);
        ca[size_t(c)] = T(k.a), cb[size_t(c)] = T(k.b), cd[size_t(c)] = T(k.d);
      }
      // pass 2: gx, plane by plane
      parallel_for(0, N * C, grain_for(HW), [&](int64_t lo, int64_t hi) {
        for (int64_t p = lo; p < hi; ++p) {
          const size_t c = size_t(p % C);
          plane_gradient_apply(sx + p * HW, sy ? sy + p * HW : nullptr, sgy + p * HW, sgx + p * HW, HW, T(psm[c]), ca[c],
                               cb[c], cd[c]);
        }
      });
      return;
    }
    parallel_for(0, C, grain_for(M), [&](int64_t lo, int64_t hi) {
      for (int64_t c = lo; c < hi; ++c) {
        const T mean = T(psm[c]);
        // pass 1: sum gy and sum gy * (x - mean)
        double s1 = 0.0, s2 = 0.0;
        for (int64_t n = 0; n < N; ++n) {
          const int64_t o = (n * C + c) * HW;
          plane_gradient_sums(sx + o, sy ? sy + o : nullptr, sgy + o, HW, mean, s1, s2);
        }
        const GradientCoefficients k = gradient_coefficients(s1, s2, M, pg[c], psi[c], pgb[c], pgg[c]);
        // pass 2: gx
        const T a = T(k.a), b = T(k.b), d = T(k.d);
        for (int64_t n = 0; n < N; ++n) {
          const int64_t o = (n * C + c) * HW;
          plane_gradient_apply(sx + o, sy ? sy + o : nullptr, sgy + o, sgx + o, HW, mean, a, b, d);
        }
      }
    });
  });
}
}  // namespace

void batch_norm_backward_train(DType dt, const void* x, const void* gy, const void* gamma, const void* save_mean,
                               const void* save_invstd, void* gx, void* ggamma, void* gbeta, int64_t N, int64_t C,
                               int64_t HW, double /*eps: held in save_invstd*/, Stream) {
  backward_train(dt, "batch_norm_backward_train", x, nullptr, gy, gamma, save_mean, save_invstd, gx, ggamma, gbeta, N,
                 C, HW);
}

// The gradients of y = relu(batch norm of x) (y: that output).
void batch_norm_relu_backward_train(DType dt, const void* x, const void* y, const void* gy, const void* gamma,
                                    const void* save_mean, const void* save_invstd, void* gx, void* ggamma,
                                    void* gbeta, int64_t N, int64_t C, int64_t HW, double /*eps*/, Stream) {
  backward_train(dt, "batch_norm_relu_backward_train", x, y, gy, gamma, save_mean, save_invstd, gx, ggamma, gbeta, N,
                 C, HW);
}

// Statistics are constants: with invstd = 1 / sqrt(running_var + eps),
//   gbeta = sum gy,  ggamma = sum gy * (x - running_mean) * invstd,  gx = gamma * invstd * gy
// all in one pass.   x, gy, gx: [N, C, HW]   [C] for the rest
void batch_norm_backward_eval(DType dt, const void* x, const void* gy, const void* gamma,
                              const void* running_mean, const void* running_var, void* gx, void* ggamma,
                              void* gbeta, int64_t N, int64_t C, int64_t HW, double eps, Stream) {
  dispatch_storage(dt, "batch_norm_backward_eval", [&](auto zero) {
    using S = decltype(zero);
    using T = compute_t<S>;
    using P = T;
    const S* sx = static_cast<const S*>(x);
    const S* sgy = static_cast<const S*>(gy);
    S* sgx = static_cast<S*>(gx);
    const P* pg = static_cast<const P*>(gamma);
    const P* prm = static_cast<const P*>(running_mean);
    const P* prv = static_cast<const P*>(running_var);
    P* pgg = static_cast<P*>(ggamma);
    P* pgb = static_cast<P*>(gbeta);
    parallel_for(0, C, grain_for(N * HW), [&](int64_t lo, int64_t hi) {
      for (int64_t c = lo; c < hi; ++c) {
        const double invstd = 1.0 / std::sqrt(double(prv[c]) + eps);
        const T mean = T(prm[c]);
        const T a = T(double(pg[c]) * invstd);
        double s1 = 0.0, s2 = 0.0;
        for (int64_t n = 0; n < N; ++n) {
          const T* xp = load<0>(sx + (n * C + c) * HW, HW);
          const T* gp = load<1>(sgy + (n * C + c) * HW, HW);
          T* op = out_ptr<2>(sgx + (n * C + c) * HW, HW);
#pragma omp simd reduction(+ : s1, s2)
          for (int64_t i = 0; i < HW; ++i) {
            const double g = double(gp[i]);
            s1 += g;
            s2 += g * double(xp[i] - mean);
            op[i] = a * gp[i];
          }
          store(op, sgx + (n * C + c) * HW, HW);
        }
        pgb[c] = P(s1);
        pgg[c] = P(s2 * invstd);
      }
    });
  });
}

}  // namespace ember::cpu
