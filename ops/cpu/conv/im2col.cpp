// ops/cpu/conv/im2col.cpp — im2col / col2im (Caffe's lowering of convolution to
// GEMM) and their kernel entries. Each row of the column matrix is one
// (c, r, s) tap; runs of output columns that land inside the image are copied
// with memcpy (stride 1) or a strided loop, the rest are zeros. For f16,
// im2col only moves bits (exact) or
// converts to f32 for the convolutions; col2im sums in f32 and rounds once.
#include "ops/cpu/conv/im2col.h"

#include <algorithm>
#include <cstring>
#include <type_traits>

#include "ops/cpu/cpu_kernels.h"
#include "ops/cpu/f16_util.h"

namespace ember::cpu {
namespace {

// Output columns q whose input column q*sw - pw + s lies inside [0, W): [lo, hi).
inline void valid_q_range(const Conv2dGeometry& g, int64_t s, int64_t& lo, int64_t& hi) {
  // q*sw - pw + s >= 0  <=>  q >= ceil((pw - s) / sw)
  const int64_t a = g.pad_w - s;
  lo = a <= 0 ? 0 : (a + g.stride_w - 1) / g.stride_w;
  // q*sw - pw + s <= W - 1  <=>  q <= floor((W - 1 + pw - s) / sw)
  const int64_t b = g.W - 1 + g.pad_w - s;
  hi = b < 0 ? 0 : std::min(g.Q, b / g.stride_w + 1);
  lo = std::min(lo, hi);
}

// x: [C, H, W] -> col: [C*R*S, P*Q]
}  // namespace

template <typename S, typename T>
void im2col_image(const Conv2dGeometry& g, const S* x, T* col, int64_t ldcol) {
  static_assert(std::is_same_v<S, T>, "only f16/bf16 -> f32 convert (the specialisations below)");
  const int64_t PQ = ldcol > 0 ? ldcol : g.P * g.Q;
  for (int64_t c = 0; c < g.C; ++c)
    for (int64_t r = 0; r < g.R; ++r)
      for (int64_t s = 0; s < g.S; ++s) {
        T* row = col + ((c * g.R + r) * g.S + s) * PQ;
        int64_t q_lo, q_hi;
        valid_q_range(g, s, q_lo, q_hi);
        for (int64_t p = 0; p < g.P; ++p) {
          T* out = row + p * g.Q;
          const int64_t h = p * g.stride_h - g.pad_h + r;
          if (h < 0 || h >= g.H) {
            std::memset(static_cast<void*>(out), 0, sizeof(T) * size_t(g.Q));
            continue;
          }
          const T* in = x + (c * g.H + h) * g.W - g.pad_w + s;
          for (int64_t q = 0; q < q_lo; ++q) out[q] = T(0);
          if (g.stride_w == 1)
            std::memcpy(out + q_lo, in + q_lo, sizeof(T) * size_t(q_hi - q_lo));
          else
            for (int64_t q = q_lo; q < q_hi; ++q) out[q] = in[q * g.stride_w];
          for (int64_t q = q_hi; q < g.Q; ++q) out[q] = T(0);
        }
      }
}

// f16 image -> f32 columns: the image is converted once (vectorised) into
// a thread-local buffer, which the f32 unfolding then copies from.
// (local_buffer slot 30: no caller of im2col_image uses it.)
template <>
void im2col_image<f16, float>(const Conv2dGeometry& g, const f16* x, float* col, int64_t ldcol) {
  constexpr int kImageF32 = 30;
  im2col_image(g, load<kImageF32>(x, g.C * g.H * g.W), col, ldcol);
}
template <>
void im2col_image<bf16, float>(const Conv2dGeometry& g, const bf16* x, float* col, int64_t ldcol) {
  constexpr int kImageF32 = 30;
  im2col_image(g, load<kImageF32>(x, g.C * g.H * g.W), col, ldcol);
}

// col: [C*R*S, P*Q] -> x: [C, H, W] (sum of every column entry at its position)
template <typename T>
void col2im_image(const Conv2dGeometry& g, const T* col, T* x, int64_t ldcol) {
  const int64_t PQ = ldcol > 0 ? ldcol : g.P * g.Q;
  std::memset(x, 0, sizeof(T) * size_t(g.C * g.H * g.W));
  for (int64_t c = 0; c < g.C; ++c)
    for (int64_t r = 0; r < g.R; ++r)
      for (int64_t s = 0; s < g.S; ++s) {
        const T* row = col + ((c * g.R + r) * g.S + s) * PQ;
        int64_t q_lo, q_hi;
        valid_q_range(g, s, q_lo, q_hi);
        for (int64_t p = 0; p < g.P; ++p) {
          const int64_t h = p * g.stride_h - g.pad_h + r;
          if (h < 0 || h >= g.H) continue;
          const T* in = row + p * g.Q;
          T* out = x + (c * g.H + h) * g.W - g.pad_w + s;
          if (g.stride_w == 1)
            for (int64_t q = q_lo; q < q_hi; ++q) out[q] += in[q];
          else
            for (int64_t q = q_lo; q < q_hi; ++q) out[q * g.stride_w] += in[q];
        }
      }
}

template void im2col_image<float, float>(const Conv2dGeometry&, const float*, float*, int64_t);
template void im2col_image<double, double>(const Conv2dGeometry&, const double*, double*, int64_t);
template void im2col_image<f16, f16>(const Conv2dGeometry&, const f16*, f16*, int64_t);
template void im2col_image<bf16, bf16>(const Conv2dGeometry&, const bf16*, bf16*, int64_t);
template void col2im_image<float>(const Conv2dGeometry&, const float*, float*, int64_t);
template void col2im_image<double>(const Conv2dGeometry&, const double*, double*, int64_t);

void im2col(DType dt, const Conv2dGeometry& g, const void* x, void* col, Stream) {
  EMBER_CHECK(!g.channels_last, "cpu im2col: one NCHW image only, not a channels_last geometry");
  dispatch_storage(dt, "im2col", [&](auto zero) {
    using T = decltype(zero);
    im2col_image(g, static_cast<const T*>(x), static_cast<T*>(col));
  });
}

void col2im(DType dt, const Conv2dGeometry& g, const void* col, void* x, Stream) {
  EMBER_CHECK(!g.channels_last, "cpu col2im: one NCHW image only, not a channels_last geometry");
  dispatch_storage(dt, "col2im", [&](auto zero) {
    using S = decltype(zero);
    const int64_t col_n = g.col_rows() * g.col_cols(), x_n = g.C * g.H * g.W;
    auto* xs = static_cast<S*>(x);
    compute_t<S>* xc = out_ptr<1>(xs, x_n);
    col2im_image(g, load<0>(static_cast<const S*>(col), col_n), xc);
    store(xc, xs, x_n);
  });
}

}  // namespace ember::cpu
