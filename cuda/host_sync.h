// cuda/host_sync.h — every wait of the host for the device goes through
// here, and so do the input checks the kernels defer to those waits.
//
// A training step issues its work to the compute stream and does not wait
// for it: the host runs ahead, queueing the next kernels while the GPU works,
// so the GPU is never idle between them. The host waits only where it needs
// a value from the device: a tensor copied to the host (a loss or an
// accuracy for the log every --disp-batches, a checkpoint), or an explicit
// synchronize(). Those waits are counted, so tests can hold a training step
// to none (tests/cuda/test_cuda_host_sync.cpp).
//
// A kernel that meets bad input cannot throw. The cross-entropy kernels
// record the first row whose label is outside [0, classes) in a device
// record of their own (one per kernel, allocated once); every wait reads the
// records afterwards and throws the CPU kernel's message for the first one
// set, which it clears. So a bad label fails the run at the next value the
// host reads, as a device-side assert does in PyTorch, with the row and the
// label named.
#pragma once
#include <cstdint>

#include <cuda_runtime.h>

namespace ember::cuda {

// cudaStreamSynchronize(s), counted, then the deferred checks (may throw).
void wait_for_stream(cudaStream_t s);

// Waits since the process started (all devices).
int64_t host_wait_count();

// The device record of the first bad label a kernel found: `found` is 0
// until a launch sets the record (later launches leave it alone).
struct BadLabelRecord {
  unsigned long long row;
  long long label, classes;
  int found;
};

// The record of the kernel named `kernel` (a string literal) on the current
// device, allocated and cleared on first use.
BadLabelRecord* bad_label_record(const char* kernel);

// Reads every record of the current device (its stream must be idle) and
// throws the first one set, clearing it; nothing to read unless a launch has
// asked for a record since the last read. wait_for_stream calls it.
void throw_deferred_errors();

}  // namespace ember::cuda
