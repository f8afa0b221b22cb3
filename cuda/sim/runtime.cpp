// cuda/sim/runtime.cpp — the emulator's stand-in for libcudart: the CUDA
// runtime API that ember's host code calls, with the real signatures of
// CUDA 13's cuda_runtime_api.h, implemented on the host.
//
// Everything is synchronous: a launch has finished when it returns, so
// streams and events are plain handles and an event's time is the host's
// clock when it was recorded. "Device" memory is malloc'd (256-byte
// aligned, exactly the requested size, so AddressSanitizer sees overruns)
// and tracked, so that copies and memsets can check that their pointers are
// the kind of memory the call says they are.
//
// Errors: every failing call records its code as the calling thread's last
// error (cudaGetLastError / cudaPeekAtLastError) together with a detailed
// message that cudaGetErrorString returns for that code.
#include <sys/sysinfo.h>
#include <unistd.h>

#include <chrono>
#include <cinttypes>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <unordered_map>

#include "cuda/sim/internal.h"

namespace cudasim::detail {
namespace {

// ------------------------------------------------------------------ errors
thread_local cudaError_t t_last_error = cudaSuccess;
thread_local cudaError_t t_detail_code = cudaSuccess;
thread_local std::string t_detail;

// clang-format off
#define CUDASIM_ERROR_NAMES(X)                \
  X(cudaErrorInvalidValue)                    \
  X(cudaErrorMemoryAllocation)                \
  X(cudaErrorInitializationError)             \
  X(cudaErrorCudartUnloading)                 \
  X(cudaErrorProfilerDisabled)                \
  X(cudaErrorProfilerNotInitialized)          \
  X(cudaErrorProfilerAlreadyStarted)          \
  X(cudaErrorProfilerAlreadyStopped)          \
  X(cudaErrorInvalidConfiguration)            \
  X(cudaErrorInvalidPitchValue)               \
  X(cudaErrorInvalidSymbol)                   \
  X(cudaErrorInvalidHostPointer)              \
  X(cudaErrorInvalidDevicePointer)            \
  X(cudaErrorInvalidTexture)                  \
  X(cudaErrorInvalidTextureBinding)           \
  X(cudaErrorInvalidChannelDescriptor)        \
  X(cudaErrorInvalidMemcpyDirection)          \
  X(cudaErrorAddressOfConstant)               \
  X(cudaErrorTextureFetchFailed)              \
  X(cudaErrorTextureNotBound)                 \
  X(cudaErrorSynchronizationError)            \
  X(cudaErrorInvalidFilterSetting)            \
  X(cudaErrorInvalidNormSetting)              \
  X(cudaErrorMixedDeviceExecution)            \
  X(cudaErrorNotYetImplemented)               \
  X(cudaErrorMemoryValueTooLarge)             \
  X(cudaErrorStubLibrary)                     \
  X(cudaErrorInsufficientDriver)              \
  X(cudaErrorCallRequiresNewerDriver)         \
  X(cudaErrorInvalidSurface)                  \
  X(cudaErrorDuplicateVariableName)           \
  X(cudaErrorDuplicateTextureName)            \
  X(cudaErrorDuplicateSurfaceName)            \
  X(cudaErrorDevicesUnavailable)              \
  X(cudaErrorIncompatibleDriverContext)       \
  X(cudaErrorMissingConfiguration)            \
  X(cudaErrorPriorLaunchFailure)              \
  X(cudaErrorLaunchMaxDepthExceeded)          \
  X(cudaErrorLaunchFileScopedTex)             \
  X(cudaErrorLaunchFileScopedSurf)            \
  X(cudaErrorSyncDepthExceeded)               \
  X(cudaErrorLaunchPendingCountExceeded)      \
  X(cudaErrorInvalidDeviceFunction)           \
  X(cudaErrorNoDevice)                        \
  X(cudaErrorInvalidDevice)                   \
  X(cudaErrorDeviceNotLicensed)               \
  X(cudaErrorSoftwareValidityNotEstablished)  \
  X(cudaErrorStartupFailure)                  \
  X(cudaErrorInvalidKernelImage)              \
  X(cudaErrorDeviceUninitialized)             \
  X(cudaErrorMapBufferObjectFailed)           \
  X(cudaErrorUnmapBufferObjectFailed)         \
  X(cudaErrorArrayIsMapped)                   \
  X(cudaErrorAlreadyMapped)                   \
  X(cudaErrorNoKernelImageForDevice)          \
  X(cudaErrorAlreadyAcquired)                 \
  X(cudaErrorNotMapped)                       \
  X(cudaErrorNotMappedAsArray)                \
  X(cudaErrorNotMappedAsPointer)              \
  X(cudaErrorECCUncorrectable)                \
  X(cudaErrorUnsupportedLimit)                \
  X(cudaErrorDeviceAlreadyInUse)              \
  X(cudaErrorPeerAccessUnsupported)           \
  X(cudaErrorInvalidPtx)                      \
  X(cudaErrorInvalidGraphicsContext)          \
  X(cudaErrorNvlinkUncorrectable)             \
  X(cudaErrorJitCompilerNotFound)             \
  X(cudaErrorUnsupportedPtxVersion)           \
  X(cudaErrorJitCompilationDisabled)          \
  X(cudaErrorUnsupportedExecAffinity)         \
  X(cudaErrorUnsupportedDevSideSync)          \
  X(cudaErrorContained)                       \
  X(cudaErrorInvalidSource)                   \
  X(cudaErrorFileNotFound)                    \
  X(cudaErrorSharedObjectSymbolNotFound)      \
  X(cudaErrorSharedObjectInitFailed)          \
  X(cudaErrorOperatingSystem)                 \
  X(cudaErrorInvalidResourceHandle)           \
  X(cudaErrorIllegalState)                    \
  X(cudaErrorLossyQuery)                      \
  X(cudaErrorSymbolNotFound)                  \
  X(cudaErrorNotReady)                        \
  X(cudaErrorIllegalAddress)                  \
  X(cudaErrorLaunchOutOfResources)            \
  X(cudaErrorLaunchTimeout)                   \
  X(cudaErrorLaunchIncompatibleTexturing)     \
  X(cudaErrorPeerAccessAlreadyEnabled)        \
  X(cudaErrorPeerAccessNotEnabled)            \
  X(cudaErrorSetOnActiveProcess)              \
  X(cudaErrorContextIsDestroyed)              \
  X(cudaErrorAssert)                          \
  X(cudaErrorTooManyPeers)                    \
  X(cudaErrorHostMemoryAlreadyRegistered)     \
  X(cudaErrorHostMemoryNotRegistered)         \
  X(cudaErrorHardwareStackError)              \
  X(cudaErrorIllegalInstruction)              \
  X(cudaErrorMisalignedAddress)               \
  X(cudaErrorInvalidAddressSpace)             \
  X(cudaErrorInvalidPc)                       \
  X(cudaErrorLaunchFailure)                   \
  X(cudaErrorCooperativeLaunchTooLarge)       \
  X(cudaErrorTensorMemoryLeak)                \
  X(cudaErrorNotPermitted)                    \
  X(cudaErrorNotSupported)                    \
  X(cudaErrorSystemNotReady)                  \
  X(cudaErrorSystemDriverMismatch)            \
  X(cudaErrorCompatNotSupportedOnDevice)      \
  X(cudaErrorMpsConnectionFailed)             \
  X(cudaErrorMpsRpcFailure)                   \
  X(cudaErrorMpsServerNotReady)               \
  X(cudaErrorMpsMaxClientsReached)            \
  X(cudaErrorMpsMaxConnectionsReached)        \
  X(cudaErrorMpsClientTerminated)             \
  X(cudaErrorCdpNotSupported)                 \
  X(cudaErrorCdpVersionMismatch)              \
  X(cudaErrorStreamCaptureUnsupported)        \
  X(cudaErrorStreamCaptureInvalidated)        \
  X(cudaErrorStreamCaptureMerge)              \
  X(cudaErrorStreamCaptureUnmatched)          \
  X(cudaErrorStreamCaptureUnjoined)           \
  X(cudaErrorStreamCaptureIsolation)          \
  X(cudaErrorStreamCaptureImplicit)           \
  X(cudaErrorCapturedEvent)                   \
  X(cudaErrorStreamCaptureWrongThread)        \
  X(cudaErrorTimeout)                         \
  X(cudaErrorGraphExecUpdateFailure)          \
  X(cudaErrorExternalDevice)                  \
  X(cudaErrorInvalidClusterSize)              \
  X(cudaErrorFunctionNotLoaded)               \
  X(cudaErrorInvalidResourceType)             \
  X(cudaErrorInvalidResourceConfiguration)    \
  X(cudaErrorUnknown)
// clang-format on

const char* error_name(cudaError_t e) {
  switch (int(e)) {
    case cudaSuccess:
      return "cudaSuccess";
#define X(name) \
  case name:    \
    return #name;
      CUDASIM_ERROR_NAMES(X)
#undef X
  }
  return "cudaErrorUnknown";
}

const char* error_text(cudaError_t e) {
  switch (e) {
    case cudaSuccess:
      return "no error";
    case cudaErrorInvalidValue:
      return "invalid argument";
    case cudaErrorMemoryAllocation:
      return "out of memory";
    case cudaErrorInvalidConfiguration:
      return "invalid configuration argument";
    case cudaErrorInvalidPitchValue:
      return "invalid pitch argument";
    case cudaErrorInvalidSymbol:
      return "invalid device symbol";
    case cudaErrorInvalidDevicePointer:
      return "invalid device pointer";
    case cudaErrorInvalidMemcpyDirection:
      return "invalid copy direction for memcpy";
    case cudaErrorInvalidDeviceFunction:
      return "invalid device function";
    case cudaErrorNoDevice:
      return "no CUDA-capable device is detected";
    case cudaErrorInvalidDevice:
      return "invalid device ordinal";
    case cudaErrorInvalidResourceHandle:
      return "invalid resource handle";
    case cudaErrorNotReady:
      return "device not ready";
    case cudaErrorIllegalAddress:
      return "an illegal memory access was encountered";
    case cudaErrorLaunchOutOfResources:
      return "too many resources requested for launch";
    case cudaErrorLaunchFailure:
      return "unspecified launch failure";
    case cudaErrorNotSupported:
      return "operation not supported";
    case cudaErrorUnknown:
      return "unknown error";
    default:
      return nullptr;
  }
}

// ------------------------------------------------------------------ memory
enum class Kind { device, pinned };
struct Block {
  size_t size;
  Kind kind;
};
struct Memory {
  std::mutex mu;
  std::map<uintptr_t, Block> blocks;  // by base address
  size_t device_bytes = 0;
};
Memory& memory() {
  static Memory* m = new Memory;  // never destroyed: frees may come from static destructors
  return *m;
}

// The tracked block holding p, if any (caller holds the lock).
const std::pair<const uintptr_t, Block>* find_block(Memory& m, const void* p) {
  const uintptr_t a = uintptr_t(p);
  auto it = m.blocks.upper_bound(a);
  if (it == m.blocks.begin()) return nullptr;
  --it;
  if (a >= it->first + (it->second.size ? it->second.size : 1)) return nullptr;
  return &*it;
}

}  // namespace

bool device_block_of(const void* p, uintptr_t* lo, uintptr_t* hi) {
  Memory& m = memory();
  std::lock_guard<std::mutex> lock(m.mu);
  const auto* b = find_block(m, p);
  if (!b) return false;
  *lo = b->first;
  *hi = b->first + (b->second.size ? b->second.size : 1);
  return true;
}

namespace {

size_t physical_memory() { return size_t(sysconf(_SC_PHYS_PAGES)) * size_t(sysconf(_SC_PAGESIZE)); }
size_t available_memory() { return size_t(sysconf(_SC_AVPHYS_PAGES)) * size_t(sysconf(_SC_PAGESIZE)); }

void* allocate(size_t size, Kind kind) {
  void* p = nullptr;
  if (posix_memalign(&p, 256, size ? size : 1) != 0) return nullptr;
  Memory& m = memory();
  std::lock_guard<std::mutex> lock(m.mu);
  m.blocks[uintptr_t(p)] = Block{size, kind};
  if (kind == Kind::device) m.device_bytes += size;
  return p;
}

cudaError_t release(const char* call, void* p, Kind kind) {
  if (!p) return cudaSuccess;
  Memory& m = memory();
  bool found = false;
  const uintptr_t base = uintptr_t(p);  // the block's key in the stream-order history
  {
    std::lock_guard<std::mutex> lock(m.mu);
    const auto it = m.blocks.find(base);
    if (it != m.blocks.end() && it->second.kind == kind) {
      if (kind == Kind::device) m.device_bytes -= it->second.size;
      m.blocks.erase(it);
      std::free(p);
      found = true;
    }
  }
  if (found) {  // cudaFree and cudaFreeHost wait for the device; the block's history goes with it
    stream_order_host_waits_all();
    stream_order_forget_block(base);
    return cudaSuccess;
  }
  return set_error(cudaErrorInvalidValue, fmt("cudasim: %s(%p): not a pointer returned by %s", call, p,
                                              kind == Kind::device ? "cudaMalloc" : "cudaMallocHost/cudaHostAlloc"));
}

const char* kind_name(cudaMemcpyKind k) {
  switch (k) {
    case cudaMemcpyHostToHost:
      return "HostToHost";
    case cudaMemcpyHostToDevice:
      return "HostToDevice";
    case cudaMemcpyDeviceToHost:
      return "DeviceToHost";
    case cudaMemcpyDeviceToDevice:
      return "DeviceToDevice";
    case cudaMemcpyDefault:
      return "Default";
  }
  return "?";
}

// Checks [p, p + n) for a call: on the device when want_device (it must lie
// inside one cudaMalloc block), on the host otherwise (it must not start in
// one). Either way it may not run past the end of the block it starts in.
cudaError_t check_range(const char* call, const char* role, const void* p, size_t n, bool want_device) {
  Memory& m = memory();
  std::unique_lock<std::mutex> lock(m.mu);
  const auto* b = find_block(m, p);
  const bool device = b && b->second.kind == Kind::device;
  std::string problem;
  if (want_device && !device) {
    problem = fmt("the %s %p is not device memory (not inside any cudaMalloc block%s)", role, p,
                  b ? "; it is page-locked host memory" : "");
  } else if (!want_device && device) {
    problem = fmt("the %s %p is device memory (inside the %zu-byte cudaMalloc block at %p)", role, p, b->second.size,
                  reinterpret_cast<const void*>(b->first));
  } else if (b && uintptr_t(p) + n > b->first + b->second.size) {
    problem = fmt("the %s range [%p, +%zu) runs %zu bytes past the end of the %zu-byte %s block at %p", role, p, n,
                  size_t(uintptr_t(p) + n - b->first - b->second.size), b->second.size,
                  device ? "cudaMalloc" : "page-locked host", reinterpret_cast<const void*>(b->first));
  }
  lock.unlock();
  if (problem.empty()) return cudaSuccess;
  return set_error(cudaErrorInvalidValue, fmt("cudasim: %s: %s", call, problem.c_str()));
}

bool is_device(const void* p) {
  Memory& m = memory();
  std::lock_guard<std::mutex> lock(m.mu);
  const auto* b = find_block(m, p);
  return b && b->second.kind == Kind::device;
}

// The synchronous calls pass stream 0, which is always valid.
cudaError_t copy(const char* fn, void* dst, const void* src, size_t count, cudaMemcpyKind kind, cudaStream_t stream) {
  if (!valid_stream(stream))
    return set_error(cudaErrorInvalidResourceHandle, fmt("cudasim: %s on a stream that does not exist", fn));
  if (kind != cudaMemcpyHostToHost && kind != cudaMemcpyHostToDevice && kind != cudaMemcpyDeviceToHost &&
      kind != cudaMemcpyDeviceToDevice && kind != cudaMemcpyDefault)
    return set_error(cudaErrorInvalidMemcpyDirection, fmt("cudasim: %s: invalid cudaMemcpyKind %d", fn, int(kind)));
  if (count == 0) return cudaSuccess;
  if (!dst || !src) return set_error(cudaErrorInvalidValue, fmt("cudasim: %s: a null pointer", fn));
  const std::string call = fmt("%s(%s, %zu bytes)", fn, kind_name(kind), count);
  const bool dst_dev =
      kind == cudaMemcpyDefault ? is_device(dst) : (kind == cudaMemcpyHostToDevice || kind == cudaMemcpyDeviceToDevice);
  const bool src_dev =
      kind == cudaMemcpyDefault ? is_device(src) : (kind == cudaMemcpyDeviceToHost || kind == cudaMemcpyDeviceToDevice);
  if (cudaError_t e = check_range(call.c_str(), "destination", dst, count, dst_dev)) return e;
  if (cudaError_t e = check_range(call.c_str(), "source", src, count, src_dev)) return e;
  if (capture_copy(stream, dst, src, count, kind)) return cudaSuccess;  // into the stream's graph
  const Touch touches[2] = {{src, false}, {dst, true}};
  if (cudaError_t e = stream_order_operation(stream, Op{Op::Kind::copy}, touches, 2)) return e;
  std::memmove(dst, src, count);
  return cudaSuccess;
}

cudaError_t fill(const char* fn, void* dst, int value, size_t count, cudaStream_t stream) {
  if (!valid_stream(stream))
    return set_error(cudaErrorInvalidResourceHandle, fmt("cudasim: %s on a stream that does not exist", fn));
  if (count == 0) return cudaSuccess;
  const std::string call = fmt("%s(%zu bytes)", fn, count);
  if (cudaError_t e = check_range(call.c_str(), "destination", dst, count, true)) return e;
  if (capture_fill(stream, dst, value, count)) return cudaSuccess;  // into the stream's graph
  const Touch touch{dst, true};
  if (cudaError_t e = stream_order_operation(stream, Op{Op::Kind::fill}, &touch, 1)) return e;
  std::memset(dst, value, count);
  return cudaSuccess;
}

// ------------------------------------------------------ streams and events
struct Handles {
  std::mutex mu;
  std::set<const CUstream_st*> streams;
  std::set<const CUevent_st*> events;
  std::unordered_map<const void*, int> max_dynamic_smem;
};
Handles& handles() {
  static Handles* h = new Handles;
  return *h;
}

bool valid_event(cudaEvent_t e) {
  Handles& h = handles();
  std::lock_guard<std::mutex> lock(h.mu);
  return e && h.events.count(e);
}

cudaError_t bad_event(const char* fn) {
  return set_error(cudaErrorInvalidResourceHandle, fmt("cudasim: %s: not an event (destroyed?)", fn));
}
cudaError_t bad_stream(const char* fn) {
  return set_error(cudaErrorInvalidResourceHandle, fmt("cudasim: %s: not a stream (destroyed?)", fn));
}

// A new stream or event joins its set; destroying one deletes it if the set
// holds it (false otherwise: never created, or destroyed already).
template <typename T>
T* add_handle(std::set<const T*>& set, T* handle) {
  std::lock_guard<std::mutex> lock(handles().mu);
  set.insert(handle);
  return handle;
}
template <typename T>
bool destroy_handle(std::set<const T*>& set, T* handle) {
  std::lock_guard<std::mutex> lock(handles().mu);
  if (!handle || !set.erase(handle)) return false;
  delete handle;
  return true;
}

cudaError_t create_stream(cudaStream_t* s, unsigned flags, int priority) {
  if (!s) return set_error(cudaErrorInvalidValue, "cudasim: cudaStreamCreate: a null pointer");
  *s = add_handle(handles().streams, new CUstream_st{flags, priority});
  return cudaSuccess;
}

}  // namespace

std::string fmt(const char* f, ...) {
  char buf[1024];
  va_list ap;
  va_start(ap, f);
  std::vsnprintf(buf, sizeof buf, f, ap);
  va_end(ap);
  return buf;
}

cudaError_t set_error(cudaError_t code, std::string message) {
  t_last_error = code;
  t_detail_code = code;
  t_detail = std::move(message);
  return code;
}

size_t max_dynamic_shared_memory(const void* kernel) {
  Handles& h = handles();
  std::lock_guard<std::mutex> lock(h.mu);
  const auto it = h.max_dynamic_smem.find(kernel);
  return it == h.max_dynamic_smem.end() ? kDefaultDynamicSharedMemory : size_t(it->second);
}

bool valid_stream(cudaStream_t stream) {
  if (stream == nullptr || stream == cudaStreamLegacy || stream == cudaStreamPerThread) return true;
  Handles& h = handles();
  std::lock_guard<std::mutex> lock(h.mu);
  return h.streams.count(stream) != 0;
}

}  // namespace cudasim::detail

using namespace cudasim::detail;

// ================================================================ the API
extern "C" {

// ------------------------------------------------------------------ errors
cudaError_t cudaGetLastError(void) {
  const cudaError_t e = t_last_error;
  t_last_error = cudaSuccess;
  return e;
}
cudaError_t cudaPeekAtLastError(void) { return t_last_error; }
const char* cudaGetErrorString(cudaError_t error) {
  if (error != cudaSuccess && error == t_detail_code && !t_detail.empty()) return t_detail.c_str();
  if (const char* text = error_text(error)) return text;
  return error_name(error);
}
const char* cudaGetErrorName(cudaError_t error) { return error_name(error); }

// ----------------------------------------------------------------- devices
cudaError_t cudaGetDeviceCount(int* count) {
  if (!count) return set_error(cudaErrorInvalidValue, "cudasim: cudaGetDeviceCount: a null pointer");
  *count = 1;
  return cudaSuccess;
}
cudaError_t cudaSetDevice(int device) {
  if (device != 0)
    return set_error(cudaErrorInvalidDevice, fmt("cudasim: cudaSetDevice(%d): the emulator has one device, 0", device));
  return cudaSuccess;
}
cudaError_t cudaGetDevice(int* device) {
  if (!device) return set_error(cudaErrorInvalidValue, "cudasim: cudaGetDevice: a null pointer");
  *device = 0;
  return cudaSuccess;
}
cudaError_t cudaDeviceSynchronize(void) {
  if (cudaError_t e = capture_refuses("cudaDeviceSynchronize", nullptr)) return e;
  stream_order_host_waits_all();
  return cudaSuccess;
}
cudaError_t cudaDeviceReset(void) { return cudaSuccess; }
cudaError_t cudaDriverGetVersion(int* version) {
  if (!version) return set_error(cudaErrorInvalidValue, "cudasim: cudaDriverGetVersion: a null pointer");
  *version = CUDART_VERSION;
  return cudaSuccess;
}
cudaError_t cudaRuntimeGetVersion(int* version) {
  if (!version) return set_error(cudaErrorInvalidValue, "cudasim: cudaRuntimeGetVersion: a null pointer");
  *version = CUDART_VERSION;
  return cudaSuccess;
}

cudaError_t cudaGetDeviceProperties(struct cudaDeviceProp* prop, int device) {
  if (!prop) return set_error(cudaErrorInvalidValue, "cudasim: cudaGetDeviceProperties: a null pointer");
  if (device != 0)
    return set_error(cudaErrorInvalidDevice,
                     fmt("cudasim: cudaGetDeviceProperties(%d): the emulator has one device, 0", device));
  std::memset(prop, 0, sizeof *prop);
  std::snprintf(prop->name, sizeof prop->name, "%s", "cudasim (CPU emulator)");
  prop->totalGlobalMem = physical_memory();
  prop->sharedMemPerBlock = kDefaultDynamicSharedMemory;
  prop->regsPerBlock = 65536;
  prop->warpSize = 32;
  prop->memPitch = 2147483647;
  prop->maxThreadsPerBlock = 1024;
  prop->maxThreadsDim[0] = 1024;
  prop->maxThreadsDim[1] = 1024;
  prop->maxThreadsDim[2] = 64;
  prop->maxGridSize[0] = 2147483647;
  prop->maxGridSize[1] = 65535;
  prop->maxGridSize[2] = 65535;
  prop->totalConstMem = 65536;
  prop->major = 9;
  prop->minor = 0;
  prop->textureAlignment = 512;
  prop->texturePitchAlignment = 32;
  prop->multiProcessorCount = 132;
  prop->canMapHostMemory = 1;
  prop->concurrentKernels = 1;
  prop->asyncEngineCount = 2;
  prop->unifiedAddressing = 1;
  prop->memoryBusWidth = 5120;
  prop->l2CacheSize = 50 * 1024 * 1024;
  prop->maxThreadsPerMultiProcessor = 2048;
  prop->streamPrioritiesSupported = 1;
  prop->globalL1CacheSupported = 1;
  prop->localL1CacheSupported = 1;
  prop->sharedMemPerMultiprocessor = 228 * 1024;
  prop->regsPerMultiprocessor = 65536;
  prop->sharedMemPerBlockOptin = kMaxSharedMemoryOptin;
  prop->reservedSharedMemPerBlock = 1024;
  prop->maxBlocksPerMultiProcessor = 32;
  prop->computePreemptionSupported = 1;
  return cudaSuccess;
}

cudaError_t cudaDeviceGetAttribute(int* value, enum cudaDeviceAttr attr, int device) {
  if (!value) return set_error(cudaErrorInvalidValue, "cudasim: cudaDeviceGetAttribute: a null pointer");
  if (device != 0)
    return set_error(cudaErrorInvalidDevice,
                     fmt("cudasim: cudaDeviceGetAttribute(device %d): the emulator has one device, 0", device));
  switch (attr) {
    case cudaDevAttrMaxThreadsPerBlock:
      *value = 1024;
      break;
    case cudaDevAttrMaxBlockDimX:
      *value = 1024;
      break;
    case cudaDevAttrMaxBlockDimY:
      *value = 1024;
      break;
    case cudaDevAttrMaxBlockDimZ:
      *value = 64;
      break;
    case cudaDevAttrMaxGridDimX:
      *value = 2147483647;
      break;
    case cudaDevAttrMaxGridDimY:
      *value = 65535;
      break;
    case cudaDevAttrMaxGridDimZ:
      *value = 65535;
      break;
    case cudaDevAttrMaxSharedMemoryPerBlock:
      *value = int(kDefaultDynamicSharedMemory);
      break;
    case cudaDevAttrMaxSharedMemoryPerBlockOptin:
      *value = int(kMaxSharedMemoryOptin);
      break;
    case cudaDevAttrMaxSharedMemoryPerMultiprocessor:
      *value = 228 * 1024;
      break;
    case cudaDevAttrReservedSharedMemoryPerBlock:
      *value = 1024;
      break;
    case cudaDevAttrTotalConstantMemory:
      *value = 65536;
      break;
    case cudaDevAttrWarpSize:
      *value = 32;
      break;
    case cudaDevAttrMaxPitch:
      *value = 2147483647;
      break;
    case cudaDevAttrMaxRegistersPerBlock:
      *value = 65536;
      break;
    case cudaDevAttrMaxRegistersPerMultiprocessor:
      *value = 65536;
      break;
    case cudaDevAttrMultiProcessorCount:
      *value = 132;
      break;
    case cudaDevAttrMaxThreadsPerMultiProcessor:
      *value = 2048;
      break;
    case cudaDevAttrMaxBlocksPerMultiprocessor:
      *value = 32;
      break;
    case cudaDevAttrComputeCapabilityMajor:
      *value = 9;
      break;
    case cudaDevAttrComputeCapabilityMinor:
      *value = 0;
      break;
    case cudaDevAttrL2CacheSize:
      *value = 50 * 1024 * 1024;
      break;
    case cudaDevAttrGlobalMemoryBusWidth:
      *value = 5120;
      break;
    case cudaDevAttrAsyncEngineCount:
      *value = 2;
      break;
    case cudaDevAttrTextureAlignment:
      *value = 512;
      break;
    case cudaDevAttrUnifiedAddressing:
      *value = 1;
      break;
    case cudaDevAttrConcurrentKernels:
      *value = 1;
      break;
    case cudaDevAttrCanMapHostMemory:
      *value = 1;
      break;
    case cudaDevAttrStreamPrioritiesSupported:
      *value = 1;
      break;
    case cudaDevAttrGlobalL1CacheSupported:
      *value = 1;
      break;
    case cudaDevAttrLocalL1CacheSupported:
      *value = 1;
      break;
    case cudaDevAttrIntegrated:
      *value = 0;
      break;
    case cudaDevAttrEccEnabled:
      *value = 0;
      break;
    case cudaDevAttrManagedMemory:
      *value = 0;
      break;
    case cudaDevAttrCooperativeLaunch:
      *value = 0;
      break;
    case cudaDevAttrMemoryPoolsSupported:
      *value = 0;
      break;
    case cudaDevAttrHostNativeAtomicSupported:
      *value = 0;
      break;
    case cudaDevAttrPageableMemoryAccess:
      *value = 0;
      break;
    case cudaDevAttrConcurrentManagedAccess:
      *value = 0;
      break;
    case cudaDevAttrPciBusId:
      *value = 0;
      break;
    case cudaDevAttrComputeMode:
      *value = cudaComputeModeDefault;
      break;
    default:
      return set_error(cudaErrorInvalidValue,
                       fmt("cudasim: cudaDeviceGetAttribute: attribute %d is not emulated", int(attr)));
  }
  return cudaSuccess;
}

cudaError_t cudaDeviceGetStreamPriorityRange(int* leastPriority, int* greatestPriority) {
  if (leastPriority) *leastPriority = 0;
  if (greatestPriority) *greatestPriority = -5;
  return cudaSuccess;
}

// ------------------------------------------------------------------ memory
cudaError_t cudaMalloc(void** devPtr, size_t size) {
  if (!devPtr) return set_error(cudaErrorInvalidValue, "cudasim: cudaMalloc: a null pointer");
  *devPtr = nullptr;
  if (size == 0) return cudaSuccess;
  void* p = allocate(size, Kind::device);
  if (!p) return set_error(cudaErrorMemoryAllocation, fmt("cudasim: cudaMalloc(%zu bytes): out of host memory", size));
  *devPtr = p;
  return cudaSuccess;
}
cudaError_t cudaFree(void* devPtr) {
  if (cudaError_t e = capture_refuses("cudaFree", nullptr)) return e;
  return release("cudaFree", devPtr, Kind::device);
}
cudaError_t cudaMallocAsync(void** devPtr, size_t size, cudaStream_t stream) {
  if (!valid_stream(stream)) return bad_stream("cudaMallocAsync");
  return cudaMalloc(devPtr, size);
}
cudaError_t cudaFreeAsync(void* devPtr, cudaStream_t stream) {
  if (!valid_stream(stream)) return bad_stream("cudaFreeAsync");
  return cudaFree(devPtr);
}

cudaError_t cudaHostAlloc(void** pHost, size_t size, unsigned int) {
  if (!pHost) return set_error(cudaErrorInvalidValue, "cudasim: cudaHostAlloc: a null pointer");
  *pHost = nullptr;
  if (size == 0) return cudaSuccess;
  void* p = allocate(size, Kind::pinned);
  if (!p)
    return set_error(cudaErrorMemoryAllocation, fmt("cudasim: cudaHostAlloc(%zu bytes): out of host memory", size));
  *pHost = p;
  return cudaSuccess;
}
cudaError_t cudaMallocHost(void** ptr, size_t size) { return cudaHostAlloc(ptr, size, 0); }
cudaError_t cudaFreeHost(void* ptr) { return release("cudaFreeHost", ptr, Kind::pinned); }
cudaError_t cudaHostRegister(void*, size_t, unsigned int) { return cudaSuccess; }
cudaError_t cudaHostUnregister(void*) { return cudaSuccess; }

cudaError_t cudaMemGetInfo(size_t* free, size_t* total) {
  if (free) *free = available_memory();
  if (total) *total = physical_memory();
  return cudaSuccess;
}

cudaError_t cudaPointerGetAttributes(struct cudaPointerAttributes* attributes, const void* ptr) {
  if (!attributes) return set_error(cudaErrorInvalidValue, "cudasim: cudaPointerGetAttributes: a null pointer");
  std::memset(attributes, 0, sizeof *attributes);
  Memory& m = memory();
  std::lock_guard<std::mutex> lock(m.mu);
  const auto* b = find_block(m, ptr);
  attributes->device = 0;
  if (!b) {
    attributes->type = cudaMemoryTypeUnregistered;
  } else if (b->second.kind == Kind::device) {
    attributes->type = cudaMemoryTypeDevice;
    attributes->devicePointer = const_cast<void*>(ptr);
  } else {
    attributes->type = cudaMemoryTypeHost;
    attributes->devicePointer = const_cast<void*>(ptr);
    attributes->hostPointer = const_cast<void*>(ptr);
  }
  return cudaSuccess;
}

cudaError_t cudaMemcpy(void* dst, const void* src, size_t count, enum cudaMemcpyKind kind) {
  if (cudaError_t e = capture_refuses("cudaMemcpy", nullptr)) return e;
  const cudaError_t e = copy("cudaMemcpy", dst, src, count, kind, nullptr);
  stream_order_host_waits_stream(nullptr);
  return e;
}
cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t count, enum cudaMemcpyKind kind, cudaStream_t stream) {
  return copy("cudaMemcpyAsync", dst, src, count, kind, stream);
}
namespace {
cudaError_t copy_2d(const char* fn, void* dst, size_t dpitch, const void* src, size_t spitch, size_t width,
                    size_t height, enum cudaMemcpyKind kind, cudaStream_t stream) {
  if (!valid_stream(stream)) return bad_stream(fn);
  if (width > dpitch || width > spitch)
    return set_error(cudaErrorInvalidPitchValue,
                     fmt("cudasim: %s: width %zu exceeds a pitch (%zu, %zu)", fn, width, dpitch, spitch));
  for (size_t r = 0; r < height; ++r)
    if (cudaError_t e = copy(fn, static_cast<char*>(dst) + r * dpitch, static_cast<const char*>(src) + r * spitch,
                             width, kind, stream))
      return e;
  return cudaSuccess;
}
}  // namespace
cudaError_t cudaMemcpy2D(void* dst, size_t dpitch, const void* src, size_t spitch, size_t width, size_t height,
                         enum cudaMemcpyKind kind) {
  if (cudaError_t e = capture_refuses("cudaMemcpy2D", nullptr)) return e;
  const cudaError_t e = copy_2d("cudaMemcpy2D", dst, dpitch, src, spitch, width, height, kind, nullptr);
  stream_order_host_waits_stream(nullptr);
  return e;
}
cudaError_t cudaMemcpy2DAsync(void* dst, size_t dpitch, const void* src, size_t spitch, size_t width, size_t height,
                              enum cudaMemcpyKind kind, cudaStream_t stream) {
  return copy_2d("cudaMemcpy2DAsync", dst, dpitch, src, spitch, width, height, kind, stream);
}
cudaError_t cudaMemset(void* devPtr, int value, size_t count) {
  if (cudaError_t e = capture_refuses("cudaMemset", nullptr)) return e;
  const cudaError_t e = fill("cudaMemset", devPtr, value, count, nullptr);
  stream_order_host_waits_stream(nullptr);
  return e;
}
cudaError_t cudaMemsetAsync(void* devPtr, int value, size_t count, cudaStream_t stream) {
  return fill("cudaMemsetAsync", devPtr, value, count, stream);
}

// __device__ and __constant__ variables are host globals on the emulator.
cudaError_t cudaMemcpyToSymbol(const void* symbol, const void* src, size_t count, size_t offset, enum cudaMemcpyKind) {
  if (!symbol || (!src && count))
    return set_error(cudaErrorInvalidSymbol, "cudasim: cudaMemcpyToSymbol: a null pointer");
  if (count) std::memmove(static_cast<char*>(const_cast<void*>(symbol)) + offset, src, count);
  return cudaSuccess;
}
cudaError_t cudaMemcpyFromSymbol(void* dst, const void* symbol, size_t count, size_t offset, enum cudaMemcpyKind) {
  if (!symbol || (!dst && count))
    return set_error(cudaErrorInvalidSymbol, "cudasim: cudaMemcpyFromSymbol: a null pointer");
  if (count) std::memmove(dst, static_cast<const char*>(symbol) + offset, count);
  return cudaSuccess;
}
cudaError_t cudaMemcpyToSymbolAsync(const void* symbol, const void* src, size_t count, size_t offset,
                                    enum cudaMemcpyKind kind, cudaStream_t stream) {
  if (!valid_stream(stream)) return bad_stream("cudaMemcpyToSymbolAsync");
  return cudaMemcpyToSymbol(symbol, src, count, offset, kind);
}
cudaError_t cudaMemcpyFromSymbolAsync(void* dst, const void* symbol, size_t count, size_t offset,
                                      enum cudaMemcpyKind kind, cudaStream_t stream) {
  if (!valid_stream(stream)) return bad_stream("cudaMemcpyFromSymbolAsync");
  return cudaMemcpyFromSymbol(dst, symbol, count, offset, kind);
}
cudaError_t cudaGetSymbolAddress(void** devPtr, const void* symbol) {
  if (!devPtr || !symbol) return set_error(cudaErrorInvalidSymbol, "cudasim: cudaGetSymbolAddress: a null pointer");
  *devPtr = const_cast<void*>(symbol);
  return cudaSuccess;
}

// ----------------------------------------------------------------- streams
cudaError_t cudaStreamCreate(cudaStream_t* pStream) { return create_stream(pStream, cudaStreamDefault, 0); }
cudaError_t cudaStreamCreateWithFlags(cudaStream_t* pStream, unsigned int flags) {
  return create_stream(pStream, flags, 0);
}
cudaError_t cudaStreamCreateWithPriority(cudaStream_t* pStream, unsigned int flags, int priority) {
  return create_stream(pStream, flags, priority);
}
cudaError_t cudaStreamDestroy(cudaStream_t stream) {
  if (valid_stream(stream)) stream_order_forget_stream(stream);
  return destroy_handle(handles().streams, stream) ? cudaSuccess : bad_stream("cudaStreamDestroy");
}
// All work has run already: a wait or a query teaches the host the stream's clock.
cudaError_t cudaStreamSynchronize(cudaStream_t stream) {
  if (!valid_stream(stream)) return bad_stream("cudaStreamSynchronize");
  if (cudaError_t e = capture_refuses("cudaStreamSynchronize", stream ? stream : nullptr)) return e;
  stream_order_host_waits_stream(stream);
  return cudaSuccess;
}
cudaError_t cudaStreamQuery(cudaStream_t stream) {
  if (!valid_stream(stream)) return bad_stream("cudaStreamQuery");
  if (stream && stream_capturing(stream)) return capture_refuses("cudaStreamQuery", stream);
  stream_order_host_waits_stream(stream);
  return cudaSuccess;
}
cudaError_t cudaStreamGetFlags(cudaStream_t stream, unsigned int* flags) {
  if (!valid_stream(stream)) return bad_stream("cudaStreamGetFlags");
  if (flags) *flags = (stream && stream != cudaStreamLegacy && stream != cudaStreamPerThread) ? stream->flags : 0u;
  return cudaSuccess;
}
cudaError_t cudaStreamWaitEvent(cudaStream_t stream, cudaEvent_t event, unsigned int) {
  if (!valid_stream(stream)) return bad_stream("cudaStreamWaitEvent");
  if (!valid_event(event)) return bad_event("cudaStreamWaitEvent");
  if (stream && stream_capturing(stream)) return capture_refuses("cudaStreamWaitEvent (across streams)", stream);
  stream_order_wait_event(stream, event);
  return cudaSuccess;
}

// ------------------------------------------------------------------ events
cudaError_t cudaEventCreateWithFlags(cudaEvent_t* event, unsigned int flags) {
  if (!event) return set_error(cudaErrorInvalidValue, "cudasim: cudaEventCreate: a null pointer");
  *event = add_handle(handles().events, new CUevent_st{flags});
  return cudaSuccess;
}
cudaError_t cudaEventCreate(cudaEvent_t* event) { return cudaEventCreateWithFlags(event, cudaEventDefault); }
cudaError_t cudaEventDestroy(cudaEvent_t event) {
  if (valid_event(event)) stream_order_forget_event(event);
  return destroy_handle(handles().events, event) ? cudaSuccess : bad_event("cudaEventDestroy");
}
cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t stream) {
  if (!valid_stream(stream)) return bad_stream("cudaEventRecord");
  if (!valid_event(event)) return bad_event("cudaEventRecord");
  if (stream && stream_capturing(stream)) return capture_refuses("cudaEventRecord (across streams)", stream);
  event->time = std::chrono::steady_clock::now();
  event->recorded = true;
  stream_order_record(event, stream);
  return cudaSuccess;
}
cudaError_t cudaEventRecordWithFlags(cudaEvent_t event, cudaStream_t stream, unsigned int) {
  return cudaEventRecord(event, stream);
}
cudaError_t cudaEventSynchronize(cudaEvent_t event) {
  if (!valid_event(event)) return bad_event("cudaEventSynchronize");
  stream_order_host_waits_event(event);
  return cudaSuccess;
}
cudaError_t cudaEventQuery(cudaEvent_t event) {
  if (!valid_event(event)) return bad_event("cudaEventQuery");
  stream_order_host_waits_event(event);
  return cudaSuccess;
}
cudaError_t cudaEventElapsedTime(float* ms, cudaEvent_t start, cudaEvent_t end) {
  if (!ms) return set_error(cudaErrorInvalidValue, "cudasim: cudaEventElapsedTime: a null pointer");
  if (!valid_event(start) || !valid_event(end)) return bad_event("cudaEventElapsedTime");
  if ((start->flags | end->flags) & cudaEventDisableTiming)
    return set_error(cudaErrorInvalidResourceHandle,
                     "cudasim: cudaEventElapsedTime: an event made with cudaEventDisableTiming");
  if (!start->recorded || !end->recorded)
    return set_error(cudaErrorInvalidResourceHandle, "cudasim: cudaEventElapsedTime: an event that was never recorded");
  *ms = std::chrono::duration<float, std::milli>(end->time - start->time).count();
  return cudaSuccess;
}

// --------------------------------------------------------------- functions
cudaError_t cudaFuncSetAttribute(const void* func, enum cudaFuncAttribute attr, int value) {
  if (!func) return set_error(cudaErrorInvalidDeviceFunction, "cudasim: cudaFuncSetAttribute: a null function");
  if (attr == cudaFuncAttributeMaxDynamicSharedMemorySize) {
    if (value < 0 || size_t(value) > kMaxSharedMemoryOptin)
      return set_error(cudaErrorInvalidValue,
                       fmt("cudasim: cudaFuncSetAttribute(MaxDynamicSharedMemorySize, %d): at most %zu bytes", value,
                           kMaxSharedMemoryOptin));
    Handles& h = handles();
    std::lock_guard<std::mutex> lock(h.mu);
    h.max_dynamic_smem[func] = value;
    return cudaSuccess;
  }
  if (attr == cudaFuncAttributePreferredSharedMemoryCarveout) {
    if (value < -1 || value > 100)
      return set_error(cudaErrorInvalidValue,
                       fmt("cudasim: cudaFuncSetAttribute(PreferredSharedMemoryCarveout, %d)", value));
    return cudaSuccess;
  }
  return set_error(cudaErrorInvalidValue,
                   fmt("cudasim: cudaFuncSetAttribute: attribute %d is not emulated", int(attr)));
}

cudaError_t cudaFuncGetAttributes(struct cudaFuncAttributes* attr, const void* func) {
  if (!attr || !func)
    return set_error(cudaErrorInvalidDeviceFunction, "cudasim: cudaFuncGetAttributes: a null pointer");
  std::memset(attr, 0, sizeof *attr);
  attr->maxThreadsPerBlock = 1024;
  attr->numRegs = 32;
  attr->ptxVersion = 90;
  attr->binaryVersion = 90;
  attr->maxDynamicSharedSizeBytes = int(max_dynamic_shared_memory(func));
  attr->preferredShmemCarveout = -1;
  return cudaSuccess;
}

cudaError_t cudaOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(int* numBlocks, const void* func, int blockSize,
                                                                   size_t dynamicSMemSize, unsigned int) {
  if (!numBlocks || !func || blockSize <= 0 || blockSize > 1024)
    return set_error(cudaErrorInvalidValue, "cudasim: cudaOccupancyMaxActiveBlocksPerMultiprocessor: bad arguments");
  int n = 2048 / blockSize;
  if (n > 32) n = 32;
  if (dynamicSMemSize) {
    const int by_smem = int((228 * 1024) / (dynamicSMemSize + 1024));
    if (by_smem < n) n = by_smem;
  }
  *numBlocks = n;
  return cudaSuccess;
}
cudaError_t cudaOccupancyMaxActiveBlocksPerMultiprocessor(int* numBlocks, const void* func, int blockSize,
                                                          size_t dynamicSMemSize) {
  return cudaOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(numBlocks, func, blockSize, dynamicSMemSize, 0);
}

}  // extern "C"
