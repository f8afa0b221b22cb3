// cuda/host_staging.cu — the staging ring of copy_from_host_async (see
// host_staging.h).
#include "cuda/host_staging.h"

#include <atomic>
#include <cstring>
#include <mutex>
#include <unordered_set>

#include "cuda/allocator.h"
#include "cuda/common.cuh"
#include "cuda/host_sync.h"

namespace ember::cuda {
namespace {

// Four slots: a training step uploads a batch's images and its labels, so
// a slot comes round again two steps later.
constexpr int kSlots = 4;

struct Slot {
  void* host = nullptr;  // page-locked
  size_t capacity = 0;
  cudaEvent_t done = nullptr;
  bool in_flight = false;
};

struct Ring {
  std::mutex mu;
  Slot slots[kSlots];
  int next = 0;
};

Ring& ring() {
  static Ring* r = new Ring();  // never destroyed: its blocks belong to the CUDA context
  return *r;
}

std::atomic<int64_t> g_staging_waits{0};

// The slot's last DMA has finished (waiting for it if it has not).
void wait_for_slot(Slot& s) {
  if (!s.in_flight) return;
  const cudaError_t q = cudaEventQuery(s.done);
  if (q == cudaErrorNotReady) {
    cudaGetLastError();
    g_staging_waits.fetch_add(1, std::memory_order_relaxed);
    CUDA_CHECK(cudaEventSynchronize(s.done));
  } else {
    CUDA_CHECK(q);
  }
  s.in_flight = false;
}

// Grows the slot to n bytes; false when page-locked memory is not available.
// (cudaFreeHost and cudaMallocHost may synchronise the device: a slot grows
// only while the sizes settle, in the first steps. Each slot ends as large
// as the largest copy it took, plus a quarter: four slots of a ResNet-50
// batch of 256 uint8 images, 38.5 MB, hold ~190 MB page-locked.)
bool reserve(Slot& s, size_t n) {
  if (s.capacity >= n) return true;
  if (s.host) CUDA_CHECK(cudaFreeHost(s.host));
  s.host = nullptr;
  s.capacity = 0;
  const size_t want = n + n / 4;  // batches of a few sizes settle quickly
  if (cudaMallocHost(&s.host, want) != cudaSuccess) {
    cudaGetLastError();
    s.host = nullptr;
    return false;
  }
  s.capacity = want;
  if (!s.done) CUDA_CHECK(cudaEventCreateWithFlags(&s.done, cudaEventDisableTiming));
  return true;
}

}  // namespace

void copy_from_host_async(void* dst, const void* src, size_t n, cudaStream_t stream) {
  if (n == 0) return;
  Ring& r = ring();
  std::lock_guard<std::mutex> lock(r.mu);
  Slot& s = r.slots[r.next];
  r.next = (r.next + 1) % kSlots;
  wait_for_slot(s);
  if (!reserve(s, n)) {  // no page-locked memory: the plain copy, then a wait so src may be freed
    CUDA_CHECK(cudaMemcpyAsync(dst, src, n, cudaMemcpyHostToDevice, stream));
    count_device_work(DeviceWork::copy);
    wait_for_stream(stream);
    return;
  }
  std::memcpy(s.host, src, n);
  CUDA_CHECK(cudaMemcpyAsync(dst, s.host, n, cudaMemcpyHostToDevice, stream));
  count_device_work(DeviceWork::copy);
  CUDA_CHECK(cudaEventRecord(s.done, stream));
  s.in_flight = true;
}

int64_t staging_wait_count() { return g_staging_waits.load(std::memory_order_relaxed); }

// ---------------------------------------------------------- copies ahead
namespace {

struct Ahead {
  std::mutex mu;
  cudaEvent_t compute_mark = nullptr;  // the compute stream's work before a copy ahead
  cudaEvent_t copies_done = nullptr;   // the copy stream's work so far
  std::unordered_set<const void*> unfinished;  // destinations not yet ordered before compute work
};

// Whether `unfinished` may be non-empty: read without the lock by every
// deallocation (constant-initialised, so safe from static destructors).
std::atomic<bool> g_any_unfinished{false};

Ahead& ahead() {
  static Ahead* a = [] {
    auto* x = new Ahead();  // never destroyed, as the ring
    CUDA_CHECK(cudaEventCreateWithFlags(&x->compute_mark, cudaEventDisableTiming));
    CUDA_CHECK(cudaEventCreateWithFlags(&x->copies_done, cudaEventDisableTiming));
    return x;
  }();
  return *a;
}

// The compute stream waits for every copy ahead so far (caller holds a.mu).
void finish_locked(Ahead& a) {
  if (a.unfinished.empty()) return;
  CUDA_CHECK(cudaStreamWaitEvent(compute_stream(), a.copies_done, 0));
  a.unfinished.clear();
  g_any_unfinished.store(false, std::memory_order_release);
}

}  // namespace

cudaStream_t copy_stream() {
  static cudaStream_t stream = [] {
    cudaStream_t s = nullptr;
    CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    return s;
  }();
  return stream;
}

void copy_from_host_ahead(void* dst, const void* src, size_t n) {
  if (n == 0) return;
  Ahead& a = ahead();
  std::lock_guard<std::mutex> lock(a.mu);
  const cudaStream_t copies = copy_stream();
  CUDA_CHECK(cudaEventRecord(a.compute_mark, compute_stream()));
  CUDA_CHECK(cudaStreamWaitEvent(copies, a.compute_mark, 0));
  copy_from_host_async(dst, src, n, copies);
  CUDA_CHECK(cudaEventRecord(a.copies_done, copies));
  a.unfinished.insert(dst);
  g_any_unfinished.store(true, std::memory_order_release);
}

void finish_copies_ahead() {
  Ahead& a = ahead();
  std::lock_guard<std::mutex> lock(a.mu);
  finish_locked(a);
}

void order_copies_ahead_before_reuse(const void* block) {
  if (!block) return;
  if (!g_any_unfinished.load(std::memory_order_acquire)) return;  // the common case: no lock
  Ahead& a = ahead();
  std::lock_guard<std::mutex> lock(a.mu);
  if (a.unfinished.count(block)) finish_locked(a);
}

}  // namespace ember::cuda
