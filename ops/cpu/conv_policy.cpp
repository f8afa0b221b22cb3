// ops/cpu/conv_policy.cpp — the convolution algorithm policy
// (conv_policy.h): the setting, the heuristic, and benchmark mode's timed
// choices cached per pass, geometry, dtype and thread count.
#include "ops/cpu/conv_policy.h"

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <mutex>
#include <tuple>

#include "engine/error.h"
#include "engine/parallel.h"
#include "ops/cpu/conv_bf16_kernels.h"

namespace ember::cpu {
namespace {

ConvPolicy initial_policy() {
  const char* env = std::getenv("EMBER_CPU_CONV");
  if (!env || !*env) return ConvPolicy::heuristic;
  try {
    return parse_conv_policy(env);
  } catch (const Error& e) {
    std::fprintf(stderr, "warning: %s; using heuristic\n", e.what());
    return ConvPolicy::heuristic;
  }
}

std::atomic<ConvPolicy>& policy_state() {
  static std::atomic<ConvPolicy> p{initial_policy()};
  return p;
}

// Benchmark mode's choices: pass, geometry, dtype and thread count -> algorithm.
using ChoiceKey = std::tuple<int, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t,
                             int64_t, int64_t, int, int>;
ChoiceKey key_of(ConvPass pass, const Conv2dGeometry& g, DType dt) {
  return ChoiceKey{int(pass), g.N, g.C, g.H, g.W, g.K, g.R, g.S, g.stride_h, g.stride_w, g.pad_h, g.pad_w, int(dt),
                   num_threads()};
}
std::mutex choices_mutex;
std::map<ChoiceKey, ConvAlgo>& choices() {
  static std::map<ChoiceKey, ConvAlgo> m;
  return m;
}

bool has_winograd(ConvPass pass, const Conv2dGeometry& g) {
  return pass != ConvPass::backward_filter && winograd_applies(g);
}

// Measured per layer and pass with build/bench_conv (ResNet-20 at batch 128
// and ResNet-50 at batch 16, 2 threads, a Zen 5 EPYC): the window-row
// algorithm wins on every 3x3 stride-1 layer, the stems, pointwise layers on
// large planes and strided forwards; the GEMM lowerings (which pack, but
// compute no padding columns and block the inner dimension in cache) win on
//   - pointwise layers with small outputs (fewer than 256 pixels: 14x14 and
//     7x7), except the strided forward: 10-40%;
//   - the gradients of strided 3x3 layers with 256 channels or more (the
//     phases of backward data: up to 35%);
//   - filter gradients with fewer than 32 output channels (the window tile
//     folds lanes for them; dot products do better): 10% at 16, 2x at the
//     one-channel stem.
//
// bf16 on AVX512-BF16 (conv_bf16_kernels.h) is a different balance: the
// window tiles multiply bf16 pairs at twice the f32 rate while the GEMM
// lowerings convert to f32, and the window algorithm wins everywhere but
// the backward data of strided pointwise layers (which it runs in f32).
ConvAlgo heuristic(ConvPass pass, const Conv2dGeometry& g, DType dt) {
  const bool pointwise = g.R == 1 && g.S == 1 && g.pad_h == 0 && g.pad_w == 0;
  const bool strided = g.stride_h > 1 || g.stride_w > 1;
  if (dt == DType::bf16 && bf16_conv_kernels())
    return pass == ConvPass::backward_data && strided && pointwise ? ConvAlgo::gemm : ConvAlgo::window;
  if (pointwise && g.P * g.Q < 256 && !(pass == ConvPass::forward && strided)) return ConvAlgo::gemm;
  if (pass != ConvPass::forward && strided && !pointwise && g.C >= 256) return ConvAlgo::gemm;
  if (pass == ConvPass::backward_filter && g.K < 32) return ConvAlgo::gemm;
  return ConvAlgo::window;
}

double seconds_of(const std::function<void(ConvAlgo)>& run, ConvAlgo a) {
  const auto t0 = std::chrono::steady_clock::now();
  run(a);
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

bool winograd_applies(const Conv2dGeometry& g) {
  return g.R == 3 && g.S == 3 && g.stride_h == 1 && g.stride_w == 1 && g.pad_h <= 2 && g.pad_w <= 2;
}

ConvPolicy conv_policy() { return policy_state().load(std::memory_order_relaxed); }
void set_conv_policy(ConvPolicy p) { policy_state().store(p); }

ConvPolicy parse_conv_policy(const std::string& name) {
  if (name == "heuristic") return ConvPolicy::heuristic;
  if (name == "benchmark") return ConvPolicy::benchmark;
  if (name == "window") return ConvPolicy::window;
  if (name == "gemm") return ConvPolicy::gemm;
  if (name == "winograd") return ConvPolicy::winograd;
  throw Error("EMBER_CPU_CONV=" + name +
              ": unknown convolution policy (expected heuristic, benchmark, window, gemm or winograd)");
}

const char* conv_policy_name(ConvPolicy p) {
  switch (p) {
    case ConvPolicy::benchmark: return "benchmark";
    case ConvPolicy::window: return "window";
    case ConvPolicy::gemm: return "gemm";
    case ConvPolicy::winograd: return "winograd";
    default: return "heuristic";
  }
}

const char* conv_algo_name(ConvAlgo a) {
  switch (a) {
    case ConvAlgo::gemm: return "gemm";
    case ConvAlgo::winograd: return "winograd";
    default: return "window";
  }
}

void clear_conv_choices() {
  std::lock_guard<std::mutex> lock(choices_mutex);
  choices().clear();
}

ConvAlgo conv_algo_for(ConvPass pass, const Conv2dGeometry& g, DType dt) {
  switch (conv_policy()) {
    case ConvPolicy::window: return ConvAlgo::window;
    case ConvPolicy::gemm: return ConvAlgo::gemm;
    case ConvPolicy::winograd: return has_winograd(pass, g) ? ConvAlgo::winograd : ConvAlgo::window;
    case ConvPolicy::benchmark: {
      std::lock_guard<std::mutex> lock(choices_mutex);
      auto it = choices().find(key_of(pass, g, dt));
      return it == choices().end() ? ConvAlgo::window : it->second;
    }
    default: return heuristic(pass, g, dt);
  }
}

void run_conv_pass(ConvPass pass, const Conv2dGeometry& g, DType dt, const std::function<void(ConvAlgo)>& run) {
  if (conv_policy() != ConvPolicy::benchmark) return run(conv_algo_for(pass, g, dt));
  const ChoiceKey key = key_of(pass, g, dt);
  {
    std::lock_guard<std::mutex> lock(choices_mutex);
    auto it = choices().find(key);
    if (it != choices().end()) return run(it->second);
  }
  // First call: every candidate, timed (each writes the whole output; the
  // last one's stays). The first run also warms the caches for the others.
  ConvAlgo best = ConvAlgo::window;
  double best_s = seconds_of(run, ConvAlgo::window);
  for (ConvAlgo a : {ConvAlgo::gemm, ConvAlgo::winograd}) {
    if (a == ConvAlgo::winograd && !has_winograd(pass, g)) continue;
    const double s = seconds_of(run, a);
    if (s < best_s) best = a, best_s = s;
  }
  std::lock_guard<std::mutex> lock(choices_mutex);
  choices()[key] = best;
}

}  // namespace ember::cpu
