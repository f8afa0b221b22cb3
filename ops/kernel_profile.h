// ops/kernel_profile.h — per-kernel wall time of the CPU backend, for
// finding where a training step's time goes (train_resnet --profile 1).
//
// When enabled, kernels_for(cpu) hands out a second table whose entries
// time each call (steady clock) and forward to the real CPU kernel; the
// totals are kept per kernel and dtype. Only the CPU table is timed: CUDA
// kernels are asynchronous, so host-side timing would only see launches
// (use Nsight Systems there). Enabling costs two clock reads per call.
#pragma once
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "engine/dtype.h"

namespace ember {

struct Kernels;

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
// A table: kernel, dtype, calls, total ms, ms per call, share of the total.
void print_kernel_profile(std::FILE* out);

}  // namespace ember
