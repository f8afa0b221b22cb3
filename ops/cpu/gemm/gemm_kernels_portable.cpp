// ops/cpu/gemm/gemm_kernels_portable.cpp — the GEMM kernels for any CPU: 16-byte
// vectors (SSE2 on every x86-64, NEON elsewhere) and a 6 x 8 f32 tile. The
// Makefile builds this file for the baseline x86-64 on x86.
#include "ops/cpu/gemm/gemm_micro.h"

namespace ember::cpu {

GemmKernels<float> gemm_kernels_portable_f32() { return gemm_micro::make_kernels<float, 16, 6, 2>("portable"); }
GemmKernels<double> gemm_kernels_portable_f64() { return gemm_micro::make_kernels<double, 16, 6, 2>("portable"); }

}  // namespace ember::cpu
