// cuda/kernels/conv_batch_norm.cu — the `conv2d_batch_norm_forward_train`
// entry of the CUDA table: a convolution and the training batch norm after
// it (then the ReLU, or the residual add and the ReLU: a ResNet block's
// conv -> bn -> relu and conv -> bn -> + shortcut -> relu).
//
// Unfused, batch norm reads the convolution's output twice: its statistics
// pass (batch_norm_sums.cuh), then its elementwise pass. When the
// convolution runs on mma.sync with 16-bit outputs (conv_mma_fuses_batch_norm),
// the statistics are taken where the output is produced instead: the
// epilogue has each block's tile in shared memory, rounded to T as it is
// stored, and sums every channel's values around the running mean in
// double; the last block to finish adds the partials in order and runs
// batch norm's finalize (batch_norm_finalize.cuh). One read of y_conv and
// one launch fewer: the convolution (with the statistics), then the
// elementwise pass (batch_norm_parts.h), against the convolution, the
// statistics pass and the elementwise pass.
//
// The statistics are those of y_conv as stored, summed in another order
// and around another shift than batch norm's own pass (its channel's first
// value), so save_mean, save_invstd and the running averages agree with the
// unfused entries' to the rounding of double sums, not always bit for bit.
// Every other convolution runs the entries one after the other
// (compose_conv2d_batch_norm_forward_train).
#include "cuda/common.cuh"

#include "cuda/allocator.h"
#include "cuda/cuda_device.h"
#include "cuda/cuda_kernels.h"
#include "cuda/kernels/batch_norm_parts.h"
#include "cuda/kernels/conv_mma.h"

namespace ember::cuda {

void conv2d_batch_norm_forward_train(DType dt, const Conv2dGeometry& g, const void* x, const void* w, void* y_conv,
                                     const void* r, const void* gamma, const void* beta, void* y, void* save_mean,
                                     void* save_invstd, void* running_mean, void* running_var, double momentum,
                                     double eps, bool relu, Stream stream) {
  if (!conv_mma_fuses_batch_norm(dt, g)) {
    compose_conv2d_batch_norm_forward_train(native_kernels(), dt, g, x, w, y_conv, r, gamma, beta, y, save_mean,
                                            save_invstd, running_mean, running_var, momentum, eps, relu, stream);
    return;
  }
  EMBER_CHECK(!r || relu, "conv2d_batch_norm_forward_train: a residual comes with the ReLU (relu(bn + r))");
  DeviceBuffer coef(size_t(3 * g.K) * sizeof(float));  // [mean | gamma * invstd | beta], the finalize's
  conv2d_forward_mma_batch_norm(dt, g, x, w, y_conv,
                                MmaBatchNormArgs{gamma, beta, save_mean, save_invstd, running_mean, running_var,
                                                 coef.get(), momentum, eps},
                                stream);
  batch_norm_forward_apply(dt, y_conv, r, y, coef.get(), g.N * g.P * g.Q, g.K, 1, relu, stream);
  // `coef` goes back to the cache here: later work on the stream runs after the kernels above.
}

}  // namespace ember::cuda
