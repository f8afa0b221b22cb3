// apps/bench_gemm.cpp — GFLOP/s of ember's CPU GEMM (f32), square and
// ResNet-shaped, against the arithmetic peak of this CPU measured on the spot.
//
//   build/bench_gemm                          # the best kernel set the CPU runs
//   build/bench_gemm --isa all --threads 2    # every set this CPU supports
//   build/bench_gemm --shapes 1024x1024x1024,64x3136x576
//
// The peak is the rate of independent vector FMAs held in registers (the
// kernel set's own loop, every thread at once), so "of peak" is a fraction of
// what this CPU does at the clock it runs at now; no figure is carried over
// from another machine. Each problem: one warm-up call, then the median of
// --reps calls. Correctness is the tests' job (tests/test_gemm_isa.cpp).
#include <algorithm>
#include <cstdio>
#include <exception>
#include <string>
#include <thread>
#include <vector>

#include "apps/common/bench_timing.h"
#include "apps/common/flags.h"
#include "engine/error.h"
#include "engine/parallel.h"
#include "ops/cpu/gemm.h"
#include "ops/cpu/gemm_isa.h"

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

void bench_isa(const std::vector<Shape3>& shapes, int reps) {
  const cpu::GemmKernels<float>& k = cpu::gemm_kernels<float>();
  const double peak = apps::cpu_fma_peak_gflops();
  std::printf("kernel set %s: %dx%d f32 tile, %d threads, measured FMA peak %.1f GFLOP/s\n", k.isa, k.mr, k.nr,
              num_threads(), peak);
  std::printf("  %-22s %10s %9s %8s  %s\n", "M x N x K", "ms", "GFLOP/s", "of peak", "what");
  for (const Shape3& s : shapes) {
    std::vector<float> A(size_t(s.M * s.K), 0.5f), B(size_t(s.K * s.N), 0.25f), C(size_t(s.M * s.N));
    for (size_t i = 0; i < A.size(); ++i) A[i] = float(int(i % 17) - 8) / 8.0f;
    for (size_t i = 0; i < B.size(); ++i) B[i] = float(int(i % 13) - 6) / 6.0f;
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

int run(int argc, char** argv) {
  int reps = 7, threads = 0;
  std::string isa = "best", shapes_flag;
  apps::Flags f("bench_gemm", "GFLOP/s of the CPU GEMM (f32) against this CPU's measured FMA peak.");
  f.add("isa", &isa, "kernel set: best, all, avx512, avx2 or portable");
  f.add("shapes", &shapes_flag, "comma-separated MxNxK problems (default: square 1024/2048 and ResNet shapes)");
  f.add("reps", &reps, "timed calls per problem (after one warm-up); the median is printed");
  f.add("threads", &threads, "CPU threads (0: all cores)");
  if (!f.parse(argc, argv)) return 0;
  EMBER_CHECK(reps > 0, "--reps must be positive, got ", reps);
  set_num_threads(threads > 0 ? threads : int(std::thread::hardware_concurrency()));
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
