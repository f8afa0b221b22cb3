// apps/training/bench_timing.cpp — see bench_timing.h.
#include "apps/training/bench_timing.h"

#include <chrono>
#include <vector>

#include "engine/parallel.h"
#include "ops/cpu/gemm/gemm_isa.h"

namespace ember::apps {

double cpu_fma_peak_gflops() {
  const cpu::GemmKernels<float>& k = cpu::gemm_kernels<float>();
  const int threads = num_threads();
  std::vector<double> flops(size_t(threads), 0.0);
  std::vector<float> sink(size_t(threads) * 16, 1e-3f);  // one cache line per thread
  const int64_t iters = int64_t(1) << 25;
  k.fma_peak_loop(iters / 8, sink.data());  // warm-up: let the clock settle
  const auto t0 = std::chrono::steady_clock::now();
#pragma omp parallel num_threads(threads)
  {
    const int t = omp_get_thread_num();
    flops[size_t(t)] = k.fma_peak_loop(iters, sink.data() + size_t(t) * 16);
  }
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  double total = 0;
  for (double f : flops) total += f;
  return total / s * 1e-9;
}

}  // namespace ember::apps
