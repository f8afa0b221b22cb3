// cuda/lab/gemm_mma_versions.cu — the rungs of the mma.sync GEMM ladder
// (see gemm_mma_versions.h): one kernel template whose switches are the
// rungs' changes, so that each rung differs from the one before in exactly
// the thing it names.
//
//   A [M, K] row-major: staged K-major (a row per m, 4 chunks of 8 k)
//   B [K, N] row-major: staged MN-major (a row per k, 16 chunks of 8 n)
//   C [M, N] = A B, f32 accumulators, rounded once to f16
// Needs K and N multiples of 8 (16-byte chunks); M is free.
#include "cuda/lab/gemm_mma_versions.h"

#include "cuda/common.cuh"
#include "cuda/kernels/mma_tile.cuh"
#include "engine/error.h"

namespace ember::cuda::lab {
namespace {

using Tile = MmaTileLarge;  // 128 x 128 outputs, 2 x 2 warps of 64 x 64
constexpr int kPadBytes = 16;
constexpr int kAPaddedRow = 64 + kPadBytes, kBPaddedRow = Tile::BN * 2 + kPadBytes;

template <bool CpAsync, int Stages, bool Ldmatrix, bool Swizzle, bool StagedEpilogue>
struct Rung {
  static constexpr bool kCpAsync = CpAsync, kLdmatrix = Ldmatrix, kSwizzle = Swizzle, kStagedEpilogue = StagedEpilogue;
  static constexpr int kStages = Stages;
  static_assert(kCpAsync ? kStages >= 2 : kStages == 1, "registers stage one buffer; cp.async two or more");
  static constexpr int kABytes = Swizzle ? Tile::kABytes : Tile::BM * kAPaddedRow;
  static constexpr int kBBytes = Swizzle ? Tile::kBBytes : 32 * kBPaddedRow;
  static constexpr int kStageBytes = kABytes + kBBytes;
  static constexpr int kCRowBytes = Tile::BN * 2 + kPadBytes;  // the staged epilogue's C rows
  static constexpr int kSharedBytes = StagedEpilogue && Tile::BM * kCRowBytes > Stages * kStageBytes
                                          ? Tile::BM * kCRowBytes
                                          : Stages * kStageBytes;
};

// Where chunk `chunk` of a staged row lives: padded rows (16 spare bytes
// each, so 8 consecutive rows start in 8 different bank groups), or the
// XOR swizzle of mma_tile.cuh.
template <bool Swizzle>
__device__ __forceinline__ uint32_t a_offset(int row, int chunk) {
  return Swizzle ? k_major_offset(row, chunk) : uint32_t(row * kAPaddedRow + chunk * 16);
}
template <bool Swizzle>
__device__ __forceinline__ uint32_t b_offset(int row, int chunk) {
  return Swizzle ? mn_major_offset<__half, Tile::BN>(row, chunk) : uint32_t(row * kBPaddedRow + chunk * 16);
}

// The warp's fragments of k16 step ks, by ldmatrix or by plain 32- and
// 16-bit shared loads following the fragment layouts (cuda/ptx_instructions.cuh).
template <typename R>
__device__ __forceinline__ void load_fragments(uint32_t (&a)[Tile::kFragM][4], uint32_t (&b)[Tile::kFragN][2],
                                               const unsigned char* a_tile, const unsigned char* b_tile, int warp_m,
                                               int warp_n, int ks, int lane) {
  const int g = lane >> 2, t = lane & 3, i8 = lane >> 3;
  EMBER_UNROLL
  for (int i = 0; i < Tile::kFragM; ++i) {
    const int row = warp_m + i * 16;
    if constexpr (R::kLdmatrix) {
      ptx::ldmatrix<4>(a[i], a_tile + a_offset<R::kSwizzle>(row + (lane & 15), 2 * ks + (lane >> 4)));
    } else {
      const auto word = [&](int r, int chunk) {
        return *reinterpret_cast<const uint32_t*>(a_tile + a_offset<R::kSwizzle>(r, chunk) + 4 * t);
      };
      a[i][0] = word(row + g, 2 * ks);
      a[i][1] = word(row + g + 8, 2 * ks);
      a[i][2] = word(row + g, 2 * ks + 1);
      a[i][3] = word(row + g + 8, 2 * ks + 1);
    }
  }
  EMBER_UNROLL
  for (int j = 0; j < Tile::kFragN; j += 2) {
    const int col = warp_n + j * 8;
    if constexpr (R::kLdmatrix) {
      uint32_t r[4];
      ptx::ldmatrix_trans<4>(r, b_tile + b_offset<R::kSwizzle>(16 * ks + ((i8 & 1) << 3) + (lane & 7), (col >> 3) + (i8 >> 1)));
      b[j][0] = r[0], b[j][1] = r[1], b[j + 1][0] = r[2], b[j + 1][1] = r[3];
    } else {
      // b[j][h] = B[k, n] for k = 16 ks + 8 h + 2t (low half) and + 1, n = col + g: two rows of the tile.
      const auto value = [&](int k, int n) {
        return uint32_t(*reinterpret_cast<const uint16_t*>(b_tile + b_offset<R::kSwizzle>(k, n >> 3) + (n & 7) * 2));
      };
      EMBER_UNROLL
      for (int jj = 0; jj < 2; ++jj)
        EMBER_UNROLL
        for (int h = 0; h < 2; ++h) {
          const int k = 16 * ks + 8 * h + 2 * t, n = col + 8 * jj + g;
          b[j + jj][h] = value(k, n) | value(k + 1, n) << 16;
        }
    }
  }
}

// C [M, N] = A [M, K] B [K, N], f16.
template <typename R>
__global__ void __launch_bounds__(Tile::kThreads) gemm_mma_rung_kernel(int M, int N, int K, const __half* A,
                                                                        const __half* B, __half* C) {
  EMBER_DYNAMIC_SHARED(unsigned char, smem);
  const int tid = int(threadIdx.x), lane = tid & 31, warp = tid >> 5;
  const int m0 = int(blockIdx.x) * Tile::BM, n0 = int(blockIdx.y) * Tile::BN;
  const int warp_m = (warp % Tile::kWarpsM) * Tile::kWarpM, warp_n = (warp / Tile::kWarpsM) * Tile::kWarpN;
  const int steps = (K + 31) / 32;
  // Chunk j of this thread: A row (tid + 128 j) / 4, chunk % 4; B row (tid + 128 j) / 16, chunk % 16.
  const auto a_src = [&](int step, int j, bool& inside) {
    const int i = tid + j * Tile::kThreads, m = m0 + i / 4, k = step * 32 + (i % 4) * 8;
    inside = m < M && k < K;
    return inside ? A + int64_t(m) * K + k : A;
  };
  const auto b_src = [&](int step, int j, bool& inside) {
    const int i = tid + j * Tile::kThreads, k = step * 32 + i / 16, n = n0 + (i % 16) * 8;
    inside = k < K && n < N;
    return inside ? B + int64_t(k) * N + n : B;
  };
  const auto a_dst = [&](unsigned char* stage, int j) {
    const int i = tid + j * Tile::kThreads;
    return stage + a_offset<R::kSwizzle>(i / 4, i % 4);
  };
  const auto b_dst = [&](unsigned char* stage, int j) {
    const int i = tid + j * Tile::kThreads;
    return stage + R::kABytes + b_offset<R::kSwizzle>(i / 16, i % 16);
  };
  const auto copy_async = [&](int stage, int step) {
    unsigned char* s = smem + stage * R::kStageBytes;
    bool inside = false;
    EMBER_UNROLL
    for (int j = 0; j < Tile::kChunksPerThreadA; ++j) {
      const __half* src = a_src(step, j, inside);
      ptx::cp_async<16>(a_dst(s, j), src, inside ? 16 : 0);
    }
    EMBER_UNROLL
    for (int j = 0; j < Tile::kChunksPerThreadB; ++j) {
      const __half* src = b_src(step, j, inside);
      ptx::cp_async<16>(b_dst(s, j), src, inside ? 16 : 0);
    }
  };
  const auto compute = [&](float (&acc)[Tile::kFragM][Tile::kFragN][4], int stage) {
    const unsigned char* a_tile = smem + stage * R::kStageBytes;
    EMBER_UNROLL
    for (int ks = 0; ks < 2; ++ks) {
      uint32_t a[Tile::kFragM][4], b[Tile::kFragN][2];
      load_fragments<R>(a, b, a_tile, a_tile + R::kABytes, warp_m, warp_n, ks, lane);
      EMBER_UNROLL
      for (int i = 0; i < Tile::kFragM; ++i) {
        EMBER_UNROLL
        for (int j = 0; j < Tile::kFragN; ++j) ptx::mma_m16n8k16_f16(acc[i][j], a[i], b[j], acc[i][j]);
      }
    }
  };

  float acc[Tile::kFragM][Tile::kFragN][4];
  zero_accumulators<Tile>(acc);
  if constexpr (!R::kCpAsync) {
    // The first rung: each step's chunks through registers, one buffer.
    EMBER_NO_UNROLL
    for (int step = 0; step < steps; ++step) {
      // 16 bytes (8 halves) a load, moved as a float4 (the bits are not looked at).
      float4 va[Tile::kChunksPerThreadA], vb[Tile::kChunksPerThreadB];
      bool inside = false;
      EMBER_UNROLL
      for (int j = 0; j < Tile::kChunksPerThreadA; ++j) {
        const __half* src = a_src(step, j, inside);
        va[j] = inside ? load_vec4(reinterpret_cast<const float*>(src)) : make_float4(0, 0, 0, 0);
      }
      EMBER_UNROLL
      for (int j = 0; j < Tile::kChunksPerThreadB; ++j) {
        const __half* src = b_src(step, j, inside);
        vb[j] = inside ? load_vec4(reinterpret_cast<const float*>(src)) : make_float4(0, 0, 0, 0);
      }
      __syncthreads();  // everyone is done with the previous step's tile
      EMBER_UNROLL
      for (int j = 0; j < Tile::kChunksPerThreadA; ++j) store_vec4(reinterpret_cast<float*>(a_dst(smem, j)), va[j]);
      EMBER_UNROLL
      for (int j = 0; j < Tile::kChunksPerThreadB; ++j) store_vec4(reinterpret_cast<float*>(b_dst(smem, j)), vb[j]);
      __syncthreads();
      compute(acc, 0);
    }
  } else {
    // cp.async into kStages buffers, kStages - 1 steps in flight.
    EMBER_UNROLL
    for (int s = 0; s < R::kStages - 1; ++s) {
      if (s < steps) copy_async(s, s);
      ptx::cp_async_commit();
    }
    EMBER_NO_UNROLL
    for (int step = 0; step < steps; ++step) {
      ptx::cp_async_wait<R::kStages - 2>();
      __syncthreads();
      const int next = step + R::kStages - 1;
      if (next < steps) copy_async(next % R::kStages, next);
      ptx::cp_async_commit();
      compute(acc, step % R::kStages);
    }
    ptx::cp_async_wait<0>();
  }

  if constexpr (!R::kStagedEpilogue) {
    store_tile<Tile>(acc, m0, n0, M, N, StorePairs<__half>{C, N});
  } else {
    // The block's C tile in shared memory (padded rows), then 16-byte
    // stores along C's rows: a warp writes 512 contiguous bytes.
    __syncthreads();  // every warp is done with the stages
    store_tile<Tile>(acc, 0, 0, Tile::BM, Tile::BN, [&](int m, int n, float v0, float v1) {
      store_pair(reinterpret_cast<__half*>(smem + m * R::kCRowBytes) + n, v0, v1);
    });
    __syncthreads();
    constexpr int kChunksPerRow = Tile::BN / 8;
    EMBER_NO_UNROLL
    for (int i = tid; i < Tile::BM * kChunksPerRow; i += Tile::kThreads) {
      const int row = i / kChunksPerRow, chunk = i % kChunksPerRow, m = m0 + row, n = n0 + chunk * 8;
      if (m < M && n < N)
        store_vec4(reinterpret_cast<float*>(C + int64_t(m) * N + n),
                   load_vec4(reinterpret_cast<const float*>(smem + row * R::kCRowBytes + chunk * 16)));
    }
  }
}

template <typename R>
void run(int64_t M, int64_t N, int64_t K, const void* A, const void* B, void* C, Stream stream) {
  EMBER_CHECK(K % 8 == 0 && N % 8 == 0, "gemm/tensor/mma_*: K and N must be multiples of 8 (16-byte chunks), got K = ",
              K, ", N = ", N);
  if (M <= 0 || N <= 0) return;
  auto* kernel = gemm_mma_rung_kernel<R>;
  if (R::kSharedBytes > 48 * 1024)
    CUDA_CHECK(cudaFuncSetAttribute(reinterpret_cast<const void*>(kernel), cudaFuncAttributeMaxDynamicSharedMemorySize,
                                    R::kSharedBytes));
  const dim3 grid(unsigned((M + Tile::BM - 1) / Tile::BM), unsigned((N + Tile::BN - 1) / Tile::BN));
  launch(kernel, grid, dim3(Tile::kThreads), size_t(R::kSharedBytes), as_cuda_stream(stream), int(M), int(N), int(K),
         static_cast<const __half*>(A), static_cast<const __half*>(B), static_cast<__half*>(C));
}

struct Version {
  const char* name;
  void (*launch)(int64_t, int64_t, int64_t, const void*, const void*, void*, Stream);
};
//                                     cp.async stages ldmatrix swizzle staged epilogue
const Version kVersions[] = {
    {"mma_registers", run<Rung<false, 1, false, false, false>>},
    {"mma_cp_async", run<Rung<true, 2, false, false, false>>},
    {"mma_multistage", run<Rung<true, 3, false, false, false>>},
    {"mma_ldmatrix", run<Rung<true, 3, true, false, false>>},
    {"mma_swizzle", run<Rung<true, 3, true, true, false>>},
    {"mma_staged_epilogue", run<Rung<true, 3, true, true, true>>},
};

}  // namespace

std::vector<std::string> gemm_mma_versions() {
  std::vector<std::string> out;
  for (const Version& v : kVersions) out.push_back(v.name);
  return out;
}

bool gemm_mma_version(const std::string& name, int64_t M, int64_t N, int64_t K, const void* A, const void* B, void* C,
                      Stream stream) {
  for (const Version& v : kVersions)
    if (name == v.name) {
      v.launch(M, N, K, A, B, C, stream);
      return true;
    }
  return false;
}

}  // namespace ember::cuda::lab
