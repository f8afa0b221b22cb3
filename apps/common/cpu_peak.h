// apps/common/cpu_peak.h — this CPU's f32 arithmetic peak, measured on the
// spot, for the benchmarks' "fraction of peak" columns (bench_gemm,
// bench_conv).
#pragma once

namespace ember::apps {

// GFLOP/s of independent vector FMAs held in registers, with the active GEMM
// kernel set's instructions (ops/cpu/gemm_isa.h), on every thread at once.
// Takes about a second.
double cpu_fma_peak_gflops();

}  // namespace ember::apps
