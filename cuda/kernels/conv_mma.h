// cuda/kernels/conv_mma.h — the tensor-core NHWC convolution of conv_mma.cu,
// as conv.cu calls it: whether it takes a convolution, and its passes.
#pragma once
#include "ops/kernels.h"

namespace ember::cuda {

// Channels-last f16 or bf16 with C and K multiples of 8 (16-byte vectors of
// channels), or f32 with C and K multiples of 4 while TF32 is allowed
// (cuda_device.h's set_tf32), every tensor under 2^31 elements, while the
// native tensor cores are on (cuda_kernels.h: EMBER_CUDA_TENSOR_CORES=0
// turns them off).
bool conv_mma_supports(DType dt, const Conv2dGeometry& g);
// The block tile: chosen by the size of the problem (automatic), or forced
// (tests and the kernel lab): large is 128x128 outputs in 3 stages, small
// 64x64 in 4.
enum class MmaConvTileChoice { automatic, large, small };
//   x: [N, H, W, C]  w: [K, R, S, C]  y: [N, P, Q, K]
void conv2d_forward_mma(DType dt, const Conv2dGeometry& g, const void* x, const void* w, void* y, Stream stream,
                        MmaConvTileChoice tile = MmaConvTileChoice::automatic);
// The forward pass followed by batch norm's training statistics, for
// f16/bf16 (conv_mma_fuses_batch_norm): the epilogue sums each channel's
// stored outputs around the running mean (in double, from the tile in
// shared memory, so the statistics are those of y as stored), and the last
// block to finish runs batch norm's finalize: save_mean, save_invstd, the
// running averages, and coef ([3, K] f32) for the elementwise pass that
// follows (batch_norm_parts.h). Parameters and statistics are f32 [K].
struct MmaBatchNormArgs {
  const void* gamma;
  const void* beta;
  void* save_mean;
  void* save_invstd;
  void* running_mean;
  void* running_var;
  void* coef;
  double momentum, eps;
};
bool conv_mma_fuses_batch_norm(DType dt, const Conv2dGeometry& g);
void conv2d_forward_mma_batch_norm(DType dt, const Conv2dGeometry& g, const void* x, const void* w, void* y,
                                   const MmaBatchNormArgs& bn, Stream stream,
                                   MmaConvTileChoice tile = MmaConvTileChoice::automatic);
// The data gradient takes strides up to 2 x 2 (at most 4 phases, one launch); larger ones stay on conv.cu's
// per-phase GEMMs.
bool conv_mma_supports_backward_data(DType dt, const Conv2dGeometry& g);
//   gy: [N, P, Q, K]  w: [K, R, S, C]  gx: [N, H, W, C]
void conv2d_backward_data_mma(DType dt, const Conv2dGeometry& g, const void* gy, const void* w, void* gx,
                              Stream stream, MmaConvTileChoice tile = MmaConvTileChoice::automatic);
//   x: [N, H, W, C]  gy: [N, P, Q, K]  gw: [K, R, S, C]
void conv2d_backward_filter_mma(DType dt, const Conv2dGeometry& g, const void* x, const void* gy, void* gw,
                                Stream stream, MmaConvTileChoice tile = MmaConvTileChoice::automatic);

}  // namespace ember::cuda
