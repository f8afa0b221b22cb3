// data/augment.cpp — random padded crop and horizontal flip as plain loops.
#include "data/augment.h"

#include <algorithm>
#include <cstring>

#include "engine/error.h"

namespace ember::data {

AugmentParams draw_augment(PhiloxStream& rng, int pad, bool flip) {
  EMBER_CHECK(pad >= 0, "augment: negative crop padding ", pad);
  AugmentParams p;
  if (pad > 0) {
    const uint64_t span = uint64_t(2 * pad + 1);
    p.dy = int(rng.below(span)) - pad;
    p.dx = int(rng.below(span)) - pad;
  }
  if (flip) p.flip = (rng.next_u32() >> 31) != 0;
  return p;
}

void apply_augment(const uint8_t* src, uint8_t* dst, int64_t channels, int64_t height, int64_t width,
                   const AugmentParams& p) {
  const int64_t dy = p.dy, dx = p.dx;
  // Output columns [x0, x1) read inside the image; the rest are zero.
  // Unflipped: sx = x + dx.  Flipped: sx = W-1-x + dx.
  const int64_t x0 = std::clamp<int64_t>(p.flip ? dx : -dx, 0, width);
  const int64_t x1 = std::clamp<int64_t>(p.flip ? width + dx : width - dx, x0, width);
  for (int64_t c = 0; c < channels; ++c) {
    const uint8_t* plane = src + c * height * width;
    for (int64_t y = 0; y < height; ++y) {
      uint8_t* out = dst + (c * height + y) * width;
      const int64_t sy = y + dy;
      if (sy < 0 || sy >= height) {
        std::memset(out, 0, size_t(width));
        continue;
      }
      const uint8_t* row = plane + sy * width;
      std::memset(out, 0, size_t(x0));
      if (p.flip) {
        for (int64_t x = x0; x < x1; ++x) out[x] = row[width - 1 - x + dx];
      } else if (x1 > x0) {
        std::memcpy(out + x0, row + x0 + dx, size_t(x1 - x0));
      }
      std::memset(out + x1, 0, size_t(width - x1));
    }
  }
}

void augment_image(const uint8_t* src, uint8_t* dst, int64_t channels, int64_t height, int64_t width, int pad,
                   bool flip, PhiloxStream& rng) {
  apply_augment(src, dst, channels, height, width, draw_augment(rng, pad, flip));
}

}  // namespace ember::data
