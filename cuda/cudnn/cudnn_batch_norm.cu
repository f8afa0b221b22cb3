// cuda/cudnn/cudnn_batch_norm.cu — spatial batch norm through cuDNN:
// training forward (batch statistics, running-average update with the
// unbiased variance, saved mean and inverse std) and its backward, and the
// inference forward. The inference backward stays native (cuDNN has none).
//   x, y, gx, gy: [N, C, HW] as NCHW with H = HW, W = 1; parameters [C]
// With f16 or bf16 activations (CUDNN_DATA_HALF / CUDNN_DATA_BFLOAT16) the
// derived parameter descriptor is f32 (cudnnDeriveBNTensorDescriptor), which
// is what ops/kernels.h asks for: gamma, beta, running and saved statistics,
// ggamma and gbeta stay f32; alpha/beta blend scalars are float for f16, bf16
// and f32, double for f64.
#include "cuda/common.cuh"
#include "cuda/cudnn/cudnn_common.h"
#include "cuda/cudnn/cudnn_kernels.h"

namespace ember::cuda {
namespace {

// The activation descriptor and the derived [1, C, 1, 1] parameter descriptor.
// HW == 1 is how a channels-last activation arrives ([N*H*W, C, 1]): the same
// memory as an NHWC [N*H*W, C, 1, 1], so cuDNN is told NHWC and may pick
// its channels-last kernels.
struct BnDescriptors {
  TensorDesc x, param;
  BnDescriptors(DType dt, int64_t N, int64_t C, int64_t HW, const char* kernel) {
    x.dense(HW == 1 ? CUDNN_TENSOR_NHWC : CUDNN_TENSOR_NCHW, cudnn_type(dt, kernel), N, C, HW, 1);
    CUDNN_CHECK(cudnnDeriveBNTensorDescriptor(param, x, CUDNN_BATCHNORM_SPATIAL));
  }
};

}  // namespace

void cudnn_batch_norm_forward_train(DType dt, const void* x, const void* gamma, const void* beta, void* y,
                                    void* save_mean, void* save_invstd, void* running_mean, void* running_var,
                                    int64_t N, int64_t C, int64_t HW, double momentum, double eps, Stream s) {
  EMBER_CHECK(eps >= CUDNN_BN_MIN_EPSILON, "cudnn batch_norm: eps ", eps, " is below cuDNN's minimum");
  BnDescriptors d(dt, N, C, HW, "batch_norm_forward_train");
  const Blend b;
  CUDNN_CHECK(cudnnBatchNormalizationForwardTraining(cudnn_handle(as_cuda_stream(s)), CUDNN_BATCHNORM_SPATIAL,
                                                     b.one(dt), b.zero(dt), d.x, x, d.x, y, d.param, gamma, beta,
                                                     momentum, running_mean, running_var, eps, save_mean,
                                                     save_invstd));
  count_device_work(DeviceWork::library_call);
}

void cudnn_batch_norm_forward_eval(DType dt, const void* x, const void* gamma, const void* beta,
                                   const void* running_mean, const void* running_var, void* y, int64_t N, int64_t C,
                                   int64_t HW, double eps, Stream s) {
  BnDescriptors d(dt, N, C, HW, "batch_norm_forward_eval");
  const Blend b;
  CUDNN_CHECK(cudnnBatchNormalizationForwardInference(cudnn_handle(as_cuda_stream(s)), CUDNN_BATCHNORM_SPATIAL,
                                                      b.one(dt), b.zero(dt), d.x, x, d.x, y, d.param, gamma, beta,
                                                      running_mean, running_var, eps));
  count_device_work(DeviceWork::library_call);
}

void cudnn_batch_norm_backward_train(DType dt, const void* x, const void* gy, const void* gamma,
                                     const void* save_mean, const void* save_invstd, void* gx, void* ggamma,
                                     void* gbeta, int64_t N, int64_t C, int64_t HW, double eps, Stream s) {
  BnDescriptors d(dt, N, C, HW, "batch_norm_backward_train");
  const Blend b;
  CUDNN_CHECK(cudnnBatchNormalizationBackward(cudnn_handle(as_cuda_stream(s)), CUDNN_BATCHNORM_SPATIAL, b.one(dt),
                                              b.zero(dt), b.one(dt), b.zero(dt), d.x, x, d.x, gy, d.x, gx, d.param,
                                              gamma, ggamma, gbeta, eps, save_mean, save_invstd));
  count_device_work(DeviceWork::library_call);
}

}  // namespace ember::cuda
