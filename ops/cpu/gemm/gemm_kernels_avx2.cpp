// ops/cpu/gemm/gemm_kernels_avx2.cpp — the GEMM kernels compiled for AVX2 + FMA
// (the Makefile builds this file with -march=x86-64-v3): 32-byte vectors, a
// 6 x 16 f32 tile (12 of the 16 ymm registers hold accumulators, as in
// BLIS's Haswell kernel).
#include "ops/cpu/gemm/gemm_micro.h"

namespace ember::cpu {

GemmKernels<float> gemm_kernels_avx2_f32() { return gemm_micro::make_kernels<float, 32, 6, 2>("avx2"); }
GemmKernels<double> gemm_kernels_avx2_f64() { return gemm_micro::make_kernels<double, 32, 6, 2>("avx2"); }

}  // namespace ember::cpu
