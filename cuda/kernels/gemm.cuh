// cuda/kernels/gemm.cuh — the shared-memory tiled GEMM kernel template,
// shared by gemm.cu (plain row-major GEMM) and conv.cu (implicit-GEMM
// convolution).
//
//   C[M, N] (+)= op(A)[M, Kdim] * op(B)[Kdim, N]
//
// The kernel never touches A, B or C directly: it reads its operands through
// two *loader* functors and writes its results through a *store* functor, so
// that the same tile loop multiplies plain matrices (MatrixA / MatrixB below)
// or operands gathered on the fly from images (conv.cu), and writes C with
// alpha/beta, into NCHW planes, or into split-K partial sums.
//
//   struct Loader {
//     static constexpr bool kKFastest;   // consecutive k are adjacent in memory
//     __device__ T operator()(int64_t i, int64_t k) const;  // A: (row, k)
//     __device__ T operator()(int64_t k, int64_t j) const;  // B: (k, col)
//   };                                   // called only for in-range indices
//   struct Store { __device__ void operator()(int z, int64_t row, int64_t col, T acc) const; };
//
// T here is the COMPUTE type (float or double): mixed precision is the
// loaders' and the store's business. With f16 or bf16 storage the loaders
// read __half / __nv_bfloat16 and return float (so the tiles are staged in
// shared memory as f32), the kernel accumulates in f32, and the store rounds
// once to the 16-bit type.
// With f16 or bf16 storage the launchers below pick the tensor-core
// version of this loop instead (gemm_tensor.cuh, through nvcuda::wmma),
// unless native_tensor_cores() is off.
//
// Tiling (Cfg = GemmTile<BM, BN, BK, TM, TN>, three sizes below): a block
// of (BM/TM)*(BN/TN) threads computes a BM x BN tile of C; each thread holds
// a TM x TN micro-tile of accumulators in registers, at rows ty + i*(BM/TM) and
// columns tx + j*(BN/TN) of the tile (strided, so a warp reads consecutive
// shared-memory words of the B tile and writes consecutive columns of C).
// The inner dimension advances BK at a time: the block stages the A tile as
// As[BK][BM] and the B tile as Bs[BK][BN] in shared memory (rows padded by
// one element against bank conflicts when loaders fill them k-fastest), and
// every thread then does BK rank-1 updates of its micro-tile. The next
// tile's global loads are issued into registers before the current tile is
// used, so their latency overlaps the arithmetic (one shared buffer, two
// barriers per step). Loaders are called with k-fastest or row/col-fastest
// thread order following kKFastest, so global reads are coalesced.
// Out-of-range rows, columns and k are loaded as zeros; only in-range
// elements are stored.
//
// Grid: x = column tiles, y = row tiles (a grid-stride loop covers more than
// 65535), z = split-K slices: slice z sums k in [z*kchunk, min(Kdim, (z+1)*kchunk))
// and passes z to the store functor. f32 (and f16, bf16) accumulates in f32.
#pragma once
#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "cuda/common.cuh"
#include "cuda/cuda_kernels.h"  // native_tensor_cores()

namespace ember::cuda {

// ---------------------------------------------------------------- tiles

template <int BM_, int BN_, int BK_, int TM_, int TN_>
struct GemmTile {
  static constexpr bool kTensorCores = false;
  static constexpr int BM = BM_, BN = BN_, BK = BK_, TM = TM_, TN = TN_;
  static constexpr int kThreadsM = BM / TM, kThreadsN = BN / TN;
  static constexpr int kThreads = kThreadsM * kThreadsN;
  static constexpr int kLoadsA = BM * BK / kThreads;  // A elements each thread stages per step
  static constexpr int kLoadsB = BN * BK / kThreads;
  static_assert(BM % TM == 0 && BN % TN == 0, "micro-tiles must divide the block tile");
  static_assert(BM * BK % kThreads == 0 && BN * BK % kThreads == 0, "tiles must split evenly over the threads");
};

// 128 x 128 tile, 8 x 8 per thread, 256 threads, BK = 8: big f32 problems
// (16 shared-memory reads per 64 FMAs). f64 does not use it: 64 double
// accumulators per thread would spill.
using GemmTileHuge = GemmTile<128, 128, 8, 8, 8>;
// 64 x 64 tile, 4 x 4 per thread, 256 threads: the workhorse.
using GemmTileLarge = GemmTile<64, 64, 16, 4, 4>;
// 32 x 32 tile, 2 x 2 per thread, 256 threads: problems with a small M or N
// (many convolutions' K or C, the classifier), where 64-wide tiles would
// leave most of the block idle.
using GemmTileSmall = GemmTile<32, 32, 16, 2, 2>;

// The huge tile only when it still gives at least one block per SM of a big GPU.
constexpr int64_t kGemmHugeMinBlocks = 132;

// -------------------------------------------------------------- loaders

// op(A)(i, k) of a row-major matrix: A[i*ld + k], or A[k*ld + i] when kTrans
// (storage T, returned in compute_t<T>).
template <typename T, bool kTrans>
struct MatrixA {
  const T* a;
  int64_t ld;
  static constexpr bool kKFastest = !kTrans;
  __device__ __forceinline__ compute_t<T> operator()(int64_t i, int64_t k) const {
    return to_compute(kTrans ? a[k * ld + i] : a[i * ld + k]);
  }
};

// op(B)(k, j) of a row-major matrix: B[k*ld + j], or B[j*ld + k] when kTrans.
template <typename T, bool kTrans>
struct MatrixB {
  const T* b;
  int64_t ld;
  static constexpr bool kKFastest = kTrans;
  __device__ __forceinline__ compute_t<T> operator()(int64_t k, int64_t j) const {
    return to_compute(kTrans ? b[j * ld + k] : b[k * ld + j]);
  }
};

// --------------------------------------------------------------- kernel

// Where element e of a staged BK x kWidth tile goes: (mn, kk), mn along the
// tile's rows (A) or columns (B); k fastest when the loader reads k-fastest.
struct TileSlot {
  int mn, kk;
};
template <bool kKFastest, int kWidth, int BK>
__device__ __forceinline__ TileSlot tile_slot(int e) {
  if constexpr (kKFastest)
    return {e / BK, e % BK};
  else
    return {e % kWidth, e / kWidth};
}

// C tile (blockIdx.y, blockIdx.x) of slice blockIdx.z; block: Cfg::kThreads threads.
//   op(A): [M, Kdim] via load_a   op(B): [Kdim, N] via load_b   C: [M, N] via store
template <typename T, typename Cfg, typename LoadA, typename LoadB, typename Store>
__global__ void gemm_tiled_kernel(int64_t M, int64_t N, int64_t Kdim, int64_t kchunk, LoadA load_a, LoadB load_b,
                                  Store store) {
  constexpr int BM = Cfg::BM, BN = Cfg::BN, BK = Cfg::BK, TM = Cfg::TM, TN = Cfg::TN;
  constexpr int NT = Cfg::kThreads;
  // Row padding of the staged tiles. A loader that reads k fastest stores
  // a warp's 32 elements down BK rows of 32 / BK columns: with a row stride
  // of 32 / BK words (mod 32) those land in 32 distinct banks (floats; the
  // emulator's profiler measured 2-way conflicts with a pad of 1). Doubles
  // are stored a half-warp at a time, 16 rows of one column: an odd stride
  // keeps them apart.
  constexpr int kPad = sizeof(T) == 4 ? 32 / BK : 1;
  static_assert(sizeof(T) != 4 || (BM % 32 == 0 && BN % 32 == 0 && 32 % BK == 0), "the padding assumes these");
  __shared__ T As[BK][BM + kPad];
  __shared__ T Bs[BK][BN + kPad];

  const int tid = int(threadIdx.x);
  const int tx = tid % Cfg::kThreadsN, ty = tid / Cfg::kThreadsN;
  const int z = int(blockIdx.z);
  const int64_t k_begin = int64_t(z) * kchunk;
  const int64_t k_end = std::min(Kdim, k_begin + kchunk);
  const int64_t col0 = int64_t(blockIdx.x) * BN;
  const int64_t tiles_m = (M + BM - 1) / BM;

  // Where this thread's staged element i goes in the A and B tiles.
  auto a_slot = [&](int i) { return tile_slot<LoadA::kKFastest, BM, BK>(tid + i * NT); };
  auto b_slot = [&](int i) { return tile_slot<LoadB::kKFastest, BN, BK>(tid + i * NT); };

  for (int64_t tile_m = blockIdx.y; tile_m < tiles_m; tile_m += gridDim.y) {
    const int64_t row0 = tile_m * BM;
    T acc[TM][TN];
    for (int i = 0; i < TM; ++i)
      for (int j = 0; j < TN; ++j) acc[i][j] = T(0);

    T ra[Cfg::kLoadsA], rb[Cfg::kLoadsB];
    auto fetch = [&](int64_t k0) {  // global -> registers, zeros outside
      for (int i = 0; i < Cfg::kLoadsA; ++i) {
        const TileSlot s = a_slot(i);
        const int64_t row = row0 + s.mn, k = k0 + s.kk;
        ra[i] = (row < M && k < k_end) ? load_a(row, k) : T(0);
      }
      for (int i = 0; i < Cfg::kLoadsB; ++i) {
        const TileSlot s = b_slot(i);
        const int64_t col = col0 + s.mn, k = k0 + s.kk;
        rb[i] = (col < N && k < k_end) ? load_b(k, col) : T(0);
      }
    };

    if (k_begin < k_end) fetch(k_begin);
    for (int64_t k0 = k_begin; k0 < k_end; k0 += BK) {
      for (int i = 0; i < Cfg::kLoadsA; ++i) {  // registers -> shared
        const TileSlot s = a_slot(i);
        As[s.kk][s.mn] = ra[i];
      }
      for (int i = 0; i < Cfg::kLoadsB; ++i) {
        const TileSlot s = b_slot(i);
        Bs[s.kk][s.mn] = rb[i];
      }
      __syncthreads();
      if (k0 + BK < k_end) fetch(k0 + BK);  // in flight during the products below
      for (int kk = 0; kk < BK; ++kk) {
        T a[TM], b[TN];
        for (int i = 0; i < TM; ++i) a[i] = As[kk][ty + i * Cfg::kThreadsM];
        for (int j = 0; j < TN; ++j) b[j] = Bs[kk][tx + j * Cfg::kThreadsN];
        for (int i = 0; i < TM; ++i)
          for (int j = 0; j < TN; ++j) acc[i][j] += a[i] * b[j];
      }
      EMBER_PROFILE_FLOPS(2 * BK * TM * TN);  // a multiply-add per accumulator and kk, padding included
      __syncthreads();
    }

    for (int i = 0; i < TM; ++i) {
      const int64_t row = row0 + ty + i * Cfg::kThreadsM;
      for (int j = 0; j < TN; ++j) {
        const int64_t col = col0 + tx + j * Cfg::kThreadsN;
        if (row < M && col < N) store(z, row, col, acc[i][j]);
      }
    }
  }
}

}  // namespace ember::cuda

#include "cuda/kernels/gemm_tensor.cuh"  // needs TileSlot and tile_slot above

namespace ember::cuda {

template <typename T>
constexpr bool kTensorCoreInput = std::is_same_v<T, __half> || std::is_same_v<T, __nv_bfloat16>;

// Calls f(Tile{}) with the tile for an M x N result of storage type T: a
// tensor-core tile for f16 and bf16 (when native_tensor_cores()), else the
// largest FP32-pipe tile whose blocks the result fills.
template <typename T, typename F>
void with_gemm_tile(int64_t M, int64_t N, F&& f) {
  if constexpr (kTensorCoreInput<T>) {
    if (native_tensor_cores()) {
      with_tensor_tile(M, N, f);
      return;
    }
  }
  if constexpr (sizeof(compute_t<T>) == 4) {
    const int64_t huge_blocks = ((M + 127) / 128) * ((N + 127) / 128);
    if (M >= 128 && N >= 128 && huge_blocks >= kGemmHugeMinBlocks) {
      f(GemmTileHuge{});
      return;
    }
  }
  if (M >= 64 && N >= 64)
    f(GemmTileLarge{});
  else
    f(GemmTileSmall{});
}

// Launches the tiled kernel on `stream`: Kdim in `splits` slices of kchunk
// (a multiple of Cfg::BK; splits * kchunk >= Kdim). Nothing to do when M or N is 0.
// T is the storage type: Cfg decides between the tensor-core kernel (T
// must be 16-bit) and the FP32-pipe kernel (computing in compute_t<T>).
template <typename T, typename Cfg, typename LoadA, typename LoadB, typename Store>
void launch_gemm_tiled(int64_t M, int64_t N, int64_t Kdim, int splits, int64_t kchunk, const LoadA& load_a,
                       const LoadB& load_b, const Store& store, cudaStream_t stream) {
  if (M <= 0 || N <= 0) return;
  const int64_t tiles_n = (N + Cfg::BN - 1) / Cfg::BN;
  const int64_t tiles_m = (M + Cfg::BM - 1) / Cfg::BM;
  if (tiles_n > 0x7fffffff) fail(cat("gemm: N = ", N, " needs too many column tiles"));
  const dim3 grid(unsigned(tiles_n), unsigned(std::min<int64_t>(tiles_m, 65535)), unsigned(splits));
  if constexpr (Cfg::kTensorCores) {
    static_assert(kTensorCoreInput<T>, "tensor-core tiles take f16 or bf16");
    launch(gemm_tensor_kernel<T, Cfg, LoadA, LoadB, Store>, grid, dim3(Cfg::kThreads), 0, stream, M, N, Kdim, kchunk,
           load_a, load_b, store);
  } else {
    launch(gemm_tiled_kernel<compute_t<T>, Cfg, LoadA, LoadB, Store>, grid, dim3(Cfg::kThreads), 0, stream, M, N,
           Kdim, kchunk, load_a, load_b, store);
  }
}

// The same with the tile chosen by with_gemm_tile, no split.
template <typename T, typename LoadA, typename LoadB, typename Store>
void launch_gemm_auto(int64_t M, int64_t N, int64_t Kdim, const LoadA& load_a, const LoadB& load_b,
                      const Store& store, cudaStream_t stream) {
  with_gemm_tile<T>(M, N, [&](auto tile) {
    launch_gemm_tiled<T, decltype(tile)>(M, N, Kdim, 1, std::max<int64_t>(Kdim, 1), load_a, load_b, store, stream);
  });
}

}  // namespace ember::cuda
