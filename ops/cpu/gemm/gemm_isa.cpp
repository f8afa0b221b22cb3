// ops/cpu/gemm/gemm_isa.cpp — which GEMM kernel set runs: the CPU's features,
// the EMBER_CPU_ISA override, and the switch the tests use (gemm_isa.h).
#include "ops/cpu/gemm/gemm_isa.h"

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <type_traits>

#include "engine/error.h"

namespace ember::cpu {
namespace {

bool cpu_has(GemmIsa isa) {
  switch (isa) {
    case GemmIsa::portable:
      return true;
#if defined(__x86_64__)
    case GemmIsa::avx2:
      return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
    case GemmIsa::avx512:  // what -march=x86-64-v4 assumes
      return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
             __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl");
#endif
    default:
      return false;
  }
}

GemmIsa best_supported() {
  if (cpu_has(GemmIsa::avx512)) return GemmIsa::avx512;
  if (cpu_has(GemmIsa::avx2)) return GemmIsa::avx2;
  return GemmIsa::portable;
}

// The starting choice: EMBER_CPU_ISA if set (an unknown or unsupported value
// is one line on stderr and the best set is used), else the best set.
GemmIsa initial_isa() {
  const char* env = std::getenv("EMBER_CPU_ISA");
  if (!env || !*env) return best_supported();
  GemmIsa want;
  try {
    want = parse_gemm_isa(env);
  } catch (const Error& e) {
    std::fprintf(stderr, "warning: %s; using %s\n", e.what(), gemm_isa_name(best_supported()));
    return best_supported();
  }
  if (!cpu_has(want)) {
    std::fprintf(stderr, "warning: EMBER_CPU_ISA=%s: this CPU does not support it; using %s\n", env,
                 gemm_isa_name(best_supported()));
    return best_supported();
  }
  return want;
}

std::atomic<GemmIsa>& active() {
  static std::atomic<GemmIsa> isa{initial_isa()};
  return isa;
}

template <typename T>
GemmKernels<T> kernel_set_of(GemmIsa isa) {
#if defined(__x86_64__)
  if constexpr (std::is_same_v<T, float>) {
    if (isa == GemmIsa::avx512) return gemm_kernels_avx512_f32();
    if (isa == GemmIsa::avx2) return gemm_kernels_avx2_f32();
    return gemm_kernels_portable_f32();
  } else {
    if (isa == GemmIsa::avx512) return gemm_kernels_avx512_f64();
    if (isa == GemmIsa::avx2) return gemm_kernels_avx2_f64();
    return gemm_kernels_portable_f64();
  }
#else
  (void)isa;
  if constexpr (std::is_same_v<T, float>) return gemm_kernels_portable_f32();
  else return gemm_kernels_portable_f64();
#endif
}

// One table per set, built on first use.
template <typename T>
const GemmKernels<T>& table(GemmIsa isa) {
  static const GemmKernels<T> tables[3] = {kernel_set_of<T>(GemmIsa::portable), kernel_set_of<T>(GemmIsa::avx2),
                                           kernel_set_of<T>(GemmIsa::avx512)};
  return tables[int(isa)];
}

}  // namespace

template <typename T>
const GemmKernels<T>& gemm_kernels() {
  return table<T>(active().load(std::memory_order_relaxed));
}
template const GemmKernels<float>& gemm_kernels<float>();
template const GemmKernels<double>& gemm_kernels<double>();

bool gemm_isa_supported(GemmIsa isa) { return cpu_has(isa); }

bool set_gemm_isa(GemmIsa isa) {
  if (!cpu_has(isa)) return false;
  active().store(isa);
  return true;
}

GemmIsa active_gemm_isa() { return active().load(); }

const char* gemm_isa_name(GemmIsa isa) {
  switch (isa) {
    case GemmIsa::avx512: return "avx512";
    case GemmIsa::avx2: return "avx2";
    default: return "portable";
  }
}

std::vector<GemmIsa> supported_gemm_isas() {
  std::vector<GemmIsa> out;
  for (GemmIsa isa : {GemmIsa::portable, GemmIsa::avx2, GemmIsa::avx512})
    if (cpu_has(isa)) out.push_back(isa);
  return out;
}

GemmIsa parse_gemm_isa(const std::string& name) {
  if (name == "avx512") return GemmIsa::avx512;
  if (name == "avx2") return GemmIsa::avx2;
  if (name == "portable") return GemmIsa::portable;
  throw Error("EMBER_CPU_ISA=" + name + ": unknown instruction set (expected avx512, avx2 or portable)");
}

}  // namespace ember::cpu
