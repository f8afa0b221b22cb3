// cuda/kernels/gemm_tensor.cuh — the tensor-core tile loop: what
// gemm_tiled_kernel (gemm.cuh) does, for f16 and bf16 storage, with the
// products on the tensor cores through nvcuda::wmma (cuda/wmma.cuh; the
// emulator runs it too, cuda/sim/wmma.h). Included by gemm.cuh (include
// that, not this: it uses gemm.cuh's tile_slot), whose
// launchers pick it for 16-bit types (with_gemm_tile; off with
// EMBER_CUDA_TENSOR_CORES=0 or set_native_tensor_cores(false)).
//
//   C[M, N] (+)= op(A)[M, Kdim] * op(B)[Kdim, N]   16-bit inputs, f32 accumulators
//
// Same loaders and store functors as the FP32 kernel: the loaders return
// the 16-bit value as a float (exact), the kernel stages it back as T16.
//
// Tiling (Cfg = TensorTile<BM, BN, BK, WARPS_M, WARPS_N>): a block of
// WARPS_M x WARPS_N warps computes a BM x BN tile of C; warp (wm, wn) owns a
// WM x WN part of it, WM = BM / WARPS_M and WN = BN / WARPS_N, held as
// (WM/16) x (WN/16) 16x16 f32 accumulator fragments. The inner dimension
// advances BK = 16 at a time: the block stages the A and B tiles in shared
// memory in the order its loaders read them (A as [BM][BK] "row_major" when
// its loader reads k fastest, else [BK][BM] "col_major"; B as [BK][BN] or
// [BN][BK]), so that a warp's stores are contiguous, and each warp loads
// its fragments in the matching wmma layout. Rows are padded by 8 elements
// (16 bytes: wmma's ldm must be a multiple of 16 bytes, and the pad moves
// each row 4 banks on). As in the FP32 kernel, the next tile's global loads
// are issued into registers before the current tile's products.
// The epilogue goes through shared memory: a warp stores one accumulator
// fragment at a time into its own 16x16 f32 scratch (the element-to-lane
// mapping of a fragment is unspecified), then each lane hands 8 of the 256
// values to the store functor.
// Grid as gemm_tiled_kernel: x = column tiles, y = row tiles (grid-stride),
// z = split-K slices of kchunk (a multiple of BK).
#pragma once
#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "cuda/common.cuh"
#include "cuda/wmma.cuh"

namespace ember::cuda {

// kMinBlocks > 1 asks ptxas (__launch_bounds__) to fit that many blocks per
// SM in the register file, spilling if it must.
template <int BM_, int BN_, int BK_, int WARPS_M_, int WARPS_N_, int MIN_BLOCKS_ = 1>
struct TensorTile {
  static constexpr bool kTensorCores = true;
  static constexpr int kMinBlocks = MIN_BLOCKS_;
  static constexpr int BM = BM_, BN = BN_, BK = BK_, WARPS_M = WARPS_M_, WARPS_N = WARPS_N_;
  static constexpr int kWarps = WARPS_M * WARPS_N, kThreads = 32 * kWarps;
  static constexpr int WM = BM / WARPS_M, WN = BN / WARPS_N;  // one warp's part of the tile
  static constexpr int FM = WM / 16, FN = WN / 16;            // its 16x16 accumulator fragments
  static constexpr int kLoadsA = BM * BK / kThreads, kLoadsB = BN * BK / kThreads;
  static_assert(WM % 16 == 0 && WN % 16 == 0 && BK % 16 == 0, "warp tiles are made of 16x16x16 fragments");
  static_assert(BM * BK % kThreads == 0 && BN * BK % kThreads == 0, "tiles must split evenly over the threads");
};

// BK = 16 throughout: each thread stages BM*BK/threads + BN*BK/threads
// elements in registers for the next step, and at BK = 32 the 128 x 128 tile
// spilled (ptxas: 255 registers).
// 128 x 128, 16 warps of 32 x 32 (2 x 2 fragments): big products. The lab's
// variants (cuda/lab/gemm_tensor_versions.cu) timed on an H200, f16 4096^3:
// 43 TFLOP/s, against 26 with 8 warps of 64 x 32 (253 registers, one block
// of 8 warps per SM, stalled on its global loads) and 27-32 for the other
// variants; 54 against 36 at 2048^3.
using TensorTileLarge = TensorTile<128, 128, 16, 4, 4>;
// 64 x 64, 8 warps of 16 x 32 (1 x 2 fragments): the workhorse. The same
// lab run, f16 2048^3: 35 TFLOP/s, against 20 with 4 warps of 32 x 32.
using TensorTileMedium = TensorTile<64, 64, 16, 4, 2>;
// 32 x 32, 4 warps of 16 x 16 (1 fragment): a small M or N.
using TensorTileSmall = TensorTile<32, 32, 16, 2, 2>;

// Calls f(Tile{}) with the tensor-core tile for an M x N result.
template <typename F>
void with_tensor_tile(int64_t M, int64_t N, F&& f) {
  const int64_t large_blocks = ((M + 127) / 128) * ((N + 127) / 128);
  if (M >= 128 && N >= 128 && large_blocks >= 132)
    f(TensorTileLarge{});
  else if (M >= 64 && N >= 64)
    f(TensorTileMedium{});
  else
    f(TensorTileSmall{});
}

// C tile (blockIdx.y, blockIdx.x) of slice blockIdx.z; block: Cfg::kThreads threads.
//   op(A): [M, Kdim] via load_a   op(B): [Kdim, N] via load_b   C: [M, N] via store
template <typename T16, typename Cfg, typename LoadA, typename LoadB, typename Store>
__global__ void __launch_bounds__(Cfg::kThreads, Cfg::kMinBlocks)
    gemm_tensor_kernel(int64_t M, int64_t N, int64_t Kdim, int64_t kchunk, LoadA load_a, LoadB load_b, Store store) {
  namespace wmma = nvcuda::wmma;
  constexpr int BM = Cfg::BM, BN = Cfg::BN, BK = Cfg::BK, NT = Cfg::kThreads;
  constexpr int kPad = 8;
  constexpr bool kARowMajor = LoadA::kKFastest;   // As[m][k]; else As[k][m]
  constexpr bool kBRowMajor = !LoadB::kKFastest;  // Bs[k][n]; else Bs[n][k]
  constexpr int kALd = kARowMajor ? BK + kPad : BM + kPad;
  constexpr int kBLd = kBRowMajor ? BN + kPad : BK + kPad;
  constexpr int kScratchLd = 16 + 4;  // floats: a multiple of 16 bytes
  // The 16-bit tiles as raw 16-bit words: __half and __nv_bfloat16 have
  // constructors, which a static array (the emulator's __shared__) would run.
  __shared__ __align__(32) uint16_t a_words[(kARowMajor ? BM : BK) * kALd];
  __shared__ __align__(32) uint16_t b_words[(kBRowMajor ? BK : BN) * kBLd];
  T16* const As = reinterpret_cast<T16*>(a_words);
  T16* const Bs = reinterpret_cast<T16*>(b_words);
  __shared__ __align__(32) float scratch[Cfg::kWarps * 16 * kScratchLd];
  using LayoutA = std::conditional_t<kARowMajor, wmma::row_major, wmma::col_major>;
  using LayoutB = std::conditional_t<kBRowMajor, wmma::row_major, wmma::col_major>;

  const int tid = int(threadIdx.x);
  const int warp = tid / 32, lane = tid % 32;
  const int wm = warp / Cfg::WARPS_N, wn = warp % Cfg::WARPS_N;
  const int z = int(blockIdx.z);
  const int64_t k_begin = int64_t(z) * kchunk;
  const int64_t k_end = std::min(Kdim, k_begin + kchunk);
  const int64_t col0 = int64_t(blockIdx.x) * BN;
  const int64_t tiles_m = (M + BM - 1) / BM;
  const T16 zero = to_storage<T16>(0.0f);

  auto a_slot = [&](int i) { return tile_slot<LoadA::kKFastest, BM, BK>(tid + i * NT); };
  auto b_slot = [&](int i) { return tile_slot<LoadB::kKFastest, BN, BK>(tid + i * NT); };
  // Where (mn, kk) of a staged tile lives.
  auto a_index = [](int m, int k) { return kARowMajor ? m * kALd + k : k * kALd + m; };
  auto b_index = [](int n, int k) { return kBRowMajor ? k * kBLd + n : n * kBLd + k; };

  for (int64_t tile_m = blockIdx.y; tile_m < tiles_m; tile_m += gridDim.y) {
    const int64_t row0 = tile_m * BM;
    wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc[Cfg::FM][Cfg::FN];
    EMBER_UNROLL
    for (int i = 0; i < Cfg::FM; ++i)
      EMBER_UNROLL
      for (int j = 0; j < Cfg::FN; ++j) wmma::fill_fragment(acc[i][j], 0.0f);

    T16 ra[Cfg::kLoadsA], rb[Cfg::kLoadsB];
    auto fetch = [&](int64_t k0) {  // global -> registers, zeros outside
      EMBER_UNROLL
      for (int i = 0; i < Cfg::kLoadsA; ++i) {
        const TileSlot s = a_slot(i);
        const int64_t row = row0 + s.mn, k = k0 + s.kk;
        ra[i] = (row < M && k < k_end) ? to_storage<T16>(load_a(row, k)) : zero;
      }
      EMBER_UNROLL
      for (int i = 0; i < Cfg::kLoadsB; ++i) {
        const TileSlot s = b_slot(i);
        const int64_t col = col0 + s.mn, k = k0 + s.kk;
        rb[i] = (col < N && k < k_end) ? to_storage<T16>(load_b(k, col)) : zero;
      }
    };

    if (k_begin < k_end) fetch(k_begin);
    for (int64_t k0 = k_begin; k0 < k_end; k0 += BK) {
      EMBER_UNROLL
      for (int i = 0; i < Cfg::kLoadsA; ++i) {  // registers -> shared
        const TileSlot s = a_slot(i);
        As[a_index(s.mn, s.kk)] = ra[i];
      }
      EMBER_UNROLL
      for (int i = 0; i < Cfg::kLoadsB; ++i) {
        const TileSlot s = b_slot(i);
        Bs[b_index(s.mn, s.kk)] = rb[i];
      }
      __syncthreads();
      if (k0 + BK < k_end) fetch(k0 + BK);  // in flight during the products below
      EMBER_UNROLL
      for (int kk = 0; kk < BK; kk += 16) {
        // The B fragments for the whole row of accumulators, one A fragment at a time (registers).
        wmma::fragment<wmma::matrix_b, 16, 16, 16, T16, LayoutB> b[Cfg::FN];
        EMBER_UNROLL
        for (int j = 0; j < Cfg::FN; ++j) wmma::load_matrix_sync(b[j], &Bs[b_index(wn * Cfg::WN + j * 16, kk)], kBLd);
        EMBER_UNROLL
        for (int i = 0; i < Cfg::FM; ++i) {
          wmma::fragment<wmma::matrix_a, 16, 16, 16, T16, LayoutA> a;
          wmma::load_matrix_sync(a, &As[a_index(wm * Cfg::WM + i * 16, kk)], kALd);
          EMBER_UNROLL
          for (int j = 0; j < Cfg::FN; ++j) wmma::mma_sync(acc[i][j], a, b[j], acc[i][j]);
        }
      }
      __syncthreads();
    }

    // Epilogue: one fragment at a time through this warp's scratch.
    float* mine = &scratch[warp * 16 * kScratchLd];
    EMBER_UNROLL
    for (int i = 0; i < Cfg::FM; ++i)
      EMBER_UNROLL
      for (int j = 0; j < Cfg::FN; ++j) {
        wmma::store_matrix_sync(mine, acc[i][j], kScratchLd, wmma::mem_row_major);
        __syncwarp();
        EMBER_UNROLL
        for (int e = 0; e < 8; ++e) {  // rows 2e and 2e + 1, a half-warp per row
          const int r = 2 * e + lane / 16, c = lane % 16;
          const int64_t row = row0 + wm * Cfg::WM + i * 16 + r;
          const int64_t col = col0 + wn * Cfg::WN + j * 16 + c;
          if (row < M && col < N) store(z, row, col, mine[r * kScratchLd + c]);
        }
        __syncwarp();
      }
  }
}

}  // namespace ember::cuda
