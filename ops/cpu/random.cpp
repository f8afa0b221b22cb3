// ops/cpu/random.cpp — random fills from engine/rng.h's Philox4x32 counter
// generator (ops::uniform_ / ops::normal_, used by the weight initialisers).
//
// Where each value comes from is fixed by ops/kernels.h, so the CPU and CUDA
// fills agree and no result depends on the thread count:
//   uniform: element i <- block (offset + i/4), word i%4, u = u32_to_unit(word)
//   normal:  elements 2j, 2j+1 <- block (offset + j), words 0 and 1:
//            r = sqrt(-2 log u32_to_unit_open0(w0)), t = 2 pi u32_to_unit(w1),
//            z0 = r cos t, z1 = r sin t
// The multiply-adds are explicit fma calls, as in cuda/kernels/random.cu, so
// the two backends round identically whatever each compiler contracts.
// Threads take ranges of blocks; the value is computed in double and rounded
// once to the output type (f16, bf16: through round-to-odd f32, one rounding).
#include <algorithm>
#include <cmath>

#include "engine/parallel.h"
#include "engine/rng.h"
#include "ops/cpu/cpu_kernels.h"
#include "ops/cpu/f16_util.h"

namespace ember::cpu {

namespace {
constexpr int64_t kGrainBlocks = 1 << 12;  // Philox blocks below which a fill runs on one thread
constexpr double kTwoPi = 6.283185307179586476925286766559;

template <typename S>
inline S round_from_double(double v) {
  if constexpr (is_half_v<S>) {
    return double_to_half<S>(v);
  } else {
    return S(v);
  }
}
}  // namespace

// y = lo + (hi - lo) * u,  u in [0, 1)                      y: [n]
void random_uniform(DType dt, void* y, int64_t n, uint64_t seed, uint64_t offset, double lo, double hi, Stream) {
  dispatch_storage(dt, "random_uniform", [&](auto zero) {
    using T = decltype(zero);
    T* py = static_cast<T*>(y);
    const double range = hi - lo;
    const int64_t blocks = (std::max<int64_t>(n, 0) + 3) / 4;
    parallel_for(0, blocks, kGrainBlocks, [&](int64_t b0, int64_t b1) {
      for (int64_t blk = b0; blk < b1; ++blk) {
        const PhiloxBlock r = philox4x32(seed, offset + uint64_t(blk), 0);
        const int64_t i0 = blk * 4, m = std::min<int64_t>(4, n - i0);
        for (int64_t k = 0; k < m; ++k) py[i0 + k] = round_from_double<T>(std::fma(range, double(u32_to_unit(r.w[k])), lo));
      }
    });
  });
}

// y = mean + std * z,  z standard normal                   y: [n]
void random_normal(DType dt, void* y, int64_t n, uint64_t seed, uint64_t offset, double mean, double std,
                   Stream) {
  dispatch_storage(dt, "random_normal", [&](auto zero) {
    using T = decltype(zero);
    T* py = static_cast<T*>(y);
    const int64_t pairs = (std::max<int64_t>(n, 0) + 1) / 2;
    parallel_for(0, pairs, kGrainBlocks, [&](int64_t j0, int64_t j1) {
      for (int64_t j = j0; j < j1; ++j) {
        const PhiloxBlock r = philox4x32(seed, offset + uint64_t(j), 0);
        const double radius = std::sqrt(-2.0 * std::log(double(u32_to_unit_open0(r.w[0]))));
        const double theta = kTwoPi * double(u32_to_unit(r.w[1]));
        py[2 * j] = round_from_double<T>(std::fma(std * radius, std::cos(theta), mean));
        if (2 * j + 1 < n) py[2 * j + 1] = round_from_double<T>(std::fma(std * radius, std::sin(theta), mean));
      }
    });
  });
}

}  // namespace ember::cpu
