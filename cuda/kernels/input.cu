// cuda/kernels/input.cu — turns a batch of uint8 images into the normalised
// float input of the network on the device (the counterpart of
// ops/cpu/input.cpp).
//
// y = (x / 255 - mean[c]) * inv_std[c] is computed as x * a[c] + b[c] with
// a = inv_std / 255 and b = -mean * inv_std, per-channel constants computed
// in double on the host and rounded once to the output type, exactly as the
// CPU kernel does. One grid-stride pass over the N * C * HW pixels. f16/bf16
// output is computed in f32 (f32 constants) and rounded once.
#include "cuda/common.cuh"
#include "cuda/cuda_kernels.h"
#include "cuda/kernels/fast_divmod.cuh"

namespace ember::cuda {

namespace {

constexpr unsigned kNormalizeThreads = 256;  // threads per block
constexpr int kMaxChannels = 8;              // ChannelNorm's capacity

// The per-channel constants, passed by value (they live in the kernel's parameter space).
template <typename T>
struct AffineCoefficients {
  T a[kMaxChannels];
  T b[kMaxChannels];
  using argument_has_no_pointers = void;  // for the emulator's stream-order checker (cuda/sim/argument_pointers.h)
};

// ----------------------------------------------------------------- kernels

// y[p, i] = x[p, i] * a[p % C] + b[p % C], p the plane n * C + c
//   x: u8 [N, C, HW]   y: [N, C, HW]
template <typename T, typename I, typename Acc = compute_t<T>>
__global__ void normalize_u8_kernel(const uint8_t* __restrict__ x, T* __restrict__ y, int64_t total,
                                    IndexDivisor<I> by_HW, IndexDivisor<I> by_C, AffineCoefficients<Acc> k) {
  for (int64_t j = grid_thread_index(); j < total; j += grid_thread_count()) {
    I nc, hw, n, c;
    by_HW.divmod(I(j), nc, hw);
    by_C.divmod(nc, n, c);
    y[j] = to_storage<T>(Acc(x[j]) * k.a[c] + k.b[c]);
  }
}

}  // namespace

// --------------------------------------------------------------- launchers

//   x: u8 [N, C, HW]   y: [N, C, HW]   C = norm.channels
void normalize_u8(DType dt, const uint8_t* x, void* y, int64_t N, int64_t HW, const ChannelNorm& norm, Stream stream) {
  dispatch_float_half(dt, "normalize_u8", [&](auto zero) {
    using T = decltype(zero);
    const int64_t C = norm.channels;
    EMBER_CHECK(C >= 1 && C <= kMaxChannels, "normalize_u8: channels must be in [1, 8], got ", C);
    using Acc = compute_t<T>;
    AffineCoefficients<Acc> k{};
    for (int64_t c = 0; c < C; ++c) {
      k.a[c] = Acc(double(norm.inv_std[c]) / 255.0);
      k.b[c] = Acc(-double(norm.mean[c]) * double(norm.inv_std[c]));
    }
    const int64_t total = N * C * HW;
    if (total <= 0) return;
    with_index_type(total, [&](auto index) {
      using I = decltype(index);
      launch(normalize_u8_kernel<T, I>, dim3(blocks_for(total, kNormalizeThreads)), dim3(kNormalizeThreads), 0,
             as_cuda_stream(stream), x, static_cast<T*>(y), total, IndexDivisor<I>(HW), IndexDivisor<I>(C), k);
    });
  });
}

}  // namespace ember::cuda
