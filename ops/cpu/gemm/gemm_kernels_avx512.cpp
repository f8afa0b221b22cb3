// ops/cpu/gemm/gemm_kernels_avx512.cpp — the GEMM kernels compiled for AVX-512
// (the Makefile builds this file with -march=x86-64-v4): 64-byte vectors, an
// 8 x 32 f32 tile (16 of the 32 zmm registers hold accumulators).
#include "ops/cpu/gemm/gemm_micro.h"

namespace ember::cpu {

GemmKernels<float> gemm_kernels_avx512_f32() { return gemm_micro::make_kernels<float, 64, 8, 2>("avx512"); }
GemmKernels<double> gemm_kernels_avx512_f64() { return gemm_micro::make_kernels<double, 64, 8, 2>("avx512"); }

}  // namespace ember::cpu
