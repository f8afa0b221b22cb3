// ops/cpu/conv/conv_policy.cpp — the convolution algorithm policy
// (conv_policy.h): the setting, the heuristic (with its one measured input,
// whether Winograd pays on this CPU), and benchmark mode's timed choices
// cached per pass, geometry, dtype and thread count.
#include "ops/cpu/conv/conv_policy.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <tuple>
#include <vector>

#include "engine/error.h"
#include "engine/parallel.h"
#include "ops/cpu/conv/conv_bf16_kernels.h"
#include "ops/cpu/conv/conv_window.h"
#include "ops/cpu/conv/conv_winograd.h"

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

WinogradRule rule_from_environment() {
  const char* env = std::getenv("EMBER_CPU_WINOGRAD");
  if (!env || !*env || std::strcmp(env, "auto") == 0) return WinogradRule::automatic;
  if (std::strcmp(env, "0") == 0) return WinogradRule::off;
  if (std::strcmp(env, "1") == 0) return WinogradRule::on;
  std::fprintf(stderr, "warning: EMBER_CPU_WINOGRAD=%s: expected 0, 1 or auto; using auto\n", env);
  return WinogradRule::automatic;
}

std::atomic<WinogradRule>& winograd_rule_state() {
  static std::atomic<WinogradRule> r{rule_from_environment()};
  return r;
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

// Whether Winograd suits layer g: 3x3 stride 1, >= 128 channels in and out,
// and enough tiles for each thread. The Winograd path splits the images
// across the threads and runs its 16 GEMMs on each thread's tiles, so with
// few tiles a thread it loses (Zen 4, forward, window / Winograd by 2x2
// tiles a thread: 128ch 28x28 196: 1.14, 392: 1.24, 784: 1.31; 256ch 14x14
// 49: 0.90, 98: 1.10, 196: 1.24, 392: 1.44; 512ch 7x7 32: 1.01, 128: 1.26;
// one 56x56 image on two threads: 0.65).
bool winograd_suits(ConvPass pass, const Conv2dGeometry& g) {
  const int64_t threads = num_threads();
  const int64_t tiles = g.N * ((g.P + 1) / 2) * ((g.Q + 1) / 2);
  const int64_t channels = std::min(g.C, g.K);
  const int64_t min_channels = pass == ConvPass::backward_filter ? kWinogradMinChannelsFilter : kWinogradMinChannels;
  return winograd_applies(g) && channels >= min_channels && g.N >= threads &&
         tiles >= kWinogradMinTilesPerThread * threads &&
         (g.P * g.Q >= kWinogradMinPlane || channels >= kWinogradSmallPlaneChannels);
}

// Whether F(4x4, 3x3) suits pass `pass` of layer g (rather than F(2x2, 3x3)
// or the window algorithm): from 16 channels in and out (>= 64 for outputs
// smaller than kWinogradMinPlane), where 4x4 tiles cover a row no wider than
// 2x2 tiles do (width 4j or 4j + 3: on a 14-wide row 4x4 tiles compute 16
// columns, 2x2 tiles 14), and each thread gets enough 4x4 tiles to repay
// the per-call filter transforms (twice as many for the filter gradient,
// which also sums each thread's transformed gradient). Its 4x4 tiles need
// 2.25 times fewer products than 2x2 ones and 2.25 transformed values per
// output instead of 4; the strips of conv_winograd.cpp put several images
// side by side where a row has few tiles for the transforms' vector lanes.
bool winograd4_suits(ConvPass pass, const Conv2dGeometry& g) {
  const int64_t threads = num_threads();
  const int64_t tiles = g.N * ((g.P + 3) / 4) * ((g.Q + 3) / 4);
  const int64_t channels = std::min(g.C, g.K);
  const int64_t min_tiles =
      (pass == ConvPass::backward_filter ? kWinograd4MinTilesPerThreadFilter : kWinograd4MinTilesPerThread) * threads;
  const bool row_fits = (g.Q + 3) / 4 * 4 <= (g.Q + 1) / 2 * 2;
  return winograd_applies(g) && channels >= kWinograd4MinChannels && row_fits && g.N >= threads && tiles >= min_tiles &&
         (g.P * g.Q >= kWinogradMinPlane || channels >= kWinograd4SmallPlaneChannels);
}

// Measured per layer and pass with build/bench_conv (ResNet-20 at batch 128
// and ResNet-50 at batch 16, 2 threads, a Zen 5 EPYC): the window-row
// algorithm wins on every 3x3 stride-1 layer, the stems, pointwise layers on
// large planes and strided forwards; the GEMM lowerings (which pack, but
// compute no padding columns and block the inner dimension in cache) win on
//   - pointwise layers with small outputs (fewer than 256 pixels: 14x14 and
//     7x7): 10-40% (the strided forward too, since the im2col paths stack
//     images: Zen 4, ResNet-50's 1024 -> 2048 1x1/2 at 7x7, 28.0 -> 19.8 ms);
//   - the gradients of strided 3x3 layers with 256 channels or more (the
//     phases of backward data: up to 35%);
//   - filter gradients with fewer than 32 output channels (the window tile
//     folds lanes for them; dot products do better): 10% at 16, 2x at the
//     one-channel stem.
// Winograd: with the first kernels (scalar transforms compiled for the
// baseline ISA, the 16 products by the packing GEMM) it lost to the window
// algorithm on every layer of the Zen 5 and won only at >= 128 channels on
// a Zen 4 EPYC (AVX-512 on 256-bit units: half the Zen 5's arithmetic rate
// for about the same memory passes). With the transforms and products on
// the kernel set's vector tiles (winograd_micro.h, conv_micro.h), the Zen 4
// measures, window -> Winograd, ms (one process alternating the two, 15
// rounds, medians; forward / filter gradient; backward data runs as a
// forward):
//   ResNet-50, batch 16: 64ch 56x56 21.4 -> 17.2 / 21.1 -> 14.8;
//     128ch 28x28 18.1 -> 11.9 / 21.5 -> 13.6; 256ch 14x14 20.1 -> 15.4 /
//     24.3 -> 16.2; 512ch 7x7 25.3 -> 23.9 / 34.1 -> 25.9.
//   ResNet-20, batch 128: 32ch 14x14 2.93 -> 2.58 / 3.31 -> 2.58;
//     16ch 28x28 3.21 -> 3.33 / 3.02 -> 2.57; 64ch 7x7 3.23 -> 3.74 /
//     4.18 -> 5.04.
// A 7x7 output wastes 15 of the 64 outputs of its 2x2 tiles, which only
// wide layers repay; 16 channels are too few products to repay the
// transforms in the forward, but not in the filter gradient (bench_conv,
// three runs each: Winograd 2.24-2.61 ms, the GEMM lowering the rule below
// took 2.98-3.20, window 2.84-2.93). So the rule takes Winograd for every
// pass of 3x3 stride-1 layers with >= 32 channels in and out (the filter
// gradient from 16) and a 14x14 or larger output (>= 128 channels for
// smaller outputs), enough tiles a thread, where the measured speedup on a
// 128-channel layer says this CPU pays (winograd_pays).
//
// F(4x4, 3x3), same Zen 4, one process alternating window / F(2x2) /
// F(4x4), ms (forward / filter gradient; backward data as the forward):
//   ResNet-20, batch 128: 16ch 28x28 2.64 / 2.50 / 1.91 and 2.81 / 2.38 /
//     1.86 (backward data 2.62 / 2.42 / 1.87); 32ch 14x14 2.68 / 2.54 /
//     2.71 and 2.94 / 2.50 / 2.72; 64ch 7x7 2.69 / 3.38 / 2.61 and
//     3.24 / 3.37 / 2.78 (other runs: F(4x4) 3.10 and 3.50, slower than
//     the window's 2.82 and 3.01).
//   ResNet-50, batch 16: 64ch 56x56 18.5 / 15.0 / 10.0 and 19.0 / 13.0 /
//     9.7; 128ch 28x28 18.0 / 11.4 / 8.7 and 21.5 / 14.5 / 12.6; 256ch
//     14x14 20.6 / 17.0 / 18.5 and 26.2 / 18.3 / 24.3; 512ch 7x7 27.2 /
//     26.8 / 29.0 and 38.3 / 33.7 / 49.6.
// So F(4x4) took the layers with outputs 28 wide or wider from 16
// channels (every pass), F(2x2) the narrower ones.
// Later (2026-11-28, evening; same machine, the filter transform streamed
// and several images to a strip, 25 rounds for ResNet-20, 7-9 otherwise):
//   ResNet-20 64ch 7x7, batch 128 (512 4x4 tiles): window 2.54 -> F(4x4)
//     1.90 forward, 2.55 -> 1.93 backward data, 2.83 -> 2.30 filter
//     gradient (F(2x2) 2.76 / 2.75 / 3.16); 32ch 14x14: F(2x2) 1.92 /
//     1.94 / 1.87, F(4x4) 2.23 / 2.26 / 2.41.
//   7x7, F(2x2) / F(4x4), forward and filter gradient: 128ch at batch 64
//     (256 tiles) 4.36 / 3.42 and 5.05 / 4.71; 256ch 16.1 / 12.3 and
//     19.8 / 19.1; 512ch 58.2 / 44.9 and 72.0 / 69.5. At batch 32 (128
//     tiles, 128ch): window 2.65, F(4x4) 2.29 forward; filter gradient
//     window 3.08, F(4x4) 3.35. At batch 16 (64 tiles) F(4x4) loses
//     every pass (512ch: 20.5 vs 18.4, 38.9 vs 28.4).
//   28x28 at batch 4 (196 tiles, 64ch): forward F(2x2) 0.76, F(4x4) 0.67;
//     filter gradient 0.88 / 0.93. 16ch 7x7 at batch 128: window 0.22,
//     F(4x4) 0.25; 16ch 20x20 and 27x27: F(4x4) wins every pass (1.44 /
//     1.02 / 1.14 against the window's 1.51 / 1.38 / 1.41 at 20x20).
//   14x14 (4x4 tiles compute 16 columns of 14) at batch 32: F(4x4) ahead
//     of F(2x2) only in the forward from 128 channels (5.63 vs 5.98),
//     behind in the filter gradient (7.39 vs 6.85); 28 wide but 14 high
//     (the waste in the other direction), batch 32, 32ch: F(4x4) 1.33 /
//     0.70 / 0.78 against F(2x2)'s 1.59 / 0.88 / 0.86.
// So the width rule became the fit of the tiles to a row (winograd4_suits),
// with enough 4x4 tiles a thread: 64 (twice that for the filter gradient)
// and, for outputs under 14x14, 64 channels.
//
// bf16 on AVX512-BF16 (conv_bf16_kernels.h) is a different balance: the
// window tiles multiply bf16 pairs at twice the f32 rate while the GEMM
// lowerings convert to f32, and the window algorithm wins everywhere but
// the backward data of strided layers, which it runs in f32 through its
// phases: there the f32 rule holds (GEMM for pointwise layers and from 256
// channels; Zen 4, ResNet-50 at batch 16, window -> GEMM as benchmark mode
// timed them in a training step: 512ch 14x14 3x3/2 41.8 -> 23.2 ms, 256ch
// 28x28 26.2 -> 24.7 ms, 128ch 56x56 22.6 with the window kept).
ConvAlgo heuristic(ConvPass pass, const Conv2dGeometry& g, DType dt) {
  const bool pointwise = g.R == 1 && g.S == 1 && g.pad_h == 0 && g.pad_w == 0;
  const bool strided = g.stride_h > 1 || g.stride_w > 1;
  if (dt == DType::bf16 && bf16_conv_kernels())
    return pass == ConvPass::backward_data && strided && (pointwise || g.C >= 256) ? ConvAlgo::gemm
                                                                                     : ConvAlgo::window;
  if (winograd4_suits(pass, g) && winograd_pays()) return ConvAlgo::winograd4;
  if (winograd_suits(pass, g) && winograd_pays()) return ConvAlgo::winograd;
  if (pointwise && g.P * g.Q < 256) return ConvAlgo::gemm;
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

double winograd_speedup() {
  static const double speedup = [] {
    // The reference layer: ResNet-18/50's 128-channel 3x3 layer at batch 8
    // (1.85 GFLOP a run, ~0.1 s in all on a 2-core Zen 4; values in [-1, 1)
    // so that nothing is subnormal).
    const Conv2dGeometry g = make_conv2d_geometry(8, 128, 28, 28, 128, 3, 3, 1, 1, 1, 1);
    std::vector<float> x(size_t(g.N * g.C * g.H * g.W)), w(size_t(g.K * g.C * 9)), y(size_t(g.N * g.K * g.P * g.Q));
    uint32_t state = 12345;
    auto next = [&] { return float((state = state * 1664525u + 1013904223u) >> 8) / float(1 << 23) - 1.0f; };
    for (float& v : x) v = next();
    for (float& v : w) v = next() * 0.03f;
    const std::function<void(ConvAlgo)> run = [&](ConvAlgo a) {
      if (a == ConvAlgo::winograd) conv_forward_winograd(g, x.data(), w.data(), y.data(), 2);
      else conv_forward_window(g, x.data(), w.data(), y.data());
    };
    seconds_of(run, ConvAlgo::window);  // warm-up: buffers, caches, the clock
    seconds_of(run, ConvAlgo::winograd);
    // Alternating, so that drift falls on both; the best of 5 each: the
    // other tenants of a shared machine only ever slow a run down.
    double window_s = 1e30, winograd_s = 1e30;
    for (int round = 0; round < 5; ++round) {
      window_s = std::min(window_s, seconds_of(run, ConvAlgo::window));
      winograd_s = std::min(winograd_s, seconds_of(run, ConvAlgo::winograd));
    }
    return winograd_s > 0 ? window_s / winograd_s : 0.0;
  }();
  return speedup;
}

bool winograd_pays() {
  switch (winograd_rule_state().load(std::memory_order_relaxed)) {
    case WinogradRule::on: return true;
    case WinogradRule::off: return false;
    case WinogradRule::automatic: break;
  }
  return winograd_speedup() >= kWinogradMinSpeedup;
}

void set_winograd_rule(WinogradRule rule) { winograd_rule_state().store(rule); }
WinogradRule winograd_rule() { return winograd_rule_state().load(); }

std::string conv_policy_description() {
  const ConvPolicy p = conv_policy();
  if (p != ConvPolicy::heuristic) return conv_policy_name(p);
  const WinogradRule rule = winograd_rule_state().load();
  if (rule != WinogradRule::automatic)
    return rule == WinogradRule::on ? "heuristic (Winograd for wide 3x3 layers: EMBER_CPU_WINOGRAD=1)"
                                    : "heuristic (no Winograd: EMBER_CPU_WINOGRAD=0)";
  char ratio[32];
  std::snprintf(ratio, sizeof ratio, "%.2fx", winograd_speedup());
  return winograd_pays() ? std::string("heuristic (Winograd for wide 3x3 layers: measured ") + ratio + " window)"
                         : std::string("heuristic (no Winograd: measured ") + ratio + " window)";
}

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
  if (name == "winograd4") return ConvPolicy::winograd4;
  throw Error("EMBER_CPU_CONV=" + name +
              ": unknown convolution policy (expected heuristic, benchmark, window, gemm, winograd or winograd4)");
}

const char* conv_policy_name(ConvPolicy p) {
  switch (p) {
    case ConvPolicy::benchmark: return "benchmark";
    case ConvPolicy::window: return "window";
    case ConvPolicy::gemm: return "gemm";
    case ConvPolicy::winograd: return "winograd";
    case ConvPolicy::winograd4: return "winograd4";
    default: return "heuristic";
  }
}

const char* conv_algo_name(ConvAlgo a) {
  switch (a) {
    case ConvAlgo::gemm: return "gemm";
    case ConvAlgo::winograd: return "winograd";
    case ConvAlgo::winograd4: return "winograd4";
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
    case ConvPolicy::winograd: return winograd_applies(g) ? ConvAlgo::winograd : ConvAlgo::window;
    case ConvPolicy::winograd4: return winograd_applies(g) ? ConvAlgo::winograd4 : ConvAlgo::window;
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
  for (ConvAlgo a : {ConvAlgo::gemm, ConvAlgo::winograd, ConvAlgo::winograd4}) {
    if (a != ConvAlgo::gemm && !winograd_applies(g)) continue;
    const double s = seconds_of(run, a);
    if (s < best_s) best = a, best_s = s;
  }
  std::lock_guard<std::mutex> lock(choices_mutex);
  choices()[key] = best;
}

}  // namespace ember::cpu
