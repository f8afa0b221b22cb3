// ops/cpu/optimizer.cpp — one SGD step over a parameter tensor (net/'s SGD
// optimizer calls ops::sgd_update_ once per parameter and step).
//
// PyTorch's formula (dampening 0), in the parameter's type:
//   g' = grad_scale * g + wd * w
//   buf = first_step ? g' : momentum * buf + g'       (only when momentum != 0)
//   w -= lr * (nesterov ? g' + momentum * buf : buf)  (g' when momentum == 0)
// One pass over w, g and buf, split across threads. f16 or bf16 (w, g and
// buf all 16-bit) converts chunks to f32, updates in f32 and rounds w and buf once.
#include <algorithm>

#include "engine/parallel.h"
#include "ops/cpu/cpu_kernels.h"
#include "ops/cpu/f16_util.h"

namespace ember::cpu {

//   w, g, momentum_buf: [n]   (momentum_buf may be nullptr when momentum == 0)
void sgd_update(DType dt, void* w, const void* g, void* momentum_buf, int64_t n, const SgdParams& p, Stream) {
  dispatch_storage(dt, "sgd_update", [&](auto zero) {
    using S = decltype(zero);
    using T = compute_t<S>;
    S* sw = static_cast<S*>(w);
    const S* sg = static_cast<const S*>(g);
    S* sb = static_cast<S*>(momentum_buf);
    const T lr = T(p.lr), mom = T(p.momentum), wd = T(p.weight_decay), gs = T(p.grad_scale);
    const bool use_mom = p.momentum != 0.0, first = p.first_step, nesterov = p.nesterov;
    EMBER_CHECK(!use_mom || sb != nullptr, "sgd_update: momentum ", p.momentum, " needs a momentum buffer");
    parallel_for(0, n, 1 << 15, [&](int64_t lo, int64_t hi) {
      const int64_t step = chunk_for<S>(hi - lo);
      for (int64_t o = lo; o < hi; o += step) {
        const int64_t m = std::min(step, hi - o);  // this chunk: elements [o, o + m)
        T* __restrict pw = const_cast<T*>(load<0>(sw + o, m));
        const T* __restrict pg = load<1>(sg + o, m);
        T* __restrict pb = nullptr;
        if (!use_mom) {
#pragma omp simd
          for (int64_t i = 0; i < m; ++i) pw[i] -= lr * (gs * pg[i] + wd * pw[i]);
        } else if (first) {
          pb = out_ptr<2>(sb + o, m);
#pragma omp simd
          for (int64_t i = 0; i < m; ++i) {
            const T gi = gs * pg[i] + wd * pw[i];
            pb[i] = gi;
            pw[i] -= lr * (nesterov ? gi + mom * gi : gi);
          }
        } else {
          pb = const_cast<T*>(load<2>(sb + o, m));
#pragma omp simd
          for (int64_t i = 0; i < m; ++i) {
            const T gi = gs * pg[i] + wd * pw[i];
            const T b = mom * pb[i] + gi;
            pb[i] = b;
            pw[i] -= lr * (nesterov ? gi + mom * b : b);
          }
        }
        store(pw, sw + o, m);
        if (use_mom) store(pb, sb + o, m);
      }
    });
  });
}

}  // namespace ember::cpu
