// ops/cpu/conv_winograd.h — 3x3 stride-1 convolution by Winograd's minimal
// filtering F(2x2, 3x3) (Lavin & Gray 2015) (internal to ops/cpu).
//
// Forward, backward data (the forward of the flipped filter) and the
// filter gradient. Each 2x2 output tile costs 16 multiplies per (input,
// output) channel pair instead of 36: the filter is transformed once per call (U = G g G^T, 4x4),
// each 4x4 input tile once per channel (V = B^T d B), then 16 independent
// GEMMs M[xi] = U[xi] [K, C] * V[xi] [C, tiles] do the products and each
// output tile is A^T M A. The transforms are additions and halvings only,
// so f32 results differ from direct convolution by a few ulps of the
// largest terms (the op harness's f32 tolerance holds with a wide margin).
// The transforms cost per tile and channel, the GEMMs per channel pair: it
// wins when channels are many (from 32 on a Zen 4; the 16-channel filter
// gradient too), not in the 16-channel forward.
//
// Which algorithm runs is conv_policy.h's choice.
#pragma once
#include "ops/cpu/conv_policy.h"
#include "ops/kernels.h"

namespace ember::cpu {

// y = conv(x, w) by F(2x2, 3x3); S is the storage type (f16, bf16, f32, f64).
//   x: [N, C, H, W]   w: [K, C, 3, 3]   y: [N, K, P, Q]
template <typename S>
void conv_forward_winograd(const Conv2dGeometry& g, const S* x, const S* w, S* y, int m);

// gw = dL/dw by F(2x2, 3x3). y = A^T [U . V] A per tile is linear in
// U = G w G^T, so dL/dU = sum over tiles of (A gy_tile A^T) . V_tile and
// gw = G^T (dL/dU) G: per tile the input transform V (as forward) and the
// output-gradient transform Z = A gy A^T (4x4 from the tile's 2x2, zeros
// past the output's edge), then 16 GEMMs over the tiles, dU[xi] [K, C] +=
// Z[xi] [K, tiles] * V[xi] [C, tiles]^T (each thread its share of the
// images, the partial sums added in thread order), and gw from dU.
//   x: [N, C, H, W]   gy: [N, K, P, Q]   gw: [K, C, 3, 3]
template <typename S>
void conv_backward_filter_winograd(const Conv2dGeometry& g, const S* x, const S* gy, S* gw, int m);

}  // namespace ember::cpu
