// ops/cpu/conv/conv_window.h — convolution as a GEMM over window rows read in
// place ("direct" convolution, internal to ops/cpu).
//
// The image is copied once into a grid: zero-padded, several small images
// stacked, and for stride s split into s x s phase planes (every s-th row and
// column), so that for every filter tap (c, r, s) the values it multiplies
// for consecutive outputs sit in one contiguous run of the grid, a "window
// row" starting at a fixed offset. Then
//   forward          y'[K, cols]  = w[K, CRS] * window-rows[CRS, cols]
//   filter gradient  gw[K, CRS]  += gy'[K, cols] * window-rows^T
// run as register-tiled GEMMs whose image operand is read straight from the
// grid (conv_micro.h): no im2col matrix and no packed copy of the image, the
// two extra passes over memory the GEMM lowerings pay. Only the filter (per
// call) and, for the filter gradient, the output gradient (transposed, one
// pass) are packed.
//
// Grid layout (per stack of G images, per channel, in padded coordinates):
// one band of Hb rows, G image blocks of Wb columns side by side in each;
// image g's pixels sit at (pad_h + h, g*Wb + pad_w + w). The zero columns
// between neighbours serve as the right padding of one and the left of the
// next, so a 3x3 pad-1 layer computes H(W+1) grid outputs per H*W (7x7: 56
// for 49; stacking images one above the other, sharing rows too, took 64;
// the plain padded grid takes 81). Output (g, p, q) is grid column
// p * G*Wb/s + g * Wb/s + q; the others ("junk") are computed and dropped.
//
// Backward data: stride 1 is a forward convolution of gy with the flipped,
// transposed filter; stride s splits gx into its s x s phases, each a
// stride-1 convolution of gy with the sub-filter of the taps that reach it
// (so no multiplies by the zeros a strided transposed convolution inserts).
//
// Every pass handles f64, f32, f16 and bf16 storage (16-bit values are
// converted while the grid, the filter and the output gradient are copied;
// the arithmetic is f32), and bf16 runs on vdpbf16ps where the CPU has
// AVX512-BF16 (conv_bf16_kernels.h): the operands stay bf16, pairs of them
// multiplied into f32 accumulators.
#pragma once
#include "engine/bfloat16.h"
#include "ops/kernels.h"

namespace ember::cpu {

//   x: [N, C, H, W]   w: [K, C, R, S]   y: [N, K, P, Q]   (any stride, padding, filter)
template <typename S>
void conv_forward_window(const Conv2dGeometry& g, const S* x, const S* w, S* y);
//   gy: [N, K, P, Q]   w: [K, C, R, S]   gx: [N, C, H, W]
template <typename S>
void conv_backward_data_window(const Conv2dGeometry& g, const S* gy, const S* w, S* gx);
//   x: [N, C, H, W]   gy: [N, K, P, Q]   gw: [K, C, R, S]
template <typename S>
void conv_backward_filter_window(const Conv2dGeometry& g, const S* x, const S* gy, S* gw);

// bf16 on AVX512-BF16 (conv_window_bf16.cpp); each returns false, having
// done nothing, where those kernels are not available or (backward data)
// the geometry needs phases: the caller then takes the f32 path above.
bool conv_forward_window_bf16(const Conv2dGeometry& g, const bf16* x, const bf16* w, bf16* y);
bool conv_backward_data_window_bf16(const Conv2dGeometry& g, const bf16* gy, const bf16* w, bf16* gx);
bool conv_backward_filter_window_bf16(const Conv2dGeometry& g, const bf16* x, const bf16* gy, bf16* gw);

}  // namespace ember::cpu
