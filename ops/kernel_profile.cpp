// ops/kernel_profile.cpp — the timing wrapper table (see kernel_profile.h).
//
// Each entry of the wrapper table is Timed<id, signature>::call: it reads the
// clock, calls the CPU kernel with the same arguments and adds the elapsed
// time to the (kernel, dtype) counters. Every kernel's first argument is a
// DType (the data's; cast's source type), which picks the counter. The
// three convolution kernels are also counted per pass and geometry, with
// the algorithm the CPU policy ran (conv_layer_profile).
#include "ops/kernel_profile.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <map>
#include <mutex>
#include <tuple>
#include <type_traits>

#include "ops/cpu/conv/conv_policy.h"
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

// Per convolution pass and geometry: (pass, dtype, N, C, H, W, K, R, S,
// strides, pads) -> calls, nanoseconds, the algorithm of the last call.
using ConvKey = std::tuple<int, int, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t,
                           int64_t, int64_t>;
struct ConvCounts {
  int64_t calls = 0, nanos = 0;
  std::string algorithm;
};
std::mutex g_conv_mutex;
std::map<ConvKey, ConvCounts>& conv_counts() {
  static std::map<ConvKey, ConvCounts> m;
  return m;
}

void record_conv(cpu::ConvPass pass, DType dt, const Conv2dGeometry& g, int64_t nanos) {
  const ConvKey key{int(pass), int(dt), g.N, g.C, g.H, g.W, g.K, g.R, g.S, g.stride_h, g.stride_w, g.pad_h, g.pad_w};
  const char* algorithm = cpu::conv_algo_name(cpu::conv_algo_for(pass, g, dt));
  std::lock_guard<std::mutex> lock(g_conv_mutex);
  ConvCounts& c = conv_counts()[key];
  ++c.calls;
  c.nanos += nanos;
  c.algorithm = algorithm;
}

// The convolution pass of kernel Id, or -1.
constexpr int conv_pass_of(int id) {
  return id == k_conv2d_forward           ? int(cpu::ConvPass::forward)
         : id == k_conv2d_backward_data   ? int(cpu::ConvPass::backward_data)
         : id == k_conv2d_backward_filter ? int(cpu::ConvPass::backward_filter)
                                          : -1;
}

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
    if constexpr (conv_pass_of(Id) >= 0) {
      const Conv2dGeometry& g = std::get<0>(std::forward_as_tuple(args...));
      record_conv(cpu::ConvPass(conv_pass_of(Id)), dt, g, ns.count());
    }
  }
};

// Kernels without a leading dtype (the multi-tensor step, whose slices each
// have their own) count as f32.
template <int Id, typename... Args>
struct Timed<Id, void (*)(Args...)> {
  static inline void (*real)(Args...) = nullptr;
  static void call(Args... args) {
    const auto t0 = std::chrono::steady_clock::now();
    real(args...);
    const auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - t0);
    g_calls[Id][int(DType::f32)].fetch_add(1, std::memory_order_relaxed);
    g_nanos[Id][int(DType::f32)].fetch_add(ns.count(), std::memory_order_relaxed);
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
  std::lock_guard<std::mutex> lock(g_conv_mutex);
  conv_counts().clear();
}

std::vector<ConvLayerTime> conv_layer_profile() {
  std::vector<ConvLayerTime> out;
  {
    std::lock_guard<std::mutex> lock(g_conv_mutex);
    for (const auto& [key, counts] : conv_counts()) {
      ConvLayerTime t;
      t.pass = std::get<0>(key) == int(cpu::ConvPass::forward)         ? "forward"
               : std::get<0>(key) == int(cpu::ConvPass::backward_data) ? "backward_data"
                                                                       : "backward_filter";
      t.dtype = DType(std::get<1>(key));
      const auto [pass, dt, N, C, H, W, K, R, S, sh, sw, ph, pw] = key;
      t.geometry = make_conv2d_geometry(N, C, H, W, K, R, S, sh, sw, ph, pw);
      t.algorithm = counts.algorithm;
      t.calls = counts.calls;
      t.seconds = double(counts.nanos) * 1e-9;
      out.push_back(t);
    }
  }
  std::sort(out.begin(), out.end(), [](const ConvLayerTime& a, const ConvLayerTime& b) { return a.seconds > b.seconds; });
  return out;
}

void print_kernel_profile(std::FILE* out, double fma_peak_gflops) {
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
  const std::vector<ConvLayerTime> convs = conv_layer_profile();
  if (convs.empty()) return;
  std::fprintf(out, "Convolutions by layer and pass (GFLOP/s: 2 N K C R S P Q per call, as the direct sums%s):\n",
               fma_peak_gflops > 0 ? "; peak: this CPU's measured FMA rate" : "");
  std::fprintf(out, "  %-15s %-5s %-26s %-9s %6s %9s %8s %7s%s\n", "pass", "dtype", "geometry C,HxW->K RxS/s",
               "algorithm", "calls", "total ms", "ms/call", "GFLOP/s", fma_peak_gflops > 0 ? "  peak" : "");
  for (const ConvLayerTime& c : convs) {
    const Conv2dGeometry& g = c.geometry;
    char geometry[64];
    std::snprintf(geometry, sizeof geometry, "%lld,%lldx%lld->%lld %lldx%lld/%lld", (long long)g.C, (long long)g.H,
                  (long long)g.W, (long long)g.K, (long long)g.R, (long long)g.S, (long long)g.stride_h);
    const double per_call = c.seconds / double(c.calls);
    const double gflops = 2.0 * double(g.N * g.K * g.C * g.R * g.S * g.P * g.Q) / per_call * 1e-9;
    std::fprintf(out, "  %-15s %-5s %-26s %-9s %6lld %9.1f %8.3f %7.1f", c.pass.c_str(), dtype_name(c.dtype), geometry,
                 c.algorithm.c_str(), (long long)c.calls, c.seconds * 1e3, per_call * 1e3, gflops);
    if (fma_peak_gflops > 0) std::fprintf(out, "  %3.0f%%", 100.0 * gflops / fma_peak_gflops);
    std::fprintf(out, "\n");
  }
}

}  // namespace ember
