// engine/memory.cpp — the CPU caching allocator, backend registry and Storage.
#include "engine/memory.h"

#include "engine/device_graph.h"

#include <cstdlib>
#include <cstring>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "engine/error.h"

namespace ember {
namespace {

// Rounds a request up to a size class: multiples of 64 bytes below 4 KiB,
// then eight classes per power of two (at most 12.5% slack). Training asks
// for the same sizes every step, so freed blocks are reused exactly.
size_t size_class(size_t n) {
  if (n == 0) n = 1;
  if (n <= 4096) return (n + 63) & ~size_t(63);
  size_t p = 4096;
  while (p * 2 < n) p *= 2;
  const size_t step = p / 8;
  return (n + step - 1) / step * step;
}

class HostCachingAllocator final : public MemoryBackend {
 public:
  ~HostCachingAllocator() override { release_cache(); }

  void* allocate(size_t nbytes, int) override {
    const size_t cls = size_class(nbytes);
    {
      std::lock_guard<std::mutex> lock(mu_);
      auto it = free_.find(cls);
      if (it != free_.end() && !it->second.empty()) {
        void* p = it->second.back();
        it->second.pop_back();
        stats_.bytes_cached -= cls;
        note_in_use(cls);
        return p;
      }
    }
    void* p = source_allocate_(cls);
    if (!p) {  // give the cache back and try once more before failing
      release_cache();
      p = source_allocate_(cls);
    }
    EMBER_CHECK(p, "out of host memory allocating ", nbytes, " bytes");
    std::lock_guard<std::mutex> lock(mu_);
    owner_[p] = source_release_;  // freed by the source it came from, even after a switch
    note_in_use(cls);
    return p;
  }

  void deallocate(void* ptr, size_t nbytes, int) override {
    if (!ptr) return;
    const size_t cls = size_class(nbytes);
    std::lock_guard<std::mutex> lock(mu_);
    free_[cls].push_back(ptr);
    stats_.bytes_in_use -= cls;
    stats_.bytes_cached += cls;
  }

  void copy_to_host(void* dst, const void* src, size_t n, int) override { std::memcpy(dst, src, n); }
  void copy_from_host(void* dst, const void* src, size_t n, int) override { std::memcpy(dst, src, n); }
  void copy_on_device(void* dst, const void* src, size_t n, int) override { std::memcpy(dst, src, n); }
  void set_zero(void* dst, size_t n, int) override { std::memset(dst, 0, n); }
  void synchronize(int) override {}

  void release_cache() {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto& [cls, blocks] : free_)
      for (void* p : blocks) {
        auto it = owner_.find(p);
        (it != owner_.end() ? it->second : source_release_)(p);
        if (it != owner_.end()) owner_.erase(it);
      }
    free_.clear();
    stats_.bytes_cached = 0;
  }

  // The cache is emptied so every later block comes from the new source;
  // blocks in use go back to the source they came from when released.
  void set_source(void* (*allocate)(size_t), void (*release)(void*)) {
    release_cache();
    std::lock_guard<std::mutex> lock(mu_);
    source_allocate_ = allocate;
    source_release_ = release;
  }

  HostAllocatorStats stats() {
    std::lock_guard<std::mutex> lock(mu_);
    return stats_;
  }

 private:
  void note_in_use(size_t cls) {
    stats_.bytes_in_use += cls;
    if (stats_.bytes_in_use > stats_.peak_bytes_in_use) stats_.peak_bytes_in_use = stats_.bytes_in_use;
  }

  static void* aligned_source(size_t n) { return std::aligned_alloc(64, n); }
  static void free_source(void* p) { std::free(p); }

  std::mutex mu_;
  void* (*source_allocate_)(size_t) = aligned_source;
  void (*source_release_)(void*) = free_source;
  std::unordered_map<size_t, std::vector<void*>> free_;
  std::unordered_map<void*, void (*)(void*)> owner_;  // block -> release function of its source
  HostAllocatorStats stats_;
};

HostCachingAllocator& host_allocator() {
  static HostCachingAllocator* a = new HostCachingAllocator();  // never destroyed: outlives all tensors
  return *a;
}

MemoryBackend* g_backends[kNumDeviceTypes] = {};

}  // namespace

void register_memory_backend(DeviceType type, MemoryBackend* backend) {
  g_backends[static_cast<int>(type)] = backend;
}

bool has_memory_backend(DeviceType type) {
  return type == DeviceType::CPU || g_backends[static_cast<int>(type)] != nullptr;
}

MemoryBackend& memory_backend(DeviceType type) {
  if (type == DeviceType::CPU) return host_allocator();
  MemoryBackend* b = g_backends[static_cast<int>(type)];
  EMBER_CHECK(b, "this build of ember has no support for ", Device{type, 0}.str(),
              " devices (build with nvcc on the PATH, or CUDA=1)");
  return *b;
}

void copy_bytes(void* dst, Device dst_dev, const void* src, Device src_dev, size_t nbytes) {
  if (nbytes == 0) return;
  if (dst_dev.is_cpu() && src_dev.is_cpu()) {
    std::memcpy(dst, src, nbytes);
  } else if (dst_dev.is_cpu()) {
    memory_backend(src_dev.type).copy_to_host(dst, src, nbytes, src_dev.index);
  } else if (src_dev.is_cpu()) {
    memory_backend(dst_dev.type).copy_from_host(dst, src, nbytes, dst_dev.index);
  } else if (dst_dev == src_dev) {
    memory_backend(dst_dev.type).copy_on_device(dst, src, nbytes, dst_dev.index);
  } else {  // between two devices: stage through the host
    std::vector<unsigned char> staging(nbytes);
    memory_backend(src_dev.type).copy_to_host(staging.data(), src, nbytes, src_dev.index);
    memory_backend(dst_dev.type).copy_from_host(dst, staging.data(), nbytes, dst_dev.index);
  }
}

size_t device_peak_bytes(Device device) {
  return device.is_cpu() ? 0 : memory_backend(device.type).peak_bytes_in_use(device.index);
}

std::unique_ptr<DeviceGraph> MemoryBackend::capture_graph(const std::function<void()>&, int) { return nullptr; }

std::unique_ptr<DeviceGraph> capture_device_graph(Device device, const std::function<void()>& work) {
  EMBER_CHECK(!device.is_cpu(), "CUDA graphs: the CPU runs its work as it is issued; there is nothing to capture");
  std::unique_ptr<DeviceGraph> graph = memory_backend(device.type).capture_graph(work, device.index);
  EMBER_CHECK(graph != nullptr, "CUDA graphs: ", device.str(), " has no graph capture");
  return graph;
}

void finish_copies_ahead(Device device) {
  if (!device.is_cpu()) memory_backend(device.type).finish_copies_ahead(device.index);
}

HostAllocatorStats host_allocator_stats() { return host_allocator().stats(); }
void set_host_block_source(void* (*allocate)(size_t), void (*release)(void*)) {
  host_allocator().set_source(allocate, release);
}
void host_allocator_release_cache() { host_allocator().release_cache(); }

Storage::Storage(size_t nbytes, Device device) : nbytes_(nbytes), device_(device) {
  data_ = memory_backend(device.type).allocate(nbytes, device.index);
}

Storage::~Storage() {
  if (data_) memory_backend(device_.type).deallocate(data_, nbytes_, device_.index);
}

}  // namespace ember
