// ops/cpu/multi_tensor.cpp — the multi-tensor optimizer step on the CPU
// (ops/kernels.h: unscale_gradients, multi_tensor_sgd, loss_scale_update):
// the reference the CUDA kernels (cuda/kernels/multi_tensor.cu) are checked
// against. Chunks run in parallel; each converts its 16-bit operands to f32
// in thread-local buffers, updates in f32 and rounds once when it stores.
#include <algorithm>
#include <atomic>
#include <cmath>

#include "engine/parallel.h"
#include "ops/cpu/cpu_kernels.h"
#include "ops/cpu/f16_util.h"

namespace ember::cpu {

//   slices: [*]   chunks: [num_chunks]   state: f32 [kLossScaleStateSize]
void unscale_gradients(const MultiTensorSlice* slices, const MultiTensorChunk* chunks, int64_t num_chunks,
                       float* state, Stream) {
  const float inv_scale = 1.0f / state[kLossScale];
  std::atomic<int> found{0};
  parallel_for(0, num_chunks, 1, [&](int64_t lo, int64_t hi) {
    for (int64_t c = lo; c < hi; ++c) {
      const MultiTensorChunk& ch = chunks[c];
      const MultiTensorSlice& s = slices[ch.slice];
      const int64_t m = ch.end - ch.begin;
      dispatch_storage(DType(s.grad_dtype), "unscale_gradients", [&](auto zero) {
        using S = decltype(zero);
        if constexpr (std::is_same_v<S, double>) {
          fail("cpu unscale_gradients: f64 gradients are not supported");
        } else {
          const float* g = load<0>(static_cast<const S*>(s.grad) + ch.begin, m);
          float* out = s.grad32 + ch.begin;
          int bad = 0;
#pragma omp simd reduction(| : bad)
          for (int64_t i = 0; i < m; ++i) {
            bad |= !std::isfinite(g[i]);
            out[i] = g[i] * inv_scale;
          }
          if (bad) found.store(1, std::memory_order_relaxed);
        }
      });
    }
  });
  if (found) state[kFoundNonfinite] = 1.0f;
}

//   slices: [*]   chunks: [num_chunks]   state: f32 [kLossScaleStateSize] or nullptr
//   hyper: f32 [2] (lr, momentum) or nullptr
void multi_tensor_sgd(const MultiTensorSlice* slices, const MultiTensorChunk* chunks, int64_t num_chunks, double lr,
                      double momentum, bool nesterov, const float* state, const float* hyper, Stream) {
  if (state && state[kFoundNonfinite] != 0.0f) return;  // a skipped step
  const float lr_f = hyper ? hyper[0] : float(lr), mom = hyper ? hyper[1] : float(momentum);
  parallel_for(0, num_chunks, 1, [&](int64_t lo, int64_t hi) {
    for (int64_t c = lo; c < hi; ++c) {
      const MultiTensorChunk& ch = chunks[c];
      const MultiTensorSlice& s = slices[ch.slice];
      const int64_t m = ch.end - ch.begin;
      const float step = lr_f * s.lr_mult, wd = s.weight_decay;
      const float* __restrict g = s.grad32 + ch.begin;
      float* __restrict w = s.weight + ch.begin;
      if (!s.momentum) {
#pragma omp simd
        for (int64_t i = 0; i < m; ++i) w[i] -= step * (g[i] + wd * w[i]);
      } else {
        float* __restrict b = s.momentum + ch.begin;
#pragma omp simd
        for (int64_t i = 0; i < m; ++i) {
          const float gi = g[i] + wd * w[i];
          const float bi = mom * b[i] + gi;
          b[i] = bi;
          w[i] -= step * (nesterov ? gi + mom * bi : bi);
        }
      }
      if (s.half) {
        if (DType(s.half_dtype) == DType::f16)
          f2h(w, static_cast<f16*>(s.half) + ch.begin, m);
        else if (DType(s.half_dtype) == DType::bf16)
          f2h(w, static_cast<bf16*>(s.half) + ch.begin, m);
        else
          fail(cat("cpu multi_tensor_sgd: the 16-bit copy must be f16 or bf16, not ", dtype_name(DType(s.half_dtype))));
      }
    }
  });
}

//   state: f32 [kLossScaleStateSize]
void loss_scale_update(float* state, const LossScaleParams& p, Stream) {
  float& scale = state[kLossScale];
  if (state[kFoundNonfinite] == 0.0f) {
    state[kConsecutiveSkips] = 0.0f;
    if (p.dynamic && (state[kCleanSteps] += 1.0f) >= float(p.window)) {
      state[kCleanSteps] = 0.0f;
      scale = std::min(scale * 2.0f, std::max(float(p.max_scale), scale));
    }
  } else {
    state[kSkippedSteps] += 1.0f;
    state[kConsecutiveSkips] += 1.0f;
    state[kCleanSteps] = 0.0f;
    if (p.dynamic) scale = std::max(scale * 0.5f, 1.0f / 16777216.0f);  // floor 2^-24
  }
  state[kFoundNonfinite] = 0.0f;
}

}  // namespace ember::cpu
