// cuda/cudnn/cudnn_pooling.cu — max pooling through cuDNN. cuDNN does not
// return the argmax (the argmax buffer is left untouched); its backward
// finds each window's maximum again from x and y. The deterministic max mode
// and NaN propagation match the native kernels' rules.
//   x, gx: [N, C, H, W]   y, gy: [N, C, P, Q]   (channels_last: NHWC descriptors)
#include "cuda/common.cuh"
#include "cuda/cudnn/cudnn_common.h"
#include "cuda/cudnn/cudnn_kernels.h"

namespace ember::cuda {
namespace {

struct PoolDescriptors {
  TensorDesc x, y;
  PoolDesc pool;
  PoolDescriptors(DType dt, const Pool2dGeometry& g, const char* kernel) {
    const cudnnDataType_t t = cudnn_type(dt, kernel);
    const cudnnTensorFormat_t f = g.channels_last ? CUDNN_TENSOR_NHWC : CUDNN_TENSOR_NCHW;
    x.dense(f, t, g.N, g.C, g.H, g.W);
    y.dense(f, t, g.N, g.C, g.P, g.Q);
    CUDNN_CHECK(cudnnSetPooling2dDescriptor(pool, CUDNN_POOLING_MAX_DETERMINISTIC, CUDNN_PROPAGATE_NAN, int(g.R),
                                            int(g.S), int(g.pad_h), int(g.pad_w), int(g.stride_h), int(g.stride_w)));
  }
};

}  // namespace

void cudnn_max_pool2d_forward(DType dt, const Pool2dGeometry& g, const void* x, void* y, int32_t*, Stream s) {
  PoolDescriptors d(dt, g, "max_pool2d_forward");
  const Blend b;
  CUDNN_CHECK(cudnnPoolingForward(cudnn_handle(as_cuda_stream(s)), d.pool, b.one(dt), d.x, x, b.zero(dt), d.y, y));
  count_device_work(DeviceWork::library_call);
}

void cudnn_max_pool2d_backward(DType dt, const Pool2dGeometry& g, const void* x, const void* y, const void* gy,
                               const int32_t*, void* gx, Stream s) {
  PoolDescriptors d(dt, g, "max_pool2d_backward");
  const Blend b;
  CUDNN_CHECK(cudnnPoolingBackward(cudnn_handle(as_cuda_stream(s)), d.pool, b.one(dt), d.y, y, d.y, gy, d.x, x,
                                   b.zero(dt), d.x, gx));
  count_device_work(DeviceWork::library_call);
}

}  // namespace ember::cuda
