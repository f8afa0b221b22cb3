// cuda/cudnn/cudnn_kernels.h — the kernels of the "cudnn" table that come from
// cuDNN (convolution, batch norm, max pooling) and cuBLAS (GEMM). Same
// signatures as ops/kernels.h; everything else in that table is the native
// CUDA kernels. cudnn_table.cu assembles it.
#pragma once
#include "ops/kernels.h"

namespace ember::cuda {

void cudnn_conv2d_forward(DType dt, const Conv2dGeometry& g, const void* x, const void* w, void* y, Stream stream);
void cudnn_conv2d_backward_data(DType dt, const Conv2dGeometry& g, const void* gy, const void* w, void* gx,
                                Stream stream);
void cudnn_conv2d_backward_filter(DType dt, const Conv2dGeometry& g, const void* x, const void* gy, void* gw,
                                  Stream stream);
void cudnn_batch_norm_forward_train(DType dt, const void* x, const void* gamma, const void* beta, void* y,
                                    void* save_mean, void* save_invstd, void* running_mean, void* running_var,
                                    int64_t N, int64_t C, int64_t HW, double momentum, double eps, Stream stream);
void cudnn_batch_norm_forward_eval(DType dt, const void* x, const void* gamma, const void* beta,
                                   const void* running_mean, const void* running_var, void* y, int64_t N, int64_t C,
                                   int64_t HW, double eps, Stream stream);
void cudnn_batch_norm_backward_train(DType dt, const void* x, const void* gy, const void* gamma,
                                     const void* save_mean, const void* save_invstd, void* gx, void* ggamma,
                                     void* gbeta, int64_t N, int64_t C, int64_t HW, double eps, Stream stream);
void cudnn_max_pool2d_forward(DType dt, const Pool2dGeometry& g, const void* x, void* y, int32_t* argmax,
                              Stream stream);
void cudnn_max_pool2d_backward(DType dt, const Pool2dGeometry& g, const void* x, const void* y, const void* gy,
                               const int32_t* argmax, void* gx, Stream stream);
void cublas_gemm(DType dt, bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, double alpha, const void* A,
                 int64_t lda, const void* B, int64_t ldb, double beta, void* C, int64_t ldc, Stream stream);

}  // namespace ember::cuda
