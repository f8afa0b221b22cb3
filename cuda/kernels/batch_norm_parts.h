// cuda/kernels/batch_norm_parts.h — the pieces of batch norm's training
// forward (cuda/kernels/batch_norm.cu) that a fused caller runs itself:
// the tensor-core convolution takes the statistics in its epilogue and
// finalizes them there (batch_norm_finalize.cuh writes the coefficients),
// then this elementwise pass normalises its output
// (cuda/kernels/conv_batch_norm.cu).
#pragma once
#include "ops/kernels.h"

namespace ember::cuda {

// y = (x - mean) * scale + shift, coef = [mean | scale | shift] ([3, C], the
// parameters' type, as the finalize writes it), plus r when not null, then
// max(., 0) when relu: batch_norm_forward_train's (or its ReLU or residual
// form's) second pass.   x, r, y: [N, C, HW]
void batch_norm_forward_apply(DType dt, const void* x, const void* r, void* y, const void* coef, int64_t N, int64_t C,
                              int64_t HW, bool relu, Stream stream);

}  // namespace ember::cuda
