// ops/kernel_profile.cpp — the timing wrapper table (see kernel_profile.h).
//
// Each entry of the wrapper table is Timed<id, signature>::call: it reads the
// clock, calls the CPU kernel with the same arguments and adds the elapsed
// time to the (kernel, dtype) counters. Every kernel's first argument is a
// DType (the data's; cast's source type), which picks the counter.
#include "ops/kernel_profile.h"

#include <algorithm>
#include <atomic>
#include <chrono>

#include "ops/kernels.h"

namespace ember {
namespace {

enum KernelId : int {
#define EMBER_KERNEL_ID_(name) k_##name,
  EMBER_FOR_EACH_KERNEL(EMBER_KERNEL_ID_)
#undef EMBER_KERNEL_ID_
};
const char* const kKernelNames[] = {
#define EMBER_KERNEL_NAME_(name) #name,
    EMBER_FOR_EACH_KERNEL(EMBER_KERNEL_NAME_)
#undef EMBER_KERNEL_NAME_
};
constexpr int kDTypes = kNumDTypes;

std::atomic<bool> g_enabled{false};
std::atomic<int64_t> g_calls[kNumKernels][kDTypes];
std::atomic<int64_t> g_nanos[kNumKernels][kDTypes];

template <int Id, typename Fn>
struct Timed;
template <int Id, typename... Args>
struct Timed<Id, void (*)(DType, Args...)> {
  static inline void (*real)(DType, Args...) = nullptr;
  static void call(DType dt, Args... args) {
    const auto t0 = std::chrono::steady_clock::now();
    real(dt, args...);
    const auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - t0);
    const int d = std::min(int(dt), kDTypes - 1);
    g_calls[Id][d].fetch_add(1, std::memory_order_relaxed);
    g_nanos[Id][d].fetch_add(ns.count(), std::memory_order_relaxed);
  }
};

}  // namespace

void set_kernel_profiling(bool on) { g_enabled.store(on); }
bool kernel_profiling() { return g_enabled.load(std::memory_order_relaxed); }

const Kernels& profiled_cpu_kernels() {
  static const Kernels table = [] {
    const Kernels& cpu = cpu_kernels();
    Kernels t = cpu;
    t.name = "cpu (profiled)";
#define EMBER_TIMED_ENTRY_(name)                                    \
  Timed<k_##name, decltype(Kernels::name)>::real = cpu.name;        \
  t.name = &Timed<k_##name, decltype(Kernels::name)>::call;
    EMBER_FOR_EACH_KERNEL(EMBER_TIMED_ENTRY_)
#undef EMBER_TIMED_ENTRY_
    return t;
  }();
  return table;
}

std::vector<KernelTime> kernel_profile() {
  std::vector<KernelTime> out;
  for (int k = 0; k < kNumKernels; ++k)
    for (int d = 0; d < kDTypes; ++d)
      if (const int64_t calls = g_calls[k][d].load(); calls > 0)
        out.push_back({kKernelNames[k], DType(d), calls, double(g_nanos[k][d].load()) * 1e-9});
  std::sort(out.begin(), out.end(), [](const KernelTime& a, const KernelTime& b) { return a.seconds > b.seconds; });
  return out;
}

void reset_kernel_profile() {
  for (int k = 0; k < kNumKernels; ++k)
    for (int d = 0; d < kDTypes; ++d) g_calls[k][d].store(0), g_nanos[k][d].store(0);
}

void print_kernel_profile(std::FILE* out) {
  const std::vector<KernelTime> rows = kernel_profile();
  double total = 0;
  for (const KernelTime& r : rows) total += r.seconds;
  std::fprintf(out, "Kernel profile (CPU, wall time inside each kernel):\n");
  std::fprintf(out, "  %-30s %-5s %8s %11s %10s %6s\n", "kernel", "dtype", "calls", "total ms", "ms/call", "share");
  for (const KernelTime& r : rows)
    std::fprintf(out, "  %-30s %-5s %8lld %11.1f %10.3f %5.1f%%\n", r.kernel.c_str(), dtype_name(r.dtype),
                 (long long)r.calls, r.seconds * 1e3, r.seconds * 1e3 / double(r.calls),
                 total > 0 ? 100.0 * r.seconds / total : 0.0);
  std::fprintf(out, "  %-30s %-5s %8s %11.1f\n", "all kernels", "", "", total * 1e3);
}

}  // namespace ember
