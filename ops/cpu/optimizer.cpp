// ops/cpu/optimizer.cpp — one SGD step over a parameter tensor (net/'s SGD
// optimizer calls ops::sgd_update_ once per parameter and step).
//
// PyTorch's formula (dampening 0), in the parameter's type:
//   g' = grad_scale * g + wd * w
//   buf = first_step ? g' : momentum * buf + g'       (only when momentum != 0)
//   w -= lr * (nesterov ? g' + momentum * buf : buf)  (g' when momentum == 0)
// One pass over w, g and buf, split across threads.
#include "engine/parallel.h"
#include "ops/cpu/cpu_kernels.h"

namespace ember::cpu {

//   w, g, momentum_buf: [n]   (momentum_buf may be nullptr when momentum == 0)
void sgd_update(DType dt, void* w, const void* g, void* momentum_buf, int64_t n, const SgdParams& p, Stream) {
  dispatch_float(dt, "sgd_update", [&](auto zero) {
    using T = decltype(zero);
    T* __restrict pw = static_cast<T*>(w);
    const T* __restrict pg = static_cast<const T*>(g);
    T* __restrict pb = static_cast<T*>(momentum_buf);
    const T lr = T(p.lr), mom = T(p.momentum), wd = T(p.weight_decay), gs = T(p.grad_scale);
    const bool use_mom = p.momentum != 0.0, first = p.first_step, nesterov = p.nesterov;
    EMBER_CHECK(!use_mom || pb != nullptr, "sgd_update: momentum ", p.momentum, " needs a momentum buffer");
    parallel_for(0, n, 1 << 15, [&](int64_t lo, int64_t hi) {
      if (!use_mom) {
#pragma omp simd
        for (int64_t i = lo; i < hi; ++i) pw[i] -= lr * (gs * pg[i] + wd * pw[i]);
      } else if (first) {
#pragma omp simd
        for (int64_t i = lo; i < hi; ++i) {
          const T gi = gs * pg[i] + wd * pw[i];
          pb[i] = gi;
          pw[i] -= lr * (nesterov ? gi + mom * gi : gi);
        }
      } else {
#pragma omp simd
        for (int64_t i = lo; i < hi; ++i) {
          const T gi = gs * pg[i] + wd * pw[i];
          const T b = mom * pb[i] + gi;
          pb[i] = b;
          pw[i] -= lr * (nesterov ? gi + mom * b : b);
        }
      }
    });
  });
}

}  // namespace ember::cpu
