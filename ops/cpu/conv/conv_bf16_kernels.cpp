// ops/cpu/conv/conv_bf16_kernels.cpp — whether the AVX512-BF16 convolution tiles
// run (conv_bf16_kernels.h): the CPU's features, the measured bf16/f32
// arithmetic rates, EMBER_CPU_BF16, and the switch the tests use.
#include "ops/cpu/conv/conv_bf16_kernels.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "engine/error.h"
#include "ops/cpu/gemm/gemm_isa.h"

namespace ember::cpu {

#if defined(__x86_64__)
Bf16ConvKernels bf16_conv_kernels_avx512bf16();  // (compiled with -mavx512bf16 on x86-64)  // conv_bf16_kernels_avx512.cpp
#endif

namespace {

bool cpu_has_avx512_bf16() {
#if defined(__x86_64__)
  return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
         __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl") &&
         __builtin_cpu_supports("avx512bf16");
#else
  return false;
#endif
}

Bf16KernelMode mode_from_environment() {
  const char* env = std::getenv("EMBER_CPU_BF16");
  if (!env || !*env || std::strcmp(env, "auto") == 0) return Bf16KernelMode::automatic;
  if (std::strcmp(env, "0") == 0) return Bf16KernelMode::off;
  if (std::strcmp(env, "1") == 0) return Bf16KernelMode::on;
  throw Error(std::string("EMBER_CPU_BF16=") + env + ": expected 0, 1 or auto");
}

std::atomic<int>& mode() {
  static std::atomic<int> m{int(mode_from_environment())};
  return m;
}

// Floating-point operations per second of one run of `loop` (`iters`
// rounds) on this thread.
template <typename T>
double loop_rate(double (*loop)(int64_t, T*), int64_t iters) {
  T sink = T(1e-3);
  const auto t0 = std::chrono::steady_clock::now();
  const double flops = loop(iters, &sink);
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return s > 0 ? flops / s : 0.0;
}

}  // namespace

const Bf16ConvKernels* bf16_conv_kernels_supported() {
#if defined(__x86_64__)
  static const bool supported = cpu_has_avx512_bf16();
  static const Bf16ConvKernels kernels = supported ? bf16_conv_kernels_avx512bf16() : Bf16ConvKernels{};
  if (supported) return &kernels;
#endif
  return nullptr;
}

double bf16_dot_speedup() {
  static const double speedup = [] {
    const Bf16ConvKernels* k = bf16_conv_kernels_supported();
    if (!k) return 0.0;
    const GemmKernels<float>& f32 = gemm_kernels<float>();
    // ~0.2-1 ms a run; one warm-up each so that the clock has settled.
    constexpr int64_t kIters = int64_t(1) << 17;
    loop_rate(f32.fma_peak_loop, kIters / 4);
    loop_rate(k->dot_peak_loop, kIters / 4);
    // Alternating, so that drift falls on both; the best of 3 each, not the
    // median: the other tenants of a shared machine only ever slow a run down.
    double f32_rate = 0, bf16_rate = 0;
    for (int round = 0; round < 3; ++round) {
      f32_rate = std::max(f32_rate, loop_rate(f32.fma_peak_loop, kIters));
      bf16_rate = std::max(bf16_rate, loop_rate(k->dot_peak_loop, kIters));
    }
    return f32_rate > 0 ? bf16_rate / f32_rate : 0.0;
  }();
  return speedup;
}

const Bf16ConvKernels* bf16_conv_kernels() {
  const Bf16ConvKernels* k = bf16_conv_kernels_supported();
  if (!k) return nullptr;
  switch (Bf16KernelMode(mode().load(std::memory_order_relaxed))) {
    case Bf16KernelMode::on: return k;
    case Bf16KernelMode::off: return nullptr;
    case Bf16KernelMode::automatic: break;
  }
  return bf16_dot_speedup() >= kBf16MinSpeedup ? k : nullptr;
}

void set_bf16_conv_kernel_mode(Bf16KernelMode m) { mode().store(int(m)); }
Bf16KernelMode bf16_conv_kernel_mode() { return Bf16KernelMode(mode().load()); }

std::string bf16_conv_kernels_description() {
  if (!bf16_conv_kernels_supported()) return "f32 (no AVX512-BF16)";
  const Bf16KernelMode m = Bf16KernelMode(mode().load());
  if (m == Bf16KernelMode::off) return "f32 (EMBER_CPU_BF16=0)";
  char ratio[64];
  std::snprintf(ratio, sizeof ratio, "%.1fx", bf16_dot_speedup());
  if (m == Bf16KernelMode::on) return std::string("AVX512-BF16 (EMBER_CPU_BF16=1; measured ") + ratio + " f32)";
  return bf16_conv_kernels() ? std::string("AVX512-BF16 (measured ") + ratio + " f32)"
                             : std::string("f32 (AVX512-BF16 measured ") + ratio + " f32)";
}

}  // namespace ember::cpu
