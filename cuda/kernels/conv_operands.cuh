// cuda/kernels/conv_operands.cuh — what the implicit-GEMM convolutions
// (cuda/kernels/conv.cu, and the mma.sync ones of conv_mma.cu) share with
// the kernel lab's convolution versions (cuda/lab/conv_versions.cu): the
// geometry with its index divisors, the store that scatters a [channels,
// N*plane] GEMM result into an NCHW (or NHWC) tensor, and the phases of a
// strided data gradient.
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

// ----------------------------------------------- backward data, by phase
// gx[n, c, h, w] = sum over k, r, s of w[k, c, r, s] * gy[n, k, p, q] where
// h + ph - r = p*sh and w + pw - s = q*sw. With a stride, only the taps r
// with r = h + ph (mod sh) can meet a whole p, so the input pixels split
// into sh*sw phases (a, b) = ((h + ph) mod sh, (w + pw) mod sw), each a
// GEMM over its own taps r = a + ri*sh, s = b + si*sw:
//   gx_ab[c, (n*Ha + hi)*Wb + wi] = sum over (k*Ra + ri)*Sb + si of
//     w[k, c, a + ri*sh, b + si*sw] * gy[n, k, hi - ri + ea, wi - si + eb]
// with h = h0 + hi*sh, w = w0 + wi*sw. One GEMM over all R*S taps would
// multiply zeros in all but 1/(sh*sw) of them (75% at stride 2: the
// profiler's "FLOPs its kernels declare" was 4x the op's). At stride 1
// there is one phase, the plain implicit GEMM.
template <typename I>
struct DataPhase {
  I C, K, R, S, H, W, P, Q, sh, sw;
  I a, b;       // the tap phase: r = a (mod sh), s = b (mod sw)
  I h0, w0;     // the first input row and column of the phase
  I Ha, Wb;     // its rows and columns
  I Ra, Sb;     // its taps
  I ea, eb;     // p = hi - ri + ea, q = wi - si + eb
  IndexDivisor<I> by_Sb, by_Ra, by_Wb, by_Ha;
  bool channels_last;  // w: [K, R, S, C], gy: [N, P, Q, K], gx: [N, H, W, C]
};

template <typename I>
DataPhase<I> data_phase(const Conv2dGeometry& g, int64_t a, int64_t b) {
  auto first = [](int64_t phase, int64_t pad, int64_t stride) { return ((phase - pad) % stride + stride) % stride; };
  auto count = [](int64_t start, int64_t n, int64_t step) { return start < n ? (n - 1 - start) / step + 1 : 0; };
  const int64_t h0 = first(a, g.pad_h, g.stride_h), w0 = first(b, g.pad_w, g.stride_w);
  const int64_t Ha = count(h0, g.H, g.stride_h), Wb = count(w0, g.W, g.stride_w);
  const int64_t Ra = count(a, g.R, g.stride_h), Sb = count(b, g.S, g.stride_w);
  DataPhase<I> d{I(g.C), I(g.K), I(g.R), I(g.S), I(g.H), I(g.W), I(g.P), I(g.Q), I(g.stride_h), I(g.stride_w),
                 I(a), I(b), I(h0), I(w0), I(Ha), I(Wb), I(Ra), I(Sb),
                 I((h0 + g.pad_h - a) / g.stride_h), I((w0 + g.pad_w - b) / g.stride_w),
                 IndexDivisor<I>(Sb), IndexDivisor<I>(Ra), IndexDivisor<I>(Wb), IndexDivisor<I>(Ha), g.channels_last};
  return d;
}

}  // namespace ember::cuda
