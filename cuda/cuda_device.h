// cuda/cuda_device.h — ember's entry point into CUDA: device discovery and
// the registration of the CUDA memory backend, compute stream and kernel
// table with the engine.
//
// The same file list builds against the real runtime (nvcc) and against the
// emulator (cuda/sim, g++ -DEMBER_CUDASIM), where device 0 is the CPU
// pretending to be a GPU; is_simulated() tells which.
#pragma once
#include <string>

#include "ops/kernels.h"

namespace ember::cuda {

// Number of usable CUDA devices (0 when there is no driver or device).
int device_count();
// "NVIDIA H100 80GB HBM3 (sm_90, 79.1 GiB)"; errors for a bad index.
std::string device_name(int index);
bool is_simulated();

// Which implementation runs convolution, batch norm, pooling and GEMM.
enum class ConvBackend { native, cudnn };
ConvBackend parse_conv_backend(const std::string& name);  // "native" | "cudnn", errors otherwise
const char* conv_backend_name(ConvBackend b);

// The hand-written kernels (cuda/kernels/*.cu).
const Kernels& native_kernels();
// The native table with convolution, batch norm and pooling from cuDNN and
// GEMM from cuBLAS; null in builds without cuDNN (the emulator).
const Kernels* cudnn_kernels();
// cuDNN picks convolution algorithms by timing them all on first use of a
// shape (PyTorch's cudnn.benchmark) instead of by its heuristics. No effect
// without cuDNN.
void set_cudnn_benchmark(bool on);

// Makes `device_index` current and registers the CUDA memory backend, the
// compute stream and the table for `conv` with the engine. With
// pinned_host = true, host tensors are allocated page-locked from then on
// (batches then copy to the device by DMA). Errors if the device is
// unusable or the backend is missing from this build.
void init(int device_index = 0, ConvBackend conv = ConvBackend::cudnn, bool pinned_host = false);

}  // namespace ember::cuda
