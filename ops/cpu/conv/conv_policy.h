// ops/cpu/conv/conv_policy.h — which algorithm runs each CPU convolution pass
// (internal to ops/cpu).
//
// Candidates per pass:
//   window    the window-row direct convolution (conv_window.h): every pass,
//             every geometry;
//   gemm      the GEMM lowerings of conv.cpp (padded grid packed into GEMM
//             panels for stride 1, im2col / col2im otherwise): every pass;
//   winograd  F(2x2, 3x3) (conv_winograd.h): every pass of 3x3 stride-1
//             layers with padding <= 2;
//   winograd4 F(4x4, 3x3) (conv_winograd.h): the same layers.
// The policy:
//   heuristic  (default) window, except where the GEMM lowerings measured
//              faster: pointwise layers with small outputs, gradients of
//              wide strided 3x3 layers, filter gradients of narrow layers;
//              and Winograd for every pass of 3x3 stride-1 layers with
//              >= 128 channels in and out and >= 96
//              output tiles a thread, on CPUs where it was measured to pay
//              (winograd_pays below; rules and figures in conv_policy.cpp),
//              by F(4x4, 3x3) on outputs >= 28 wide from 16 channels;
//   benchmark  each pass of each geometry is timed with every candidate on
//              its first call and the fastest is kept (cuDNN's benchmark
//              mode; runs are then not bit-reproducible from run to run);
//   window, gemm, winograd, winograd4  forced (Winograd where it
//              applies, window elsewhere).
// EMBER_CPU_CONV=heuristic|benchmark|window|gemm|winograd|winograd4 sets it for a
// process; set_conv_policy for tests and benchmarks.
#pragma once
#include <functional>
#include <string>

#include "ops/kernels.h"

namespace ember::cpu {

enum class ConvPolicy { heuristic, benchmark, window, gemm, winograd, winograd4 };
enum class ConvPass { forward, backward_data, backward_filter };
enum class ConvAlgo { window, gemm, winograd, winograd4 };

ConvPolicy conv_policy();
void set_conv_policy(ConvPolicy p);
// "heuristic" | "benchmark" | "window" | "gemm" | "winograd" | "winograd4"; throws ember::Error otherwise.
ConvPolicy parse_conv_policy(const std::string& name);
const char* conv_policy_name(ConvPolicy p);
const char* conv_algo_name(ConvAlgo a);
// Forgets the choices benchmark mode made.
void clear_conv_choices();

// Whether F(2x2, 3x3) and F(4x4, 3x3) apply: 3x3 filter, stride 1, padding at most 2.
bool winograd_applies(const Conv2dGeometry& g);

// Whether the heuristic takes Winograd for the 3x3 stride-1 layers it
// suits (conv_policy.cpp). Where it pays depends on the CPU's arithmetic
// rate against its memory passes (a Zen 4 EPYC, whose AVX-512 runs on
// 256-bit units: Winograd 1.5x the window algorithm on a 128-channel layer;
// a Zen 5, with full-width units, lost on every layer with the first,
// slower Winograd kernels), so it is measured once per process
// (winograd_speedup, ~0.1 s, on the first such layer) unless
// EMBER_CPU_WINOGRAD sets it:
//   unset / auto  Winograd where the measured speedup >= kWinogradMinSpeedup
//   1             always (for those layers)
//   0             never
// The measured choice is per machine: a run stays bit-reproducible on one
// machine as long as the measurement does not straddle the threshold;
// EMBER_CPU_WINOGRAD pins it.
enum class WinogradRule { automatic, on, off };
constexpr double kWinogradMinSpeedup = 1.10;
// Winograd where min(C, K) >= kWinogradMinChannels (the filter gradient:
// kWinogradMinChannelsFilter), the output has >= kWinogradMinPlane pixels
// (or min(C, K) >= kWinogradSmallPlaneChannels) and each thread gets >=
// kWinogradMinTilesPerThread tiles (conv_policy.cpp).
constexpr int64_t kWinogradMinChannels = 32, kWinogradMinChannelsFilter = 16, kWinogradMinPlane = 196,
                  kWinogradSmallPlaneChannels = 128, kWinogradMinTilesPerThread = 96;
// F(4x4, 3x3) instead where min(C, K) >= kWinograd4MinChannels (outputs of
// fewer than kWinogradMinPlane pixels: kWinograd4SmallPlaneChannels), 4x4
// tiles fit the output row as closely as 2x2 ones, and each thread gets >=
// kWinograd4MinTilesPerThread 4x4 tiles (the filter gradient:
// kWinograd4MinTilesPerThreadFilter).
constexpr int64_t kWinograd4MinChannels = 16, kWinograd4SmallPlaneChannels = 64, kWinograd4MinTilesPerThread = 64,
                  kWinograd4MinTilesPerThreadFilter = 128;
bool winograd_pays();
// The window algorithm's time over Winograd's on a reference layer (forward,
// f32, batch 8, 128 -> 128 channels, 28x28, the current thread count; best
// of 5, alternating), measured once, on first call.
double winograd_speedup();
// For tests and benchmarks: override EMBER_CPU_WINOGRAD (automatic restores
// the measured choice).
void set_winograd_rule(WinogradRule rule);
// The rule in force: EMBER_CPU_WINOGRAD's, or the last set_winograd_rule.
WinogradRule winograd_rule();
// One line for program banners: "heuristic (Winograd for wide 3x3 layers:
// measured 1.4x window)", "heuristic (no Winograd: measured 0.9x window)",
// "benchmark", ...
std::string conv_policy_description();

// The algorithm that runs pass `pass` of g now (benchmark mode: the cached
// choice, or window before the first call has been timed).
ConvAlgo conv_algo_for(ConvPass pass, const Conv2dGeometry& g, DType dt);

// Runs pass `pass` of geometry g (storage type dt) by the algorithm the
// policy picks; run(algo) computes the whole output with that algorithm.
// In benchmark mode the first call of a geometry runs every candidate, timed.
void run_conv_pass(ConvPass pass, const Conv2dGeometry& g, DType dt, const std::function<void(ConvAlgo)>& run);

}  // namespace ember::cpu
