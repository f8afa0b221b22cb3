// ops/cpu/im2col.h — unfolding an image into GEMM columns and back (internal
// to ops/cpu; the im2col/col2im kernels of the table and the strided
// convolutions use them).
#pragma once
#include <cstdint>

#include "ops/kernels.h"

namespace ember::cpu {

// x: [C, H, W] -> col: [C*R*S, P*Q]; S -> T is f32/f64/f16/bf16 to itself, or f16/bf16 to f32.
template <typename S, typename T>
void im2col_image(const Conv2dGeometry& g, const S* x, T* col);

// col: [C*R*S, P*Q] -> x: [C, H, W] (sum of every column entry at its position; overwrites x)
template <typename T>
void col2im_image(const Conv2dGeometry& g, const T* col, T* x);

}  // namespace ember::cpu
