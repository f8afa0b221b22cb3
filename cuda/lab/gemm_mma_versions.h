// cuda/lab/gemm_mma_versions.h — the kernel lab's mma.sync ladder: the f16
// GEMM C = A B (A [M, K], B [K, N], C [M, N], row-major) rebuilt one change
// at a time from a plain mma.sync kernel up to ember's (cuda/kernels/gemm_mma.cu)
// and one rung past it. kernel_lab lists the rungs among the tensor-core
// variants (`--op gemm/tensor/mma_<rung> --dtype f16`, and
// `--op gemm-tensor-ladder`), checks each against the CPU and, on a GPU,
// times it beside cuBLAS-free ember and wmma variants. Not part of the
// kernel table.
//
// The rungs (128x128 outputs per block, 4 warps of 64x64, 32-value steps):
//   mma_registers   global -> registers (16-byte loads) -> shared memory,
//                   one buffer; fragments built with 32-bit shared loads
//                   from padded rows
//   mma_cp_async    cp.async straight into shared memory, two buffers:
//                   the next step's copies fly while this one computes
//   mma_multistage  three buffers: two steps in flight
//   mma_ldmatrix    fragments loaded with ldmatrix (4 matrices per
//                   instruction) instead of 32-bit loads
//   mma_swizzle     XOR-swizzled rows instead of padded ones: the same
//                   conflict-free access, no wasted shared memory (ember's
//                   kernel at this tile)
//   mma_staged_epilogue  the result goes through shared memory so each
//                   thread writes 16-byte vectors along C's rows, instead
//                   of 4-byte pairs spread over 8 rows
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "ops/kernels.h"

namespace ember::cuda::lab {

std::vector<std::string> gemm_mma_versions();

// Runs rung `name` on f16 device matrices; false if there is no such rung.
bool gemm_mma_version(const std::string& name, int64_t M, int64_t N, int64_t K, const void* A, const void* B, void* C,
                      Stream stream);

}  // namespace ember::cuda::lab
