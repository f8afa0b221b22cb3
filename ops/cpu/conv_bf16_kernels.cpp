// ops/cpu/conv_bf16_kernels.cpp — whether the AVX512-BF16 convolution tiles
// run (conv_bf16_kernels.h): the CPU's features, EMBER_CPU_BF16, and the
// switch the tests use.
#include "ops/cpu/conv_bf16_kernels.h"

#include <atomic>
#include <cstdlib>
#include <cstring>

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

std::atomic<bool>& enabled() {
  static std::atomic<bool> on{[] {
    const char* env = std::getenv("EMBER_CPU_BF16");
    return !(env && std::strcmp(env, "0") == 0);
  }()};
  return on;
}

}  // namespace

const Bf16ConvKernels* bf16_conv_kernels() {
#if defined(__x86_64__)
  static const bool supported = cpu_has_avx512_bf16();
  static const Bf16ConvKernels kernels = supported ? bf16_conv_kernels_avx512bf16() : Bf16ConvKernels{};
  if (supported && enabled().load(std::memory_order_relaxed)) return &kernels;
#endif
  return nullptr;
}

void set_bf16_conv_kernels_enabled(bool on) { enabled().store(on); }

}  // namespace ember::cpu
