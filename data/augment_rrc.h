// data/augment_rrc.h — the crop boxes of the record loader (data/image_loader.h):
// torchvision's RandomResizedCrop.get_params and the validation centre crop,
// as plain functions so tests can check their parameters directly.
#pragma once
#include "data/image.h"
#include "engine/rng.h"

namespace ember::data {

// A uniform double in [lo, hi) with 53 random bits (two words of rng).
double uniform_double(PhiloxStream& rng, double lo, double hi);

// torchvision's RandomResizedCrop.get_params on a height x width image, with
// rng for its draws: up to 10 tries of
//   area  = height * width * uniform(min_area, max_area)
//   ratio = exp(uniform(log(min_ratio), log(max_ratio)))
//   w = round(sqrt(area * ratio)), h = round(sqrt(area / ratio))   (half to even, as Python)
//   accepted when 0 < w <= width and 0 < h <= height: y = below(height - h + 1), x = below(width - w + 1);
// else the centre crop whose aspect ratio is the image's clamped to
// [min_ratio, max_ratio]. Requires 0 < min_area <= max_area, 0 < min_ratio <= max_ratio.
Box random_resized_crop_box(int height, int width, double min_area, double max_area, double min_ratio,
                            double max_ratio, PhiloxStream& rng);

// The short side validation resizes to: val_resize, or round(output_size * 8 / 7)
// when val_resize is 0 (256 for 224, torchvision's Resize(256) + CenterCrop(224)).
int validation_resize(int output_size, int val_resize);

// Resize-short-side-to-`resize` then centre-crop-`output_size`, as one box of
// the source image: the centred square whose side is round(short side *
// output_size / resize) (at least 1, at most the short side).
Box validation_crop_box(int height, int width, int output_size, int resize);

}  // namespace ember::data
