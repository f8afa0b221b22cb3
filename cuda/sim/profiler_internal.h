// cuda/sim/profiler_internal.h — what the profiler's recording side
// (profiler.cpp) hands its reporting side (profile_report.cpp).
#pragma once
#include <cstdint>
#include <unordered_map>
#include <vector>

#include "cuda/sim/cudasim.h"

namespace cudasim::detail {

struct RecordedKernel {
  const void* kernel = nullptr;
  uint64_t launches = 0, blocks = 0, threads = 0, barriers = 0, warp_ops = 0, warp_op_lanes = 0;
  uint64_t dram_sectors = 0, flops = 0, tensor_flops = 0;
  uint64_t mma_syncs = 0, ldmatrix_instructions = 0, ldmatrix_matrices = 0, async_copies = 0, async_copy_bytes = 0;
  unsigned async_groups_in_flight = 0;       // the most, over blocks
  uint64_t async_warp_bytes_in_flight = 0;   // the most, over blocks
  unsigned threads_per_block = 0;
  size_t dynamic_shared_bytes = 0;
  MemoryCounts counts;
  std::unordered_map<uintptr_t, MemoryCounts> by_pc;  // by instrumented instruction (a return address)
};

// A copy of what was recorded, in order of first launch.
std::vector<RecordedKernel> recorded_kernels();

}  // namespace cudasim::detail
