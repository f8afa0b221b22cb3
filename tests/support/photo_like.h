// tests/support/photo_like.h — a deterministic stand-in for a photograph, for the
// JPEG decode and loader tests (no photos can be downloaded, and tests may
// not depend on Debian's wallpaper packages).
//
// Natural images have a power spectrum falling as about 1/f^2 plus sharp
// edges; this makes both: a sum of sinusoids with amplitude ~ 1/f in random
// directions and phases (the texture, down to a 2-pixel period), a few
// filled ellipses with hard edges in their own colours (objects), and a
// little per-pixel noise (sensor grain), drawn from a Philox stream.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>

#include "data/image.h"
#include "engine/rng.h"

namespace ember::testing {

inline data::Image photo_like_image(int height, int width, int channels, uint64_t seed) {
  PhiloxStream rng(seed, 0x9a0701);
  constexpr int kWaves = 48;
  struct Wave {
    float fx, fy, phase, amp[3];
  };
  Wave waves[kWaves];
  constexpr float kTwoPi = 6.28318530718f;
  for (Wave& w : waves) {
    const float period = 2.0f * std::pow(200.0f, rng.uniform());  // 2 .. 400 pixels
    const float angle = kTwoPi * rng.uniform();
    w.fx = std::cos(angle) / period, w.fy = std::sin(angle) / period;
    w.phase = kTwoPi * rng.uniform();
    const float base = 60.0f * period / 400.0f;  // amplitude ~ 1/f: long waves strong, short ones weak
    for (float& a : w.amp) a = base * (0.5f + rng.uniform());
  }
  struct Blob {
    float cx, cy, rx, ry, colour[3];
  };
  Blob blobs[6];
  for (Blob& b : blobs) {
    b.cx = width * rng.uniform(), b.cy = height * rng.uniform();
    b.rx = 0.05f * width + 0.25f * width * rng.uniform();
    b.ry = 0.05f * height + 0.25f * height * rng.uniform();
    for (float& c : b.colour) c = 40.0f + 170.0f * rng.uniform();
  }
  data::Image img;
  img.height = height, img.width = width, img.channels = channels;
  img.pixels.resize(size_t(height) * size_t(width) * size_t(channels));
  for (int y = 0; y < height; ++y)
    for (int x = 0; x < width; ++x) {
      float v[3] = {120.0f, 110.0f, 100.0f};
      for (const Blob& b : blobs) {
        const float dx = (x - b.cx) / b.rx, dy = (y - b.cy) / b.ry;
        if (dx * dx + dy * dy <= 1.0f)
          for (int c = 0; c < 3; ++c) v[c] = b.colour[c];
      }
      for (const Wave& w : waves) {
        const float s = std::sin(kTwoPi * (w.fx * x + w.fy * y) + w.phase);
        for (int c = 0; c < 3; ++c) v[c] += w.amp[c] * s;
      }
      const float grain = 6.0f * (rng.uniform() - 0.5f);
      uint8_t* p = img.pixels.data() + (size_t(y) * size_t(width) + size_t(x)) * size_t(channels);
      if (channels == 1) {
        p[0] = uint8_t(std::clamp(0.299f * v[0] + 0.587f * v[1] + 0.114f * v[2] + grain, 0.0f, 255.0f));
      } else {
        for (int c = 0; c < channels; ++c) p[c] = uint8_t(std::clamp(v[c % 3] + grain, 0.0f, 255.0f));
      }
    }
  return img;
}

}  // namespace ember::testing
