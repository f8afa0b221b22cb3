// cuda/kernel_table.cu — the table of the hand-written CUDA kernels ("cuda",
// or "cuda-sim" when this file is compiled for the emulator).
#include "cuda/common.cuh"
#include "cuda/cuda_device.h"
#include "cuda/cuda_kernels.h"

namespace ember::cuda {

const Kernels& native_kernels() {
#define EMBER_CUDA_ENTRY_(name) t.name = &cuda::name;
  static const Kernels table = [] {
    Kernels t{};
    t.name = is_simulated() ? "cuda-sim" : "cuda";
    EMBER_FOR_EACH_KERNEL(EMBER_CUDA_ENTRY_)
    return t;
  }();
#undef EMBER_CUDA_ENTRY_
  return table;
}

}  // namespace ember::cuda

#if !defined(EMBER_CUDNN)
namespace ember::cuda {
// This build has no cuDNN (CUDNN=0, or the emulator): --conv cudnn is refused by init().
const Kernels* cudnn_kernels() { return nullptr; }
void set_cudnn_benchmark(bool) {}
void set_cudnn_deterministic(bool) {}
void set_cudnn_algorithm_cache(const std::string&) {}
}  // namespace ember::cuda
#endif
