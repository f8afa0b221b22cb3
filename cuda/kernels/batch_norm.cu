// cuda/kernels/batch_norm.cu — the batch-norm kernels (training and
// inference forward, and their gradients, and the training pair fused with
// the ReLU after it, or with a residual add and the ReLU), f32, f64, f16 and bf16; parameters
// and statistics have the activation type, except with 16-bit activations, where
// they are f32 (ops/kernels.h). Kernels are templated on the activation
// storage type T; parameters, statistics, coefficients and the arithmetic
// are P = compute_t<T> (T itself for f32/f64, float for f16 and bf16).
//
// Layout x: [N, C, HW]; channel c holds M = N*HW values (a channels-last
// activation comes as [N*H*W, C, 1]). Every reduction is deterministic (no
// float atomics), in two steps of one kernel (batch_norm_sums.cuh):
//   1. partial sums: block (c, g) sums a chunk of channel c's values (in
//      double, in sums of a fixed shape) into slot [c, g] of a scratch
//      buffer; with HW == 1 a block takes 32 channels of a chunk of rows, so
//      that a warp's loads are consecutive. G > 1 only when a channel is
//      long enough and there are too few channels to fill the GPU (ResNet's
//      first layers: 64 channels of N*112*112 values).
//   2. finalize: the last block to finish (an integer ticket counts the
//      finished blocks) adds each channel's G partials in order, one thread
//      per channel, and computes the statistics (and the running-average
//      update, or the parameter gradients) and the per-channel coefficients
//      of the elementwise pass, the second, fully parallel kernel. Which
//      block is last changes no bit; it saves the launch a separate
//      finalize kernel would be (two launches each way, not three).
// As on the CPU (ops/cpu/batch_norm.cpp): the forward sums are taken around
// the channel's first value (so a large mean does not cancel the variance
// away), the variance is biased for normalising and unbiased (M > 1) for the
// running average, coefficients are computed in double, and outputs are
// formed from x - mean, never as x * scale + shift.
//   forward   y  = (x - mean) * (gamma * invstd) + beta
//   backward  gbeta = sum gy, ggamma = invstd * sum gy * (x - mean),
//             gx = A*gy + B*(x - mean) + D with A = gamma*invstd,
//             B = -A*invstd*ggamma/M, D = -A*gbeta/M (training), gx = A*gy (eval)
// With the ReLU fused (kRelu), the forward's elementwise pass stores
// max(y, 0) (NaN stays NaN), and both backward passes read gy masked by the
// output, g = y_out > 0 ? gy : 0, as the CPU's single-pass kernels do: no
// ReLU launch and no masked copy of gy. With a residual too (a ResNet
// block's end, relu(bn(x) + r)), the elementwise pass adds r to batch norm's
// value rounded to T (so the bits are those of batch norm then add_relu)
// before the ReLU; backward, the partial sums store the masked gy, which is
// r's gradient, and the gx pass reads it. The elementwise passes move
// 16-byte packs (vector_loop.cuh) when every operand is aligned and HW is a
// multiple of the pack (one channel lookup per pack), or HW == 1 and C is
// (a pack holds consecutive channels of one row).
#include "cuda/common.cuh"

#include <algorithm>
#include <cmath>

#include "cuda/allocator.h"
#include "cuda/cuda_kernels.h"
#include "cuda/kernels/batch_norm_finalize.cuh"
#include "cuda/kernels/batch_norm_parts.h"
#include "cuda/kernels/batch_norm_sums.cuh"
#include "cuda/kernels/fast_divmod.cuh"
#include "cuda/kernels/vector_loop.cuh"

namespace ember::cuda {
namespace {

constexpr unsigned kChannelThreads = 256;  // threads per block of the inference coefficients kernel
constexpr unsigned kApplyThreads = 256;    // threads per block of the elementwise passes

// ---------------------------------------------------------------- kernels

// Inference forward coefficients: coef = [running_mean | gamma / sqrt(running_var + eps) | beta].
template <typename T>
__global__ void eval_coef_kernel(const T* gamma, const T* beta, const T* running_mean, const T* running_var,
                                 int64_t C, double eps, T* coef) {
  for (int64_t c = grid_thread_index(); c < C; c += grid_thread_count()) {
    coef[c] = running_mean[c];
    coef[C + c] = T(double(gamma[c]) / ::sqrt(double(running_var[c]) + eps));
    coef[2 * C + c] = beta[c];
  }
}

// The channel of element i of x: [N, C, HW].
template <typename I>
__device__ __forceinline__ I channel_of(int64_t i, const IndexDivisor<I>& by_HW, const IndexDivisor<I>& by_C) {
  I nc, hw, n, c;
  by_HW.divmod(I(i), nc, hw);
  by_C.divmod(nc, n, c);
  return c;
}

// The coefficients of one pack's K elements from a [C] row of coef: one
// channel's (planes: the same for every element, one load), or, in the rows
// layout, K consecutive channels' (c a multiple of K: 16-byte packs of P).
template <int K, typename P, typename I>
__device__ __forceinline__ void pack_coefficients(const P* row, I c, bool rows, P (&out)[K]) {
  if (!rows) {
    const P v = row[c];
    EMBER_UNROLL
    for (int k = 0; k < K; ++k) out[k] = v;
    return;
  }
  constexpr int KP = kPackElements<P>;
  static_assert(K % KP == 0, "a pack of T covers whole packs of its coefficients");
  EMBER_UNROLL
  for (int j = 0; j < K; j += KP) {
    const Pack<P> v = load_pack(row + c + j);
    EMBER_UNROLL
    for (int i = 0; i < KP; ++i) out[j + i] = v.v[i];
  }
}

// One output of the forward's elementwise pass: v = (x - mean) * scale + shift;
// with a residual, v rounded to T (batch norm's own output) plus r; then
// max(v, 0) when kRelu (NaN stays NaN).
template <typename T, bool kRelu, typename P = compute_t<T>>
__device__ __forceinline__ T forward_output(T x, bool has_residual, T r, P mean, P scale, P shift) {
  P v = (to_compute(x) - mean) * scale + shift;
  if (has_residual) v = P(to_compute(to_storage<T>(v))) + P(to_compute(r));
  return to_storage<T>(kRelu && v < P(0) ? P(0) : v);
}

// y = (x - coef[0, c]) * coef[1, c] + coef[2, c], plus r when r is given,
// then max(y, 0) when kRelu. packs > 0: 16-byte packs (vector_loop.cuh),
// each of one channel (HW a multiple of the pack: the channel found once
// per pack) or, in the rows layout (HW == 1), of K consecutive channels;
// else element by element.
//   x, r, y: [N, C, HW]  coef: [3, C]
template <typename T, typename I, bool kRelu, typename P = compute_t<T>>
__global__ void forward_apply_kernel(const T* x, const T* r, T* y, const P* coef, int64_t total, int64_t packs,
                                     IndexDivisor<I> by_HW, IndexDivisor<I> by_C) {
  const int64_t C = by_C.value();
  const bool rows = by_HW.value() == 1;  // a pack holds K consecutive channels
  constexpr int K = kPackElements<T>;
  EMBER_NO_UNROLL
  for (int64_t p = grid_thread_index(); p < packs; p += grid_thread_count()) {
    const I c = channel_of(p * K, by_HW, by_C);
    P mean[K], scale[K], shift[K];
    pack_coefficients(coef, c, rows, mean);
    pack_coefficients(coef + C, c, rows, scale);
    pack_coefficients(coef + 2 * C, c, rows, shift);
    const Pack<T> xv = load_pack(x + p * K);
    const Pack<T> rv = r ? load_pack(r + p * K) : Pack<T>{};
    Pack<T> out;
    EMBER_UNROLL
    for (int k = 0; k < K; ++k)
      out.v[k] = forward_output<T, kRelu>(xv.v[k], r != nullptr, rv.v[k], mean[k], scale[k], shift[k]);
    store_pack(y + p * K, out);
  }
  if (packs > 0) return;
  EMBER_NO_UNROLL
  for (int64_t i = grid_thread_index(); i < total; i += grid_thread_count()) {
    const I c = channel_of(i, by_HW, by_C);
    y[i] = forward_output<T, kRelu>(x[i], r != nullptr, r ? r[i] : T{}, coef[c], coef[C + c], coef[2 * C + c]);
  }
}

// Gradients of gamma and beta of channel c from the partials, and coef =
// [mean | A | B | D] for the gx pass. kTrain: invstd = save_invstd[c]
// (`stat`) and the statistics' gradient terms B, D; else invstd =
// 1 / sqrt(running_var[c] + eps) (`stat` = running_var) and B = D = 0.
//   pa, pb: [C, G]   coef: [4, C]
template <typename T, bool kTrain>  // T: the parameter type here (compute_t of the activations)
struct BackwardFinalize {
  const T* gamma;
  const T* mean;
  const T* stat;
  T* ggamma;
  T* gbeta;
  T* coef;
  int64_t M, C;
  double eps;
  __device__ void operator()(int64_t c, const double* pa, const double* pb, int64_t G) const {
    double s1, s2;
    add_partials(c, pa, pb, G, s1, s2);
    const double invstd = kTrain ? double(stat[c]) : 1.0 / ::sqrt(double(stat[c]) + eps);
    const double gb = s1, gg = s2 * invstd;
    gbeta[c] = T(gb);
    ggamma[c] = T(gg);
    const double A = double(gamma[c]) * invstd;
    const double inv_m = M > 0 ? 1.0 / double(M) : 0.0;
    coef[c] = mean[c];
    coef[C + c] = T(A);
    coef[2 * C + c] = kTrain ? T(-A * invstd * gg * inv_m) : T(0);
    coef[3 * C + c] = kTrain ? T(-A * gb * inv_m) : T(0);
  }
};

// One gradient of the backward's elementwise pass (coefficients of its channel).
template <typename T, bool kTrain, typename P = compute_t<T>>
__device__ __forceinline__ T backward_output(T x, T gy, bool has_relu, T relu_y, P mean, P A, P B, P D) {
  const P g = has_relu && !(to_compute(relu_y) > P(0)) ? P(0) : to_compute(gy);
  if (kTrain) return to_storage<T>(A * g + (B * (to_compute(x) - mean) + D));
  return to_storage<T>(A * g);
}

// kTrain: gx = A*g + (B*(x - mean) + D); else gx = A*g; g = gy, or where
// relu_y is given, relu_y > 0 ? gy : 0. packs as forward_apply_kernel's.
//   x, gy, gx, relu_y: [N, C, HW]   coef: [4, C]
template <typename T, bool kTrain, typename I, typename P = compute_t<T>>
__global__ void backward_apply_kernel(const T* x, const T* gy, const T* relu_y, T* gx, const P* coef, int64_t total,
                                      int64_t packs, IndexDivisor<I> by_HW, IndexDivisor<I> by_C) {
  const int64_t C = by_C.value();
  const bool rows = by_HW.value() == 1;  // as forward_apply_kernel's
  constexpr int K = kPackElements<T>;
  EMBER_NO_UNROLL
  for (int64_t p = grid_thread_index(); p < packs; p += grid_thread_count()) {
    const I c = channel_of(p * K, by_HW, by_C);
    P mean[K], A[K], B[K], D[K];
    pack_coefficients(coef, c, rows, mean);
    pack_coefficients(coef + C, c, rows, A);
    pack_coefficients(coef + 2 * C, c, rows, B);
    pack_coefficients(coef + 3 * C, c, rows, D);
    const Pack<T> xv = kTrain ? load_pack(x + p * K) : Pack<T>{};
    const Pack<T> gv = load_pack(gy + p * K);
    const Pack<T> yv = relu_y ? load_pack(relu_y + p * K) : Pack<T>{};
    Pack<T> out;
    EMBER_UNROLL
    for (int k = 0; k < K; ++k)
      out.v[k] = backward_output<T, kTrain>(xv.v[k], gv.v[k], relu_y != nullptr, yv.v[k], mean[k], A[k], B[k], D[k]);
    store_pack(gx + p * K, out);
  }
  if (packs > 0) return;
  EMBER_NO_UNROLL
  for (int64_t i = grid_thread_index(); i < total; i += grid_thread_count()) {
    const I c = channel_of(i, by_HW, by_C);
    gx[i] = backward_output<T, kTrain>(kTrain ? x[i] : T{}, gy[i], relu_y != nullptr, relu_y ? relu_y[i] : T{},
                                       coef[c], coef[C + c], coef[2 * C + c], coef[3 * C + c]);
  }
}

// -------------------------------------------------------------- launchers

// y = the forward's affine map of x (plus r when given; then max(., 0) when
// relu), over `total` = N*C*HW elements.
template <typename T, typename P = compute_t<T>>
void forward_apply(const T* x, const T* r, T* y, const P* coef, int64_t total, int64_t C, int64_t HW, bool relu,
                   cudaStream_t stream) {
  if (total <= 0) return;
  const int64_t packs = apply_packs<T>(total, C, HW, {x, r, y});
  with_index_type(total, [&](auto i) {
    using I = decltype(i);
    launch(relu ? forward_apply_kernel<T, I, true> : forward_apply_kernel<T, I, false>,
           dim3(blocks_for(packs > 0 ? packs : total, kApplyThreads)), dim3(kApplyThreads), 0, stream, x, r, y, coef,
           total, packs, IndexDivisor<I>(HW), IndexDivisor<I>(C));
  });
}

// The training forward: partial sums, finalize, the elementwise pass (plus
// the residual r when not null; with the ReLU when relu).
void forward_train(const char* name, DType dt, const void* x, const void* r, const void* gamma, const void* beta,
                   void* y, void* save_mean, void* save_invstd, void* running_mean, void* running_var, int64_t N,
                   int64_t C, int64_t HW, double momentum, double eps, bool relu, Stream stream) {
  dispatch_float_half(dt, name, [&](auto zero) {
    using T = decltype(zero);
    using P = compute_t<T>;
    if (C <= 0) return;
    const cudaStream_t s = as_cuda_stream(stream);
    const T* px = static_cast<const T*>(x);
    const Split sp = split_for<T>(N, C, HW);
    DeviceBuffer part(size_t(2 * C * sp.G) * sizeof(double));
    DeviceBuffer coef(size_t(3 * C) * sizeof(P));
    const ForwardFinalize<T> finalize{px,
                                      static_cast<const P*>(gamma),
                                      static_cast<const P*>(beta),
                                      static_cast<P*>(save_mean),
                                      static_cast<P*>(save_invstd),
                                      static_cast<P*>(running_mean),
                                      static_cast<P*>(running_var),
                                      coef.as<P>(),
                                      N,
                                      C,
                                      HW,
                                      momentum,
                                      eps};
    partial_sums<T, false>(px, nullptr, nullptr, nullptr, nullptr, N, C, HW, sp, part.as<double>(), finalize, s);
    forward_apply<T>(px, static_cast<const T*>(r), static_cast<T*>(y), coef.as<const P>(), N * C * HW, C, HW, relu, s);
  });
}

}  // namespace

void batch_norm_forward_apply(DType dt, const void* x, const void* r, void* y, const void* coef, int64_t N, int64_t C,
                              int64_t HW, bool relu, Stream stream) {
  dispatch_float_half(dt, "batch_norm_forward_apply", [&](auto zero) {
    using T = decltype(zero);
    using P = compute_t<T>;
    forward_apply<T>(static_cast<const T*>(x), static_cast<const T*>(r), static_cast<T*>(y), static_cast<const P*>(coef),
                     N * C * HW, C, HW, relu, as_cuda_stream(stream));
  });
}

void batch_norm_forward_train(DType dt, const void* x, const void* gamma, const void* beta, void* y,
                              void* save_mean, void* save_invstd, void* running_mean, void* running_var, int64_t N,
                              int64_t C, int64_t HW, double momentum, double eps, Stream stream) {
  forward_train("batch_norm_forward_train", dt, x, nullptr, gamma, beta, y, save_mean, save_invstd, running_mean, running_var,
                N, C, HW, momentum, eps, /*relu=*/false, stream);
}

// y = relu(batch norm of x): one elementwise pass stores both.
//   x, y: [N, C, HW]   the rest: [C]
void batch_norm_relu_forward_train(DType dt, const void* x, const void* gamma, const void* beta, void* y,
                                   void* save_mean, void* save_invstd, void* running_mean, void* running_var,
                                   int64_t N, int64_t C, int64_t HW, double momentum, double eps, Stream stream) {
  forward_train("batch_norm_relu_forward_train", dt, x, nullptr, gamma, beta, y, save_mean, save_invstd, running_mean,
                running_var, N, C, HW, momentum, eps, /*relu=*/true, stream);
}

// y = relu(batch norm of x + r), a ResNet block's end: the elementwise pass
// reads x and r and stores y once (no launch and no memory pass for the
// add).   x, r, y: [N, C, HW]   the rest: [C]
void batch_norm_add_relu_forward_train(DType dt, const void* x, const void* r, const void* gamma, const void* beta,
                                       void* y, void* save_mean, void* save_invstd, void* running_mean,
                                       void* running_var, int64_t N, int64_t C, int64_t HW, double momentum,
                                       double eps, Stream stream) {
  EMBER_CHECK(r != nullptr, "cuda batch_norm_add_relu_forward_train: no residual");
  forward_train("batch_norm_add_relu_forward_train", dt, x, r, gamma, beta, y, save_mean, save_invstd, running_mean,
                running_var, N, C, HW, momentum, eps, /*relu=*/true, stream);
}

void batch_norm_forward_eval(DType dt, const void* x, const void* gamma, const void* beta,
                             const void* running_mean, const void* running_var, void* y, int64_t N, int64_t C,
                             int64_t HW, double eps, Stream stream) {
  dispatch_float_half(dt, "batch_norm_forward_eval", [&](auto zero) {
    using T = decltype(zero);
    using P = compute_t<T>;
    const int64_t total = N * C * HW;
    if (total <= 0) return;
    const cudaStream_t s = as_cuda_stream(stream);
    DeviceBuffer coef(size_t(3 * C) * sizeof(P));
    launch(eval_coef_kernel<P>, dim3(blocks_for(C, kChannelThreads)), dim3(kChannelThreads), 0, s,
           static_cast<const P*>(gamma), static_cast<const P*>(beta), static_cast<const P*>(running_mean),
           static_cast<const P*>(running_var), C, eps, coef.as<P>());
    forward_apply<T>(static_cast<const T*>(x), nullptr, static_cast<T*>(y), coef.as<const P>(), total, C, HW, false,
                     s);
  });
}

namespace {
// The backward kernels: partial sums, finalize (kTrain picks the
// formula), elementwise gx; gy masked by relu_y when it is given. With
// masked_gy, the partial sums also store that masked gy there (the
// residual's gradient) and the gx pass reads it instead of gy and relu_y.
template <typename T, bool kTrain, typename P = compute_t<T>>
void batch_norm_backward(const T* x, const T* gy, const T* relu_y, T* masked_gy, const P* gamma, const P* mean,
                         const P* stat, double eps, T* gx, P* ggamma, P* gbeta, int64_t N, int64_t C, int64_t HW,
                         cudaStream_t s) {
  if (C <= 0) return;
  const Split sp = split_for<T>(N, C, HW);
  DeviceBuffer part(size_t(2 * C * sp.G) * sizeof(double));
  DeviceBuffer coef(size_t(4 * C) * sizeof(P));
  const BackwardFinalize<P, kTrain> finalize{gamma, mean, stat, ggamma, gbeta, coef.as<P>(), N * HW, C, eps};
  partial_sums<T, true>(x, gy, relu_y, masked_gy, mean, N, C, HW, sp, part.as<double>(), finalize, s);
  if (masked_gy) {
    gy = masked_gy;
    relu_y = nullptr;
  }
  const int64_t total = N * C * HW;
  const int64_t packs = apply_packs<T>(total, C, HW, {kTrain ? x : nullptr, gy, relu_y, gx});
  if (total > 0)
    with_index_type(total, [&](auto i) {
      using I = decltype(i);
      launch(backward_apply_kernel<T, kTrain, I>, dim3(blocks_for(packs > 0 ? packs : total, kApplyThreads)),
             dim3(kApplyThreads), 0, s, x, gy, relu_y, gx, coef.as<const P>(), total, packs, IndexDivisor<I>(HW),
             IndexDivisor<I>(C));
    });
}
}  // namespace

void batch_norm_backward_train(DType dt, const void* x, const void* gy, const void* gamma, const void* save_mean,
                               const void* save_invstd, void* gx, void* ggamma, void* gbeta, int64_t N, int64_t C,
                               int64_t HW, double /*eps: held in save_invstd*/, Stream stream) {
  dispatch_float_half(dt, "batch_norm_backward_train", [&](auto zero) {
    using T = decltype(zero);
    using P = compute_t<T>;
    batch_norm_backward<T, true>(static_cast<const T*>(x), static_cast<const T*>(gy), nullptr, nullptr,
                                 static_cast<const P*>(gamma),
                                 static_cast<const P*>(save_mean), static_cast<const P*>(save_invstd), 0.0,
                                 static_cast<T*>(gx), static_cast<P*>(ggamma), static_cast<P*>(gbeta), N, C, HW,
                                 as_cuda_stream(stream));
  });
}

void batch_norm_backward_eval(DType dt, const void* x, const void* gy, const void* gamma,
                              const void* running_mean, const void* running_var, void* gx, void* ggamma,
                              void* gbeta, int64_t N, int64_t C, int64_t HW, double eps, Stream stream) {
  dispatch_float_half(dt, "batch_norm_backward_eval", [&](auto zero) {
    using T = decltype(zero);
    using P = compute_t<T>;
    batch_norm_backward<T, false>(static_cast<const T*>(x), static_cast<const T*>(gy), nullptr, nullptr,
                                  static_cast<const P*>(gamma),
                                  static_cast<const P*>(running_mean), static_cast<const P*>(running_var), eps,
                                  static_cast<T*>(gx), static_cast<P*>(ggamma), static_cast<P*>(gbeta), N, C, HW,
                                  as_cuda_stream(stream));
  });
}

// The gradients of y = relu(batch norm of x): batch norm's of (y > 0 ? gy : 0),
// the mask applied as both passes read gy.
//   x, y, gy, gx: [N, C, HW]   the rest: [C]
void batch_norm_relu_backward_train(DType dt, const void* x, const void* y, const void* gy, const void* gamma,
                                    const void* save_mean, const void* save_invstd, void* gx, void* ggamma,
                                    void* gbeta, int64_t N, int64_t C, int64_t HW, double /*eps*/, Stream stream) {
  dispatch_float_half(dt, "batch_norm_relu_backward_train", [&](auto zero) {
    using T = decltype(zero);
    using P = compute_t<T>;
    batch_norm_backward<T, true>(static_cast<const T*>(x), static_cast<const T*>(gy), static_cast<const T*>(y),
                                 nullptr, static_cast<const P*>(gamma), static_cast<const P*>(save_mean),
                                 static_cast<const P*>(save_invstd), 0.0, static_cast<T*>(gx),
                                 static_cast<P*>(ggamma), static_cast<P*>(gbeta), N, C, HW, as_cuda_stream(stream));
  });
}

// The gradients of y = relu(batch norm of x + r): gr = (y > 0 ? gy : 0),
// stored by the partial-sums pass as it reads gy, and batch norm's
// gradients of gr (the gx pass reads gr alone).
//   x, y, gy, gx, gr: [N, C, HW]   the rest: [C]
void batch_norm_add_relu_backward_train(DType dt, const void* x, const void* y, const void* gy, const void* gamma,
                                        const void* save_mean, const void* save_invstd, void* gx, void* gr,
                                        void* ggamma, void* gbeta, int64_t N, int64_t C, int64_t HW, double /*eps*/,
                                        Stream stream) {
  dispatch_float_half(dt, "batch_norm_add_relu_backward_train", [&](auto zero) {
    using T = decltype(zero);
    using P = compute_t<T>;
    EMBER_CHECK(gr != nullptr, "cuda batch_norm_add_relu_backward_train: no residual gradient");
    batch_norm_backward<T, true>(static_cast<const T*>(x), static_cast<const T*>(gy), static_cast<const T*>(y),
                                 static_cast<T*>(gr), static_cast<const P*>(gamma), static_cast<const P*>(save_mean),
                                 static_cast<const P*>(save_invstd), 0.0, static_cast<T*>(gx),
                                 static_cast<P*>(ggamma), static_cast<P*>(gbeta), N, C, HW, as_cuda_stream(stream));
  });
}

}  // namespace ember::cuda
