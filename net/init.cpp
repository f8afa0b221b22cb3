// net/init.cpp — weight initialisers.
#include "net/init.h"

#include <cmath>

#include "ops/ops.h"

namespace ember::net {

void kaiming_normal_(Tensor& weight, FanMode mode, Generator& gen) {
  EMBER_CHECK(weight.ndim() >= 2, "kaiming_normal_: weight must have at least 2 dimensions, got ", weight.str());
  const int64_t receptive = weight.numel() / (weight.size(0) * weight.size(1));
  const int64_t fan = (mode == FanMode::fan_out ? weight.size(0) : weight.size(1)) * receptive;
  ops::normal_(weight, 0.0, std::sqrt(2.0 / double(fan)), gen);
}

void default_uniform_(Tensor& t, int64_t fan_in, Generator& gen) {
  EMBER_CHECK(fan_in > 0, "default_uniform_: fan_in must be positive");
  const double bound = 1.0 / std::sqrt(double(fan_in));
  ops::uniform_(t, -bound, bound, gen);
}

}  // namespace ember::net
