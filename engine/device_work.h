// engine/device_work.h — counts of the work the host queues on a device, and
// of the times it waits for one: the hand-written kernels launched
// (cuda/common.cuh's launch()), the cuDNN and cuBLAS calls (each launches
// one or more kernels of the library's own), the copies and memsets the
// engine issues, and the host's waits for a stream (cuda/host_sync.h).
//
// A training step's launch count is what a CUDA graph would replay and what
// the launch overhead of an eager step grows with; `--benchmark 1
// --profile 1` prints it per step, and tests hold a step to its counts
// (tests/cuda/test_cuda_step_launches.cpp). The emulator counts the same
// calls, so these figures need no GPU. The CPU backend counts nothing.
#pragma once
#include <cstdint>

namespace ember {

enum class DeviceWork { kernel, library_call, copy, host_wait, graph };

// Counts one event (thread-safe).
void count_device_work(DeviceWork kind) noexcept;

struct DeviceWorkCounts {
  int64_t kernels = 0;        // native kernel launches
  int64_t library_calls = 0;  // cuDNN / cuBLAS calls
  int64_t copies = 0;         // cudaMemcpyAsync / cudaMemsetAsync
  int64_t host_waits = 0;     // the host waited for a stream
  int64_t graphs = 0;         // CUDA graph replays (each one launch, whatever it holds)
  int64_t launches() const { return kernels + library_calls + copies + graphs; }
  DeviceWorkCounts operator-(const DeviceWorkCounts& o) const {
    return {kernels - o.kernels, library_calls - o.library_calls, copies - o.copies, host_waits - o.host_waits,
            graphs - o.graphs};
  }
};

// Since the process started (all devices and threads).
DeviceWorkCounts device_work_counts();

}  // namespace ember
