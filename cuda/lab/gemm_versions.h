// cuda/lab/gemm_versions.h — the kernel lab's GEMM ladder (apps/bench/kernel_lab.cpp,
// --op gemm --version ...): small, commented kernels that each change one
// thing, to be checked against the CPU and profiled (kernel_lab_sim) or
// timed (kernel_lab) side by side with ember's own GEMM (cuda/kernels/gemm.cuh).
// Not part of the kernel table: nothing in training calls them.
//
//   C [M, N] = A [M, K] * B [K, N]     row-major f32, no transposes, alpha 1, beta 0
#pragma once
#include <cstdint>

#include "ops/kernels.h"

namespace ember::cuda::lab {

// The rungs, in order. "tiled" is ember's GEMM (cuda::gemm), the next rung up.
enum class GemmVersion {
  naive_rows,  // one thread per C element, threadIdx.x along a row of C: B read coalesced, A broadcast
  naive_cols,  // the same, threadIdx.x down a column of C: every lane reads its own row of A (uncoalesced)
  shared_tiles,  // BLOCK x BLOCK tiles of A and B staged in shared memory, one C element per thread
  // After ember's tiled GEMM (register tiles, next tile prefetched into
  // registers), the FP32 rungs it does not have yet. Each thread owns a 4 x 4
  // micro-tile of *adjacent* rows and columns, so that:
  vector_tiles,   // global loads, shared loads and C stores are float4 (one instruction for 4 floats)
  vector_double,  // ... and the shared tiles are double-buffered: one barrier per k-step, not two
};
const char* gemm_version_name(GemmVersion v);

// Launches version v with blocks of block_x * block_y threads (shared_tiles:
// block_x == block_y, a power of two from 4 to 32; vector_tiles and
// vector_double: 16x16, 32x8 or 8x32, each thread 4 x 4 outputs, so a
// block's tile is (4 * block_y) x (4 * block_x), and N and K multiples of 4
// so that every row starts on 16 bytes). A, B, C on the device.
void gemm_version(GemmVersion v, int block_x, int block_y, int64_t M, int64_t N, int64_t K, const float* A,
                  const float* B, float* C, Stream stream);

}  // namespace ember::cuda::lab
