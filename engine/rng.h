// engine/rng.h — Philox4x32-10, the counter-based generator of ember.
//
// Philox maps (key, 128-bit counter) to four random 32-bit words, with no
// state beyond the counter, so the CPU and CUDA kernels draw identical
// streams: element i of a random fill takes its words from block
// (offset + i / k) no matter which thread computes it. The counter is
// [block_lo, block_hi, stream_lo, stream_hi]: a stream id picks an
// independent sequence (the data loader uses (epoch, sample index)).
#pragma once
#include <array>
#include <cstdint>
#include <cmath>

namespace ember {

struct PhiloxBlock {
  uint32_t w[4];
};

// Random123's Philox4x32 with 10 rounds. Usable from host and (later) device code.
#if defined(__CUDACC__)
__host__ __device__
#endif
inline PhiloxBlock philox4x32(uint64_t key, uint64_t block, uint64_t stream) {
  uint32_t c0 = uint32_t(block), c1 = uint32_t(block >> 32), c2 = uint32_t(stream), c3 = uint32_t(stream >> 32);
  uint32_t k0 = uint32_t(key), k1 = uint32_t(key >> 32);
  for (int round = 0; round < 10; ++round) {
    const uint64_t p0 = uint64_t(0xD2511F53u) * c0;
    const uint64_t p1 = uint64_t(0xCD9E8D57u) * c2;
    const uint32_t n0 = uint32_t(p1 >> 32) ^ c1 ^ k0;
    const uint32_t n2 = uint32_t(p0 >> 32) ^ c3 ^ k1;
    c1 = uint32_t(p1);
    c3 = uint32_t(p0);
    c0 = n0;
    c2 = n2;
    k0 += 0x9E3779B9u;
    k1 += 0xBB67AE85u;
  }
  return {{c0, c1, c2, c3}};
}

// A 32-bit word to a uniform float in [0, 1) with 24 random bits, and to (0, 1].
#if defined(__CUDACC__)
__host__ __device__
#endif
inline float u32_to_unit(uint32_t x) { return float(x >> 8) * (1.0f / 16777216.0f); }
#if defined(__CUDACC__)
__host__ __device__
#endif
inline float u32_to_unit_open0(uint32_t x) { return float((x >> 8) + 1) * (1.0f / 16777216.0f); }

// Sequential draws from one Philox stream, for host code (initialisers,
// shuffles, augmentation).
class PhiloxStream {
 public:
  PhiloxStream(uint64_t seed, uint64_t stream) : seed_(seed), stream_(stream) {}
  uint32_t next_u32() {
    if (used_ == 4) {
      cur_ = philox4x32(seed_, block_++, stream_);
      used_ = 0;
    }
    return cur_.w[used_++];
  }
  uint64_t next_u64() { return uint64_t(next_u32()) << 32 | next_u32(); }
  float uniform() { return u32_to_unit(next_u32()); }  // [0, 1)
  // Uniform integer in [0, n), without modulo bias.
  uint64_t below(uint64_t n) {
    if (n <= 1) return 0;
    const uint64_t limit = UINT64_MAX - UINT64_MAX % n;
    uint64_t x;
    do x = next_u64();
    while (x >= limit);
    return x % n;
  }
  double normal() {  // Box-Muller, one value per call
    const double u1 = u32_to_unit_open0(next_u32()), u2 = u32_to_unit(next_u32());
    return std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2);
  }

 private:
  uint64_t seed_, stream_, block_ = 0;
  PhiloxBlock cur_{};
  int used_ = 4;
};

// The generator tensors draw from: a seed and an offset in blocks that each
// random fill advances by what it used, so successive fills differ and a
// run is reproducible from its seed.
class Generator {
 public:
  explicit Generator(uint64_t seed = 0) : seed_(seed) {}
  uint64_t seed() const { return seed_; }
  // Reserves n blocks of stream 0 and returns the first.
  uint64_t reserve_blocks(uint64_t n) {
    const uint64_t start = offset_;
    offset_ += n;
    return start;
  }

 private:
  uint64_t seed_;
  uint64_t offset_ = 0;
};

}  // namespace ember
