// apps/bench/bench_conv.cpp — times the CPU convolution kernels on every distinct
// convolution of a ResNet, in f32 and f16, pass by pass.
//
//   build/bench_conv --num-layers 50 --batch-size 16 --image-size 224 --reps 5
//
//   build/bench_conv --num-layers 20 --batch-size 128 --image-size 28 --in-channels 1 --f16 0
//
// For each geometry (with how many times the network uses it) it prints the
// median milliseconds of forward, backward-data and backward-filter in f32,
// their GFLOP/s and fraction of this CPU's measured FMA peak, the same in
// f16 with the f16/f32 ratio, then the totals weighted by the use counts:
// the convolution share of one training step, and which algorithm ran each
// f32 pass (EMBER_CPU_CONV=benchmark: the one it measured fastest). An experiment tool in the
// spirit of llm.c's dev/cuda benchmarks; correctness is the tests' job
// (tests/ops/test_f16.cpp, the op harness).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <exception>
#include <string>
#include <thread>
#include <vector>

#include "apps/training/bench_timing.h"
#include "apps/training/flags.h"
#include "engine/error.h"
#include "engine/parallel.h"
#include "engine/tensor.h"
#include "ops/cpu/conv/conv_policy.h"
#include "ops/cpu/gemm/gemm_isa.h"
#include "net/resnet_convs.h"
#include "ops/kernels.h"

namespace ember {
namespace {

struct Times {
  double fwd = 0, bwd_data = 0, bwd_filter = 0;
  double sum() const { return fwd + bwd_data + bwd_filter; }
};

Times time_conv(const Conv2dGeometry& g, DType dt, int reps, bool want_bwd_data) {
  const Kernels& k = kernels_for(Device::cpu());
  Tensor x = Tensor::empty({g.N, g.C, g.H, g.W}, dt), w = Tensor::empty({g.K, g.C, g.R, g.S}, dt);
  Tensor y = Tensor::empty({g.N, g.K, g.P, g.Q}, dt), gy = Tensor::empty({g.N, g.K, g.P, g.Q}, dt);
  Tensor gx = Tensor::empty({g.N, g.C, g.H, g.W}, dt), gw = Tensor::empty({g.K, g.C, g.R, g.S}, dt);
  k.random_normal(dt, x.raw_data(), x.numel(), 1, 0, 0.0, 1.0, nullptr);
  k.random_normal(dt, w.raw_data(), w.numel(), 2, 0, 0.0, 0.05, nullptr);
  k.random_normal(dt, gy.raw_data(), gy.numel(), 3, 0, 0.0, 1.0, nullptr);
  Times t;
  t.fwd = apps::median_ms(reps, [&] { k.conv2d_forward(dt, g, x.raw_data(), w.raw_data(), y.raw_data(), nullptr); });
  if (want_bwd_data)
    t.bwd_data = apps::median_ms(reps, [&] { k.conv2d_backward_data(dt, g, gy.raw_data(), w.raw_data(), gx.raw_data(), nullptr); });
  t.bwd_filter =
      apps::median_ms(reps, [&] { k.conv2d_backward_filter(dt, g, x.raw_data(), gy.raw_data(), gw.raw_data(), nullptr); });
  return t;
}

// The algorithms that ran the f32 passes (after the timed calls, so in
// benchmark mode the cached choices): "forward/backward data/filter".
std::string algorithms(const Conv2dGeometry& g, bool has_bwd_data) {
  auto name = [&](cpu::ConvPass p) { return std::string(cpu::conv_algo_name(cpu::conv_algo_for(p, g, DType::f32))); };
  return name(cpu::ConvPass::forward) + "/" + (has_bwd_data ? name(cpu::ConvPass::backward_data) : "-") + "/" +
         name(cpu::ConvPass::backward_filter);
}

// GFLOP/s of a pass taking `ms` per call, and its share of the peak.
std::string rate(double flops, double ms, double peak) {
  if (ms <= 0) return "      -     ";
  char buf[32];
  const double g = flops / (ms * 1e-3) * 1e-9;
  std::snprintf(buf, sizeof buf, "%6.1f %3.0f%%", g, 100.0 * g / peak);
  return buf;
}

int run(int argc, char** argv) {
  int num_layers = 50, reps = 5, threads = 0;
  int64_t batch = 16, size = 224, in_channels = 3;
  bool f16 = true;
  apps::Flags f("bench_conv", "Time the CPU convolution kernels of a ResNet in f32 and f16 (median ms per call).");
  f.add("num-layers", &num_layers, "ResNet depth: 18, 34, 50, 101, 152 (torchvision) or 6n+2 (CIFAR style: 20, 56, ...)");
  f.add("batch-size", &batch, "images per call");
  f.add("image-size", &size, "input height and width");
  f.add("in-channels", &in_channels, "channels of the input image (1 for Fashion-MNIST)");
  f.add("f16", &f16, "also time f16 storage (0: f32 only)");
  f.add("reps", &reps, "timed calls per pass (after one warm-up call); the median is printed");
  f.add("threads", &threads, "CPU threads (0: all cores)");
  if (!f.parse(argc, argv)) return 0;
  EMBER_CHECK(reps > 0 && batch > 0 && size > 0 && in_channels > 0,
              "--reps, --batch-size, --image-size and --in-channels must be positive");
  set_num_threads(threads > 0 ? threads : int(std::thread::hardware_concurrency()));
  const std::vector<net::ConvUse> convs = net::resnet_convs(num_layers, batch, size, in_channels);
  const double peak = apps::cpu_fma_peak_gflops();
  std::printf("ResNet-%d convolutions, batch %lld, %lldx%lldx%lld, %d threads, median of %d; GEMM kernels %s, "
              "measured f32 FMA peak %.1f GFLOP/s\n",
              num_layers, (long long)batch, (long long)in_channels, (long long)size, (long long)size, num_threads(),
              reps, cpu::gemm_kernels<float>().isa, peak);
  std::printf("%-28s %4s | %8s %8s %8s | %-11s %-11s %-11s | %-22s", "geometry C,HxW->K RxS/stride", "uses", "fwd32",
              "bdata32", "bfilt32", "fwd GF/s", "bdata GF/s", "bfilt GF/s", "f32 algorithms");
  if (f16) std::printf(" | %8s %8s %8s | %6s", "fwd16", "bdata16", "bfilt16", "16/32");
  std::printf("\n");
  Times total32, total16;
  double flops_total = 0, flops_data = 0;  // per step, weighted by uses (backward data skips the stem)
  for (const net::ConvUse& u : convs) {
    const Conv2dGeometry& g = u.g;
    const bool first = g.C == in_channels;  // the stem's input gradient is never computed
    const Times a = time_conv(g, DType::f32, reps, !first);
    const Times b = f16 ? time_conv(g, DType::f16, reps, !first) : Times{};
    const double flops = 2.0 * double(g.N) * double(g.K) * double(g.col_rows()) * double(g.col_cols());
    char name[64];
    std::snprintf(name, sizeof name, "%lld,%lldx%lld->%lld %lldx%lld/%lld", (long long)g.C, (long long)g.H,
                  (long long)g.W, (long long)g.K, (long long)g.R, (long long)g.S, (long long)g.stride_h);
    std::printf("%-28s %4d | %8.2f %8.2f %8.2f | %s %s %s | %-22s", name, u.count, a.fwd, a.bwd_data, a.bwd_filter,
                rate(flops, a.fwd, peak).c_str(), rate(flops, a.bwd_data, peak).c_str(),
                rate(flops, a.bwd_filter, peak).c_str(), algorithms(g, !first).c_str());
    if (f16)
      std::printf(" | %8.2f %8.2f %8.2f | %6.3f", b.fwd, b.bwd_data, b.bwd_filter, b.sum() / a.sum());
    std::printf("\n");
    std::fflush(stdout);
    flops_total += u.count * flops;
    if (!first) flops_data += u.count * flops;
    total32.fwd += u.count * a.fwd, total32.bwd_data += u.count * a.bwd_data, total32.bwd_filter += u.count * a.bwd_filter;
    total16.fwd += u.count * b.fwd, total16.bwd_data += u.count * b.bwd_data, total16.bwd_filter += u.count * b.bwd_filter;
  }
  std::printf("%-28s %4s | %8.1f %8.1f %8.1f | %s %s %s | %-22s", "step total (ms, weighted)", "", total32.fwd,
              total32.bwd_data, total32.bwd_filter, rate(flops_total, total32.fwd, peak).c_str(),
              rate(flops_data, total32.bwd_data, peak).c_str(), rate(flops_total, total32.bwd_filter, peak).c_str(),
              cpu::conv_policy_name(cpu::conv_policy()));
  if (f16)
    std::printf(" | %8.1f %8.1f %8.1f | %6.3f", total16.fwd, total16.bwd_data, total16.bwd_filter,
                total16.sum() / total32.sum());
  std::printf("\nconvolution policy: %s\n", cpu::conv_policy_description().c_str());
  return 0;
}

}  // namespace
}  // namespace ember

int main(int argc, char** argv) {
  try {
    return ember::run(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_conv: error: %s\n", e.what());
    return 1;
  }
}
