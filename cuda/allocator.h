// cuda/allocator.h — the caching device allocator and the compute stream.
//
// cudaMalloc and cudaFree synchronise the device, so the training loop must
// never call them: freed blocks are kept in per-size free lists (the size
// classes of the host allocator) and handed out again. ember issues all of a
// device's work on one compute stream, so a block freed after launching work
// that uses it can be reused by the next launch without a synchronisation
// (stream order keeps them apart). The one exception is the copy stream of
// cuda/host_staging.h (the next batch uploaded during a step): its copies
// start after an event recorded on the compute stream, and a block freed
// while such a copy may still write it makes the compute stream wait for
// the copies first, so compute-stream order still holds for every reuse.
#pragma once
#include <cstddef>
#include <unordered_map>
#include <vector>

#include <cuda_runtime.h>

namespace ember::cuda {

// Memory on the current device, from the cache when possible.
void* device_allocate(size_t nbytes);
void device_deallocate(void* ptr, size_t nbytes);

struct DeviceAllocatorStats {
  size_t bytes_in_use = 0, peak_bytes_in_use = 0, bytes_cached = 0;
  size_t cuda_malloc_calls = 0;  // how often the cache missed
};
DeviceAllocatorStats device_allocator_stats();
void device_allocator_release_cache();  // cudaFree of every cached block

// A private pool for a captured CUDA graph (PyTorch's graph pool). While a
// pool is active, every allocation comes from it (its free blocks, or a new
// cudaMalloc); a block of a pool, freed at any time, goes back to that pool,
// never to the shared cache. So the addresses a graph was captured with
// belong to it alone: eager work between replays cannot be handed one of
// them and have it overwritten by the next replay. Within the capture the
// pool's blocks are reused in stream order, as the shared cache's are.
class DevicePrivatePool {
 public:
  DevicePrivatePool() = default;
  ~DevicePrivatePool();  // cudaFree of its free blocks: only once the graph is gone and its work is done
  DevicePrivatePool(const DevicePrivatePool&) = delete;
  DevicePrivatePool& operator=(const DevicePrivatePool&) = delete;
  size_t bytes() const { return bytes_; }  // held from the device

 private:
  friend void* device_allocate(size_t nbytes);
  friend void device_deallocate(void* ptr, size_t nbytes);
  friend class ActivePrivatePool;
  std::vector<void*> blocks_;  // every block it holds
  std::unordered_map<size_t, std::vector<void*>> free_blocks_;  // by size class
  size_t bytes_ = 0;
};

// Makes `pool` the one allocations come from for its lifetime (one at a time).
class ActivePrivatePool {
 public:
  explicit ActivePrivatePool(DevicePrivatePool& pool);
  ~ActivePrivatePool();
  ActivePrivatePool(const ActivePrivatePool&) = delete;
  ActivePrivatePool& operator=(const ActivePrivatePool&) = delete;
};

// RAII scratch memory for a kernel launcher (workspaces, partial sums). It
// may be released while the kernels using it are still queued: that is safe
// because every kernel of ember runs on compute_stream(), so whoever gets the
// block next uses it after them. Work on another stream must not use it.
class DeviceBuffer {
 public:
  explicit DeviceBuffer(size_t nbytes) : ptr_(nbytes ? device_allocate(nbytes) : nullptr), nbytes_(nbytes) {}
  ~DeviceBuffer() { device_deallocate(ptr_, nbytes_); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  void* get() const { return ptr_; }
  template <typename T>
  T* as() const { return static_cast<T*>(ptr_); }
  size_t size() const { return nbytes_; }

 private:
  void* ptr_;
  size_t nbytes_;
};

// The stream all of ember's work on the current device is issued to.
cudaStream_t compute_stream();

}  // namespace ember::cuda
