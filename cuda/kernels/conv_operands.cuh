// cuda/kernels/conv_operands.cuh — what the implicit-GEMM convolutions
// (cuda/kernels/conv.cu) share with the kernel lab's convolution versions
// (cuda/lab/conv_versions.cu): the geometry with its index divisors, and the
// store that scatters a [channels, N*plane] GEMM result into an NCHW (or
// NHWC) tensor.
//
// Channels-last (d.channels_last): the images are [N, H, W, C] and the
// filter [K, R, S, C], and the GEMM's inner index over the filter taps runs
// (r, s, c) instead of (c, r, s), so the filter is still a plain [K, R*S*C]
// matrix (its memory order) and the filter gradient stores as one too.
#pragma once
#include <cstdint>

#include "cuda/common.cuh"
#include "cuda/kernels/fast_divmod.cuh"
#include "ops/kernels.h"

namespace ember::cuda {

// The geometry as index type I (int32_t when every tensor fits, else int64_t),
// with the divisors the index decodes use.
template <typename I>
struct ConvDims {
  I N, C, H, W, K, R, S, sh, sw, ph, pw, P, Q;
  IndexDivisor<I> by_R, by_S, by_H, by_W, by_Q, by_PQ, by_sh, by_sw, by_C;
  bool channels_last;
};

template <typename I>
ConvDims<I> dims_of(const Conv2dGeometry& g) {
  using D = IndexDivisor<I>;
  ConvDims<I> d{I(g.N), I(g.C), I(g.H), I(g.W), I(g.K), I(g.R), I(g.S), I(g.stride_h), I(g.stride_w),
                I(g.pad_h), I(g.pad_w), I(g.P), I(g.Q), {}, {}, {}, {}, {}, {}, {}, {}, {}, g.channels_last};
  d.by_R = D(g.R), d.by_S = D(g.S), d.by_H = D(g.H), d.by_W = D(g.W), d.by_Q = D(g.Q), d.by_PQ = D(g.P * g.Q);
  d.by_sh = D(g.stride_h), d.by_sw = D(g.stride_w), d.by_C = D(g.C);
  return d;
}

// Column n*plane + i of a [channels, N*plane] result goes to y[n, row, i].
//   y: [N, channels, plane]   (channels_last: [N, plane, channels], so y[col * channels + row])
template <typename T, typename I>
struct StorePlanes {
  T* y;
  I channels;
  IndexDivisor<I> plane;
  bool channels_last = false;
  __device__ __forceinline__ void operator()(int, int64_t row, int64_t col, compute_t<T> acc) const {
    if (channels_last) {
      y[I(col) * channels + I(row)] = to_storage<T>(acc);
      return;
    }
    I n, i;
    plane.divmod(I(col), n, i);
    y[(n * channels + I(row)) * plane.value() + i] = to_storage<T>(acc);
  }
};

}  // namespace ember::cuda
