// ops/cpu/batch_norm.cpp — the batch-norm CPU kernels (ops/batch_norm.cpp
// calls them): training forward with running-statistic update, inference
// forward, and the gradients of both; and the training pair fused with the
// relu that follows (the output pass applies max(., 0); the gradient passes
// mask gy by the output), which saves relu's own passes over memory.
//
// Layout x: [N, C, HW]; channel c is N planes of HW contiguous values, so
// the training kernels give each thread whole channels: a channel's planes
// (N*HW values, a few hundred KB in a ResNet) mostly stay in that core's
// caches between the statistics pass and the output pass, so the second pass
// costs little DRAM traffic. Sums are accumulated in double, taken around
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
// (ops/cpu/f16_util.h) and outputs rounded once on store.
#include <algorithm>
#include <cmath>
#include <vector>

#include "engine/parallel.h"
#include "ops/cpu/cpu_kernels.h"
#include "ops/cpu/f16_util.h"
#include "ops/cpu/vector_clones.h"

namespace ember::cpu {

namespace {
constexpr int64_t kGrain = 1 << 15;  // elements below which a kernel runs on one thread
int64_t grain_for(int64_t per_item) { return std::max<int64_t>(1, kGrain / std::max<int64_t>(1, per_item)); }

// Values summed in the compute type T before the partial sum joins the
// double total: short enough that f32 rounding stays near 1e-7 relative,
// long enough that the double adds (2 lanes wide on SSE, 8 on AVX-512) cost
// nothing next to the f32 vector loop.
constexpr int64_t kChunk = 1024;

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

}  // namespace

namespace {
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
    parallel_for(0, C, grain_for(M), [&](int64_t lo, int64_t hi) {
      for (int64_t c = lo; c < hi; ++c) {
        // pass 1: shifted sum and sum of squares
        const T shift = M > 0 ? load<0>(sx + c * HW, 1)[0] : T(0);
        double s = 0.0, ss = 0.0;
        for (int64_t n = 0; n < N; ++n) {
          shifted_sums(load<0>(sx + (n * C + c) * HW, HW), HW, shift, s, ss);
        }
        const double dmean = M > 0 ? s / double(M) : 0.0;
        const double mean = double(shift) + dmean;
        const double var = M > 0 ? std::max(0.0, ss / double(M) - dmean * dmean) : 0.0;
        const double invstd = 1.0 / std::sqrt(var + eps);
        psm[c] = P(mean);
        psi[c] = P(invstd);
        const double var_unbiased = M > 1 ? var * double(M) / double(M - 1) : var;
        prm[c] = P((1.0 - momentum) * double(prm[c]) + momentum * mean);
        prv[c] = P((1.0 - momentum) * double(prv[c]) + momentum * var_unbiased);
        // pass 2: y = (x - mean) * scale + beta (then relu)
        const T m = T(mean), a = T(double(pg[c]) * invstd), b = T(pb[c]);
        for (int64_t n = 0; n < N; ++n) {
          const T* xp = load<0>(sx + (n * C + c) * HW, HW);
          T* yp = out_ptr<1>(sy + (n * C + c) * HW, HW);
          if constexpr (kRelu)
            apply_affine_relu(xp, yp, HW, m, a, b);
          else
            apply_affine(xp, yp, HW, m, a, b);
          store(yp, sy + (n * C + c) * HW, HW);
        }
      }
    });
  });
}
}  // namespace

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
    parallel_for(0, C, grain_for(M), [&](int64_t lo, int64_t hi) {
      for (int64_t c = lo; c < hi; ++c) {
        const T mean = T(psm[c]);
        const double invstd = double(psi[c]);
        // pass 1: sum gy and sum gy * (x - mean)
        double s1 = 0.0, s2 = 0.0;
        for (int64_t n = 0; n < N; ++n) {
          const T* xp = load<0>(sx + (n * C + c) * HW, HW);
          const T* gp = load<1>(sgy + (n * C + c) * HW, HW);
          if (sy)
            masked_gradient_sums(xp, load<3>(sy + (n * C + c) * HW, HW), gp, HW, mean, s1, s2);
          else
            gradient_sums(xp, gp, HW, mean, s1, s2);
        }
        const double gb = s1, gg = s2 * invstd;
        pgb[c] = P(gb);
        pgg[c] = P(gg);
        // pass 2: gx
        const double A = double(pg[c]) * invstd;
        const double inv_m = M > 0 ? 1.0 / double(M) : 0.0;
        const T a = T(A), b = T(-A * invstd * gg * inv_m), d = T(-A * gb * inv_m);
        for (int64_t n = 0; n < N; ++n) {
          const T* xp = load<0>(sx + (n * C + c) * HW, HW);
          const T* gp = load<1>(sgy + (n * C + c) * HW, HW);
          T* op = out_ptr<2>(sgx + (n * C + c) * HW, HW);
          if (sy)
            apply_masked_gradient(xp, load<3>(sy + (n * C + c) * HW, HW), gp, op, HW, mean, a, b, d);
          else
            apply_gradient(xp, gp, op, HW, mean, a, b, d);
          store(op, sgx + (n * C + c) * HW, HW);
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
