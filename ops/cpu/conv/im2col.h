// ops/cpu/conv/im2col.h — unfolding an image into GEMM columns and back (internal
// to ops/cpu; the im2col/col2im kernels of the table and the strided
// convolutions use them).
#pragma once
#include <cstdint>

#include "ops/kernels.h"

namespace ember::cpu {

// x: [C, H, W] -> col: [C*R*S, P*Q]; S -> T is f32/f64/f16/bf16 to itself, or f16/bf16 to f32.
// ldcol: the distance between col's rows (P*Q when 0: other images'
// columns may sit beside each row).
template <typename S, typename T>
void im2col_image(const Conv2dGeometry& g, const S* x, T* col, int64_t ldcol = 0);

// col: [C*R*S, P*Q] -> x: [C, H, W] (sum of every column entry at its position; overwrites x).
// ldcol: the distance between col's rows (P*Q when 0: another image's
// columns may follow each row).
template <typename T>
void col2im_image(const Conv2dGeometry& g, const T* col, T* x, int64_t ldcol = 0);

}  // namespace ember::cpu
