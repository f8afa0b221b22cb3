// cuda/lab/gemm_versions.cu — the kernel lab's GEMM ladder (see
// gemm_versions.h). Each kernel is the previous one with one change; the lab
// checks every version against the CPU at several block sizes, and the
// emulator's profiler shows what the change did to the memory traffic:
//   naive_cols    32 sectors per global load of A (each lane its own row)
//   naive_rows    B: 4 sectors per request (32 consecutive columns); A: 1
//                 (every lane the same element, a broadcast) — but every
//                 element of A and B is fetched from global memory again
//                 for every row/column of C that needs it
//   shared_tiles  each element fetched once per tile and reused BLOCK times
//                 from shared memory; next rung: ember's gemm_tiled_kernel
//                 (register tiles of TM x TN per thread, the next tile's
//                 global loads in registers during the products, padded tiles)
//   vector_tiles  a 4 x 4 micro-tile of adjacent outputs per thread: its 4
//                 A values and 4 B values of each k are one float4 shared
//                 load each (ember's strided micro-tile takes 8 scalar
//                 loads), and global loads and C stores move 16 bytes a lane
//   vector_double the same with two shared buffers: the tile of step k+1 is
//                 stored into the buffer nobody reads during step k, so a
//                 step needs one barrier instead of two
#include "cuda/lab/gemm_versions.h"

#include "cuda/common.cuh"
#include "engine/error.h"

namespace ember::cuda::lab {
namespace {

// C: [M, N]; thread (x, y) of the grid computes C[y, x]
__global__ void gemm_naive_rows_kernel(int64_t M, int64_t N, int64_t K, const float* A, const float* B, float* C) {
  const int64_t col = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t row = int64_t(blockIdx.y) * blockDim.y + threadIdx.y;
  if (row >= M || col >= N) return;
  float acc = 0;
  for (int64_t k = 0; k < K; ++k) acc += A[row * K + k] * B[k * N + col];
  EMBER_PROFILE_FLOPS(2 * K);
  C[row * N + col] = acc;
}

// The same with the roles of x and y swapped: thread (x, y) computes C[x, y]
__global__ void gemm_naive_cols_kernel(int64_t M, int64_t N, int64_t K, const float* A, const float* B, float* C) {
  const int64_t row = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t col = int64_t(blockIdx.y) * blockDim.y + threadIdx.y;
  if (row >= M || col >= N) return;
  float acc = 0;
  for (int64_t k = 0; k < K; ++k) acc += A[row * K + k] * B[k * N + col];
  EMBER_PROFILE_FLOPS(2 * K);
  C[row * N + col] = acc;
}

// BLOCK x BLOCK threads; C tile (blockIdx.y, blockIdx.x). Every thread
// stages one element of A's and B's tiles per step; out-of-range elements
// are zeros, so the loop has no bounds checks inside.
template <int BLOCK>
__global__ void gemm_shared_tiles_kernel(int64_t M, int64_t N, int64_t K, const float* A, const float* B, float* C) {
  __shared__ float As[BLOCK][BLOCK];
  __shared__ float Bs[BLOCK][BLOCK];
  const int tx = int(threadIdx.x), ty = int(threadIdx.y);
  const int64_t row = int64_t(blockIdx.y) * BLOCK + ty, col = int64_t(blockIdx.x) * BLOCK + tx;
  float acc = 0;
  for (int64_t k0 = 0; k0 < K; k0 += BLOCK) {
    As[ty][tx] = (row < M && k0 + tx < K) ? A[row * K + k0 + tx] : 0.0f;
    Bs[ty][tx] = (k0 + ty < K && col < N) ? B[(k0 + ty) * N + col] : 0.0f;
    __syncthreads();
    for (int kk = 0; kk < BLOCK; ++kk) acc += As[ty][kk] * Bs[kk][tx];
    EMBER_PROFILE_FLOPS(2 * BLOCK);
    __syncthreads();
  }
  if (row < M && col < N) C[row * N + col] = acc;
}

// ------------------------------------------------------- vector tiles
// Block: BX x BY threads, thread (tx, ty) owns C rows ty*4 .. ty*4+3 and
// columns tx*4 .. tx*4+3 of the block's BM x BN tile (BM = 4*BY, BN = 4*BX).
//   A: [M, K] row-major   B: [K, N] row-major   C: [M, N]   (N, K multiples of 4)
// Shared: As[k][m] (A transposed, so a thread's 4 rows are adjacent; rows
// padded by 4 floats to keep float4 alignment), Bs[k][n].
template <int BX, int BY, int BK>
struct VectorTile {
  static constexpr int BM = 4 * BY, BN = 4 * BX, kThreads = BX * BY;
  static constexpr int kStrideA = BM + 4;                // floats per As row
  static constexpr int kQuadsA = BM * BK / 4;            // float4 per A tile
  static constexpr int kQuadsB = BN * BK / 4;
  static constexpr int kLoadsA = (kQuadsA + kThreads - 1) / kThreads;  // per thread
  static constexpr int kLoadsB = (kQuadsB + kThreads - 1) / kThreads;
};

// Which piece of the A tile quad q is: row m, columns k .. k+3 (BK = 16: 4
// quads a row). A warp takes 16 rows x 2 quads, so its loads are 16 whole
// 32-byte sectors, and its transposed stores As[k + e][m] land on banks
// (16 * quad + m) mod 32 (the row stride is 4 mod 32): all 32 distinct. (Row
// order, 8 rows x 4 quads a warp, loads as well but stores quads 0 and 2
// into the same banks: 2-way conflicts.)
struct QuadA {
  int m, k;
};
__device__ __forceinline__ QuadA quad_of_a(int q) {
  const int lane = q % 32, warp = q / 32;
  return {16 * (warp / 2) + lane % 16, 4 * (lane / 16 + 2 * (warp % 2))};
}

// The float4 this thread stages for quad q of the A tile (quad_of_a) and of
// the B tile (BN/4 quads per row of k, in order); zeros outside the matrix
// (N and K are multiples of 4, so a quad is all inside or all outside).
template <typename Tile>
struct VectorStage {
  static_assert(Tile::BM % 16 == 0, "quad_of_a takes rows 16 at a time");
  float4 a[Tile::kLoadsA], b[Tile::kLoadsB];

  template <int BK>
  __device__ __forceinline__ void fetch(const float* A, const float* B, int64_t M, int64_t N, int64_t K, int64_t row0,
                                        int64_t col0, int64_t k0, int tid) {
    for (int i = 0; i < Tile::kLoadsA; ++i) {
      static_assert(BK == 16, "quad_of_a assumes 4 quads a row");
      const int q = tid + i * Tile::kThreads;
      const QuadA at = quad_of_a(q);
      const int64_t row = row0 + at.m, k = k0 + at.k;
      a[i] = (q < Tile::kQuadsA && row < M && k < K) ? load_vec4(A + row * K + k)
                                                       : make_float4(0, 0, 0, 0);
    }
    for (int i = 0; i < Tile::kLoadsB; ++i) {
      const int q = tid + i * Tile::kThreads;
      const int64_t k = k0 + q / (Tile::BN / 4), col = col0 + 4 * (q % (Tile::BN / 4));
      b[i] = (q < Tile::kQuadsB && k < K && col < N) ? load_vec4(B + k * N + col)
                                                       : make_float4(0, 0, 0, 0);
    }
  }

  // As: [BK][kStrideA] floats, Bs: [BK][BN] floats. A is transposed on the
  // way in (4 scalar stores a quad); B keeps its layout (one float4 store).
  template <int BK>
  __device__ __forceinline__ void store(float* As, float* Bs, int tid) const {
    for (int i = 0; i < Tile::kLoadsA; ++i) {
      const int q = tid + i * Tile::kThreads;
      if (q >= Tile::kQuadsA) break;
      const auto [m, k] = quad_of_a(q);
      As[(k + 0) * Tile::kStrideA + m] = a[i].x;
      As[(k + 1) * Tile::kStrideA + m] = a[i].y;
      As[(k + 2) * Tile::kStrideA + m] = a[i].z;
      As[(k + 3) * Tile::kStrideA + m] = a[i].w;
    }
    for (int i = 0; i < Tile::kLoadsB; ++i) {
      const int q = tid + i * Tile::kThreads;
      if (q >= Tile::kQuadsB) break;
      const int k = q / (Tile::BN / 4), n = 4 * (q % (Tile::BN / 4));
      store_vec4(Bs + k * Tile::BN + n, b[i]);
    }
  }
};

// acc += As[k][ty*4 ..] (x) Bs[k][tx*4 ..] over the BK steps of one staged tile.
template <typename Tile, int BK>
__device__ __forceinline__ void vector_products(const float* As, const float* Bs, int tx, int ty, float (&acc)[4][4]) {
  for (int kk = 0; kk < BK; ++kk) {
    const float4 a4 = load_vec4(As + kk * Tile::kStrideA + 4 * ty);
    const float4 b4 = load_vec4(Bs + kk * Tile::BN + 4 * tx);
    const float a[4] = {a4.x, a4.y, a4.z, a4.w}, b[4] = {b4.x, b4.y, b4.z, b4.w};
    for (int i = 0; i < 4; ++i)
      for (int j = 0; j < 4; ++j) acc[i][j] += a[i] * b[j];
  }
  EMBER_PROFILE_FLOPS(2 * BK * 16);
}

// The thread's 4 x 4 outputs, a float4 per row (whole quads: N % 4 == 0).
template <typename Tile>
__device__ __forceinline__ void vector_store_c(float* C, int64_t M, int64_t N, int64_t row0, int64_t col0, int tx,
                                               int ty, const float (&acc)[4][4]) {
  const int64_t col = col0 + 4 * tx;
  if (col >= N) return;
  for (int i = 0; i < 4; ++i) {
    const int64_t row = row0 + 4 * ty + i;
    if (row < M) store_vec4(C + row * N + col, make_float4(acc[i][0], acc[i][1], acc[i][2], acc[i][3]));
  }
}

// C tile (blockIdx.y, blockIdx.x). One shared buffer: load, barrier, multiply, barrier.
template <int BX, int BY, int BK>
__global__ void gemm_vector_tiles_kernel(int64_t M, int64_t N, int64_t K, const float* A, const float* B, float* C) {
  using Tile = VectorTile<BX, BY, BK>;
  __shared__ float4 As4[BK * Tile::kStrideA / 4];  // float4 elements: 16-byte aligned
  __shared__ float4 Bs4[BK * Tile::BN / 4];
  float* As = reinterpret_cast<float*>(As4);
  float* Bs = reinterpret_cast<float*>(Bs4);
  const int tid = int(threadIdx.x), tx = tid % BX, ty = tid / BX;
  const int64_t row0 = int64_t(blockIdx.y) * Tile::BM, col0 = int64_t(blockIdx.x) * Tile::BN;
  float acc[4][4] = {};
  VectorStage<Tile> stage;
  for (int64_t k0 = 0; k0 < K; k0 += BK) {
    stage.template fetch<BK>(A, B, M, N, K, row0, col0, k0, tid);
    stage.template store<BK>(As, Bs, tid);
    __syncthreads();
    vector_products<Tile, BK>(As, Bs, tx, ty, acc);
    __syncthreads();  // before the next step overwrites the tiles
  }
  vector_store_c<Tile>(C, M, N, row0, col0, tx, ty, acc);
}

// The same with two shared buffers. Step s multiplies buffer s % 2 while
// its next tile is in flight in registers, then stores that tile into the
// other buffer: everybody finished reading that one before the barrier
// that ended step s - 1, so one barrier per step suffices.
template <int BX, int BY, int BK>
__global__ void gemm_vector_double_kernel(int64_t M, int64_t N, int64_t K, const float* A, const float* B, float* C) {
  using Tile = VectorTile<BX, BY, BK>;
  constexpr int kSizeA = BK * Tile::kStrideA, kSizeB = BK * Tile::BN;  // floats per buffer
  __shared__ float4 As4[2 * kSizeA / 4];
  __shared__ float4 Bs4[2 * kSizeB / 4];
  float* As = reinterpret_cast<float*>(As4);
  float* Bs = reinterpret_cast<float*>(Bs4);
  const int tid = int(threadIdx.x), tx = tid % BX, ty = tid / BX;
  const int64_t row0 = int64_t(blockIdx.y) * Tile::BM, col0 = int64_t(blockIdx.x) * Tile::BN;
  float acc[4][4] = {};
  VectorStage<Tile> stage;
  if (K > 0) {
    stage.template fetch<BK>(A, B, M, N, K, row0, col0, 0, tid);
    stage.template store<BK>(As, Bs, tid);
    __syncthreads();
  }
  int buf = 0;
  for (int64_t k0 = 0; k0 < K; k0 += BK, buf ^= 1) {
    const bool more = k0 + BK < K;
    if (more) stage.template fetch<BK>(A, B, M, N, K, row0, col0, k0 + BK, tid);  // in flight during the products
    vector_products<Tile, BK>(As + buf * kSizeA, Bs + buf * kSizeB, tx, ty, acc);
    if (more) stage.template store<BK>(As + (buf ^ 1) * kSizeA, Bs + (buf ^ 1) * kSizeB, tid);
    __syncthreads();
  }
  vector_store_c<Tile>(C, M, N, row0, col0, tx, ty, acc);
}

unsigned blocks(int64_t n, int per_block) { return unsigned((n + per_block - 1) / per_block); }

// A vector rung for blocks of BX x BY threads (BK = 16).
template <int BX, int BY>
void launch_vector(bool double_buffer, int64_t M, int64_t N, int64_t K, const float* A, const float* B, float* C,
                   cudaStream_t s) {
  using Tile = VectorTile<BX, BY, 16>;
  const dim3 grid(blocks(N, Tile::BN), blocks(M, Tile::BM)), block(Tile::kThreads);
  if (double_buffer)
    launch(gemm_vector_double_kernel<BX, BY, 16>, grid, block, 0, s, M, N, K, A, B, C);
  else
    launch(gemm_vector_tiles_kernel<BX, BY, 16>, grid, block, 0, s, M, N, K, A, B, C);
}

}  // namespace

const char* gemm_version_name(GemmVersion v) {
  switch (v) {
    case GemmVersion::naive_rows:
      return "naive_rows";
    case GemmVersion::naive_cols:
      return "naive_cols";
    case GemmVersion::shared_tiles:
      return "shared_tiles";
    case GemmVersion::vector_tiles:
      return "vector_tiles";
    case GemmVersion::vector_double:
      return "vector_double";
  }
  return "?";
}

void gemm_version(GemmVersion v, int block_x, int block_y, int64_t M, int64_t N, int64_t K, const float* A,
                  const float* B, float* C, Stream stream) {
  EMBER_CHECK(block_x > 0 && block_y > 0 && block_x * block_y <= 1024, "gemm_version: block ", block_x, "x", block_y,
              " is not a CUDA block size");
  if (M <= 0 || N <= 0) return;
  const cudaStream_t s = as_cuda_stream(stream);
  switch (v) {
    case GemmVersion::naive_rows:
      launch(gemm_naive_rows_kernel, dim3(blocks(N, block_x), blocks(M, block_y)), dim3(block_x, block_y), 0, s, M, N,
             K, A, B, C);
      return;
    case GemmVersion::naive_cols:
      launch(gemm_naive_cols_kernel, dim3(blocks(M, block_x), blocks(N, block_y)), dim3(block_x, block_y), 0, s, M, N,
             K, A, B, C);
      return;
    case GemmVersion::shared_tiles: {
      EMBER_CHECK(block_x == block_y, "gemm_version shared_tiles: the block must be square, got ", block_x, "x",
                  block_y);
      const dim3 grid(blocks(N, block_x), blocks(M, block_x)), block(block_x, block_x);
      switch (block_x) {
        case 4:
          launch(gemm_shared_tiles_kernel<4>, grid, block, 0, s, M, N, K, A, B, C);
          return;
        case 8:
          launch(gemm_shared_tiles_kernel<8>, grid, block, 0, s, M, N, K, A, B, C);
          return;
        case 16:
          launch(gemm_shared_tiles_kernel<16>, grid, block, 0, s, M, N, K, A, B, C);
          return;
        case 32:
          launch(gemm_shared_tiles_kernel<32>, grid, block, 0, s, M, N, K, A, B, C);
          return;
      }
      fail(cat("gemm_version shared_tiles: block ", block_x, " (expected 4, 8, 16 or 32)"));
    }
    case GemmVersion::vector_tiles:
    case GemmVersion::vector_double: {
      const char* name = gemm_version_name(v);
      EMBER_CHECK(N % 4 == 0 && K % 4 == 0, "gemm_version ", name, ": N = ", N, " and K = ", K,
                  " must be multiples of 4 (its rows are read and written as float4)");
      EMBER_CHECK((reinterpret_cast<uintptr_t>(A) | reinterpret_cast<uintptr_t>(B) | reinterpret_cast<uintptr_t>(C)) %
                          16 == 0,
                  "gemm_version ", name, ": A, B and C must start on 16 bytes");
      const bool double_buffer = v == GemmVersion::vector_double;
      if (block_x == 16 && block_y == 16) return launch_vector<16, 16>(double_buffer, M, N, K, A, B, C, s);
      if (block_x == 32 && block_y == 8) return launch_vector<32, 8>(double_buffer, M, N, K, A, B, C, s);
      if (block_x == 8 && block_y == 32) return launch_vector<8, 32>(double_buffer, M, N, K, A, B, C, s);
      fail(cat("gemm_version ", name, ": block ", block_x, "x", block_y, " (expected 16x16, 32x8 or 8x32)"));
    }
  }
}

}  // namespace ember::cuda::lab
