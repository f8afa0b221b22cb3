// cuda/kernels/optimizer.cu — one SGD step over a parameter tensor on the
// device (the counterpart of ops/cpu/optimizer.cpp).
//
// PyTorch's formula (dampening 0), in the parameter's type:
//   g' = grad_scale * g + wd * w
//   buf = first_step ? g' : momentum * buf + g'       (only when momentum != 0)
//   w -= lr * (nesterov ? g' + momentum * buf : buf)  (g' when momentum == 0)
// One grid-stride pass over w, g and buf; the form is chosen on the host and
// is the same for every thread. With momentum == 0 buf is never touched (it
// may be nullptr). f16/bf16 w/g/buf are loaded to f32, updated in f32 and rounded
// once each (the trainer normally keeps f32 masters and calls this with f32).
#include "cuda/common.cuh"
#include "cuda/cuda_kernels.h"

namespace ember::cuda {

namespace {

constexpr unsigned kSgdThreads = 256;  // threads per block

enum class SgdForm : int { plain, first_momentum, momentum };  // momentum == 0 | first step | later steps

// ----------------------------------------------------------------- kernels

//   w, g, buf: [n]
template <typename T, typename C = compute_t<T>>
__global__ void sgd_update_kernel(T* __restrict__ w, const T* __restrict__ g, T* __restrict__ buf, int64_t n, C lr,
                                  C mom, C wd, C gs, bool nesterov, SgdForm form) {
  for (int64_t i = grid_thread_index(); i < n; i += grid_thread_count()) {
    const C wi = to_compute(w[i]);
    const C gi = gs * to_compute(g[i]) + wd * wi;
    if (form == SgdForm::plain) {
      w[i] = to_storage<T>(wi - lr * gi);
    } else {
      const C b = form == SgdForm::first_momentum ? gi : mom * to_compute(buf[i]) + gi;
      buf[i] = to_storage<T>(b);
      w[i] = to_storage<T>(wi - lr * (nesterov ? gi + mom * b : b));
    }
  }
}

}  // namespace

// --------------------------------------------------------------- launchers

//   w, g, momentum_buf: [n]   (momentum_buf may be nullptr when momentum == 0)
void sgd_update(DType dt, void* w, const void* g, void* momentum_buf, int64_t n, const SgdParams& p, Stream stream) {
  dispatch_float_half(dt, "sgd_update", [&](auto zero) {
    using T = decltype(zero);
    using C = compute_t<T>;
    const bool use_momentum = p.momentum != 0.0;
    EMBER_CHECK(!use_momentum || momentum_buf != nullptr, "sgd_update: momentum ", p.momentum,
                " needs a momentum buffer");
    if (n <= 0) return;
    const SgdForm form = !use_momentum ? SgdForm::plain : p.first_step ? SgdForm::first_momentum : SgdForm::momentum;
    launch(sgd_update_kernel<T>, dim3(blocks_for(n, kSgdThreads)), dim3(kSgdThreads), 0, as_cuda_stream(stream),
           static_cast<T*>(w), static_cast<const T*>(g), static_cast<T*>(momentum_buf), n, C(p.lr), C(p.momentum),
           C(p.weight_decay), C(p.grad_scale), p.nesterov, form);
  });
}

}  // namespace ember::cuda
