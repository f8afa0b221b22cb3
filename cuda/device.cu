// cuda/device.cu — device discovery, the CUDA MemoryBackend, and init().
#include <cstdio>
#include <mutex>

#include "cuda/allocator.h"
#include "cuda/common.cuh"
#include "cuda/cuda_device.h"
#include "cuda/device_graph.h"
#include "cuda/host_staging.h"
#include "cuda/host_sync.h"
#include "engine/memory.h"

#if !defined(EMBER_CUDA_ARCH_LIST)  // the Makefile's CUDA_ARCH; the emulator has none
#define EMBER_CUDA_ARCH_LIST "(emulated)"
#endif

namespace ember::cuda {
namespace {

// Tensors on the device: memory from the caching allocator, copies ordered
// on the compute stream. Device-to-host copies wait for it (the host needs
// the bytes); host-to-device copies do not (cuda/host_staging.h), so the
// host never waits inside a training step (cuda/host_sync.h).
class CudaMemory final : public MemoryBackend {
 public:
  void* allocate(size_t nbytes, int) override { return nbytes ? device_allocate(nbytes) : nullptr; }
  void deallocate(void* ptr, size_t nbytes, int) override { device_deallocate(ptr, nbytes); }
  void copy_to_host(void* dst, const void* src, size_t n, int) override {
    CUDA_CHECK(cudaMemcpyAsync(dst, src, n, cudaMemcpyDeviceToHost, compute_stream()));
    count_device_work(DeviceWork::copy);
    wait_for_stream(compute_stream());
  }
  void copy_from_host(void* dst, const void* src, size_t n, int) override {
    EMBER_CHECK(!capturing(), "a host-to-device copy of ", n, " bytes inside a captured CUDA graph: a replay would copy "
                "the staging buffer again, holding other bytes by then (upload before the capture)");
    copy_from_host_async(dst, src, n, compute_stream());
  }
  void copy_on_device(void* dst, const void* src, size_t n, int) override {
    CUDA_CHECK(cudaMemcpyAsync(dst, src, n, cudaMemcpyDeviceToDevice, compute_stream()));
    count_device_work(DeviceWork::copy);
  }
  void set_zero(void* dst, size_t n, int) override {
    CUDA_CHECK(cudaMemsetAsync(dst, 0, n, compute_stream()));
    count_device_work(DeviceWork::copy);
  }
  void synchronize(int) override { wait_for_stream(compute_stream()); }
  void copy_from_host_ahead(void* dst, const void* src, size_t n, int) override {
    cuda::copy_from_host_ahead(dst, src, n);
  }
  void finish_copies_ahead(int) override { cuda::finish_copies_ahead(); }
  size_t peak_bytes_in_use(int) override { return device_allocator_stats().peak_bytes_in_use; }
  std::unique_ptr<DeviceGraph> capture_graph(const std::function<void()>& work, int) override {
    return cuda::capture_graph(work);
  }
};

// Launched by nobody: init() asks the runtime for its attributes, which fails
// when this binary carries no code (machine code or PTX) the device can run.
__global__ void architecture_probe_kernel() {}

// "13.0" from 13000.
std::string cuda_version_text(int v) { return cat(v / 1000, ".", (v % 1000) / 10); }

void* pinned_allocate(size_t n) {
  void* p = nullptr;
  return cudaMallocHost(&p, n) == cudaSuccess ? p : nullptr;
}
void pinned_release(void* p) { cudaFreeHost(p); }

Stream stream_getter(int) { return compute_stream(); }

}  // namespace

int device_count() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError();  // clear the error of a machine without a driver
    return 0;
  }
  return n;
}

std::string describe_no_device(int error, int driver_version, int runtime_version) {
  if (error == int(cudaErrorInsufficientDriver) && driver_version > 0)
    return cat("the NVIDIA driver supports CUDA up to ", cuda_version_text(driver_version), " but this build of ember",
               " uses the CUDA ", cuda_version_text(runtime_version), " runtime: update the driver, or build ember",
               " with a CUDA toolkit no newer than ", cuda_version_text(driver_version));
  if (error == int(cudaErrorInsufficientDriver) || error == int(cudaErrorNoDevice) || error == int(cudaSuccess))
    return driver_version > 0 ? "no CUDA device (none found, or CUDA_VISIBLE_DEVICES hides them)"
                              : "no CUDA device (no NVIDIA driver is loaded)";
  return cat("no usable CUDA device: ", cudaGetErrorString(cudaError_t(error)),
             " (no driver, no device, or CUDA_VISIBLE_DEVICES hides them)");
}

std::string no_device_reason() {
  int n = 0, driver = 0;
  const cudaError_t e = cudaGetDeviceCount(&n);
  cudaGetLastError();
  if (cudaDriverGetVersion(&driver) != cudaSuccess) driver = 0;
  cudaGetLastError();
  return describe_no_device(int(e), driver, CUDART_VERSION);
}

std::string device_name(int index) {
  cudaDeviceProp prop;
  CUDA_CHECK(cudaGetDeviceProperties(&prop, index));
  char buf[320];
  std::snprintf(buf, sizeof(buf), "%s (sm_%d%d, %.1f GiB)", prop.name, prop.major, prop.minor,
                double(prop.totalGlobalMem) / double(1ull << 30));
  return buf;
}

int compute_capability(int index) {
  cudaDeviceProp prop;
  CUDA_CHECK(cudaGetDeviceProperties(&prop, index));
  return 10 * prop.major + prop.minor;
}

bool is_simulated() {
#if defined(EMBER_CUDASIM)
  return true;
#else
  return false;
#endif
}

ConvBackend parse_conv_backend(const std::string& name) {
  if (name == "native") return ConvBackend::native;
  if (name == "cudnn") return ConvBackend::cudnn;
  fail(cat("unknown --conv '", name, "' (native or cudnn)"));
}

const char* conv_backend_name(ConvBackend b) { return b == ConvBackend::native ? "native" : "cudnn"; }

void init(int device_index, ConvBackend conv, bool pinned_host) {
  const int n = device_count();
  EMBER_CHECK(n > 0, no_device_reason());
  EMBER_CHECK(device_index >= 0 && device_index < n, "--gpus ", device_index, ": this machine has ", n,
              " CUDA device(s)");
  EMBER_CHECK(device_index == 0, "--gpus ", device_index,
              ": one process drives device 0 (use CUDA_VISIBLE_DEVICES to pick another)");
  CUDA_CHECK(cudaSetDevice(device_index));
  cudaFuncAttributes probe;
  if (const cudaError_t e = cudaFuncGetAttributes(&probe, reinterpret_cast<const void*>(&architecture_probe_kernel)); e != cudaSuccess) {
    cudaGetLastError();
    cudaDeviceProp prop;
    CUDA_CHECK(cudaGetDeviceProperties(&prop, device_index));
    fail(cat(prop.name, " (sm_", prop.major, prop.minor, "): ", cudaGetErrorString(e), "; this build carries code for",
             " CUDA_ARCH=\"", EMBER_CUDA_ARCH_LIST, "\" (PTX for the newest): rebuild with make CUDA_ARCH=", prop.major,
             prop.minor));
  }
  const Kernels* table = conv == ConvBackend::cudnn ? cudnn_kernels() : &native_kernels();
  EMBER_CHECK(table, "--conv cudnn: this build has no cuDNN (", is_simulated() ? "the CUDA emulator" : "cuDNN not found",
              "); use --conv native");
  static CudaMemory memory;
  register_memory_backend(DeviceType::CUDA, &memory);
  register_stream_getter(DeviceType::CUDA, stream_getter);
  register_kernels(DeviceType::CUDA, table);
  if (pinned_host) set_host_block_source(pinned_allocate, pinned_release);
}

}  // namespace ember::cuda
