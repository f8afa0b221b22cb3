// ops/cpu/batch_norm_add_relu.cpp — the CPU's relu(batch_norm(x) + r), the
// end of every ResNet block, as the pair it is defined by: the batch-norm
// kernels of batch_norm.cpp, then add_relu (forward) or relu_backward
// (backward) of elementwise.cpp. These are the reference the CUDA kernels
// (one fused pass, cuda/kernels/batch_norm.cu) are checked against; on the
// CPU the extra pass over y costs little next to the convolutions. So is
// the convolution + batch norm entry: on the CPU, its parts in order.
#include "ops/cpu/cpu_kernels.h"

namespace ember::cpu {

// y = max(bn(x) + r, 0), bn rounded to the activation type first (it is y
// itself before the add).   x, r, y: [N, C, HW]   the rest: [C]
void batch_norm_add_relu_forward_train(DType dt, const void* x, const void* r, const void* gamma, const void* beta,
                                       void* y, void* save_mean, void* save_invstd, void* running_mean,
                                       void* running_var, int64_t N, int64_t C, int64_t HW, double momentum,
                                       double eps, Stream stream) {
  batch_norm_forward_train(dt, x, gamma, beta, y, save_mean, save_invstd, running_mean, running_var, N, C, HW,
                           momentum, eps, stream);
  add_relu(dt, y, r, y, N * C * HW, stream);
}

// gr = y > 0 ? gy : 0, then batch norm's gradients of gr.
//   x, y, gy, gx, gr: [N, C, HW]   the rest: [C]
void batch_norm_add_relu_backward_train(DType dt, const void* x, const void* y, const void* gy, const void* gamma,
                                        const void* save_mean, const void* save_invstd, void* gx, void* gr,
                                        void* ggamma, void* gbeta, int64_t N, int64_t C, int64_t HW, double eps,
                                        Stream stream) {
  relu_backward(dt, y, gy, gr, N * C * HW, stream);
  batch_norm_backward_train(dt, x, gr, gamma, save_mean, save_invstd, gx, ggamma, gbeta, N, C, HW, eps, stream);
}

// The convolution, then the batch-norm entry: batch norm's own statistics
// pass costs the CPU what taking them in the convolution would.
void conv2d_batch_norm_forward_train(DType dt, const Conv2dGeometry& g, const void* x, const void* w, void* y_conv,
                                     const void* r, const void* gamma, const void* beta, void* y, void* save_mean,
                                     void* save_invstd, void* running_mean, void* running_var, double momentum,
                                     double eps, bool relu, Stream stream) {
  compose_conv2d_batch_norm_forward_train(cpu_kernels(), dt, g, x, w, y_conv, r, gamma, beta, y, save_mean,
                                          save_invstd, running_mean, running_var, momentum, eps, relu, stream);
}

}  // namespace ember::cpu
