// ops/cpu/conv/conv_winograd.h — 3x3 stride-1 convolution by Winograd's minimal
// filtering F(m x m, 3x3), m = 2 or 4 (Lavin & Gray 2015) (internal to
// ops/cpu).
//
// Forward, backward data (the forward of the flipped filter) and the
// filter gradient. Each m x m output tile costs (m + 2)^2 multiplies per
// (input, output) channel pair instead of 9 m^2: 16 instead of 36 for
// F(2x2, 3x3), 36 instead of 144 for F(4x4, 3x3). The filter is
// transformed once per call (U = G g G^T), each input tile once per
// channel (V = B^T d B), then (m + 2)^2 independent GEMMs M[xi] = U[xi]
// [K, C] * V[xi] [C, tiles] do the products and each output tile is
// A^T M A.
//
// Accuracy: F(2x2)'s transforms only add and halve, so f32 results differ
// from direct convolution by a few ulps of the largest terms. F(4x4)'s
// scale by up to 5 (B^T), 8 (A^T) and 1/24 (G): its f32 results round
// several times coarser (up to ~1.5x F(2x2)'s error against the largest
// terms in the tests, ~10x where an output cancels to far below its
// terms), still far inside f16 or bf16 rounding; f64 is exact to rounding
// either way.
//
// Speed: the transforms cost per tile and channel, the GEMMs per channel
// pair, and F(4x4) needs 2.25 transformed values per output where F(2x2)
// needs 4: on a Zen 4 it beats both F(2x2) and the window algorithm on
// outputs 28 wide and wider from 16 channels, F(2x2) wins on 14x14 from
// 32 channels and on 7x7 from 128 (conv_policy.cpp has the figures). Small
// images are tiled side by side in strips (conv_winograd.cpp), which makes
// an image's outputs depend, in floating point, on its neighbour's values
// being finite.
//
// Which algorithm runs is conv_policy.h's choice.
#pragma once
#include "ops/cpu/conv/conv_policy.h"
#include "ops/kernels.h"

namespace ember::cpu {

// y = conv(x, w) by F(m x m, 3x3), m = 2 or 4; S is the storage type
// (f16, bf16, f32, f64). Throws ember::Error for other m or layers it does
// not apply to (winograd_applies).
//   x: [N, C, H, W]   w: [K, C, 3, 3]   y: [N, K, P, Q]
template <typename S>
void conv_forward_winograd(const Conv2dGeometry& g, const S* x, const S* w, S* y, int m);

// gw = dL/dw by F(m x m, 3x3). y = A^T [U . V] A per tile is linear in
// U = G w G^T, so dL/dU = sum over tiles of (A gy_tile A^T) . V_tile and
// gw = G^T (dL/dU) G: per tile the input transform V (as forward) and the
// output-gradient transform Z = A gy A^T ((m + 2)^2 from the tile's m x m,
// zeros past the output's edge), then (m + 2)^2 GEMMs over the tiles,
// dU[xi] [K, C] += Z[xi] [K, tiles] * V[xi] [C, tiles]^T (each thread its
// share of the images, the partial sums added in thread order), and gw
// from dU.
//   x: [N, C, H, W]   gy: [N, K, P, Q]   gw: [K, C, 3, 3]
template <typename S>
void conv_backward_filter_winograd(const Conv2dGeometry& g, const S* x, const S* gy, S* gw, int m);

}  // namespace ember::cpu
