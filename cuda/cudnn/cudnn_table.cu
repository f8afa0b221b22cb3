// cuda/cudnn/cudnn_table.cu — the "cudnn" table: the native CUDA kernels with
// convolution, batch norm (except the inference backward) and max pooling
// from cuDNN and GEMM from cuBLAS. Selected by `--conv cudnn` (the default
// on GPUs) through ember::cuda::init.
#include "cuda/cuda_device.h"
#include "cuda/cudnn/cudnn_kernels.h"

namespace ember::cuda {

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
    t.max_pool2d_forward = cudnn_max_pool2d_forward;
    t.max_pool2d_backward = cudnn_max_pool2d_backward;
    t.gemm = cublas_gemm;
    return t;
  }();
  return &table;
}

}  // namespace ember::cuda
