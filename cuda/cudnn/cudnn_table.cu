// cuda/cudnn/cudnn_table.cu — the "cudnn" table: the native CUDA kernels with
// convolution, batch norm (except the inference backward; with the relu
// kernels around it for batch norm + relu and batch norm + add + relu) and max pooling
// from cuDNN and GEMM from cuBLAS. Selected by `--conv cudnn` (the default
// on GPUs) through ember::cuda::init. Convolution + batch norm is the two,
// one after the other.
#include "cuda/allocator.h"
#include "cuda/cuda_device.h"
#include "cuda/cuda_kernels.h"
#include "cuda/cudnn/cudnn_kernels.h"

namespace ember::cuda {
namespace {

// Batch norm + relu with cuDNN's batch norm: the relu kernels of
// elementwise.cu after it (forward, in place) or before it (backward, the
// gradient masked by the output into scratch memory).
void cudnn_batch_norm_relu_forward_train(DType dt, const void* x, const void* gamma, const void* beta, void* y,
                                         void* save_mean, void* save_invstd, void* running_mean, void* running_var,
                                         int64_t N, int64_t C, int64_t HW, double momentum, double eps,
                                         Stream stream) {
  cudnn_batch_norm_forward_train(dt, x, gamma, beta, y, save_mean, save_invstd, running_mean, running_var, N, C, HW,
                                 momentum, eps, stream);
  relu_forward(dt, y, y, N * C * HW, stream);
}
void cudnn_batch_norm_relu_backward_train(DType dt, const void* x, const void* y, const void* gy, const void* gamma,
                                          const void* save_mean, const void* save_invstd, void* gx, void* ggamma,
                                          void* gbeta, int64_t N, int64_t C, int64_t HW, double eps, Stream stream) {
  const int64_t n = N * C * HW;
  DeviceBuffer masked(size_t(n) * dtype_size(dt));
  relu_backward(dt, y, gy, masked.get(), n, stream);
  cudnn_batch_norm_backward_train(dt, x, masked.get(), gamma, save_mean, save_invstd, gx, ggamma, gbeta, N, C, HW,
                                  eps, stream);
}

// relu(batch norm + r) with cuDNN's batch norm: add_relu in place after it;
// backward, the masked gradient goes straight into gr (the residual's
// gradient), which cuDNN's backward then reads.
void cudnn_batch_norm_add_relu_forward_train(DType dt, const void* x, const void* r, const void* gamma,
                                             const void* beta, void* y, void* save_mean, void* save_invstd,
                                             void* running_mean, void* running_var, int64_t N, int64_t C, int64_t HW,
                                             double momentum, double eps, Stream stream) {
  cudnn_batch_norm_forward_train(dt, x, gamma, beta, y, save_mean, save_invstd, running_mean, running_var, N, C, HW,
                                 momentum, eps, stream);
  add_relu(dt, y, r, y, N * C * HW, stream);
}
void cudnn_batch_norm_add_relu_backward_train(DType dt, const void* x, const void* y, const void* gy,
                                              const void* gamma, const void* save_mean, const void* save_invstd,
                                              void* gx, void* gr, void* ggamma, void* gbeta, int64_t N, int64_t C,
                                              int64_t HW, double eps, Stream stream) {
  relu_backward(dt, y, gy, gr, N * C * HW, stream);
  cudnn_batch_norm_backward_train(dt, x, gr, gamma, save_mean, save_invstd, gx, ggamma, gbeta, N, C, HW, eps, stream);
}

// cuDNN's convolution, then the table's batch-norm entry (cuDNN's batch
// norm): no statistics are taken in cuDNN's convolution.
void cudnn_conv2d_batch_norm_forward_train(DType dt, const Conv2dGeometry& g, const void* x, const void* w,
                                           void* y_conv, const void* r, const void* gamma, const void* beta, void* y,
                                           void* save_mean, void* save_invstd, void* running_mean, void* running_var,
                                           double momentum, double eps, bool relu, Stream stream) {
  compose_conv2d_batch_norm_forward_train(*cudnn_kernels(), dt, g, x, w, y_conv, r, gamma, beta, y, save_mean,
                                          save_invstd, running_mean, running_var, momentum, eps, relu, stream);
}

}  // namespace

const Kernels* cudnn_kernels() {
  static const Kernels table = [] {
    Kernels t = native_kernels();
    t.name = "cuda-cudnn";
    t.conv2d_forward = cudnn_conv2d_forward;
    t.conv2d_backward_data = cudnn_conv2d_backward_data;
    t.conv2d_backward_filter = cudnn_conv2d_backward_filter;
    t.batch_norm_forward_train = cudnn_batch_norm_forward_train;
    t.batch_norm_forward_eval = cudnn_batch_norm_forward_eval;
    t.batch_norm_backward_train = cudnn_batch_norm_backward_train;
    t.batch_norm_relu_forward_train = cudnn_batch_norm_relu_forward_train;
    t.batch_norm_relu_backward_train = cudnn_batch_norm_relu_backward_train;
    t.batch_norm_add_relu_forward_train = cudnn_batch_norm_add_relu_forward_train;
    t.batch_norm_add_relu_backward_train = cudnn_batch_norm_add_relu_backward_train;
    t.conv2d_batch_norm_forward_train = cudnn_conv2d_batch_norm_forward_train;
    t.max_pool2d_forward = cudnn_max_pool2d_forward;
    t.max_pool2d_backward = cudnn_max_pool2d_backward;
    t.gemm = cublas_gemm;
    return t;
  }();
  return &table;
}

}  // namespace ember::cuda
