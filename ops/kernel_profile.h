// ops/kernel_profile.h — per-kernel wall time of the CPU backend, for
// finding where a training step's time goes (train_resnet --profile 1).
//
// When enabled, kernels_for(cpu) hands out a second table whose entries
// time each call (steady clock) and forward to the real CPU kernel; the
// totals are kept per kernel and dtype. Only the CPU table is timed: CUDA
// kernels are asynchronous, so host-side timing would only see launches
// (use Nsight Systems there). Enabling costs two clock reads per call. The
// convolutions are also kept per pass and geometry, with the algorithm the
// CPU policy ran (ops/cpu/conv/conv_policy.h), to see which layer and pass the
// time goes to in a real step rather than in bench_conv's isolation.
#pragma once
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "engine/dtype.h"
#include "ops/kernels.h"

namespace ember {


void set_kernel_profiling(bool on);
bool kernel_profiling();
// The timing wrapper around the CPU table (used by kernels_for).
const Kernels& profiled_cpu_kernels();

struct KernelTime {
  std::string kernel;
  DType dtype = DType::f32;
  int64_t calls = 0;
  double seconds = 0;
};
// Totals since the last reset, largest first.
std::vector<KernelTime> kernel_profile();
void reset_kernel_profile();
struct ConvLayerTime {
  std::string pass;  // "forward", "backward_data", "backward_filter"
  DType dtype = DType::f32;
  Conv2dGeometry geometry;
  std::string algorithm;  // the policy's choice on the last call: window, gemm, winograd, winograd4
  int64_t calls = 0;
  double seconds = 0;
};
// The convolution calls per pass, dtype and geometry since the last reset, largest first.
std::vector<ConvLayerTime> conv_layer_profile();
// A table: kernel, dtype, calls, total ms, ms per call, share of the total;
// then the convolutions by layer and pass (algorithm, ms per call, GFLOP/s,
// and the share of fma_peak_gflops when it is given).
void print_kernel_profile(std::FILE* out, double fma_peak_gflops = 0);

}  // namespace ember
