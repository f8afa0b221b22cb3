// cuda/kernels/conv.cu — im2col, col2im and the three native convolution
// kernels (groups = 1, dilation = 1, any kernel size, stride and padding),
// f32, f64, f16 and bf16 (16-bit: the loaders convert gathered values to
// f32, tiles and accumulators are f32, split-K partials are f32, and each
// output is rounded once; see compute_t in cuda/common.cuh).
//
// Convolution is IMPLICIT GEMM: the tiled kernel of gemm.cuh, with loaders
// that gather the im2col matrix (or its transpose-convolution counterpart)
// from the image on the fly, tile by tile, instead of materialising it:
//
//   forward          y  [K, N*P*Q] = w [K, C*R*S] * col(x) [C*R*S, N*P*Q]
//                    (A: the filter as a plain matrix; B: x gathered, zero
//                    outside the image; the store scatters column n*PQ + pq
//                    to y[n, k, pq])
//   backward data    gx [C, N*H*W] = w^T [C, K*R*S] * gyc [K*R*S, N*H*W]
//                    gyc(k*RS + r*S + s, (n, h, w)) = gy[n, k, p, q] when
//                    h + pad_h - r = p*stride_h (and likewise for w) with
//                    0 <= p < P, 0 <= q < Q, else 0: the transposed
//                    convolution as a gather, so every gx element is written
//                    once (no col2im, no atomics). With a stride, one GEMM
//                    per phase of (h, w) over the taps that phase can meet
//                    (DataPhase below), so no zero of gyc is multiplied
//   backward filter  gw [K, C*R*S] = gy [K, N*P*Q] * col(x)^T [N*P*Q, C*R*S]
//                    both operands gathered; M*N is small and the inner
//                    dimension N*P*Q long, so it is SPLIT-K: slice z of the
//                    grid sums a contiguous run of (n, p, q) into its own
//                    partial gw, and a second kernel adds the partials in
//                    slice order (deterministic, no float atomics). Slices
//                    are added only while the tiles alone would leave the GPU
//                    short of blocks.
//
// Why implicit GEMM rather than im2col + gemm per image: no workspace of
// C*R*S*P*Q elements per image (9x the activation for a 3x3 conv), one
// launch for the whole batch instead of one or two per image (ResNet's late
// layers have P*Q = 49, far too little for a GPU per image), and the same
// tile loop — and the same test coverage — as the plain GEMM. The price is
// an index decode per gathered element; indices are 32-bit whenever every
// tensor has fewer than 2^31 elements (the usual case), 64-bit otherwise,
// and the decode divides by multiplication (fast_divmod.cuh): the 32-bit
// kernels hold no division instruction (tests/cuda/test_cuda_ptx.cpp reads the
// PTX to make sure).
//
// im2col / col2im (one image, as ops/kernels.h defines them) are one thread
// per output element; col2im is a gather per input pixel over the (r, s)
// taps that reach it, summed in the CPU's order.
#include "cuda/common.cuh"

#include <algorithm>

#include "cuda/allocator.h"
#include "cuda/cuda_kernels.h"
#include "cuda/kernels/conv_mma.h"
#include "cuda/kernels/conv_operands.cuh"
#include "cuda/kernels/fast_divmod.cuh"
#include "cuda/kernels/gemm.cuh"

namespace ember::cuda {
namespace {

constexpr unsigned kIm2colThreads = 256;   // threads per block of im2col / col2im
constexpr unsigned kReduceThreads = 256;   // threads per block of the split-K reduction
constexpr int64_t kSplitTargetBlocks = 264;  // split-K until about this many blocks (2 per SM on an H100)
constexpr int64_t kSplitMinChunk = 256;     // inner-dimension elements per split-K slice, at least
constexpr int kMaxSplits = 64;

// im2col entry (row crs = (c*R + r)*S + s, column pq = p*Q + q) of image n.
//   x: [N, C, H, W]
// Channels-last: row crs = (r*S + s)*C + c and x: [N, H, W, C].
// (storage T, returned in compute_t<T>)
template <typename T, typename I>
__device__ __forceinline__ compute_t<T> im2col_value(const T* x, const ConvDims<I>& d, I n, I crs, I pq) {
  I c, r, s, p, q;
  if (d.channels_last) {
    I rs;
    d.by_C.divmod(crs, rs, c);
    d.by_S.divmod(rs, r, s);
  } else {
    I cr;
    d.by_S.divmod(crs, cr, s);
    d.by_R.divmod(cr, c, r);
  }
  d.by_Q.divmod(pq, p, q);
  const I h = p * d.sh - d.ph + r, w = q * d.sw - d.pw + s;
  if (h < 0 || h >= d.H || w < 0 || w >= d.W) return compute_t<T>(0);
  return to_compute(x[d.channels_last ? ((n * d.H + h) * d.W + w) * d.C + c : ((n * d.C + c) * d.H + h) * d.W + w]);
}

// ---------------------------------------------------------------- kernels

// col[crs, pq] = x[c, p*sh - ph + r, q*sw - pw + s] (0 outside)     x: [C, H, W]  col: [C*R*S, P*Q]
template <typename T, typename I>
__global__ void im2col_kernel(ConvDims<I> d, const T* x, T* col) {
  const int64_t total = int64_t(d.C) * d.R * d.S * d.P * d.Q;
  for (int64_t i = grid_thread_index(); i < total; i += grid_thread_count()) {
    I crs, pq;
    d.by_PQ.divmod(I(i), crs, pq);
    col[i] = to_storage<T>(im2col_value(x, d, I(0), crs, pq));
  }
}

// x[c, h, w] = sum over the taps (r, s) with h + ph - r = p*sh, w + pw - s = q*sw
// inside the output of col[(c*R + r)*S + s, p*Q + q]      col: [C*R*S, P*Q]  x: [C, H, W]
template <typename T, typename I>
__global__ void col2im_kernel(ConvDims<I> d, const T* col, T* x) {
  const I PQ = d.P * d.Q;
  const int64_t total = int64_t(d.C) * d.H * d.W;
  for (int64_t i = grid_thread_index(); i < total; i += grid_thread_count()) {
    I ch, w, c, h;
    d.by_W.divmod(I(i), ch, w);
    d.by_H.divmod(ch, c, h);
    compute_t<T> sum = 0;
    for (I r = 0; r < d.R; ++r) {
      const I hp = h + d.ph - r;
      if (hp < 0) continue;
      I p, hp_rem;
      d.by_sh.divmod(hp, p, hp_rem);
      if (hp_rem != 0 || p >= d.P) continue;
      for (I s = 0; s < d.S; ++s) {
        const I wq = w + d.pw - s;
        if (wq < 0) continue;
        I q, wq_rem;
        d.by_sw.divmod(wq, q, wq_rem);
        if (wq_rem != 0 || q >= d.Q) continue;
        sum += to_compute(col[((c * d.R + r) * d.S + s) * PQ + p * d.Q + q]);
      }
    }
    x[i] = to_storage<T>(sum);
  }
}

// gw[i] = sum over z of part[z, i], z in order       part: [splits, n] (compute type)  gw: [n]
template <typename T, typename Acc = compute_t<T>>
__global__ void sum_slices_kernel(const Acc* part, int splits, int64_t n, T* gw) {
  for (int64_t i = grid_thread_index(); i < n; i += grid_thread_count()) {
    Acc s = part[i];
    for (int z = 1; z < splits; ++z) s += part[int64_t(z) * n + i];
    gw[i] = to_storage<T>(s);
  }
}

// ------------------------------------------------- implicit-GEMM operands

// forward B(crs, n*PQ + pq) = col(x[n])[crs, pq]
template <typename T, typename I>
struct ForwardB {
  const T* x;
  ConvDims<I> d;
  static constexpr bool kKFastest = false;  // consecutive columns = consecutive q
  __device__ __forceinline__ compute_t<T> operator()(int64_t crs, int64_t npq) const {
    I n, pq;
    d.by_PQ.divmod(I(npq), n, pq);
    return im2col_value(x, d, n, I(crs), pq);
  }
};

// A(row, n*plane + i) = x[n, row, i]: a [N, channels, plane] tensor read as
// the [channels, N*plane] matrix (the operand counterpart of StorePlanes).
//   backward filter  A(k, n*PQ + pq) = gy[n, k, pq]     gy: [N, K, P*Q]
// Channels-last: x is [N, plane, channels], so A(row, col) = x[col * channels + row].
template <typename T, typename I>
struct LoadPlanes {
  const T* x;
  I channels;
  IndexDivisor<I> plane;
  bool channels_last;
  static constexpr bool kKFastest = true;  // consecutive n*plane + i run along i
  __device__ __forceinline__ compute_t<T> operator()(int64_t row, int64_t col) const {
    if (channels_last) return to_compute(x[I(col) * channels + I(row)]);
    I n, i;
    plane.divmod(I(col), n, i);
    return to_compute(x[(n * channels + I(row)) * plane.value() + i]);
  }
};

// ----------------------------------------------- backward data, by phase
// (DataPhase and data_phase: conv_operands.cuh, shared with conv_mma.cu.)

// A(c, (k*Ra + ri)*Sb + si) = w[k, c, a + ri*sh, b + si*sw]      w: [K, C, R, S]
template <typename T, typename I>
struct PhaseWeights {
  const T* w;
  DataPhase<I> d;
  static constexpr bool kKFastest = true;  // consecutive taps of one filter
  __device__ __forceinline__ compute_t<T> operator()(int64_t c, int64_t col) const {
    I kr, si, k, ri;
    d.by_Sb.divmod(I(col), kr, si);
    d.by_Ra.divmod(kr, k, ri);
    const I r = d.a + ri * d.sh, s = d.b + si * d.sw;
    return to_compute(w[d.channels_last ? ((k * d.R + r) * d.S + s) * d.C + I(c) : ((k * d.C + I(c)) * d.R + r) * d.S + s]);
  }
};

// B((k*Ra + ri)*Sb + si, (n*Ha + hi)*Wb + wi) = gy[n, k, hi - ri + ea, wi - si + eb], 0 outside gy.
//   gy: [N, K, P, Q]
template <typename T, typename I>
struct PhaseGradient {
  const T* gy;
  DataPhase<I> d;
  static constexpr bool kKFastest = false;  // consecutive columns = consecutive q
  __device__ __forceinline__ compute_t<T> operator()(int64_t krs, int64_t col) const {
    I kr, si, k, ri, nh, wi, n, hi;
    d.by_Sb.divmod(I(krs), kr, si);
    d.by_Ra.divmod(kr, k, ri);
    d.by_Wb.divmod(I(col), nh, wi);
    d.by_Ha.divmod(nh, n, hi);
    const I p = hi - ri + d.ea, q = wi - si + d.eb;
    if (p < 0 || p >= d.P || q < 0 || q >= d.Q) return compute_t<T>(0);
    return to_compute(gy[d.channels_last ? ((n * d.P + p) * d.Q + q) * d.K + k : ((n * d.K + k) * d.P + p) * d.Q + q]);
  }
};

// Column (n*Ha + hi)*Wb + wi of row c goes to gx[n, c, h0 + hi*sh, w0 + wi*sw].   gx: [N, C, H, W]
template <typename T, typename I>
struct PhaseStore {
  T* gx;
  DataPhase<I> d;
  __device__ __forceinline__ void operator()(int, int64_t c, int64_t col, compute_t<T> acc) const {
    I nh, wi, n, hi;
    d.by_Wb.divmod(I(col), nh, wi);
    d.by_Ha.divmod(nh, n, hi);
    const I h = d.h0 + hi * d.sh, w = d.w0 + wi * d.sw;
    gx[d.channels_last ? ((n * d.H + h) * d.W + w) * d.C + I(c) : ((n * d.C + I(c)) * d.H + h) * d.W + w] =
        to_storage<T>(acc);
  }
};

// backward filter B(n*PQ + pq, crs) = col(x[n])[crs, pq]
template <typename T, typename I>
struct BackwardFilterB {
  const T* x;
  ConvDims<I> d;
  static constexpr bool kKFastest = true;  // consecutive inner indices = consecutive q
  __device__ __forceinline__ compute_t<T> operator()(int64_t npq, int64_t crs) const {
    I n, pq;
    d.by_PQ.divmod(I(npq), n, pq);
    return im2col_value(x, d, n, I(crs), pq);
  }
};

// Split-K slice z of a [rows, ld] result: out[z*slice + row*ld + col]
// (T: the result's storage type, or the compute type for partials).
template <typename T>
struct StoreSlices {
  T* out;
  int64_t slice, ld;
  __device__ __forceinline__ void operator()(int z, int64_t row, int64_t col, compute_t<T> acc) const {
    out[z * slice + row * ld + col] = to_storage<T>(acc);
  }
};

// -------------------------------------------------------------- launchers

// Calls f(T{}, I{}): T from dt (f32/f64/f16/bf16 storage), I = int32_t when `max_elems` < 2^31.
template <typename F>
void dispatch_conv(DType dt, int64_t max_elems, const char* kernel, F&& f) {
  dispatch_float_half(dt, kernel, [&](auto t) { with_index_type(max_elems, [&](auto i) { f(t, i); }); });
}

// The largest tensor (or index space) a convolution touches.
int64_t conv_max_elems(const Conv2dGeometry& g) {
  return std::max({g.N * g.C * g.H * g.W, g.N * g.K * g.P * g.Q, g.K * g.C * g.R * g.S});
}

template <typename T, typename I, typename Cfg>
void backward_filter_tiles(const Conv2dGeometry& g, const T* x, const T* gy, T* gw, cudaStream_t stream) {
  using Acc = compute_t<T>;
  const int64_t M = g.K, N = g.col_rows(), Kdim = g.N * g.P * g.Q;
  const ConvDims<I> d = dims_of<I>(g);
  const LoadPlanes<T, I> load_a{gy, I(g.K), IndexDivisor<I>(g.P * g.Q), g.channels_last};
  const BackwardFilterB<T, I> load_b{x, d};
  const int64_t tiles = ((M + Cfg::BM - 1) / Cfg::BM) * ((N + Cfg::BN - 1) / Cfg::BN);
  int64_t splits = 1;
  if (tiles < kSplitTargetBlocks)
    splits = std::clamp<int64_t>(std::min(kSplitTargetBlocks / tiles, (Kdim + kSplitMinChunk - 1) / kSplitMinChunk), 1,
                                 kMaxSplits);
  int64_t kchunk = (Kdim + splits - 1) / splits;
  kchunk = std::max<int64_t>(Cfg::BK, (kchunk + Cfg::BK - 1) / Cfg::BK * Cfg::BK);
  splits = std::max<int64_t>(1, (Kdim + kchunk - 1) / kchunk);
  const int64_t slice = M * N;
  if (splits == 1) {
    launch_gemm_tiled<T, Cfg>(M, N, Kdim, 1, kchunk, load_a, load_b, StoreSlices<T>{gw, slice, N}, stream);
    return;
  }
  DeviceBuffer part(size_t(splits * slice) * sizeof(Acc));
  launch_gemm_tiled<T, Cfg>(M, N, Kdim, int(splits), kchunk, load_a, load_b,
                              StoreSlices<Acc>{part.as<Acc>(), slice, N}, stream);
  launch(sum_slices_kernel<T>, dim3(blocks_for(slice, kReduceThreads)), dim3(kReduceThreads), 0, stream,
         part.as<const Acc>(), int(splits), slice, gw);
  // `part` goes back to the cache here: later work on the stream runs after the kernels above.
}

}  // namespace

void im2col(DType dt, const Conv2dGeometry& g, const void* x, void* col, Stream stream) {
  EMBER_CHECK(!g.channels_last, "cuda im2col: one NCHW image only, not a channels_last geometry");
  const int64_t total = g.col_rows() * g.col_cols();
  dispatch_conv(dt, std::max(total, g.C * g.H * g.W), "im2col", [&](auto t, auto i) {
    using T = decltype(t);
    using I = decltype(i);
    if (total > 0)
      launch(im2col_kernel<T, I>, dim3(blocks_for(total, kIm2colThreads)), dim3(kIm2colThreads), 0,
             as_cuda_stream(stream), dims_of<I>(g), static_cast<const T*>(x), static_cast<T*>(col));
  });
}

void col2im(DType dt, const Conv2dGeometry& g, const void* col, void* x, Stream stream) {
  EMBER_CHECK(!g.channels_last, "cuda col2im: one NCHW image only, not a channels_last geometry");
  const int64_t total = g.C * g.H * g.W;
  dispatch_conv(dt, std::max(total, g.col_rows() * g.col_cols()), "col2im", [&](auto t, auto i) {
    using T = decltype(t);
    using I = decltype(i);
    if (total > 0)
      launch(col2im_kernel<T, I>, dim3(blocks_for(total, kIm2colThreads)), dim3(kIm2colThreads), 0,
             as_cuda_stream(stream), dims_of<I>(g), static_cast<const T*>(col), static_cast<T*>(x));
  });
}

void conv2d_forward(DType dt, const Conv2dGeometry& g, const void* x, const void* w, void* y, Stream stream) {
  if (conv_mma_supports(dt, g)) {
    conv2d_forward_mma(dt, g, x, w, y, stream);
    return;
  }
  dispatch_conv(dt, conv_max_elems(g), "conv2d_forward", [&](auto t, auto i) {
    using T = decltype(t);
    using I = decltype(i);
    launch_gemm_auto<T>(g.K, g.N * g.P * g.Q, g.col_rows(),
                        MatrixA<T, false>{static_cast<const T*>(w), g.col_rows()},
                        ForwardB<T, I>{static_cast<const T*>(x), dims_of<I>(g)},
                        StorePlanes<T, I>{static_cast<T*>(y), I(g.K), IndexDivisor<I>(g.P * g.Q), g.channels_last},
                        as_cuda_stream(stream));
  });
}

void conv2d_backward_data(DType dt, const Conv2dGeometry& g, const void* gy, const void* w, void* gx,
                          Stream stream) {
  if (conv_mma_supports_backward_data(dt, g)) {
    conv2d_backward_data_mma(dt, g, gy, w, gx, stream);
    return;
  }
  dispatch_conv(dt, conv_max_elems(g), "conv2d_backward_data", [&](auto t, auto i) {
    using T = decltype(t);
    using I = decltype(i);
    // One GEMM per phase; a phase without taps (a 1x1 filter's odd rows at
    // stride 2) runs with an empty inner dimension, which stores zeros.
    for (int64_t a = 0; a < g.stride_h; ++a)
      for (int64_t b = 0; b < g.stride_w; ++b) {
        const DataPhase<I> d = data_phase<I>(g, a, b);
        launch_gemm_auto<T>(g.C, g.N * int64_t(d.Ha) * d.Wb, g.K * int64_t(d.Ra) * d.Sb,
                            PhaseWeights<T, I>{static_cast<const T*>(w), d},
                            PhaseGradient<T, I>{static_cast<const T*>(gy), d},
                            PhaseStore<T, I>{static_cast<T*>(gx), d}, as_cuda_stream(stream));
      }
  });
}

void conv2d_backward_filter(DType dt, const Conv2dGeometry& g, const void* x, const void* gy, void* gw,
                            Stream stream) {
  if (conv_mma_supports(dt, g)) {
    conv2d_backward_filter_mma(dt, g, x, gy, gw, stream);
    return;
  }
  dispatch_conv(dt, conv_max_elems(g), "conv2d_backward_filter", [&](auto t, auto i) {
    using T = decltype(t);
    using I = decltype(i);
    const T* px = static_cast<const T*>(x);
    const T* pgy = static_cast<const T*>(gy);
    T* pgw = static_cast<T*>(gw);
    with_gemm_tile<T>(g.K, g.col_rows(), [&](auto tile) {
      backward_filter_tiles<T, I, decltype(tile)>(g, px, pgy, pgw, as_cuda_stream(stream));
    });
  });
}

}  // namespace ember::cuda
