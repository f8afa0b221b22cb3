// ops/cpu/conv_winograd.h — 3x3 stride-1 convolution by Winograd's minimal
// filtering F(2x2, 3x3) (Lavin & Gray 2015), and the choice between it and
// the GEMM lowerings of conv.cpp (internal to ops/cpu).
//
// Each 2x2 output tile costs 16 multiplies per (input, output) channel pair
// instead of 36: the filter is transformed once per call (U = G g G^T, 4x4),
// each 4x4 input tile once per channel (V = B^T d B), then 16 independent
// GEMMs M[xi] = U[xi] [K, C] * V[xi] [C, tiles] do the products and each
// output tile is A^T M A. The transforms are additions and halvings only,
// so f32 results differ from direct convolution by a few ulps of the
// largest terms (the op harness's f32 tolerance holds with a wide margin).
// The transforms cost per tile and channel, the GEMMs per channel pair: it
// wins when channels are many (ResNet-50's 3x3 layers), not at 16.
//
// Which algorithm runs (conv2d forward, and backward data, which is a
// forward convolution of the gradient with the flipped filter):
//   heuristic  (default) Winograd for 3x3 stride 1 when both channel counts
//              reach 32 and there is an image per thread;
//   benchmark  each eligible geometry is timed both ways on its first call
//              and the faster choice is cached per geometry (cuDNN's
//              benchmark mode; results then depend on timing noise);
//   gemm / winograd  forced (winograd wherever it applies, with any batch).
// EMBER_CPU_CONV=heuristic|benchmark|gemm|winograd sets it for a process;
// set_conv_policy for tests and benchmarks.
#pragma once
#include <functional>
#include <string>

#include "ops/kernels.h"

namespace ember::cpu {

enum class ConvPolicy { heuristic, benchmark, gemm, winograd };

ConvPolicy conv_policy();
void set_conv_policy(ConvPolicy p);
// "heuristic" | "benchmark" | "gemm" | "winograd"; throws ember::Error otherwise.
ConvPolicy parse_conv_policy(const std::string& name);
const char* conv_policy_name(ConvPolicy p);
// Forgets the choices benchmark mode made.
void clear_conv_choices();

// Whether F(2x2, 3x3) applies: 3x3 filter, stride 1, padding at most 2.
bool winograd_applies(const Conv2dGeometry& g);

// Runs the forward convolution of geometry g (storage type dt) by the
// algorithm the policy picks: `gemm` or `winograd` (each computes the whole
// output). In benchmark mode the first call of a geometry runs both, timed.
void run_conv_forward(const Conv2dGeometry& g, DType dt, const std::function<void()>& gemm,
                      const std::function<void()>& winograd);

// y = conv(x, w) by F(2x2, 3x3); S is the storage type (f16, bf16, f32, f64).
//   x: [N, C, H, W]   w: [K, C, 3, 3]   y: [N, K, P, Q]
template <typename S>
void conv_forward_winograd(const Conv2dGeometry& g, const S* x, const S* w, S* y);

}  // namespace ember::cpu
