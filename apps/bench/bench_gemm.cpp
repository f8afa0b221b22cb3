// apps/bench/bench_gemm.cpp — GFLOP/s of ember's CPU GEMM (f32), square and
// ResNet-shaped, against the arithmetic peak of this CPU measured on the spot.
//
//   build/bench_gemm                          # the best kernel set the CPU runs
//   build/bench_gemm --isa all --threads 2    # every set this CPU supports
//   build/bench_gemm --shapes 1024x1024x1024,64x3136x576
//   build/bench_gemm --ladder 1               # naive loop -> ... -> ember's GEMM
//
// The peak is the rate of independent vector FMAs held in registers (the
// kernel set's own loop, every thread at once), so "of peak" is a fraction of
// what this CPU does at the clock it runs at now; no figure is carried over
// from another machine. Each problem: one warm-up call, then the median of
// --reps calls. Correctness is the tests' job (tests/ops/cpu/gemm/test_gemm_isa.cpp),
// except in the ladder (ops/cpu/gemm/gemm_ladder.h), which checks every rung
// against a double-precision product before timing it.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <exception>
#include <string>
#include <thread>
#include <vector>

#include "apps/training/bench_timing.h"
#include "apps/training/flags.h"
#include "engine/error.h"
#include "engine/parallel.h"
#include "ops/cpu/gemm/gemm.h"
#include "ops/cpu/gemm/gemm_isa.h"
#include "ops/cpu/gemm/gemm_ladder.h"

namespace ember {
namespace {


struct Shape3 {
  int64_t M, N, K;
  std::string what;
};

// Square problems and the GEMMs of ResNet convolutions (M = output channels,
// N = output pixels of one image, K = C*R*S), forward orientation.
std::vector<Shape3> default_shapes() {
  return {{1024, 1024, 1024, "square"},
          {2048, 2048, 2048, "square"},
          {16, 840, 144, "resnet20 3x3 16ch, 28x28 (padded grid)"},
          {32, 224, 288, "resnet20 3x3 32ch, 14x14"},
          {64, 63, 576, "resnet20 3x3 64ch, 7x7"},
          {64, 3136, 576, "resnet50 3x3 64ch, 56x56"},
          {256, 3136, 64, "resnet50 1x1 64->256, 56x56"},
          {128, 784, 1152, "resnet50 3x3 128ch, 28x28"},
          {512, 49, 4608, "resnet50 3x3 512ch, 7x7"}};
}

std::vector<Shape3> parse_shapes(const std::string& list) {
  std::vector<Shape3> out;
  size_t at = 0;
  while (at <= list.size()) {
    const size_t end = std::min(list.find(',', at), list.size());
    const std::string item = list.substr(at, end - at);
    long long m, n, k;
    char tail;
    EMBER_CHECK(std::sscanf(item.c_str(), "%lldx%lldx%lld%c", &m, &n, &k, &tail) == 3 && m > 0 && n > 0 && k > 0,
                "--shapes: '", item, "' is not MxNxK with positive sizes");
    out.push_back({m, n, k, "given"});
    at = end + 1;
  }
  return out;
}

// Operands of the benchmark: small exact-ish values, no denormals.
void fill_operands(std::vector<float>& A, std::vector<float>& B) {
  for (size_t i = 0; i < A.size(); ++i) A[i] = float(int(i % 17) - 8) / 8.0f;
  for (size_t i = 0; i < B.size(); ++i) B[i] = float(int(i % 13) - 6) / 6.0f;
}

void bench_isa(const std::vector<Shape3>& shapes, int reps) {
  const cpu::GemmKernels<float>& k = cpu::gemm_kernels<float>();
  const double peak = apps::cpu_fma_peak_gflops();
  std::printf("kernel set %s: %dx%d f32 tile, %d threads, measured FMA peak %.1f GFLOP/s\n", k.isa, k.mr, k.nr,
              num_threads(), peak);
  std::printf("  %-22s %10s %9s %8s  %s\n", "M x N x K", "ms", "GFLOP/s", "of peak", "what");
  for (const Shape3& s : shapes) {
    std::vector<float> A(size_t(s.M * s.K)), B(size_t(s.K * s.N)), C(size_t(s.M * s.N));
    fill_operands(A, B);
    const double ms = apps::median_ms(reps, [&] {
      cpu::gemm_parallel<float>(false, false, s.M, s.N, s.K, 1.0f, A.data(), s.K, B.data(), s.N, 0.0f, C.data(), s.N);
    });
    const double gflops = 2.0 * double(s.M) * double(s.N) * double(s.K) / (ms * 1e-3) * 1e-9;
    char dims[64];
    std::snprintf(dims, sizeof dims, "%lld x %lld x %lld", (long long)s.M, (long long)s.N, (long long)s.K);
    std::printf("  %-22s %10.3f %9.1f %7.0f%%  %s\n", dims, ms, gflops, 100.0 * gflops / peak, s.what.c_str());
    std::fflush(stdout);
  }
}

// The ladder (ops/cpu/gemm/gemm_ladder.h) on one problem. Each rung is first
// checked against the product in double precision: the error of every
// element must be within the worst-case bound of a K-term f32 sum,
// gamma_K * sum_k |A[i,k] B[k,j]| with gamma_K = K u / (1 - K u), u = 2^-24;
// the column "error" is the largest error / bound (a wrong element shows as
// a ratio far above 1). Then the median time of `reps` calls, and GFLOP/s
// against the measured peak of the threads the rung uses.
void bench_ladder(const Shape3& s, int reps, int threads) {
  std::vector<float> A(size_t(s.M * s.K)), B(size_t(s.K * s.N)), C(size_t(s.M * s.N));
  fill_operands(A, B);
  std::vector<double> ref(C.size()), mag(C.size());
  for (int64_t i = 0; i < s.M; ++i)
    for (int64_t k = 0; k < s.K; ++k) {
      const double a = A[size_t(i * s.K + k)];
      for (int64_t j = 0; j < s.N; ++j) {
        ref[size_t(i * s.N + j)] += a * B[size_t(k * s.N + j)];
        mag[size_t(i * s.N + j)] += std::fabs(a * B[size_t(k * s.N + j)]);
      }
    }
  const double u = std::ldexp(1.0, -24), gamma = double(s.K) * u / (1.0 - double(s.K) * u);
  const cpu::GemmIsa best = cpu::supported_gemm_isas().back();
  cpu::set_gemm_isa(best);
  set_num_threads(1);
  const double peak1 = apps::cpu_fma_peak_gflops();
  set_num_threads(threads);
  const double peak_all = apps::cpu_fma_peak_gflops();
  std::printf("CPU GEMM ladder, %lld x %lld x %lld (f32), median of %d calls; measured FMA peak (%s) %.1f GFLOP/s on "
              "1 thread, %.1f on %d\n",
              (long long)s.M, (long long)s.N, (long long)s.K, reps, cpu::gemm_isa_name(best), peak1, peak_all, threads);
  std::printf("  %-16s %7s %10s %9s %8s %8s  %s\n", "rung", "threads", "ms", "GFLOP/s", "of peak", "error", "what it changes");
  for (const cpu::lab::GemmRung& r : cpu::lab::gemm_ladder()) {
    const std::string isa = r.isa;
    if (!isa.empty() && isa != "best") {
      const cpu::GemmIsa want = cpu::parse_gemm_isa(isa);
      if (!cpu::gemm_isa_supported(want)) {
        std::printf("  %-16s %7s   (skipped: this CPU has no %s)\n", r.name, "-", isa.c_str());
        continue;
      }
      cpu::set_gemm_isa(want);
    } else {
      cpu::set_gemm_isa(best);
    }
    const int t = r.all_threads ? threads : 1;
    set_num_threads(t);
    std::fill(C.begin(), C.end(), std::nanf(""));
    r.run(s.M, s.N, s.K, A.data(), B.data(), C.data());
    double worst = 0;
    for (size_t e = 0; e < C.size(); ++e) {
      const double err = std::fabs(double(C[e]) - ref[e]), bound = gamma * mag[e];
      const double ratio = err == 0 ? 0 : bound > 0 ? err / bound : INFINITY;
      worst = std::isnan(ratio) || std::isnan(double(C[e])) ? INFINITY : std::max(worst, ratio);
    }
    EMBER_CHECK(worst <= 1.0, "ladder rung ", r.name, ": an element is off by ", worst,
                " times the f32 rounding bound (a wrong result; not timed)");
    const double ms = apps::median_ms(reps, [&] { r.run(s.M, s.N, s.K, A.data(), B.data(), C.data()); });
    const double gflops = 2.0 * double(s.M) * double(s.N) * double(s.K) / (ms * 1e-3) * 1e-9;
    std::printf("  %-16s %7d %10.3f %9.1f %7.1f%% %8.3f  %s\n", r.name, t, ms, gflops,
                100.0 * gflops / (r.all_threads ? peak_all : peak1), worst, r.change);
    std::fflush(stdout);
  }
  cpu::set_gemm_isa(best);
  set_num_threads(threads);
}

int run(int argc, char** argv) {
  int reps = 7, threads = 0, ladder = 0;
  std::string isa = "best", shapes_flag;
  apps::Flags f("bench_gemm", "GFLOP/s of the CPU GEMM (f32) against this CPU's measured FMA peak.");
  f.add("isa", &isa, "kernel set: best, all, avx512, avx2 or portable");
  f.add("shapes", &shapes_flag, "comma-separated MxNxK problems (default: square 1024/2048 and ResNet shapes)");
  f.add("reps", &reps, "timed calls per problem (after one warm-up); the median is printed");
  f.add("threads", &threads, "CPU threads (0: all cores)");
  f.add("ladder", &ladder, "1: the GEMM ladder (naive loop -> ember's GEMM, ops/cpu/gemm/gemm_ladder.h) on --shapes "
                           "(default 768x768x768), each rung checked, then timed");
  if (!f.parse(argc, argv)) return 0;
  EMBER_CHECK(reps > 0, "--reps must be positive, got ", reps);
  EMBER_CHECK(ladder == 0 || ladder == 1, "--ladder must be 0 or 1, got ", ladder);
  set_num_threads(threads > 0 ? threads : int(std::thread::hardware_concurrency()));
  if (ladder) {
    const std::vector<Shape3> shapes = shapes_flag.empty() ? std::vector<Shape3>{{768, 768, 768, "square"}}
                                                           : parse_shapes(shapes_flag);
    for (const Shape3& s : shapes) bench_ladder(s, reps, num_threads());
    return 0;
  }
  const std::vector<Shape3> shapes = shapes_flag.empty() ? default_shapes() : parse_shapes(shapes_flag);
  std::vector<cpu::GemmIsa> isas;
  if (isa == "all") {
    isas = cpu::supported_gemm_isas();
    std::reverse(isas.begin(), isas.end());
  } else if (isa == "best") {
    isas = {cpu::active_gemm_isa()};
  } else {
    EMBER_CHECK(isa == "avx512" || isa == "avx2" || isa == "portable", "--isa ", isa,
                ": expected best, all, avx512, avx2 or portable");
    const cpu::GemmIsa want = cpu::parse_gemm_isa(isa);
    EMBER_CHECK(cpu::gemm_isa_supported(want), "--isa ", isa, ": this CPU does not support it");
    isas = {want};
  }
  for (cpu::GemmIsa i : isas) {
    cpu::set_gemm_isa(i);
    bench_isa(shapes, reps);
  }
  return 0;
}

}  // namespace
}  // namespace ember

int main(int argc, char** argv) {
  try {
    return ember::run(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_gemm: error: %s\n", e.what());
    return 1;
  }
}
