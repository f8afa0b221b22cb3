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
// Why device_count() is 0, as one line: no device, a driver older than this
// build's CUDA runtime (both versions named), or the runtime's own words.
std::string no_device_reason();
// The line of no_device_reason() for cudaGetDeviceCount's error `error`,
// with the driver's and this build's runtime's CUDA versions as the runtime
// gives them (1000 * major + 10 * minor; driver 0: no driver). Pure, for tests.
std::string describe_no_device(int error, int driver_version, int runtime_version);
// "NVIDIA H100 80GB HBM3 (sm_90, 79.1 GiB)"; errors for a bad index.
std::string device_name(int index);
// 10 * major + minor: 90 for sm_90; errors for a bad index.
int compute_capability(int index);
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
// cuDNN takes a deterministic convolution algorithm when one is available
// (runs repeat bit for bit), or with false (the default, PyTorch's
// cudnn.deterministic = False) the first-ranked, fastest one, which may sum
// in a different order each run. No effect without cuDNN.
void set_cudnn_deterministic(bool on);
// Keeps cuDNN's algorithm choices in the file `path` (empty: nowhere):
// choices it holds for this GPU and cuDNN version are used without timing
// or ranking, and it is rewritten (atomically) whenever a shape is timed.
// A file made on another GPU or cuDNN is ignored with a note on stderr and
// replaced; a malformed one is an Error naming the file and line. No effect
// without cuDNN.
void set_cudnn_algorithm_cache(const std::string& path);
// f32 convolutions and GEMMs may run on TF32 tensor cores: inputs rounded
// to a 10-bit mantissa, products accumulated in f32, as PyTorch's
// torch.backends.cudnn.allow_tf32 (on by default there) and
// torch.backends.cuda.matmul.allow_tf32. cuDNN and cuBLAS take it as their
// math mode; ember's own kernels run the channels-last convolutions with C
// and K multiples of 4 (conv_mma.cu) and GEMMs whose operands allow 16-byte
// copies (gemm_mma.cu) on mma.sync m16n8k8, inputs rounded to nearest
// (cvt.rna), and keep the rest in f32. Off by default in the library, so
// f32 stays within f32 rounding of the CPU; the programs turn it on with
// --tf32 1 (their default). Ampere (sm 80) and newer; no effect on f16,
// bf16 and f64.
void set_tf32(bool on);
bool tf32_enabled();

// Makes `device_index` current and registers the CUDA memory backend, the
// compute stream and the table for `conv` with the engine. With
// pinned_host = true, host tensors are allocated page-locked from then on
// (batches then copy to the device by DMA). Errors if the device is
// unusable or the backend is missing from this build.
void init(int device_index = 0, ConvBackend conv = ConvBackend::cudnn, bool pinned_host = false);

}  // namespace ember::cuda
