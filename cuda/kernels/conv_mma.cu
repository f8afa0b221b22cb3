// cuda/kernels/conv_mma.cu — the tensor-core convolutions for channels-last
// tensors: f16 and bf16, and f32 on TF32 while set_tf32 is on (cuda_device.h,
// the programs' --tf32): implicit GEMMs on mma.sync, fed by a multistage
// cp.async pipeline and ldmatrix from swizzled shared memory
// (cuda/kernels/mma_tile.cuh, cuda/ptx_instructions.cuh). conv.cu hands them
// the convolutions they take (conv_mma_supports) and keeps its scalar path
// for the rest.
//
//   forward          y [N*P*Q, K] = col(x) [N*P*Q, R*S*C] * w^T [R*S*C, K]
//                    A: x gathered, K-major (a row per output pixel, 8
//                    channels (4 in f32) of one tap per 16-byte chunk); B: w as stored
//                    [K, R*S*C], K-major.
//   backward data    gx [N*H*W, C] = g(gy) [N*H*W, R*S*K] * w' [R*S*K, C]
//                    A(m = (n, h, w), (r, s, k)) = gy[n, p, q, k] where
//                    h + ph - r = p*sh (0 outside gy), K-major; B((r, s, k),
//                    c) = w[k, r, s, c], MN-major (its rows are filter taps,
//                    its chunks input channels). With a stride, the input
//                    pixels split into sh*sw phases that each meet their
//                    own taps (conv_operands.cuh's DataPhase, as conv.cu's
//                    GEMMs per phase), all in one launch over grid.z, so no
//                    zero of the strided gradient is multiplied.
//   backward filter  gw [K, R*S*C] = gy^T [K, N*P*Q] * col(x) [N*P*Q, R*S*C]
//                    A: gy as stored, MN-major (rows are output pixels);
//                    B: x gathered, MN-major. The reduction (N*P*Q) is long
//                    and the output small, so it is split over grid.z into
//                    f32 partials that a second kernel adds in slice order
//                    (deterministic, no atomics).
//   x: [N, H, W, C]  w: [K, R, S, C]  y, gy: [N, P, Q, K]
//
// How a block works (BM x BN outputs, 32 reduction values a step):
// - prologue, once per thread: the rows and chunks it copies are decoded
//   (output pixel to image offset and top-left tap; a filter column to its
//   tap and channel); afterwards every position advances by adding 32 and
//   carrying (c into s into r, or q into p into n), so no loop divides
//   (tests/cuda/test_cuda_ptx.cpp reads the PTX);
// - main loop: kStages shared-memory stages in a ring; step t (64 bytes of
//   each row: 32 16-bit values or 16 f32) is copied with
//   16-byte cp.async (zero-filled where it falls outside the tensors) into
//   stage t % kStages, one commit group per step, and computed after
//   cp.async.wait_group kStages - 2 and a barrier, so kStages - 1 steps of
//   copies are in flight while the tensor cores work;
// - each warp loads its fragments with ldmatrix (.trans for MN-major tiles;
//   32-bit shared loads for MN-major f32) and runs mma.sync m16n8k16 (f32:
//   m16n8k8 on values rounded to TF32) with f32 accumulators (mma_tile.cuh);
// - epilogue: output columns are adjacent in memory in all three passes.
//   16-bit results go through shared memory (mma_tile.cuh's
//   store_tile_staged: rounded once, then one 16-byte store per 8 columns);
//   f32 ones (TF32, and the filter gradient's slices) are stored from the
//   accumulators as pairs, 8 bytes a lane.
#include "cuda/common.cuh"

#include <algorithm>

#include "cuda/allocator.h"
#include "cuda/cuda_device.h"
#include "cuda/cuda_kernels.h"
#include "cuda/kernels/batch_norm_finalize.cuh"
#include "cuda/kernels/conv_mma.h"
#include "cuda/kernels/conv_operands.cuh"
#include "cuda/kernels/fast_divmod.cuh"
#include "cuda/kernels/mma_tile.cuh"

namespace ember::cuda {
namespace {

// Advances a reduction position (outer, inner, c) by `step` values of c,
// carrying into inner (of extent inner_n) and outer; stops once outer
// reaches outer_n (past the end). C may be smaller than the step.
__device__ __forceinline__ void advance_tap(int& outer, int& inner, int& c, int step, int C, int inner_n, int outer_n) {
  c += step;
  while (c >= C && outer < outer_n) {
    c -= C;
    if (++inner == inner_n) inner = 0, ++outer;
  }
}

// ------------------------------------------------------------------ forward
// y [N*P*Q, K] = gather(x) [N*P*Q, R*S*C] * w^T.   x: [N, H, W, C]  w: [K, R, S, C]  y: [N, P, Q, K]
// Without batch norm after it (Stats = NoStatistics), or taking its
// statistics (Stats = BatchNormStatistics<T>): the epilogue's column sums,
// then, in the last block to finish, batch norm's finalize for every channel.
struct NoStatistics {
  static constexpr bool kTake = false;
};
template <typename T>
struct BatchNormStatistics {
  static constexpr bool kTake = true;
  ColumnSums sums;  // center = the running mean (read by every block before the last one updates it)
  unsigned* tickets;
  ForwardFinalize<T> finalize;  // its center is sums.center
};

template <typename T, typename Cfg, typename Stats>
__global__ void __launch_bounds__(Cfg::kThreads) conv_mma_forward_kernel(ConvDims<int32_t> d, const T* x, const T* w,
                                                                          T* y, Stats stats) {
  EMBER_DYNAMIC_SHARED(unsigned char, stages);
  const int tid = int(threadIdx.x);
  const int M = d.N * d.P * d.Q, Kred = d.R * d.S * d.C;
  const int m0 = int(blockIdx.x) * Cfg::BM, n0 = int(blockIdx.y) * Cfg::BN;
  constexpr int kChunk = kChunkValues<T>, kStep = kStepValues<T>;
  // This thread copies chunk `chunk` of rows row0 + i * kRowStep of both tiles.
  constexpr int kRowStep = Cfg::kThreads / 4;
  const int chunk = tid & 3, row0 = tid >> 2;
  int64_t a_image[Cfg::kChunksPerThreadA];  // n*H*W*C, or -1 past the last output pixel
  int a_h[Cfg::kChunksPerThreadA], a_w[Cfg::kChunksPerThreadA];
  EMBER_UNROLL
  for (int i = 0; i < Cfg::kChunksPerThreadA; ++i) {
    const int m = m0 + row0 + i * kRowStep;
    int n = 0, pq = 0, p = 0, q = 0;
    if (m < M) {
      d.by_PQ.divmod(m, n, pq);
      d.by_Q.divmod(pq, p, q);
    }
    a_image[i] = m < M ? int64_t(n) * d.H * d.W * d.C : -1;
    a_h[i] = p * d.sh - d.ph;
    a_w[i] = q * d.sw - d.pw;
  }
  int tap_r = 0, tap_s = 0, tap_c = 0;  // the reduction position of this thread's chunk
  advance_tap(tap_r, tap_s, tap_c, chunk * kChunk, d.C, d.S, d.R);
  int b_k = chunk * kChunk;  // the same, as an index into a filter row

  const auto copy = [&](int stage, int) {
    unsigned char* a_tile = stages + stage * Cfg::kStageBytes;
    unsigned char* b_tile = a_tile + Cfg::kABytes;
    EMBER_UNROLL
    for (int i = 0; i < Cfg::kChunksPerThreadA; ++i) {
      const int h = a_h[i] + tap_r, wc = a_w[i] + tap_s;
      const bool inside = a_image[i] >= 0 && tap_r < d.R && h >= 0 && h < d.H && wc >= 0 && wc < d.W;
      const T* src = inside ? x + a_image[i] + (int64_t(h) * d.W + wc) * d.C + tap_c : x;
      ptx::cp_async<16>(a_tile + k_major_offset(row0 + i * kRowStep, chunk), src, inside ? 16 : 0);
    }
    EMBER_UNROLL
    for (int i = 0; i < Cfg::kChunksPerThreadB; ++i) {
      const int k = n0 + row0 + i * kRowStep;
      const bool inside = k < d.K && b_k < Kred;
      ptx::cp_async<16>(b_tile + k_major_offset(row0 + i * kRowStep, chunk), inside ? w + int64_t(k) * Kred + b_k : w,
                        inside ? 16 : 0);
    }
    advance_tap(tap_r, tap_s, tap_c, kStep, d.C, d.S, d.R);
    b_k += kStep;
  };
  float acc[Cfg::kFragM][Cfg::kFragN][4];
  zero_accumulators<Cfg>(acc);
  main_loop<T, Cfg, true, true>(acc, stages, 0, (Kred + kStep - 1) / kStep, copy);
  if constexpr (Stats::kTake) {
    static_assert(kStagedEpilogueFits<T, Cfg>, "batch norm's sums are taken from the staged tile");
    store_tile_staged<T, Cfg>(acc, stages, m0, n0, M, d.K, StoreChunks<T>{y, d.K}, stats.sums);
    if (!last_block_to_finish(stats.tickets)) return;
    EMBER_NO_UNROLL
    for (int k = tid; k < d.K; k += Cfg::kThreads) stats.finalize(k, stats.sums.pa, stats.sums.pb, stats.sums.G);
    if (tid == 0) *stats.tickets = 0u;  // ready for the next launch on this stream
  } else if constexpr (kStagedEpilogueFits<T, Cfg>) {
    store_tile_staged<T, Cfg>(acc, stages, m0, n0, M, d.K, StoreChunks<T>{y, d.K});
  } else {
    store_tile<Cfg>(acc, m0, n0, M, d.K, StorePairs<T>{y, d.K});
  }
}

// ------------------------------------------------------------ backward data
// Phase z of the data gradient (conv_operands.cuh's DataPhase: at stride 1
// the one phase is the whole image and every tap):
//   gx_z [N*Ha*Wb, C] = gather(gy) [N*Ha*Wb, Ra*Sb*K] * w_z [Ra*Sb*K, C]
// where row (n, hi, wi) is input pixel (h0 + hi*sh, w0 + wi*sw) and
// reduction index (ri, si, k) is tap (a + ri*sh, b + si*sw) of filter k, read
// from gy[n, hi - ri + ea, wi - si + eb, k] (0 outside gy). All phases are one
// launch (grid.z); a phase without taps stores zeros.
//   gy: [N, P, Q, K]  w: [K, R, S, C]  gx: [N, H, W, C]
constexpr int kMaxDataPhases = 4;  // strides up to 2 x 2
struct DataPhases {
  using argument_has_no_pointers = void;  // for the emulator's stream-order checker (an array: no pointers)
  DataPhase<int32_t> phase[kMaxDataPhases];
};

// Row (n, hi, wi) of a phase's result to gx[n, h0 + hi*sh, w0 + wi*sw, c]:
// pairs of channels (f32), or 16-byte chunks of 8 (16-bit, staged).
template <typename T>
struct StorePhase {
  T* gx;
  const DataPhase<int32_t>* d;
  __device__ __forceinline__ T* at(int m, int c) const {
    int nh, wi, n, hi;
    d->by_Wb.divmod(m, nh, wi);
    d->by_Ha.divmod(nh, n, hi);
    const int64_t pixel = (int64_t(n) * d->H + d->h0 + hi * d->sh) * d->W + d->w0 + wi * d->sw;
    return gx + pixel * d->C + c;
  }
  __device__ __forceinline__ void operator()(int m, int c, float v0, float v1) const { store_pair(at(m, c), v0, v1); }
  __device__ __forceinline__ void operator()(int m, int c, const Pack<T>& chunk) const { store_pack(at(m, c), chunk); }
};

template <typename T, typename Cfg>
__global__ void __launch_bounds__(Cfg::kThreads) conv_mma_backward_data_kernel(DataPhases phases, int N, const T* gy,
                                                                                const T* w, T* gx) {
  EMBER_DYNAMIC_SHARED(unsigned char, stages);
  const DataPhase<int32_t>& d = phases.phase[blockIdx.z];
  const int tid = int(threadIdx.x);
  const int M = N * d.Ha * d.Wb, Kred = d.Ra * d.Sb * d.K;
  const int m0 = int(blockIdx.x) * Cfg::BM, n0 = int(blockIdx.y) * Cfg::BN;
  if (m0 >= M) return;  // the grid fits the largest phase; the whole block leaves, before any barrier
  constexpr int kChunk = kChunkValues<T>, kStep = kStepValues<T>;
  // A (K-major): chunk `a_chunk` of rows a_row0 + i * kARowStep.
  constexpr int kARowStep = Cfg::kThreads / 4;
  const int a_chunk = tid & 3, a_row0 = tid >> 2;
  int64_t a_image[Cfg::kChunksPerThreadA];  // n*P*Q*K, or -1 past the phase's last pixel
  int a_p[Cfg::kChunksPerThreadA], a_q[Cfg::kChunksPerThreadA];  // gy's row and column at tap (0, 0)
  EMBER_UNROLL
  for (int i = 0; i < Cfg::kChunksPerThreadA; ++i) {
    const int m = m0 + a_row0 + i * kARowStep;
    int nh = 0, wi = 0, n = 0, hi = 0;
    if (m < M) {
      d.by_Wb.divmod(m, nh, wi);
      d.by_Ha.divmod(nh, n, hi);
    }
    a_image[i] = m < M ? int64_t(n) * d.P * d.Q * d.K : -1;
    a_p[i] = hi + d.ea;
    a_q[i] = wi + d.eb;
  }
  int a_r = 0, a_s = 0, a_k = 0;  // (ri, si, k) of this thread's A chunk
  advance_tap(a_r, a_s, a_k, a_chunk * kChunk, d.K, d.Sb, d.Ra);
  // B (MN-major, rows = reduction (ri, si, k), chunks along c): chunk b_chunk
  // of rows b_row0 + j * kBRowStep, each with its own reduction position.
  constexpr int kBChunksPerRow = Cfg::BN / kChunk, kBRowStep = Cfg::kThreads / kBChunksPerRow;
  const int b_chunk = tid % kBChunksPerRow, b_row0 = tid / kBChunksPerRow;
  const int c = n0 + b_chunk * kChunk;
  int b_r[Cfg::kChunksPerThreadB], b_s[Cfg::kChunksPerThreadB], b_k[Cfg::kChunksPerThreadB];
  EMBER_UNROLL
  for (int j = 0; j < Cfg::kChunksPerThreadB; ++j) {
    b_r[j] = b_s[j] = b_k[j] = 0;
    advance_tap(b_r[j], b_s[j], b_k[j], b_row0 + j * kBRowStep, d.K, d.Sb, d.Ra);
  }

  const auto copy = [&](int stage, int) {
    unsigned char* a_tile = stages + stage * Cfg::kStageBytes;
    unsigned char* b_tile = a_tile + Cfg::kABytes;
    EMBER_UNROLL
    for (int i = 0; i < Cfg::kChunksPerThreadA; ++i) {
      const int p = a_p[i] - a_r, q = a_q[i] - a_s;
      const bool inside = a_image[i] >= 0 && a_r < d.Ra && p >= 0 && p < d.P && q >= 0 && q < d.Q;
      const T* src = inside ? gy + a_image[i] + (int64_t(p) * d.Q + q) * d.K + a_k : gy;
      ptx::cp_async<16>(a_tile + k_major_offset(a_row0 + i * kARowStep, a_chunk), src, inside ? 16 : 0);
    }
    EMBER_UNROLL
    for (int j = 0; j < Cfg::kChunksPerThreadB; ++j) {
      const bool inside = b_r[j] < d.Ra && c < d.C;
      const int r = d.a + b_r[j] * d.sh, s = d.b + b_s[j] * d.sw;
      const T* src = inside ? w + ((int64_t(b_k[j]) * d.R + r) * d.S + s) * d.C + c : w;
      ptx::cp_async<16>(b_tile + mn_major_offset<T, Cfg::BN>(b_row0 + j * kBRowStep, b_chunk), src,
                        inside ? 16 : 0);
      advance_tap(b_r[j], b_s[j], b_k[j], kStep, d.K, d.Sb, d.Ra);
    }
    advance_tap(a_r, a_s, a_k, kStep, d.K, d.Sb, d.Ra);
  };
  float acc[Cfg::kFragM][Cfg::kFragN][4];
  zero_accumulators<Cfg>(acc);
  main_loop<T, Cfg, true, false>(acc, stages, 0, (Kred + kStep - 1) / kStep, copy);
  if constexpr (kStagedEpilogueFits<T, Cfg>)
    store_tile_staged<T, Cfg>(acc, stages, m0, n0, M, d.C, StorePhase<T>{gx, &d});
  else
    store_tile<Cfg>(acc, m0, n0, M, d.C, StorePhase<T>{gx, &d});
}

// ----------------------------------------------------------- backward filter
// gw [K, R*S*C] (or f32 slice z of it) = gy^T [K, N*P*Q] * gather(x) [N*P*Q, R*S*C]
// over the steps of slice z.   x: [N, H, W, C]  gy: [N, P, Q, K]
template <typename T, typename Cfg, typename Out>
__global__ void __launch_bounds__(Cfg::kThreads) conv_mma_backward_filter_kernel(ConvDims<int32_t> d, const T* x,
                                                                                  const T* gy, int steps_per_slice,
                                                                                  Out* out) {
  EMBER_DYNAMIC_SHARED(unsigned char, stages);
  const int tid = int(threadIdx.x);
  const int RSC = d.R * d.S * d.C, NPQ = d.N * d.P * d.Q;
  const int m0 = int(blockIdx.x) * Cfg::BM, n0 = int(blockIdx.y) * Cfg::BN;
  constexpr int kChunk = kChunkValues<T>, kStep = kStepValues<T>;
  const int steps = (NPQ + kStep - 1) / kStep;
  const int first = int(blockIdx.z) * steps_per_slice;
  const int last = first + steps_per_slice < steps ? first + steps_per_slice : steps;
  // A (MN-major, rows = output pixels, chunks along k): chunk a_chunk of rows a_row0 + i * kARowStep.
  constexpr int kAChunksPerRow = Cfg::BM / kChunk, kARowStep = Cfg::kThreads / kAChunksPerRow;
  const int a_chunk = tid % kAChunksPerRow, a_row0 = tid / kAChunksPerRow;
  const int k = m0 + a_chunk * kChunk;
  int a_npq = first * kStep + a_row0;  // of row a_row0; row i is kARowStep further
  // B (MN-major, rows = output pixels, chunks along (r, s, c)): the chunk's tap, decoded once.
  constexpr int kBChunksPerRow = Cfg::BN / kChunk, kBRowStep = Cfg::kThreads / kBChunksPerRow;
  const int b_chunk = tid % kBChunksPerRow, b_row0 = tid / kBChunksPerRow;
  const int rsc = n0 + b_chunk * kChunk;
  int r = 0, s = 0, c = 0;
  if (rsc < RSC) {
    int rs = 0;
    d.by_C.divmod(rsc, rs, c);
    d.by_S.divmod(rs, r, s);
  }
  int b_n[Cfg::kChunksPerThreadB], b_p[Cfg::kChunksPerThreadB], b_q[Cfg::kChunksPerThreadB];
  EMBER_UNROLL
  for (int j = 0; j < Cfg::kChunksPerThreadB; ++j) {
    const int npq = first * kStep + b_row0 + j * kBRowStep;
    int pq = 0;
    b_n[j] = b_p[j] = b_q[j] = 0;
    if (npq < NPQ) {
      d.by_PQ.divmod(npq, b_n[j], pq);
      d.by_Q.divmod(pq, b_p[j], b_q[j]);
    } else {
      b_n[j] = d.N;  // past the end
    }
  }

  const auto copy = [&](int stage, int) {
    unsigned char* a_tile = stages + stage * Cfg::kStageBytes;
    unsigned char* b_tile = a_tile + Cfg::kABytes;
    EMBER_UNROLL
    for (int i = 0; i < Cfg::kChunksPerThreadA; ++i) {
      const int npq = a_npq + i * kARowStep;
      const bool inside = npq < NPQ && k < d.K;
      ptx::cp_async<16>(a_tile + mn_major_offset<T, Cfg::BM>(a_row0 + i * kARowStep, a_chunk),
                        inside ? gy + int64_t(npq) * d.K + k : gy, inside ? 16 : 0);
    }
    a_npq += kStep;
    EMBER_UNROLL
    for (int j = 0; j < Cfg::kChunksPerThreadB; ++j) {
      const int h = b_p[j] * d.sh - d.ph + r, wc = b_q[j] * d.sw - d.pw + s;
      const bool inside = b_n[j] < d.N && rsc < RSC && h >= 0 && h < d.H && wc >= 0 && wc < d.W;
      const T* src = inside ? x + ((int64_t(b_n[j]) * d.H + h) * d.W + wc) * d.C + c : x;
      ptx::cp_async<16>(b_tile + mn_major_offset<T, Cfg::BN>(b_row0 + j * kBRowStep, b_chunk), src,
                        inside ? 16 : 0);
      advance_tap(b_n[j], b_p[j], b_q[j], kStep, d.Q, d.P, d.N);
    }
  };
  float acc[Cfg::kFragM][Cfg::kFragN][4];
  zero_accumulators<Cfg>(acc);
  main_loop<T, Cfg, false, false>(acc, stages, first, last, copy);
  Out* slice = out + int64_t(blockIdx.z) * d.K * RSC;
  if constexpr (std::is_same_v<Out, T> && kStagedEpilogueFits<T, Cfg>)
    store_tile_staged<T, Cfg>(acc, stages, m0, n0, d.K, RSC, StoreChunks<T>{slice, RSC});
  else
    store_tile<Cfg>(acc, m0, n0, d.K, RSC, StorePairs<Out>{slice, RSC});
}

// gw[i] = sum over z of part[z, i], z in order.   part: [splits, n] f32  gw: [n]
template <typename T>
__global__ void sum_filter_slices_kernel(const float* part, int splits, int64_t n, T* gw) {
  for (int64_t i = grid_thread_index(); i < n; i += grid_thread_count()) {
    float s = part[i];
    for (int z = 1; z < splits; ++z) s += part[int64_t(z) * n + i];
    gw[i] = to_storage<T>(s);
  }
}

// -------------------------------------------------------------- launchers

// The large tile while it still gives the GPU two waves of blocks, else the small one.
constexpr int64_t kLargeTileMinBlocks = 264;
constexpr int64_t kSplitTargetBlocks = 264;  // split the filter gradient's reduction until about this many blocks
constexpr int64_t kMinPixelsPerSlice = 256;  // output pixels a slice, at least
constexpr int kMaxSlices = 64;

bool use_large(MmaConvTileChoice tile, int64_t rows, int64_t cols) {
  if (tile != MmaConvTileChoice::automatic) return tile == MmaConvTileChoice::large;
  return ((rows + 127) / 128) * ((cols + 127) / 128) >= kLargeTileMinBlocks;
}

// Calls f(T{}) for f16, bf16 or f32 (TF32).
template <typename F>
void with_mma_type(DType dt, F&& f) {
  if (dt == DType::f16)
    f(__half{});
  else if (dt == DType::bf16)
    f(__nv_bfloat16{});
  else
    f(float{});
}

template <typename Cfg, typename Kernel, typename... Args>
void launch_tiles(Kernel kernel, int64_t rows, int64_t cols, int slices, cudaStream_t stream, Args... args) {
  const dim3 grid(unsigned((rows + Cfg::BM - 1) / Cfg::BM), unsigned((cols + Cfg::BN - 1) / Cfg::BN), unsigned(slices));
  launch(kernel, grid, dim3(Cfg::kThreads), size_t(Cfg::kSharedBytes), stream, args...);
}

template <typename T, typename Cfg>
void backward_filter(const Conv2dGeometry& g, const T* x, const T* gy, T* gw, cudaStream_t stream) {
  const int64_t M = g.K, N = g.R * g.S * g.C, steps = (g.N * g.P * g.Q + kStepValues<T> - 1) / kStepValues<T>;
  const int64_t tiles = ((M + Cfg::BM - 1) / Cfg::BM) * ((N + Cfg::BN - 1) / Cfg::BN);
  int64_t slices = std::clamp<int64_t>(std::min(kSplitTargetBlocks / tiles, steps * kStepValues<T> / kMinPixelsPerSlice), 1,
                                  kMaxSlices);
  const int64_t per_slice = std::max<int64_t>(1, (steps + slices - 1) / slices);
  slices = (steps + per_slice - 1) / per_slice;
  const ConvDims<int32_t> d = dims_of<int32_t>(g);
  if (slices <= 1) {
    launch_tiles<Cfg>(conv_mma_backward_filter_kernel<T, Cfg, T>, M, N, 1, stream, d, x, gy, int(per_slice), gw);
    return;
  }
  DeviceBuffer part(size_t(slices * M * N) * sizeof(float));
  launch_tiles<Cfg>(conv_mma_backward_filter_kernel<T, Cfg, float>, M, N, int(slices), stream, d, x, gy,
                    int(per_slice), part.as<float>());
  launch(sum_filter_slices_kernel<T>, dim3(blocks_for(M * N, 256)), dim3(256), 0, stream, part.as<const float>(),
         int(slices), M * N, gw);
  // `part` goes back to the cache here: later work on the stream runs after the kernels above.
}

}  // namespace

bool conv_mma_supports(DType dt, const Conv2dGeometry& g) {
  if (!native_tensor_cores()) return false;
  const bool tf32 = dt == DType::f32 && tf32_enabled();
  if (dt != DType::f16 && dt != DType::bf16 && !tf32) return false;
  const int64_t chunk = tf32 ? 4 : 8;  // values in 16 bytes
  if (!g.channels_last || g.C % chunk != 0 || g.K % chunk != 0) return false;
  // 32-bit indices: every tensor and the output pixel count below 2^31.
  const int64_t limit = int64_t(1) << 31;
  return g.N * g.H * g.W * g.C < limit && g.N * g.P * g.Q * g.K < limit && g.K * g.R * g.S * g.C < limit;
}

bool conv_mma_supports_backward_data(DType dt, const Conv2dGeometry& g) {
  return conv_mma_supports(dt, g) && g.stride_h * g.stride_w <= kMaxDataPhases;
}

void conv2d_forward_mma(DType dt, const Conv2dGeometry& g, const void* x, const void* w, void* y, Stream stream,
                        MmaConvTileChoice tile) {
  EMBER_CHECK(conv_mma_supports(dt, g), "conv2d_forward_mma: not a channels-last f16/bf16 (or TF32) convolution "
                                        "with C and K multiples of 8 (4 in f32)");
  const int64_t M = g.N * g.P * g.Q;
  if (M == 0 || g.K == 0) return;
  const ConvDims<int32_t> d = dims_of<int32_t>(g);
  with_mma_type(dt, [&](auto t) {
    using T = decltype(t);
    const T* px = static_cast<const T*>(x);
    const T* pw = static_cast<const T*>(w);
    T* py = static_cast<T*>(y);
    const cudaStream_t s = as_cuda_stream(stream);
    if (use_large(tile, M, g.K))
      launch_tiles<MmaTileLarge>(conv_mma_forward_kernel<T, MmaTileLarge, NoStatistics>, M, g.K, 1, s, d, px, pw, py,
                                 NoStatistics{});
    else
      launch_tiles<MmaTileSmall>(conv_mma_forward_kernel<T, MmaTileSmall, NoStatistics>, M, g.K, 1, s, d, px, pw, py,
                                 NoStatistics{});
  });
}

bool conv_mma_fuses_batch_norm(DType dt, const Conv2dGeometry& g) {
  return (dt == DType::f16 || dt == DType::bf16) && conv_mma_supports(dt, g) && g.N * g.P * g.Q > 0 && g.K > 0;
}

void conv2d_forward_mma_batch_norm(DType dt, const Conv2dGeometry& g, const void* x, const void* w, void* y,
                                   const MmaBatchNormArgs& bn, Stream stream, MmaConvTileChoice tile) {
  EMBER_CHECK(conv_mma_fuses_batch_norm(dt, g), "conv2d_forward_mma_batch_norm: not a non-empty channels-last "
                                                "f16/bf16 convolution with C and K multiples of 8");
  const int64_t M = g.N * g.P * g.Q;
  const ConvDims<int32_t> d = dims_of<int32_t>(g);
  with_mma_type(dt, [&](auto t) {
    using T = decltype(t);
    if constexpr (sizeof(T) == 2) {
      const cudaStream_t s = as_cuda_stream(stream);
      const auto run = [&](auto cfg) {
        using Cfg = decltype(cfg);
        const int G = int((M + Cfg::BM - 1) / Cfg::BM);
        DeviceBuffer partial(size_t(2 * G * g.K) * sizeof(double));
        BatchNormStatistics<T> stats;
        stats.sums.center = static_cast<const float*>(bn.running_mean);
        stats.sums.pa = partial.as<double>();
        stats.sums.pb = partial.as<double>() + G * g.K;
        stats.sums.G = G;
        stats.tickets = finalize_tickets(s);
        stats.finalize = ForwardFinalize<T>{static_cast<const T*>(y),
                                            static_cast<const float*>(bn.gamma),
                                            static_cast<const float*>(bn.beta),
                                            static_cast<float*>(bn.save_mean),
                                            static_cast<float*>(bn.save_invstd),
                                            static_cast<float*>(bn.running_mean),
                                            static_cast<float*>(bn.running_var),
                                            static_cast<float*>(bn.coef),
                                            M,
                                            g.K,
                                            1,
                                            bn.momentum,
                                            bn.eps,
                                            static_cast<const float*>(bn.running_mean)};
        launch_tiles<Cfg>(conv_mma_forward_kernel<T, Cfg, BatchNormStatistics<T>>, M, g.K, 1, s, d,
                          static_cast<const T*>(x), static_cast<const T*>(w), static_cast<T*>(y), stats);
        // `partial` goes back to the cache here: later work on the stream runs after the kernel.
      };
      if (use_large(tile, M, g.K))
        run(MmaTileLarge{});
      else
        run(MmaTileSmall{});
    }
  });
}

void conv2d_backward_data_mma(DType dt, const Conv2dGeometry& g, const void* gy, const void* w, void* gx,
                              Stream stream, MmaConvTileChoice tile) {
  EMBER_CHECK(conv_mma_supports_backward_data(dt, g), "conv2d_backward_data_mma: not a channels-last f16/bf16 "
                                                      "(or TF32) convolution with C and K multiples of 8 (4 in f32) "
                                                      "and strides up to 2x2");
  if (g.N * g.H * g.W == 0 || g.C == 0) return;
  DataPhases phases{};
  int64_t rows = 0;  // the largest phase's pixels
  int count = 0;
  for (int64_t a = 0; a < g.stride_h; ++a)
    for (int64_t b = 0; b < g.stride_w; ++b) {
      phases.phase[count] = data_phase<int32_t>(g, a, b);
      rows = std::max<int64_t>(rows, g.N * int64_t(phases.phase[count].Ha) * phases.phase[count].Wb);
      ++count;
    }
  with_mma_type(dt, [&](auto t) {
    using T = decltype(t);
    const T* pgy = static_cast<const T*>(gy);
    const T* pw = static_cast<const T*>(w);
    T* pgx = static_cast<T*>(gx);
    const cudaStream_t s = as_cuda_stream(stream);
    const int N = int(g.N);
    if (use_large(tile, rows * count, g.C))
      launch_tiles<MmaTileLarge>(conv_mma_backward_data_kernel<T, MmaTileLarge>, rows, g.C, count, s, phases, N, pgy,
                                 pw, pgx);
    else
      launch_tiles<MmaTileSmall>(conv_mma_backward_data_kernel<T, MmaTileSmall>, rows, g.C, count, s, phases, N, pgy,
                                 pw, pgx);
  });
}

void conv2d_backward_filter_mma(DType dt, const Conv2dGeometry& g, const void* x, const void* gy, void* gw,
                                Stream stream, MmaConvTileChoice tile) {
  EMBER_CHECK(conv_mma_supports(dt, g), "conv2d_backward_filter_mma: not a channels-last f16/bf16 (or TF32) "
                                        "convolution with C and K multiples of 8 (4 in f32)");
  if (g.K == 0 || g.C == 0) return;
  with_mma_type(dt, [&](auto t) {
    using T = decltype(t);
    const T* px = static_cast<const T*>(x);
    const T* pgy = static_cast<const T*>(gy);
    T* pgw = static_cast<T*>(gw);
    const cudaStream_t s = as_cuda_stream(stream);
    if (use_large(tile, g.K, g.R * g.S * g.C))
      backward_filter<T, MmaTileLarge>(g, px, pgy, pgw, s);
    else
      backward_filter<T, MmaTileSmall>(g, px, pgy, pgw, s);
  });
}

}  // namespace ember::cuda
