// cuda/allocator.cu — the caching device allocator and the compute stream.
#include <mutex>
#include <unordered_map>
#include <vector>

#include "cuda/allocator.h"
#include "cuda/common.cuh"
#include "cuda/host_staging.h"

namespace ember::cuda {
namespace {

// Same classes as the host allocator: 512-byte steps below 64 KiB, then
// eight classes per power of two (at most 12.5% slack).
size_t size_class(size_t n) {
  if (n == 0) n = 1;
  if (n <= 65536) return (n + 511) & ~size_t(511);
  size_t p = 65536;
  while (p * 2 < n) p *= 2;
  const size_t step = p / 8;
  return (n + step - 1) / step * step;
}

struct Cache {
  std::mutex mu;
  std::unordered_map<size_t, std::vector<void*>> free_blocks;  // by size class
  DeviceAllocatorStats stats;
  DevicePrivatePool* active_pool = nullptr;                   // allocations come from here while set
  std::unordered_map<void*, DevicePrivatePool*> pool_of;      // every block of every private pool
};

Cache& cache() {
  static Cache* c = new Cache();  // never destroyed: outlives every tensor
  return *c;
}

void release_locked(Cache& c) {
  for (auto& [cls, blocks] : c.free_blocks)
    for (void* p : blocks) cudaFree(p);
  c.free_blocks.clear();
  c.stats.bytes_cached = 0;
}

}  // namespace

void* device_allocate(size_t nbytes) {
  const size_t cls = size_class(nbytes);
  Cache& c = cache();
  std::lock_guard<std::mutex> lock(c.mu);
  if (DevicePrivatePool* pool = c.active_pool) {
    std::vector<void*>& list = pool->free_blocks_[cls];
    void* p = nullptr;
    if (!list.empty()) {
      p = list.back();
      list.pop_back();
    } else {
      const cudaError_t status = cudaMalloc(&p, cls);
      if (status != cudaSuccess)
        fail(cat("out of device memory allocating ", nbytes, " bytes for a CUDA graph's pool (", pool->bytes_,
                 " held by it, ", c.stats.bytes_in_use, " in use, ", cudaGetErrorString(status), ")"));
      ++c.stats.cuda_malloc_calls;
      pool->blocks_.push_back(p);
      pool->bytes_ += cls;
      c.pool_of[p] = pool;
    }
    c.stats.bytes_in_use += cls;
    if (c.stats.bytes_in_use > c.stats.peak_bytes_in_use) c.stats.peak_bytes_in_use = c.stats.bytes_in_use;
    return p;
  }
  auto it = c.free_blocks.find(cls);
  void* p = nullptr;
  if (it != c.free_blocks.end() && !it->second.empty()) {
    p = it->second.back();
    it->second.pop_back();
    c.stats.bytes_cached -= cls;
  } else {
    cudaError_t status = cudaMalloc(&p, cls);
    if (status == cudaErrorMemoryAllocation) {  // give the cache back, try once more
      cudaGetLastError();
      release_locked(c);
      status = cudaMalloc(&p, cls);
    }
    if (status != cudaSuccess)
      fail(cat("out of device memory allocating ", nbytes, " bytes (", c.stats.bytes_in_use, " in use, ",
               cudaGetErrorString(status), ")"));
    ++c.stats.cuda_malloc_calls;
  }
  c.stats.bytes_in_use += cls;
  if (c.stats.bytes_in_use > c.stats.peak_bytes_in_use) c.stats.peak_bytes_in_use = c.stats.bytes_in_use;
  return p;
}

void device_deallocate(void* ptr, size_t nbytes) {
  if (!ptr) return;
  order_copies_ahead_before_reuse(ptr);  // a block a copy ahead may still be writing
  const size_t cls = size_class(nbytes);
  Cache& c = cache();
  std::lock_guard<std::mutex> lock(c.mu);
  c.stats.bytes_in_use -= cls;
  // (pool_of is empty unless a CUDA graph was captured: no lookup on the eager path)
  if (const auto owner = c.pool_of.empty() ? c.pool_of.end() : c.pool_of.find(ptr); owner != c.pool_of.end()) {
    owner->second->free_blocks_[cls].push_back(ptr);  // the graph's memory stays the graph's
    return;
  }
  c.free_blocks[cls].push_back(ptr);
  c.stats.bytes_cached += cls;
}

DevicePrivatePool::~DevicePrivatePool() {
  Cache& c = cache();
  std::lock_guard<std::mutex> lock(c.mu);
  if (c.active_pool == this) c.active_pool = nullptr;
  // Free blocks go back to the device; a block still held by a tensor
  // becomes an ordinary block of the shared cache when that tensor frees it.
  for (auto& [cls, list] : free_blocks_)
    for (void* p : list) {
      c.pool_of.erase(p);
      cudaFree(p);
    }
  for (void* p : blocks_) c.pool_of.erase(p);
}

ActivePrivatePool::ActivePrivatePool(DevicePrivatePool& pool) {
  Cache& c = cache();
  std::lock_guard<std::mutex> lock(c.mu);
  EMBER_CHECK(c.active_pool == nullptr, "device allocator: a private pool is already active");
  c.active_pool = &pool;
}

ActivePrivatePool::~ActivePrivatePool() {
  Cache& c = cache();
  std::lock_guard<std::mutex> lock(c.mu);
  c.active_pool = nullptr;
}

DeviceAllocatorStats device_allocator_stats() {
  Cache& c = cache();
  std::lock_guard<std::mutex> lock(c.mu);
  return c.stats;
}

void device_allocator_release_cache() {
  Cache& c = cache();
  std::lock_guard<std::mutex> lock(c.mu);
  release_locked(c);
}

cudaStream_t compute_stream() {
  static cudaStream_t stream = [] {
    cudaStream_t s = nullptr;
    CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    return s;
  }();
  return stream;
}

}  // namespace ember::cuda
