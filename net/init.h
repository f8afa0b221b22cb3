// net/init.h — weight initialisers (PyTorch's formulas), drawing from a Generator.
#pragma once
#include "engine/rng.h"
#include "engine/tensor.h"

namespace ember::net {

// He et al.: normal(0, sqrt(2 / fan)), fan = fan_out (out * k * k) or fan_in (in * k * k).
enum class FanMode { fan_in, fan_out };
void kaiming_normal_(Tensor& weight, FanMode mode, Generator& gen);

// PyTorch's default for Linear and Conv weights and biases:
// uniform(-1/sqrt(fan_in), 1/sqrt(fan_in)), fan_in = weight.numel() / weight.size(0).
void default_uniform_(Tensor& t, int64_t fan_in, Generator& gen);

}  // namespace ember::net
