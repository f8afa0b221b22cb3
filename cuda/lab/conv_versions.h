// cuda/lab/conv_versions.h — the kernel lab's convolution ladder
// (apps/bench/kernel_lab.cpp, --op conv2d_forward/<version>, or --op conv-ladder):
// the f32 forward convolution, each version one change from the one before,
// checked against the CPU and profiled (kernel_lab_sim) or timed
// (kernel_lab). ember's own kernel (cuda/kernels/conv.cu) is the middle
// rung. Not part of the kernel table.
//
//   x: [N, C, H, W]   w: [K, C, R, S]   y: [N, K, P, Q]
#pragma once
#include <cstdint>

#include "ops/kernels.h"

namespace ember::cuda::lab {

enum class ConvVersion {
  direct,     // one thread per output, loops over (c, r, s): every weight and input re-read per output
  tap_table,  // ember's implicit GEMM with the gathers' (c, r, s) decode replaced by a table of per-tap offsets
  column_once,  // ... and each thread's column (n, p, q) decoded once, not per element: no decode in the k loop
};
const char* conv_version_name(ConvVersion v);
// "direct" | "tap_table" | "column_once"; throws naming the value otherwise.
ConvVersion parse_conv_version(const char* name);

// y = conv(x, w) for geometry g (groups 1, dilation 1), f32, on the device.
void conv_forward_version(ConvVersion v, const Conv2dGeometry& g, const float* x, const float* w, float* y,
                          Stream stream);

}  // namespace ember::cuda::lab
