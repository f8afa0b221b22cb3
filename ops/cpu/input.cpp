// ops/cpu/input.cpp — turns a batch of uint8 images into the normalised float
// input of the network (ops::normalize_u8, called once per batch by the
// training loop after the data loader).
//
// y = (x / 255 - mean[c]) * inv_std[c] is computed as x * a[c] + b[c] with
// a = inv_std / 255 and b = -mean * inv_std (per-channel constants in double,
// rounded once to the output type), one plane [HW] of one image at a time;
// f16/bf16 output is computed in f32 and rounded once per value.
#include <algorithm>

#include "engine/parallel.h"
#include "ops/cpu/cpu_kernels.h"
#include "ops/cpu/f16_util.h"

namespace ember::cpu {

//   x: u8 [N, C, HW]   y: [N, C, HW]   C = norm.channels
void normalize_u8(DType dt, const uint8_t* x, void* y, int64_t N, int64_t HW, const ChannelNorm& norm, Stream) {
  dispatch_storage(dt, "normalize_u8", [&](auto zero) {
    using S = decltype(zero);
    using T = compute_t<S>;
    const int64_t C = norm.channels;
    EMBER_CHECK(C >= 1 && C <= 8, "normalize_u8: channels must be in [1, 8], got ", C);
    T a[8], b[8];
    for (int64_t c = 0; c < C; ++c) {
      a[c] = T(double(norm.inv_std[c]) / 255.0);
      b[c] = T(-double(norm.mean[c]) * double(norm.inv_std[c]));
    }
    S* sy = static_cast<S*>(y);
    const uint8_t* __restrict px = x;
    parallel_for(0, N * C, std::max<int64_t>(1, (1 << 15) / std::max<int64_t>(1, HW)), [&](int64_t lo, int64_t hi) {
      for (int64_t p = lo; p < hi; ++p) {
        const T ac = a[p % C], bc = b[p % C];
        const uint8_t* xp = px + p * HW;
        T* __restrict yp = out_ptr<0>(sy + p * HW, HW);
#pragma omp simd
        for (int64_t i = 0; i < HW; ++i) yp[i] = T(xp[i]) * ac + bc;
        store(yp, sy + p * HW, HW);
      }
    });
  });
}

}  // namespace ember::cpu
