// cuda/kernels/batch_norm.cu — the batch-norm kernels (training and
// inference forward, and their gradients, and the training pair fused with
// the ReLU after it, or with a residual add and the ReLU), f32, f64, f16 and bf16; parameters
// and statistics have the activation type, except with 16-bit activations, where
// they are f32 (ops/kernels.h). Kernels are templated on the activation
// storage type T; parameters, statistics, coefficients and the arithmetic
// are P = compute_t<T> (T itself for f32/f64, float for f16 and bf16).
//
// Layout x: [N, C, HW]; channel c holds M = N*HW values. Every reduction is
// deterministic (no float atomics), in two steps of one kernel:
//   1. partial sums: grid (C, G), block (c, g) sums a contiguous run of
//      channel c's values (in double, thread-strided, then reduce.cuh's
//      block_sum: shuffle trees of a fixed shape) into slot [c, g] of a
//      scratch buffer. G > 1 only when a channel is long enough and there
//      are too few channels to fill the GPU (ResNet's first layers: 64
//      channels of N*112*112 values).
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
// 16-byte packs (vector_loop.cuh) when HW is a multiple of the pack and
// every operand is aligned, one channel lookup per pack.
#include "cuda/common.cuh"

#include <algorithm>
#include <cmath>
#include <initializer_list>
#include <map>
#include <mutex>

#include "cuda/allocator.h"
#include "cuda/kernels/fast_divmod.cuh"
#include "cuda/cuda_kernels.h"
#include "cuda/kernels/reduce.cuh"
#include "cuda/kernels/vector_loop.cuh"

namespace ember::cuda {
namespace {

constexpr unsigned kSumThreads = 256;      // threads per block of the partial sums (a multiple of 32)
constexpr unsigned kChannelThreads = 256;  // threads per block of the inference coefficients kernel
constexpr unsigned kApplyThreads = 256;    // threads per block of the elementwise passes
constexpr int64_t kMinPerBlock = 1024;     // values per partial-sum block, at least
constexpr int64_t kTargetBlocks = 264;     // split channels until about this many blocks

// ---------------------------------------------------------------- kernels

// Partial sums of channel c = blockIdx.x over values [g*chunk, (g+1)*chunk)
// (g = blockIdx.y) of its N*HW, into pa/pb[c*G + g], and then, in the last
// block to finish (tickets[0] counts the finished blocks and is left at 0
// again), finalize(c, pa, pb, G) for every channel:
//   kGrad = false:  pa = sum (x - shift), pb = sum (x - shift)^2, shift = x[0, c, 0]
//   kGrad = true:   pa = sum gy,  pb = sum gy * (x - mean[c])  (x - mean in T)
//   x, gy: [N, C, HW]   mean: [C]   pa, pb: [C, G]
//   relu_y: [N, C, HW] or nullptr: gy counts only where relu_y > 0 (kGrad)
//   masked_gy: [N, C, HW] or nullptr: receives that masked gy (kGrad with relu_y)
// packed: each thread reads 16-byte packs (HW and chunk are multiples of the
// pack and every operand is aligned, so a pack lies in one plane).
template <typename T, bool kGrad, typename I, typename Finalize, typename P = compute_t<T>>
__global__ void partial_sums_kernel(const T* x, const T* gy, const T* relu_y, T* masked_gy, const P* mean, int64_t N,
                                    int64_t C, IndexDivisor<I> by_HW, int64_t chunk, bool packed, double* pa,
                                    double* pb, unsigned* tickets, Finalize finalize) {
  const int64_t HW = by_HW.value();
  const int64_t c = blockIdx.x, g = blockIdx.y, G = gridDim.y, M = N * HW;
  const int64_t begin = g * chunk, end = std::min(M, begin + chunk);
  P center = P(0);  // the shift the sums are taken around
  if constexpr (kGrad)
    center = mean[c];
  else if (M > 0)
    center = to_compute(x[c * HW]);
  double a = 0.0, b = 0.0;
  // Adds one value to the sums: x's (forward), or the gradient's, masked by
  // relu_y > 0 when relu_y is given, with x (backward); returns that gradient.
  // The mask is a bit mask, not a branch: every lane makes the same accesses.
  auto add_value = [&](T xv, T gv, T yv) {
    if constexpr (kGrad) {
      const T g = relu_y ? keep_or_zero(to_compute(yv) > P(0), gv) : gv;
      const double gd = double(to_compute(g));
      a += gd;
      b += gd * double(to_compute(xv) - center);
      return g;
    } else {
      const double d = double(to_compute(xv)) - double(center);
      a += d;
      b += d * d;
      return xv;
    }
  };
  if (packed) {
    constexpr int K = kPackElements<T>;
    EMBER_NO_UNROLL  // unrolled, nvcc would divide for the trip count (tests/cuda/test_cuda_ptx.cpp)
    for (int64_t j = begin + int64_t(threadIdx.x) * K; j < end; j += int64_t(blockDim.x) * K) {
      I n, hw;
      by_HW.divmod(I(j), n, hw);
      const int64_t at = (int64_t(n) * C + c) * HW + hw;
      const Pack<T> xv = load_pack(x + at);
      Pack<T> gv{}, yv{}, out;
      if constexpr (kGrad) {
        gv = load_pack(gy + at);
        if (relu_y) yv = load_pack(relu_y + at);
      }
      EMBER_UNROLL
      for (int k = 0; k < K; ++k) out.v[k] = add_value(xv.v[k], gv.v[k], yv.v[k]);
      if (kGrad && masked_gy) store_pack(masked_gy + at, out);
    }
  } else {
    EMBER_NO_UNROLL
    for (int64_t j = begin + threadIdx.x; j < end; j += blockDim.x) {
      I n, hw;
      by_HW.divmod(I(j), n, hw);
      const int64_t at = (int64_t(n) * C + c) * HW + hw;
      const T g = add_value(x[at], kGrad ? gy[at] : T{}, relu_y ? relu_y[at] : T{});
      if (kGrad && masked_gy) masked_gy[at] = g;
    }
  }
  a = block_sum(a);  // fixed-shape shuffle trees (reduce.cuh): deterministic
  b = block_sum(b);
  __shared__ unsigned finished_before;  // blocks that had finished before this one
  if (threadIdx.x == 0) {
    pa[c * G + g] = a;
    pb[c * G + g] = b;
    __threadfence();  // the partials are visible to every block before the ticket is
    finished_before = atomicAdd(tickets, 1u);
  }
  __syncthreads();
  const unsigned blocks = gridDim.x * gridDim.y;
  if (finished_before != blocks - 1) return;
  // The last block: every partial is written. Each channel adds its G
  // partials in order, so the result does not depend on which block is last.
  __threadfence();
  EMBER_NO_UNROLL
  for (int64_t ch = threadIdx.x; ch < C; ch += blockDim.x) finalize(ch, pa, pb, G);
  if (threadIdx.x == 0) *tickets = 0u;  // ready for the next launch on this stream
}

// Channel c's two sums from its G partials, in order. The partials were
// written by other blocks of this launch: read past the L1 cache (__ldcg).
__device__ __forceinline__ void add_partials(int64_t c, const double* pa, const double* pb, int64_t G, double& s1,
                                             double& s2) {
  s1 = 0.0, s2 = 0.0;
  for (int64_t g = 0; g < G; ++g) {
    s1 += __ldcg(pa + c * G + g);
    s2 += __ldcg(pb + c * G + g);
  }
}

// Training forward, channel c: statistics from the partials, save_mean/
// save_invstd, the running averages, and coef = [mean | gamma*invstd | beta].
//   pa, pb: [C, G]   coef: [3, C]
template <typename T, typename P = compute_t<T>>
struct ForwardFinalize {
  const T* x;
  const P* gamma;
  const P* beta;
  P* save_mean;
  P* save_invstd;
  P* running_mean;
  P* running_var;
  P* coef;
  int64_t N, C, HW;
  double momentum, eps;
  __device__ void operator()(int64_t c, const double* pa, const double* pb, int64_t G) const {
    const int64_t M = N * HW;
    double s, ss;
    add_partials(c, pa, pb, G, s, ss);
    const double shift = M > 0 ? double(to_compute(x[c * HW])) : 0.0;
    const double dmean = M > 0 ? s / double(M) : 0.0;
    const double mean = shift + dmean;
    const double var = M > 0 ? std::max(0.0, ss / double(M) - dmean * dmean) : 0.0;
    const double invstd = 1.0 / ::sqrt(var + eps);
    save_mean[c] = P(mean);
    save_invstd[c] = P(invstd);
    const double var_unbiased = M > 1 ? var * double(M) / double(M - 1) : var;
    running_mean[c] = P((1.0 - momentum) * double(running_mean[c]) + momentum * mean);
    running_var[c] = P((1.0 - momentum) * double(running_var[c]) + momentum * var_unbiased);
    coef[c] = P(mean);
    coef[C + c] = P(double(gamma[c]) * invstd);
    coef[2 * C + c] = beta[c];
  }
};

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
// then max(y, 0) when kRelu. packs > 0: 16-byte packs (vector_loop.cuh) of
// one channel each (HW is a multiple of the pack, every operand aligned),
// the channel found once per pack; else element by element.
//   x, r, y: [N, C, HW]  coef: [3, C]
template <typename T, typename I, bool kRelu, typename P = compute_t<T>>
__global__ void forward_apply_kernel(const T* x, const T* r, T* y, const P* coef, int64_t total, int64_t packs,
                                     IndexDivisor<I> by_HW, IndexDivisor<I> by_C) {
  const int64_t C = by_C.value();
  constexpr int K = kPackElements<T>;
  EMBER_NO_UNROLL
  for (int64_t p = grid_thread_index(); p < packs; p += grid_thread_count()) {
    const I c = channel_of(p * K, by_HW, by_C);
    const P mean = coef[c], scale = coef[C + c], shift = coef[2 * C + c];
    const Pack<T> xv = load_pack(x + p * K);
    const Pack<T> rv = r ? load_pack(r + p * K) : Pack<T>{};
    Pack<T> out;
    EMBER_UNROLL
    for (int k = 0; k < K; ++k) out.v[k] = forward_output<T, kRelu>(xv.v[k], r != nullptr, rv.v[k], mean, scale, shift);
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
  constexpr int K = kPackElements<T>;
  EMBER_NO_UNROLL
  for (int64_t p = grid_thread_index(); p < packs; p += grid_thread_count()) {
    const I c = channel_of(p * K, by_HW, by_C);
    const P mean = coef[c], A = coef[C + c], B = coef[2 * C + c], D = coef[3 * C + c];
    const Pack<T> xv = kTrain ? load_pack(x + p * K) : Pack<T>{};
    const Pack<T> gv = load_pack(gy + p * K);
    const Pack<T> yv = relu_y ? load_pack(relu_y + p * K) : Pack<T>{};
    Pack<T> out;
    EMBER_UNROLL
    for (int k = 0; k < K; ++k)
      out.v[k] = backward_output<T, kTrain>(xv.v[k], gv.v[k], relu_y != nullptr, yv.v[k], mean, A, B, D);
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

// Blocks per channel of the partial sums, and the values each one takes.
struct Split {
  int64_t G, chunk;
};
// chunk is a multiple of `multiple` (the pack, when the sums read packs).
Split split_channels(int64_t C, int64_t M, int64_t multiple = 1) {
  int64_t G = std::min((M + kMinPerBlock - 1) / kMinPerBlock, (kTargetBlocks + C - 1) / C);
  G = std::clamp<int64_t>(G, 1, 65535);
  int64_t chunk = std::max<int64_t>(1, (M + G - 1) / G);
  chunk = (chunk + multiple - 1) / multiple * multiple;
  return Split{std::max<int64_t>(1, (M + chunk - 1) / chunk), chunk};
}

// The elementwise passes' 16-byte packs: total / K when each pack lies in
// one channel (HW a multiple of K) and every operand is aligned, else 0.
template <typename T>
int64_t apply_packs(int64_t total, int64_t HW, std::initializer_list<const void*> operands) {
  constexpr int64_t K = kPackElements<T>;
  if (HW % K != 0) return 0;
  for (const void* p : operands)
    if (p && !is_aligned16(p)) return 0;
  return total / K;
}

// The ticket counter of the partial-sums kernels on the current device:
// zero between launches (the last block resets it). One per device is
// enough because all of a device's work is queued on one stream
// (cuda/allocator.h), so two of these kernels never run at once. Made on
// first use (4 bytes of the caching allocator, zeroed on `stream`) and kept
// for the life of the process.
unsigned* finalize_tickets(cudaStream_t stream) {
  int device = 0;
  CUDA_CHECK(cudaGetDevice(&device));
  thread_local int last_device = -1;  // every batch-norm launch asks: no lock after the first
  thread_local unsigned* last = nullptr;
  if (device == last_device) return last;
  static std::mutex mutex;
  static std::map<int, unsigned*> by_device;
  const std::lock_guard<std::mutex> lock(mutex);
  unsigned*& tickets = by_device[device];
  if (!tickets) {
    tickets = static_cast<unsigned*>(device_allocate(sizeof(unsigned)));
    CUDA_CHECK(cudaMemsetAsync(tickets, 0, sizeof(unsigned), stream));
  }
  last_device = device;
  last = tickets;
  return tickets;
}

// Partial sums of every channel into `part` ([2, C, G] doubles), then
// finalize for every channel in the same launch.
template <typename T, bool kGrad, typename Finalize>
void partial_sums(const T* x, const T* gy, const T* relu_y, T* masked_gy, const compute_t<T>* mean, int64_t N,
                  int64_t C, int64_t HW, const Split& sp, double* part, const Finalize& finalize,
                  cudaStream_t stream) {
  EMBER_CHECK(C <= 0x7fffffff && C * sp.G <= 0xffffffff, "cuda batch norm: too many channels (", C, ")");
  unsigned* tickets = finalize_tickets(stream);
  const bool packed =
      sp.chunk % kPackElements<T> == 0 && apply_packs<T>(N * C * HW, HW, {x, gy, relu_y, masked_gy}) > 0;
  with_index_type(N * HW, [&](auto i) {
    using I = decltype(i);
    launch(partial_sums_kernel<T, kGrad, I, Finalize>, dim3(unsigned(C), unsigned(sp.G)), dim3(kSumThreads), 0,
           stream, x, gy, relu_y, masked_gy, mean, N, C, IndexDivisor<I>(HW), sp.chunk, packed, part,
           part + C * sp.G, tickets, finalize);
  });
}

// y = the forward's affine map of x (plus r when given; then max(., 0) when
// relu), over `total` = N*C*HW elements.
template <typename T, typename P = compute_t<T>>
void forward_apply(const T* x, const T* r, T* y, const P* coef, int64_t total, int64_t C, int64_t HW, bool relu,
                   cudaStream_t stream) {
  if (total <= 0) return;
  const int64_t packs = apply_packs<T>(total, HW, {x, r, y});
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
    const Split sp = split_channels(C, N * HW, HW % kPackElements<T> == 0 ? kPackElements<T> : 1);
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
  const Split sp = split_channels(C, N * HW, HW % kPackElements<T> == 0 ? kPackElements<T> : 1);
  DeviceBuffer part(size_t(2 * C * sp.G) * sizeof(double));
  DeviceBuffer coef(size_t(4 * C) * sizeof(P));
  const BackwardFinalize<P, kTrain> finalize{gamma, mean, stat, ggamma, gbeta, coef.as<P>(), N * HW, C, eps};
  partial_sums<T, true>(x, gy, relu_y, masked_gy, mean, N, C, HW, sp, part.as<double>(), finalize, s);
  if (masked_gy) {
    gy = masked_gy;
    relu_y = nullptr;
  }
  const int64_t total = N * C * HW;
  const int64_t packs = apply_packs<T>(total, HW, {kTrain ? x : nullptr, gy, relu_y, gx});
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
