// ops/cpu/loss.cpp — softmax cross-entropy with label smoothing on the CPU,
// forward (per-row losses and the softmax probabilities) and backward
// (ops/loss.cpp averages the losses and scales the gradient).
//
// Per row, with m = max logit and lse = m + log sum_c exp(x_c - m):
//   p_c = exp(x_c - lse),  target_c = (1 - s) * [c == label] + s / C,
//   loss = -sum_c target_c * log p_c = lse - sum_c target_c * x_c
// (the target sums to one). Row sums are accumulated in double. Labels are
// checked on the calling thread before any work, so a bad label is an
// ember::Error, never an exception inside a parallel region.
// f16/bf16 logits (and glogits) are converted per row; probs, losses and
// grad_loss are f32 then (ops/kernels.h), and all arithmetic is in f32/f64.
#include <algorithm>
#include <cmath>

#include "engine/parallel.h"
#include "ops/cpu/cpu_kernels.h"
#include "ops/cpu/f16_util.h"

namespace ember::cpu {

namespace {
void check_labels(const int64_t* labels, int64_t N, int64_t classes, const char* kernel) {
  for (int64_t n = 0; n < N; ++n)
    EMBER_CHECK(labels[n] >= 0 && labels[n] < classes, kernel, ": label ", labels[n], " of row ", n,
                " is outside [0, ", classes, ") for ", classes, " classes");
}
int64_t grain_rows(int64_t classes) { return std::max<int64_t>(1, 8192 / std::max<int64_t>(1, classes)); }
}  // namespace

//   logits, probs: [N, classes]   labels: i64 [N]   losses: [N]
void softmax_cross_entropy_forward(DType dt, const void* logits, const int64_t* labels, void* losses, void* probs,
                                   int64_t N, int64_t classes, double smoothing, Stream) {
  dispatch_storage(dt, "softmax_cross_entropy_forward", [&](auto zero) {
    using S = decltype(zero);
    using T = compute_t<S>;
    using P = T;  // loss and probs type (f32 for f16, bf16 and f32, f64 for f64)
    check_labels(labels, N, classes, "softmax_cross_entropy_forward");
    const S* sx = static_cast<const S*>(logits);
    T* pp = static_cast<T*>(probs);
    P* pl = static_cast<P*>(losses);
    const double on = 1.0 - smoothing, off = smoothing / double(classes);
    parallel_for(0, N, grain_rows(classes), [&](int64_t lo, int64_t hi) {
      for (int64_t n = lo; n < hi; ++n) {
        const T* x = load<0>(sx + n * classes, classes);
        T* p = pp + n * classes;
        T m = x[0];
        for (int64_t c = 1; c < classes; ++c) m = std::max(m, x[c]);
        double se = 0.0, sx = 0.0;
        for (int64_t c = 0; c < classes; ++c) {
          const T e = std::exp(x[c] - m);
          p[c] = e;
          se += double(e);
          sx += double(x[c]);
        }
        const double lse = double(m) + std::log(se);
        const T inv = T(1.0 / se);
        for (int64_t c = 0; c < classes; ++c) p[c] *= inv;
        pl[n] = P(lse - on * double(x[labels[n]]) - off * sx);
      }
    });
  });
}

// glogits = grad_loss[0] * scale * (probs - target)
//   probs, glogits: [N, classes]   labels: i64 [N]   grad_loss: [1]
void softmax_cross_entropy_backward(DType dt, const void* probs, const int64_t* labels, const void* grad_loss,
                                    double scale, void* glogits, int64_t N, int64_t classes, double smoothing,
                                    Stream) {
  dispatch_storage(dt, "softmax_cross_entropy_backward", [&](auto zero) {
    using S = decltype(zero);
    using T = compute_t<S>;
    using P = T;
    check_labels(labels, N, classes, "softmax_cross_entropy_backward");
    const T* pp = static_cast<const T*>(probs);
    S* sg = static_cast<S*>(glogits);
    const double k = double(static_cast<const P*>(grad_loss)[0]) * scale;
    const T kt = T(k), off = T(smoothing / double(classes));
    const T hit = T(1.0 - smoothing + smoothing / double(classes));  // target of the label's class
    parallel_for(0, N, grain_rows(classes), [&](int64_t lo, int64_t hi) {
      for (int64_t n = lo; n < hi; ++n) {
        const T* p = pp + n * classes;
        T* g = out_ptr<0>(sg + n * classes, classes);
#pragma omp simd
        for (int64_t c = 0; c < classes; ++c) g[c] = kt * (p[c] - off);
        g[labels[n]] = kt * (p[labels[n]] - hit);
        store(g, sg + n * classes, classes);
      }
    });
  });
}

}  // namespace ember::cpu
