// cuda/kernels/batch_norm_sums.cuh — batch norm's statistics pass
// (cuda/kernels/batch_norm.cu): the per-channel partial sums of the forward
// (of x) and the backward (of gy and gy * (x - mean)), with the finalize step
// run by the last block to finish, in the two layouts a channel's values
// come in:
//   planes  x: [N, C, HW]: a channel is N runs of HW values. Block (c, g)
//           walks a contiguous chunk of channel c's values, thread-strided
//           (16-byte packs when HW and the chunk are multiples of the pack).
//   rows    x: [M, C] (HW == 1: how a channels-last activation arrives, as
//           [N*H*W, C, 1]): a channel's values lie C apart, so a block takes
//           32 channels at once: a warp reads 32 consecutive channels of one
//           row (coalesced), its 8 warps take every 8th row of the block's
//           chunk, and each channel's 8 sums are added in warp order in
//           shared memory. Walking one channel per block here would make
//           every load a separate memory request.
// Both write one partial per (channel, chunk) into pa/pb [C, G] and count
// finished blocks with an integer ticket; the last block adds each
// channel's G partials in order and calls finalize(c, pa, pb, G). Every
// sum has a fixed shape, so the results do not depend on scheduling.
#pragma once
#include <algorithm>
#include <initializer_list>
#include <map>
#include <mutex>

#include "cuda/allocator.h"
#include "cuda/common.cuh"
#include "cuda/kernels/fast_divmod.cuh"
#include "cuda/kernels/reduce.cuh"
#include "cuda/kernels/vector_loop.cuh"

namespace ember::cuda {
namespace {

constexpr unsigned kSumThreads = 256;   // threads per block of the planes partial sums (a multiple of 32)
constexpr int kRowsLanes = 32;          // rows partial sums: channels per block (one warp's width)
constexpr int kRowsGroups = 8;          // ... and warps per block, each taking every 8th row
constexpr int64_t kMinPerBlock = 1024;  // values per partial-sum block, at least
constexpr int64_t kTargetBlocks = 264;  // split channels until about this many blocks

// Adds one value to the sums a, b: x's (forward: a += d, b += d*d with
// d = x - center), or the gradient's, masked by relu_y > 0 when has_relu,
// with x (backward: a += g, b += g * (x - center)); returns that gradient.
// The mask is a bit mask, not a branch: every lane makes the same accesses.
template <typename T, bool kGrad, typename P = compute_t<T>>
__device__ __forceinline__ T sum_value(T xv, T gv, T yv, bool has_relu, P center, double& a, double& b) {
  if constexpr (kGrad) {
    const T g = has_relu ? keep_or_zero(to_compute(yv) > P(0), gv) : gv;
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
}

// The last block of a partial-sums launch: true once this block's partials
// are written and every other block's too (tickets[0] counts finished
// blocks). Call with every thread of the block after its partials are
// stored; the writers fence their stores first.
__device__ __forceinline__ bool last_block_to_finish(unsigned* tickets) {
  __shared__ unsigned finished_before;  // blocks that had finished before this one
  __syncthreads();
  if (threadIdx.x == 0 && threadIdx.y == 0) finished_before = atomicAdd(tickets, 1u);
  __syncthreads();
  const bool last = finished_before == gridDim.x * gridDim.y - 1;
  if (last) __threadfence();
  return last;
}

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
  auto add_value = [&](T xv, T gv, T yv) { return sum_value<T, kGrad>(xv, gv, yv, relu_y != nullptr, center, a, b); };
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
  if (threadIdx.x == 0) {
    pa[c * G + g] = a;
    pb[c * G + g] = b;
    __threadfence();  // the partials are visible to every block before the ticket is
  }
  if (!last_block_to_finish(tickets)) return;
  // The last block: every partial is written. Each channel adds its G
  // partials in order, so the result does not depend on which block is last.
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

// Rows partial sums (see the top): channels [32*blockIdx.x, +32) over rows
// [g*chunk, (g+1)*chunk) of x: [M, C] (g = blockIdx.y), then, in the last
// block, finalize for every channel. Block: 32 x 8 threads.
//   x, gy, relu_y, masked_gy: [M, C]   mean: [C]   pa, pb: [C, G]
template <typename T, bool kGrad, typename Finalize, typename P = compute_t<T>>
__global__ void partial_sums_rows_kernel(const T* x, const T* gy, const T* relu_y, T* masked_gy, const P* mean,
                                         int64_t M, int64_t C, int64_t chunk, double* pa, double* pb,
                                         unsigned* tickets, Finalize finalize) {
  const int lane = int(threadIdx.x), group = int(threadIdx.y);
  const int64_t c = int64_t(blockIdx.x) * kRowsLanes + lane, g = blockIdx.y, G = gridDim.y;
  const int64_t begin = g * chunk, end = std::min(M, begin + chunk);
  const bool live = c < C;
  P center = P(0);  // the shift the sums are taken around: as the planes kernel's
  if (live) {
    if constexpr (kGrad)
      center = mean[c];
    else if (M > 0)
      center = to_compute(x[c]);
  }
  double a = 0.0, b = 0.0;
  if (live) {
    EMBER_NO_UNROLL
    for (int64_t r = begin + group; r < end; r += kRowsGroups) {
      const int64_t at = r * C + c;
      const T gv = sum_value<T, kGrad>(x[at], kGrad ? gy[at] : T{}, relu_y ? relu_y[at] : T{}, relu_y != nullptr,
                                       center, a, b);
      if (kGrad && masked_gy) masked_gy[at] = gv;
    }
  }
  __shared__ double sum_a[kRowsGroups][kRowsLanes], sum_b[kRowsGroups][kRowsLanes];
  sum_a[group][lane] = a;
  sum_b[group][lane] = b;
  __syncthreads();
  if (group == 0 && live) {
    double ta = 0.0, tb = 0.0;
    for (int k = 0; k < kRowsGroups; ++k) ta += sum_a[k][lane], tb += sum_b[k][lane];
    pa[c * G + g] = ta;
    pb[c * G + g] = tb;
    __threadfence();  // the partials are visible to every block before the ticket is
  }
  if (!last_block_to_finish(tickets)) return;
  const int flat = group * kRowsLanes + lane;
  EMBER_NO_UNROLL
  for (int64_t ch = flat; ch < C; ch += kRowsLanes * kRowsGroups) finalize(ch, pa, pb, G);
  if (flat == 0) *tickets = 0u;  // ready for the next launch on this stream
}

// -------------------------------------------------------------- launchers

// Blocks per channel of the partial sums, and the values each one takes
// (rows layout: rows per block, for 32 channels at once).
struct Split {
  int64_t G, chunk;
};
// chunk is a multiple of `multiple` (the pack, when the sums read packs).
inline Split split_channels(int64_t C, int64_t M, int64_t multiple = 1) {
  int64_t G = std::min((M + kMinPerBlock - 1) / kMinPerBlock, (kTargetBlocks + C - 1) / C);
  G = std::clamp<int64_t>(G, 1, 65535);
  int64_t chunk = std::max<int64_t>(1, (M + G - 1) / G);
  chunk = (chunk + multiple - 1) / multiple * multiple;
  return Split{std::max<int64_t>(1, (M + chunk - 1) / chunk), chunk};
}

// The rows layout: G chunks of rows, each taken by ceil(C / 32) blocks of
// 32 channels, at least kMinPerBlock values a block.
inline Split split_rows(int64_t C, int64_t M) {
  const int64_t tiles = (C + kRowsLanes - 1) / kRowsLanes;
  const int64_t min_rows = std::max<int64_t>(kRowsGroups, kMinPerBlock / kRowsLanes);
  int64_t G = std::min((M + min_rows - 1) / min_rows, (kTargetBlocks + tiles - 1) / tiles);
  G = std::clamp<int64_t>(G, 1, 65535);
  const int64_t chunk = std::max<int64_t>(1, (M + G - 1) / G);
  return Split{std::max<int64_t>(1, (M + chunk - 1) / chunk), chunk};
}

// The split of a [N, C, HW] batch norm: rows when HW == 1, else planes
// (chunks a multiple of the pack when HW is).
template <typename T>
Split split_for(int64_t N, int64_t C, int64_t HW) {
  if (HW == 1) return split_rows(C, N);
  return split_channels(C, N * HW, HW % kPackElements<T> == 0 ? kPackElements<T> : 1);
}

// The elementwise passes' 16-byte packs: total / K when every operand is
// aligned and each pack lies in one channel (HW a multiple of K), or in one
// row of a rows layout (HW == 1, C a multiple of K: K consecutive
// channels); else 0 (element by element).
template <typename T>
int64_t apply_packs(int64_t total, int64_t C, int64_t HW, std::initializer_list<const void*> operands) {
  constexpr int64_t K = kPackElements<T>;
  if (HW % K != 0 && !(HW == 1 && C % K == 0)) return 0;
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
inline unsigned* finalize_tickets(cudaStream_t stream) {
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
// finalize for every channel in the same launch. sp: split_for's.
template <typename T, bool kGrad, typename Finalize>
void partial_sums(const T* x, const T* gy, const T* relu_y, T* masked_gy, const compute_t<T>* mean, int64_t N,
                  int64_t C, int64_t HW, const Split& sp, double* part, const Finalize& finalize,
                  cudaStream_t stream) {
  EMBER_CHECK(C <= 0x7fffffff && C * sp.G <= 0xffffffff, "cuda batch norm: too many channels (", C, ")");
  unsigned* tickets = finalize_tickets(stream);
  if (HW == 1) {
    const unsigned tiles = unsigned((C + kRowsLanes - 1) / kRowsLanes);
    launch(partial_sums_rows_kernel<T, kGrad, Finalize>, dim3(tiles, unsigned(sp.G)), dim3(kRowsLanes, kRowsGroups), 0,
           stream, x, gy, relu_y, masked_gy, mean, N, C, sp.chunk, part, part + C * sp.G, tickets, finalize);
    return;
  }
  const bool packed =
      sp.chunk % kPackElements<T> == 0 && apply_packs<T>(N * C * HW, C, HW, {x, gy, relu_y, masked_gy}) > 0;
  with_index_type(N * HW, [&](auto i) {
    using I = decltype(i);
    launch(partial_sums_kernel<T, kGrad, I, Finalize>, dim3(unsigned(C), unsigned(sp.G)), dim3(kSumThreads), 0,
           stream, x, gy, relu_y, masked_gy, mean, N, C, IndexDivisor<I>(HW), sp.chunk, packed, part,
           part + C * sp.G, tickets, finalize);
  });
}

}  // namespace
}  // namespace ember::cuda
