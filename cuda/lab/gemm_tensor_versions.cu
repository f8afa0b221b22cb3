// cuda/lab/gemm_tensor_versions.cu — the tensor-core rungs of the kernel lab
// (see gemm_tensor_versions.h). What each variant tries, against the
// library's first 128x128x16 tile of 8 warps (253 registers on sm_90: one block,
// 8 warps, per SM; Nsight Compute on an H200 found its warps stalled on
// global loads most of the time, "long scoreboard", with no other warp to
// switch to):
//   128x128x32/8w      twice the tensor-core work per staged step, the
//                      global loads of the next step in flight longer
//   128x128x16/8w/2b   at most 128 registers, so two blocks (16 warps) per
//                      SM hide each other's loads
//   128x128x32/8w/2b   both
//   128x128x16/16w     16 warps of 32x32: half the staged elements and
//                      accumulators per thread, twice the warps per SM
//   128x128x32/16w     the same, deeper
//   128x64x32/4w       4 warps of 64x32, fewer registers per block
//   64x64x32/4w        the library's medium tile, deeper
//   64x64x16/4w        the library's first medium tile
//   64x64x16/4w/4b     the medium tile bounded to 4 blocks per SM
//   64x64x16/8w        8 warps of 16x32 (the large tile's lesson: more,
//   64x64x16/16w       smaller warps), and 16 warps of 16x16
// Measured on an H200 (f16, 4096^3 / 2048^3, TFLOP/s): 128x128x16/8w 24 / 32,
// 128x128x32/8w 26 / 36, 128x128x16/8w/2b 27 / 30, 128x128x32/8w/2b 16 / 15,
// 128x128x16/16w 43 / 54 (now the library's large tile), 128x128x32/16w
// 32 / 41, 128x64x32/4w 12 / 13, 64x64x32/4w 10 / 16, 64x64x16/4w/4b 21 / 30;
// at 2048^3 only: 64x64x16/4w 20, 64x64x16/8w 35 (now the library's medium
// tile), 64x64x16/16w 31.
#include "cuda/lab/gemm_tensor_versions.h"

#include "cuda/lab/gemm_mma_versions.h"

#include "cuda/common.cuh"
#include "cuda/kernels/gemm.cuh"
#include "engine/error.h"

namespace ember::cuda::lab {
namespace {

struct StoreHalf {  // C[i, j] = acc, rounded once
  __half* c;
  int64_t ldc;
  __device__ __forceinline__ void operator()(int, int64_t i, int64_t j, float acc) const {
    c[i * ldc + j] = __float2half_rn(acc);
  }
};

template <typename Cfg>
void run(int64_t M, int64_t N, int64_t K, const void* A, const void* B, void* C, Stream stream) {
  launch_gemm_tiled<__half, Cfg>(M, N, K, 1, std::max<int64_t>(K, 1),
                                 MatrixA<__half, false>{static_cast<const __half*>(A), K},
                                 MatrixB<__half, false>{static_cast<const __half*>(B), N},
                                 StoreHalf{static_cast<__half*>(C), N}, as_cuda_stream(stream));
}

struct Version {
  const char* name;
  void (*launch)(int64_t, int64_t, int64_t, const void*, const void*, void*, Stream);
};
const Version kVersions[] = {
    {"128x128x16/8w", run<TensorTile<128, 128, 16, 2, 4>>},
    {"128x128x32/8w", run<TensorTile<128, 128, 32, 2, 4>>},
    {"128x128x16/8w/2b", run<TensorTile<128, 128, 16, 2, 4, 2>>},
    {"128x128x32/8w/2b", run<TensorTile<128, 128, 32, 2, 4, 2>>},
    {"128x128x16/16w", run<TensorTile<128, 128, 16, 4, 4>>},
    {"128x128x32/16w", run<TensorTile<128, 128, 32, 4, 4>>},
    {"128x64x32/4w", run<TensorTile<128, 64, 32, 2, 2>>},
    {"64x64x32/4w", run<TensorTile<64, 64, 32, 2, 2>>},
    {"64x64x16/4w", run<TensorTile<64, 64, 16, 2, 2>>},
    {"64x64x16/4w/4b", run<TensorTile<64, 64, 16, 2, 2, 4>>},
    {"64x64x16/8w", run<TensorTile<64, 64, 16, 4, 2>>},
    {"64x64x16/16w", run<TensorTile<64, 64, 16, 4, 4>>},
};

}  // namespace

std::vector<std::string> gemm_tensor_versions() {
  std::vector<std::string> out;
  for (const Version& v : kVersions) out.push_back(v.name);
  for (const std::string& v : gemm_mma_versions()) out.push_back(v);  // the mma.sync ladder (gemm_mma_versions.cu)
  return out;
}

void gemm_tensor_version(const std::string& name, int64_t M, int64_t N, int64_t K, const void* A, const void* B,
                         void* C, Stream stream) {
  if (gemm_mma_version(name, M, N, K, A, B, C, stream)) return;
  for (const Version& v : kVersions)
    if (name == v.name) {
      v.launch(M, N, K, A, B, C, stream);
      return;
    }
  std::string names;
  for (const std::string& v : gemm_tensor_versions()) names += std::string(names.empty() ? "" : ", ") + v;
  fail(cat("gemm/tensor/", name, ": unknown tensor-core variant (", names, ")"));
}

}  // namespace ember::cuda::lab
