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
//                 (register tiles of TM x TN per thread, double-buffered
//                 global fetches, padded tiles)
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

unsigned blocks(int64_t n, int per_block) { return unsigned((n + per_block - 1) / per_block); }

}  // namespace

const char* gemm_version_name(GemmVersion v) {
  switch (v) {
    case GemmVersion::naive_rows:
      return "naive_rows";
    case GemmVersion::naive_cols:
      return "naive_cols";
    case GemmVersion::shared_tiles:
      return "shared_tiles";
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
  }
}

}  // namespace ember::cuda::lab
