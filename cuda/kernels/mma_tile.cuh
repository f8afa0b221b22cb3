// cuda/kernels/mma_tile.cuh — ember's mma.sync main loop and what it is made
// of, apart from what is being multiplied (cuda/kernels/conv_mma.cu runs the
// three convolution passes on it, cuda/kernels/gemm_mma.cu the GEMM): the
// block tile, where a 16-byte chunk of a staged tile lives in shared memory,
// one warp's fragments loaded with ldmatrix and multiplied with mma.sync,
// the cp.async pipeline over the reduction steps, and the epilogue's walk
// over the accumulators.
//
// The element type T is f16 or bf16 (mma.sync m16n8k16), or f32, which the
// tensor cores take as TF32 (m16n8k8: each value rounded to a 10-bit
// mantissa by cvt.rna.tf32.f32 once its fragment is loaded). A 16-byte
// chunk holds kChunkValues<T> values (8, or 4 f32) and a reduction step 64
// bytes of each row: kStepValues<T> values (32, or 16 f32), two k16 (or k8)
// mma.sync steps.
//
// A staged tile holds one reduction step of an operand, in one of two
// layouts, picked by which index runs contiguous in global memory:
// - K-major (KMajor = true): a row per M (or N) index, the step's
//   reduction values as 4 chunks (the forward pass's image gather:
//   channels are the reduction). ldmatrix without .trans: its 8x8 matrices
//   of 16-bit pairs are, for f32, 8x4 matrices of words, which is exactly
//   the TF32 fragment layout, so the same addresses serve both.
// - MN-major (KMajor = false): a row per reduction index (kStepValues<T>
//   rows), the M (or N) values as chunks (the filter in the data gradient:
//   its input channels are the result's columns). ldmatrix .trans for 16-bit
//   values; f32 has no transposing ldmatrix, so each lane reads its words
//   with 32-bit shared loads (2-way bank conflicts at worst).
// Both are XOR-swizzled so that the 8 rows of one ldmatrix phase, and the 8
// chunks a quarter-warp of cp.async writes, use 8 different 16-byte slots
// of the 128-byte bank cycle: no bank conflicts, no padding.
#pragma once
#include "cuda/common.cuh"
#include "cuda/kernels/pack.cuh"
#include "cuda/ptx_instructions.cuh"

namespace ember::cuda {

template <typename T>
inline constexpr int kChunkValues = 16 / int(sizeof(T));
template <typename T>
inline constexpr int kStepValues = 64 / int(sizeof(T));

// The block's tile: BM x BN outputs, warps arranged kWarpsM x kWarpsN,
// kStages shared-memory stages of one 64-byte reduction step each.
template <int BM_, int BN_, int kWarpsM_, int kWarpsN_, int kStages_>
struct MmaTile {
  static constexpr int BM = BM_, BN = BN_, kWarpsM = kWarpsM_, kWarpsN = kWarpsN_, kStages = kStages_;
  static constexpr int kThreads = 32 * kWarpsM * kWarpsN;
  static constexpr int kWarpM = BM / kWarpsM, kWarpN = BN / kWarpsN;
  static constexpr int kFragM = kWarpM / 16, kFragN = kWarpN / 8;
  static constexpr int kABytes = BM * 64, kBBytes = BN * 64;  // one step of each operand
  static constexpr int kStageBytes = kABytes + kBBytes;
  static constexpr int kSharedBytes = kStages * kStageBytes;
  static constexpr int kChunksPerThreadA = BM * 4 / kThreads, kChunksPerThreadB = BN * 4 / kThreads;
  static_assert(kWarpM % 16 == 0 && kWarpN % 16 == 0, "a warp covers whole 16x16 pieces");
  static_assert(BM * 4 % kThreads == 0 && BN * 4 % kThreads == 0, "every thread copies whole chunks");
  static_assert(BM >= 64 && BN >= 64, "an MN-major row needs at least 8 chunks for its swizzle");
};
using MmaTileLarge = MmaTile<128, 128, 2, 2, 3>;  // 48 KiB of stages: the default dynamic limit
using MmaTileSmall = MmaTile<64, 64, 2, 2, 4>;    // for problems with few output tiles

// K-major: chunk `chunk` (0-3) of row `row`. Two 64-byte rows share a
// 128-byte line; the chunk's slot in the line is XORed with the line number.
__device__ __forceinline__ uint32_t k_major_offset(int row, int chunk) {
  const int line = row >> 1, slot = ((row & 1) << 2) | chunk;
  return uint32_t(line * 128 + ((slot ^ (line & 7)) << 4));
}
// MN-major: chunk `chunk` of reduction row `row`, rows of `Extent` values
// of T (Extent / kChunkValues<T> chunks); the chunk is XORed with the row's
// place in its 8.
template <typename T, int Extent>
__device__ __forceinline__ uint32_t mn_major_offset(int row, int chunk) {
  return uint32_t(row * Extent * int(sizeof(T)) + ((chunk ^ (row & 7)) << 4));
}

// f32 in an MN-major tile: the word of reduction row `row`, column `col`, as TF32.
template <int Extent>
__device__ __forceinline__ uint32_t mn_major_tf32(const unsigned char* tile, int row, int col) {
  const float v = *reinterpret_cast<const float*>(tile + mn_major_offset<float, Extent>(row, col >> 2) + (col & 3) * 4);
  return ptx::to_tf32(v);
}

template <int N>
__device__ __forceinline__ void round_to_tf32(uint32_t (&r)[N]) {
  EMBER_UNROLL
  for (int i = 0; i < N; ++i) r[i] = ptx::to_tf32(__uint_as_float(r[i]));
}

// A fragments (16 x 16 of the warp's rows from `row0`, or 16 x 8 f32) of
// mma step ks (0, 1) of the staged step.
template <typename T, bool KMajor, int Extent>
__device__ __forceinline__ void load_a_fragment(uint32_t (&a)[4], const unsigned char* tile, int row0, int ks,
                                                int lane) {
  if constexpr (KMajor) {
    // matrix lane / 8: rows 0-7 / 8-15 (lane % 16), chunks 2 ks + lane / 16
    ptx::ldmatrix<4>(a, tile + k_major_offset(row0 + (lane & 15), 2 * ks + (lane >> 4)));
    if constexpr (std::is_same_v<T, float>) round_to_tf32(a);
  } else if constexpr (std::is_same_v<T, float>) {
    // a[0] = A[g][t], a[1] = A[g+8][t], a[2] = A[g][t+4], a[3] = A[g+8][t+4]; k is the tile's row
    const int g = lane >> 2, k = 8 * ks + (lane & 3);
    a[0] = mn_major_tf32<Extent>(tile, k, row0 + g);
    a[1] = mn_major_tf32<Extent>(tile, k, row0 + g + 8);
    a[2] = mn_major_tf32<Extent>(tile, k + 4, row0 + g);
    a[3] = mn_major_tf32<Extent>(tile, k + 4, row0 + g + 8);
  } else {
    // matrix i = lane / 8 holds k rows 8 (i / 2).., m chunk row0 / 8 + i % 2, transposed
    const int i = lane >> 3;
    ptx::ldmatrix_trans<4>(a, tile + mn_major_offset<T, Extent>(16 * ks + ((i >> 1) << 3) + (lane & 7),
                                                             (row0 >> 3) + (i & 1)));
  }
}

// B fragments of two n8 tiles (columns col0 .. col0 + 15) of mma step ks.
template <typename T, bool KMajor, int Extent>
__device__ __forceinline__ void load_b_fragments(uint32_t (&b0)[2], uint32_t (&b1)[2], const unsigned char* tile,
                                                 int col0, int ks, int lane) {
  uint32_t r[4];
  const int i = lane >> 3;
  if constexpr (KMajor) {  // matrix i: n rows 8 (i / 2) + lane % 8, chunk 2 ks + i % 2
    ptx::ldmatrix<4>(r, tile + k_major_offset(col0 + ((i >> 1) << 3) + (lane & 7), 2 * ks + (i & 1)));
    if constexpr (std::is_same_v<T, float>) round_to_tf32(r);
  } else if constexpr (std::is_same_v<T, float>) {
    // b[0] = B[t][g], b[1] = B[t+4][g] of each n8 tile; k is the tile's row
    const int g = lane >> 2, k = 8 * ks + (lane & 3);
    r[0] = mn_major_tf32<Extent>(tile, k, col0 + g);
    r[1] = mn_major_tf32<Extent>(tile, k + 4, col0 + g);
    r[2] = mn_major_tf32<Extent>(tile, k, col0 + 8 + g);
    r[3] = mn_major_tf32<Extent>(tile, k + 4, col0 + 8 + g);
  } else {  // matrix i: k rows 16 ks + 8 (i % 2) + lane % 8, n chunk col0 / 8 + i / 2, transposed
    ptx::ldmatrix_trans<4>(r, tile + mn_major_offset<T, Extent>(16 * ks + ((i & 1) << 3) + (lane & 7),
                                                                (col0 >> 3) + (i >> 1)));
  }
  b0[0] = r[0];
  b0[1] = r[1];
  b1[0] = r[2];
  b1[1] = r[3];
}

// d += a b for one 16 x 8 piece: m16n8k16 for 16-bit T, m16n8k8 TF32 for f32.
template <typename T>
__device__ __forceinline__ void mma_piece(float (&d)[4], const uint32_t (&a)[4], const uint32_t (&b)[2]) {
  if constexpr (std::is_same_v<T, __half>)
    ptx::mma_m16n8k16_f16(d, a, b, d);
  else if constexpr (std::is_same_v<T, __nv_bfloat16>)
    ptx::mma_m16n8k16_bf16(d, a, b, d);
  else
    ptx::mma_m16n8k8_tf32(d, a, b, d);
}

// One staged step for one warp: 2 mma steps (k16, or k8 for f32), each kFragM x kFragN mma.sync.
template <typename T, typename Cfg, bool AKMajor, bool BKMajor>
__device__ __forceinline__ void warp_step(float (&acc)[Cfg::kFragM][Cfg::kFragN][4], const unsigned char* a_tile,
                                          const unsigned char* b_tile, int warp_m, int warp_n, int lane) {
  EMBER_UNROLL
  for (int ks = 0; ks < 2; ++ks) {
    uint32_t a[Cfg::kFragM][4], b[Cfg::kFragN][2];
    EMBER_UNROLL
    for (int i = 0; i < Cfg::kFragM; ++i) load_a_fragment<T, AKMajor, Cfg::BM>(a[i], a_tile, warp_m + i * 16, ks, lane);
    EMBER_UNROLL
    for (int j = 0; j < Cfg::kFragN; j += 2)
      load_b_fragments<T, BKMajor, Cfg::BN>(b[j], b[j + 1], b_tile, warp_n + j * 8, ks, lane);
    EMBER_UNROLL
    for (int i = 0; i < Cfg::kFragM; ++i) {
      EMBER_UNROLL
      for (int j = 0; j < Cfg::kFragN; ++j) mma_piece<T>(acc[i][j], a[i], b[j]);
    }
  }
}

// Two adjacent outputs, rounded once, as one store (4 bytes for 16-bit T, 8 for float).
template <typename T>
__device__ __forceinline__ void store_pair(T* y, float v0, float v1) {
  struct alignas(2 * sizeof(T)) Pair {
    T v[2];
  };
  Pair p;
  p.v[0] = to_storage<T>(v0);
  p.v[1] = to_storage<T>(v1);
  *reinterpret_cast<Pair*>(y) = p;
}

// Accumulators to zero.
template <typename Cfg>
__device__ __forceinline__ void zero_accumulators(float (&acc)[Cfg::kFragM][Cfg::kFragN][4]) {
  EMBER_UNROLL
  for (int i = 0; i < Cfg::kFragM; ++i) {
    EMBER_UNROLL
    for (int j = 0; j < Cfg::kFragN; ++j) {
      EMBER_UNROLL
      for (int e = 0; e < 4; ++e) acc[i][j][e] = 0.0f;
    }
  }
}

// The pipelined main loop over steps [first, last): copy(stage, step) issues
// one step's cp.async copies (in step order: each call advances the
// caller's positions), then the warps multiply.
template <typename T, typename Cfg, bool AKMajor, bool BKMajor, typename Copy>
__device__ __forceinline__ void main_loop(float (&acc)[Cfg::kFragM][Cfg::kFragN][4], unsigned char* stages, int first,
                                          int last, Copy&& copy) {
  const int lane = int(threadIdx.x) & 31, warp = int(threadIdx.x) >> 5;
  const int warp_m = (warp % Cfg::kWarpsM) * Cfg::kWarpM, warp_n = (warp / Cfg::kWarpsM) * Cfg::kWarpN;
  const int steps = last - first;
  EMBER_UNROLL
  for (int s = 0; s < Cfg::kStages - 1; ++s) {
    if (s < steps) copy(s, first + s);
    ptx::cp_async_commit();
  }
  EMBER_NO_UNROLL
  for (int t = 0; t < steps; ++t) {
    ptx::cp_async_wait<Cfg::kStages - 2>();  // this thread's copies of step t have landed
    __syncthreads();                          // everyone's; and the stage of step t - 1 is free
    const int next = t + Cfg::kStages - 1;
    if (next < steps) copy(next % Cfg::kStages, first + next);
    ptx::cp_async_commit();
    const unsigned char* a_tile = stages + (t % Cfg::kStages) * Cfg::kStageBytes;
    warp_step<T, Cfg, AKMajor, BKMajor>(acc, a_tile, a_tile + Cfg::kABytes, warp_m, warp_n, lane);
  }
  ptx::cp_async_wait<0>();
}

// Hands the block's results to epilogue(m, n, v, v1): outputs (m, n) and
// (m, n + 1) of the rows m0.. and columns n0.. with m < M and n < N (n + 1
// may be N when N is odd: the epilogue checks).
template <typename Cfg, typename Epilogue>
__device__ __forceinline__ void store_tile(const float (&acc)[Cfg::kFragM][Cfg::kFragN][4], int m0, int n0, int M,
                                           int N, const Epilogue& epilogue) {
  const int lane = int(threadIdx.x) & 31, warp = int(threadIdx.x) >> 5;
  const int warp_m = (warp % Cfg::kWarpsM) * Cfg::kWarpM, warp_n = (warp / Cfg::kWarpsM) * Cfg::kWarpN;
  const int g = lane >> 2, t = lane & 3;  // lane holds rows g, g + 8 and columns 2t, 2t + 1 of each piece
  EMBER_UNROLL
  for (int i = 0; i < Cfg::kFragM; ++i) {
    EMBER_UNROLL
    for (int half = 0; half < 2; ++half) {
      const int m = m0 + warp_m + i * 16 + g + half * 8;
      if (m >= M) continue;
      EMBER_UNROLL
      for (int j = 0; j < Cfg::kFragN; ++j) {
        const int n = n0 + warp_n + j * 8 + 2 * t;
        if (n < N) epilogue(m, n, acc[i][j][2 * half], acc[i][j][2 * half + 1]);
      }
    }
  }
}

// The staged epilogue, for 16-bit results whose row length N is a multiple
// of 8: the warps write their accumulators, rounded once to T, into the
// block's tile in shared memory (the stages are free by then), and every
// thread then hands whole 16-byte chunks of a row to store(m, n, chunk):
// outputs (m, n .. n + 7). A warp so stores 512 contiguous-by-row bytes,
// 16 sectors a request, where the lanes' pairs of store_tile make 8 sectors
// of 4 bytes each half-used. Staged rows hold BN + 8 values: the 8 rows a
// warp writes at once then start 16 bytes apart in the banks (no
// conflicts), and a quarter-warp reads 8 chunks of one row.
template <typename T, typename Cfg>
inline constexpr bool kStagedEpilogueFits =
    sizeof(T) == 2 && Cfg::BM * (Cfg::BN + 8) * int(sizeof(T)) <= Cfg::kSharedBytes;

// Batch norm's statistics taken in the staged epilogue: per output column
// n (a channel), the sums of (y - center[n]) and of its square over the
// block's rows, from the values as stored (rounded to T), in double, into
// pa[n * G + blockIdx.x] and pb[...] (batch_norm_sums.cuh's layout, G the
// grid's row blocks). Null pa: none taken.
struct ColumnSums {
  const float* center = nullptr;  // [N]
  double* pa = nullptr;           // [N, G]
  double* pb = nullptr;           // [N, G]
  int G = 0;
};

template <typename T, typename Cfg, typename ChunkStore>
__device__ __forceinline__ void store_tile_staged(const float (&acc)[Cfg::kFragM][Cfg::kFragN][4],
                                                  unsigned char* smem, int m0, int n0, int M, int N,
                                                  const ChunkStore& store, const ColumnSums& sums = {}) {
  static_assert(kStagedEpilogueFits<T, Cfg>, "the staged tile is 16-bit and fits in the stages' memory");
  constexpr int kRow = Cfg::BN + 8, kChunksPerRow = Cfg::BN / 8;
  const int tid = int(threadIdx.x), lane = tid & 31, warp = tid >> 5;
  const int warp_m = (warp % Cfg::kWarpsM) * Cfg::kWarpM, warp_n = (warp / Cfg::kWarpsM) * Cfg::kWarpN;
  const int g = lane >> 2, t = lane & 3;
  T* tile = reinterpret_cast<T*>(smem);
  __syncthreads();  // every warp has read its last stage
  EMBER_UNROLL
  for (int i = 0; i < Cfg::kFragM; ++i) {
    EMBER_UNROLL
    for (int half = 0; half < 2; ++half) {
      const int row = warp_m + i * 16 + g + half * 8;
      EMBER_UNROLL
      for (int j = 0; j < Cfg::kFragN; ++j)
        store_pair(tile + row * kRow + warp_n + j * 8 + 2 * t, acc[i][j][2 * half], acc[i][j][2 * half + 1]);
    }
  }
  __syncthreads();
  EMBER_UNROLL
  for (int c = tid; c < Cfg::BM * kChunksPerRow; c += Cfg::kThreads) {
    const int row = c / kChunksPerRow, chunk = c % kChunksPerRow;  // powers of two: shifts
    const int m = m0 + row, n = n0 + chunk * 8;
    if (m < M && n < N) store(m, n, load_pack(tile + row * kRow + chunk * 8));
  }
  if (sums.pa == nullptr) return;
  // One thread a column, down the block's rows in order (a warp reads 32
  // consecutive values of a row: no bank conflicts).
  const int rows = M - m0 < Cfg::BM ? M - m0 : Cfg::BM;
  for (int col = tid; col < Cfg::BN; col += Cfg::kThreads) {
    const int n = n0 + col;
    if (n >= N) continue;
    const double center = double(sums.center[n]);
    double a = 0.0, b = 0.0;
    for (int row = 0; row < rows; ++row) {
      const double d = double(to_compute(tile[row * kRow + col])) - center;
      a += d;
      b += d * d;
    }
    sums.pa[int64_t(n) * sums.G + blockIdx.x] = a;
    sums.pb[int64_t(n) * sums.G + blockIdx.x] = b;
  }
  __threadfence();  // the partials are visible to every block before this block counts itself finished
}

// out[m * ld + n .. + 7] = one 16-byte chunk of 16-bit values (ld and n multiples of 8).
template <typename T>
struct StoreChunks {
  T* out;
  int64_t ld;
  __device__ __forceinline__ void operator()(int m, int n, const Pack<T>& chunk) const {
    store_pack(out + int64_t(m) * ld + n, chunk);
  }
};

// The plain epilogue: out[m * ld + n], n + 1 as one store (N even).
template <typename Out>
struct StorePairs {
  Out* out;
  int64_t ld;
  __device__ __forceinline__ void operator()(int m, int n, float v0, float v1) const {
    store_pair(out + int64_t(m) * ld + n, v0, v1);
  }
};

}  // namespace ember::cuda
