// data/augment_rrc.cpp — the crop boxes of the record loader: torchvision's
// RandomResizedCrop.get_params (with Python's round-half-to-even) and the
// validation resize + centre crop expressed as one box of the source image.
#include "data/augment_rrc.h"

#include <algorithm>
#include <cmath>

#include "engine/error.h"

namespace ember::data {
namespace {

// Python's round(): to the nearest integer, halves to the even neighbour.
// Written out (not std::nearbyint) so it does not depend on the FP rounding mode.
int64_t round_half_even(double x) {
  const double lo = std::floor(x);
  const double diff = x - lo;
  int64_t r = int64_t(lo);
  if (diff > 0.5 || (diff == 0.5 && (r & 1) != 0)) ++r;
  return r;
}

}  // namespace

double uniform_double(PhiloxStream& rng, double lo, double hi) {
  const double unit = double(rng.next_u64() >> 11) * (1.0 / 9007199254740992.0);  // [0, 1), 53 bits
  return lo + unit * (hi - lo);
}

Box random_resized_crop_box(int height, int width, double min_area, double max_area, double min_ratio, double max_ratio,
                            PhiloxStream& rng) {
  EMBER_CHECK(height > 0 && width > 0, "random_resized_crop: image size ", height, "x", width, " must be positive");
  EMBER_CHECK(min_area > 0 && min_area <= max_area, "random_resized_crop: area range [", min_area, ", ", max_area,
              "] needs 0 < min <= max");
  EMBER_CHECK(min_ratio > 0 && min_ratio <= max_ratio, "random_resized_crop: ratio range [", min_ratio, ", ", max_ratio,
              "] needs 0 < min <= max");
  const double area = double(height) * double(width);
  const double log_lo = std::log(min_ratio), log_hi = std::log(max_ratio);
  for (int attempt = 0; attempt < 10; ++attempt) {
    const double target_area = area * uniform_double(rng, min_area, max_area);
    const double ratio = std::exp(uniform_double(rng, log_lo, log_hi));
    const int64_t w = round_half_even(std::sqrt(target_area * ratio));
    const int64_t h = round_half_even(std::sqrt(target_area / ratio));
    if (w > 0 && w <= width && h > 0 && h <= height) {
      Box b;
      b.width = int(w);
      b.height = int(h);
      b.y = int(rng.below(uint64_t(height - h + 1)));
      b.x = int(rng.below(uint64_t(width - w + 1)));
      return b;
    }
  }
  // Fallback: the centre crop with the image's aspect ratio clamped to the range.
  const double in_ratio = double(width) / double(height);
  int64_t w = width, h = height;
  if (in_ratio < min_ratio) {
    h = round_half_even(double(w) / min_ratio);
  } else if (in_ratio > max_ratio) {
    w = round_half_even(double(h) * max_ratio);
  }
  w = std::clamp<int64_t>(w, 1, width);
  h = std::clamp<int64_t>(h, 1, height);
  Box b;
  b.width = int(w);
  b.height = int(h);
  b.y = int((height - h) / 2);
  b.x = int((width - w) / 2);
  return b;
}

int validation_resize(int output_size, int val_resize) {
  EMBER_CHECK(output_size > 0, "validation: output size ", output_size, " must be positive");
  EMBER_CHECK(val_resize >= 0, "validation: resize ", val_resize, " must not be negative");
  if (val_resize > 0) return val_resize;
  return int(round_half_even(double(output_size) * 8.0 / 7.0));
}

Box validation_crop_box(int height, int width, int output_size, int resize) {
  EMBER_CHECK(height > 0 && width > 0, "validation: image size ", height, "x", width, " must be positive");
  EMBER_CHECK(output_size > 0 && resize > 0, "validation: output size ", output_size, " and resize ", resize,
              " must be positive");
  const int short_side = std::min(height, width);
  const int64_t side = std::clamp<int64_t>(round_half_even(double(short_side) * output_size / resize), 1, short_side);
  Box b;
  b.width = b.height = int(side);
  // torchvision's CenterCrop: offset int(round((size - crop) / 2)).
  b.y = int(round_half_even(double(height - side) / 2.0));
  b.x = int(round_half_even(double(width - side) / 2.0));
  return b;
}

}  // namespace ember::data
