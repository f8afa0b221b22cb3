// engine/memory.h — raw memory per device: a backend interface and Storage.
//
// The engine knows how to allocate CPU memory (a caching allocator, so the
// training loop does not page-fault fresh buffers every step). Other device
// types register a MemoryBackend (cuda/ registers one for CUDA). Storage is
// the RAII owner of one allocation; tensors share it through shared_ptr.
#pragma once
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>

#include "engine/device.h"

namespace ember {

class DeviceGraph;  // engine/device_graph.h

struct MemoryBackend {
  virtual ~MemoryBackend() = default;
  virtual void* allocate(size_t nbytes, int device_index) = 0;
  virtual void deallocate(void* ptr, size_t nbytes, int device_index) = 0;
  // Copies between this backend's device and the host, or within the device.
  virtual void copy_to_host(void* dst, const void* src, size_t nbytes, int device_index) = 0;
  virtual void copy_from_host(void* dst, const void* src, size_t nbytes, int device_index) = 0;
  virtual void copy_on_device(void* dst, const void* src, size_t nbytes, int device_index) = 0;
  virtual void set_zero(void* dst, size_t nbytes, int device_index) = 0;
  virtual void synchronize(int device_index) = 0;
  // A host-to-device copy that may overlap the work already queued (a second
  // stream on a GPU): the data a training step will need next, uploaded
  // while the current step runs. The destination must not be read before
  // finish_copies_ahead (freeing it is safe at any time). By default, an
  // ordinary copy_from_host.
  virtual void copy_from_host_ahead(void* dst, const void* src, size_t nbytes, int device_index) {
    copy_from_host(dst, src, nbytes, device_index);
  }
  // Work issued from now on sees every copy_from_host_ahead made so far.
  virtual void finish_copies_ahead(int /*device_index*/) {}
  // The most bytes the device had handed out at once (tensors and kernel
  // workspaces, not the cache of freed blocks) since the process started;
  // 0 where the backend does not count.
  virtual size_t peak_bytes_in_use(int /*device_index*/) { return 0; }
  // engine/device_graph.h's capture_device_graph; nullptr where the backend
  // has no graphs.
  virtual std::unique_ptr<DeviceGraph> capture_graph(const std::function<void()>& work, int device_index);
};

// Registers the backend for a device type (the CPU one is built in).
void register_memory_backend(DeviceType type, MemoryBackend* backend);
MemoryBackend& memory_backend(DeviceType type);  // errors if none registered
bool has_memory_backend(DeviceType type);

// Copies nbytes between any two devices (through the host when needed).
void copy_bytes(void* dst, Device dst_dev, const void* src, Device src_dev, size_t nbytes);
// The MemoryBackend's finish_copies_ahead for `device` (nothing on the CPU).
// Tensor::to_ahead makes the copies.
void finish_copies_ahead(Device device);
// The backend's peak_bytes_in_use for `device` (0 on the CPU, whose peak is
// the process's resident memory).
size_t device_peak_bytes(Device device);

// Statistics of the CPU caching allocator.
struct HostAllocatorStats {
  size_t bytes_in_use = 0;
  size_t peak_bytes_in_use = 0;
  size_t bytes_cached = 0;  // freed but kept for reuse
};
HostAllocatorStats host_allocator_stats();
void host_allocator_release_cache();  // gives cached blocks back to the OS
// Where the host allocator gets new blocks (64-byte aligned): aligned_alloc
// by default; cuda/ switches to page-locked memory (cudaMallocHost) when a
// GPU trains, so batches copy to the device by DMA. Releases the cache.
void set_host_block_source(void* (*allocate)(size_t nbytes), void (*release)(void* ptr));

class Storage {
 public:
  Storage(size_t nbytes, Device device);
  ~Storage();
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;

  void* data() const { return data_; }
  size_t nbytes() const { return nbytes_; }
  Device device() const { return device_; }

 private:
  void* data_ = nullptr;
  size_t nbytes_ = 0;
  Device device_;
};

}  // namespace ember
