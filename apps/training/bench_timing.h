// apps/training/bench_timing.h — what the kernel benchmarks (bench_gemm,
// bench_conv) share: the median time of repeated calls, and this CPU's f32
// arithmetic peak measured on the spot for their "fraction of peak" columns.
#pragma once
#include <algorithm>
#include <chrono>
#include <vector>

namespace ember::apps {

// Median milliseconds of `reps` calls of f, after one warm-up call (buffers
// sized, pages touched).
double median_ms(int reps, const auto& f) {
  f();
  std::vector<double> t;
  for (int i = 0; i < reps; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    f();
    t.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

// GFLOP/s of independent vector FMAs held in registers, with the active GEMM
// kernel set's instructions (ops/cpu/gemm/gemm_isa.h), on every thread at once.
// Takes about a second.
double cpu_fma_peak_gflops();

}  // namespace ember::apps
