// data/augment.h — per-image augmentation of uint8 CHW images.
//
// Random crop with zero padding followed by random horizontal flip, as
// torchvision's Compose([RandomCrop(H, padding=pad), RandomHorizontalFlip()]):
// the image is (virtually) padded by `pad` zero pixels on each side and an
// H x W window is cut out at a uniform offset, then mirrored with p = 0.5.
// The randomness comes from a PhiloxStream the caller seeds per sample
// (data/batch_iterator.cpp seeds it from (seed, epoch, index)), so the result
// does not depend on which thread runs it. No padded copy is made.
#pragma once
#include <cstdint>

#include "engine/rng.h"

namespace ember::data {

// One sample's draw: output pixel (c, y, x) is input pixel
// (c, y + dy, x' + dx) with x' = flip ? W-1-x : x, or 0 outside the image.
struct AugmentParams {
  int dy = 0, dx = 0;  // crop offset, each in [-pad, pad]
  bool flip = false;
};

// Draws the offsets (dy, then dx, each uniform in [-pad, pad]; nothing is
// drawn for pad = 0) and then, when `flip` is on, the mirror decision (p = 0.5).
AugmentParams draw_augment(PhiloxStream& rng, int pad, bool flip);

// Writes the C x H x W image src transformed by p into dst (no overlap).
void apply_augment(const uint8_t* src, uint8_t* dst, int64_t channels, int64_t height, int64_t width,
                   const AugmentParams& p);

// draw_augment then apply_augment.
void augment_image(const uint8_t* src, uint8_t* dst, int64_t channels, int64_t height, int64_t width, int pad,
                   bool flip, PhiloxStream& rng);

}  // namespace ember::data
