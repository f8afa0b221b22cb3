// cuda/lab/gemm_tensor_versions.h — the kernel lab's tensor-core rungs: ember's
// tensor-core tile loop (cuda/kernels/gemm_tensor.cuh) instantiated at tile
// shapes, depths and register budgets that the library does not pick, so
// that kernel_lab can check each against the CPU and time them side by side
// (`--op gemm/tensor/<variant> --dtype f16`, or `--op gemm-tensor-ladder`).
// The winner goes into with_tensor_tile. Not part of the kernel table.
//
//   C [M, N] = A [M, K] * B [K, N]     row-major f16, f32 accumulation, C rounded once
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "ops/kernels.h"

namespace ember::cuda::lab {

// The variants' names: "<BM>x<BN>x<BK>/<warps>w", with "/<n>b" when the
// kernel is bounded to n blocks per SM (wmma tiles), then the rungs of the
// mma.sync ladder (cuda/lab/gemm_mma_versions.h: "mma_registers", ...).
std::vector<std::string> gemm_tensor_versions();

// Launches variant `name` (one of the above; throws ember::Error otherwise)
// on f16 matrices on the device (A, B, C as __half).
void gemm_tensor_version(const std::string& name, int64_t M, int64_t N, int64_t K, const void* A, const void* B,
                         void* C, Stream stream);

}  // namespace ember::cuda::lab
