// cuda/sim/async_copy.cpp — cp.async on the emulator: each thread's queue
// of copies from global to shared memory, in the groups it commits, done
// when a cp.async.wait_group lets their group go.
//
// PTX lets a copy land any time between the cp.async and the wait that
// covers it. The emulator picks the latest moment and fills the destination
// with 0xFF bytes (a NaN in f16, bf16 and f32) in between, so a kernel that
// reads a stage before waiting for it (or before the barrier that makes
// other threads' copies visible) computes NaNs here instead of passing by
// luck; the source is read at the cp.async itself (by the kernel's code in
// cuda/sim/ptx_instructions.h, so the profiler counts that load as the
// instruction's). Launches are serialised by the scheduler, so one set of
// queues serves every launch.
#define CUDASIM_RUNTIME_BUILD 1
#include <algorithm>
#include <cstring>
#include <vector>

#include "cuda/sim/cudasim.h"
#include "cuda/sim/internal.h"

namespace cudasim::detail {
namespace {

struct PendingCopy {
  unsigned char* dst;
  unsigned char data[16];
  uint32_t bytes;
  uint32_t group;  // the thread's commit count when it was issued
};

struct ThreadQueue {
  std::vector<PendingCopy> pending;  // in issue order, so groups never decrease
  uint32_t committed = 0;            // groups closed by cp.async.commit_group
  uint32_t completed = 0;            // groups done (the oldest `completed` ones)
  uint64_t peak_bytes = 0;           // most bytes of committed groups in flight at one wait
};

std::vector<ThreadQueue> queues;
unsigned peak_groups = 0;  // of the running block, at any thread's wait

}  // namespace

void async_copy_block_begin(unsigned nthreads) {
  if (queues.size() < nthreads) queues.resize(nthreads);
  for (unsigned i = 0; i < nthreads; ++i) {
    ThreadQueue& q = queues[i];
    q.pending.clear();
    q.committed = q.completed = 0;
    q.peak_bytes = 0;
  }
  peak_groups = 0;
}

void async_copy_block_end(bool profiled) {
  if (!profiled || peak_groups == 0) return;
  uint64_t warp_peak = 0;
  for (size_t w = 0; w * 32 < queues.size(); ++w) {
    uint64_t sum = 0;
    for (size_t i = w * 32; i < std::min(queues.size(), w * 32 + 32); ++i) sum += queues[i].peak_bytes;
    warp_peak = std::max(warp_peak, sum);
  }
  profile_async_pipeline(peak_groups, warp_peak);
}

void async_copy_check(const void* dst, const void* src, unsigned bytes, int src_bytes, const char* file,
                      unsigned line) {
  char what[200];
  if (src_bytes < 0 || unsigned(src_bytes) > bytes) {
    std::snprintf(what, sizeof what, "cp.async of %u bytes with a source size of %d (it must be 0 to %u)", bytes,
                  src_bytes, bytes);
    kernel_error(what, file, line);
  }
  if (uintptr_t(dst) % bytes != 0 || uintptr_t(src) % bytes != 0) {
    std::snprintf(what, sizeof what, "cp.async of %u bytes from %p to %p: both addresses must be %u-byte aligned",
                  bytes, src, dst, bytes);
    kernel_error(what, file, line);
  }
  if (!is_shared_memory(dst, bytes)) {
    std::snprintf(what, sizeof what, "cp.async of %u bytes to %p, which is not shared memory", bytes, dst);
    kernel_error(what, file, line);
  }
  uintptr_t lo = 0, hi = 0;
  if (src_bytes > 0 && !(device_block_of(src, &lo, &hi) && uintptr_t(src) + unsigned(src_bytes) <= hi)) {
    std::snprintf(what, sizeof what, "cp.async of %d bytes from %p, which is not in one block of device memory",
                  src_bytes, src);
    kernel_error(what, file, line);
  }
}

void async_copy_queue(void* dst, const unsigned char* data, unsigned bytes) {
  ThreadQueue& q = queues[current_thread()];
  PendingCopy c{static_cast<unsigned char*>(dst), {}, bytes, q.committed};
  std::memcpy(c.data, data, bytes);
  q.pending.push_back(c);
  std::memset(dst, 0xff, bytes);
  if (profile_recording) profile_async_copy(bytes);
}

void async_copy_commit() noexcept { ++queues[current_thread()].committed; }

void async_copy_wait(unsigned pending) {
  ThreadQueue& q = queues[current_thread()];
  const uint32_t in_flight = q.committed - q.completed;
  if (in_flight <= pending) return;
  peak_groups = std::max(peak_groups, unsigned(in_flight));
  uint64_t bytes_in_flight = 0;
  for (const PendingCopy& c : q.pending)
    if (c.group < q.committed) bytes_in_flight += c.bytes;
  q.peak_bytes = std::max(q.peak_bytes, bytes_in_flight);
  // The oldest in_flight - pending groups complete, in issue order; the
  // copies of the open (uncommitted) group stay queued.
  const uint32_t done_before = q.committed - pending;
  size_t n = 0;
  const void* pc = __builtin_return_address(0);
  for (; n < q.pending.size() && q.pending[n].group < done_before; ++n) {
    const PendingCopy& c = q.pending[n];
    std::memcpy(c.dst, c.data, c.bytes);
    if (profile_recording) profile_access(c.dst, c.bytes, true, pc);
  }
  q.pending.erase(q.pending.begin(), q.pending.begin() + std::ptrdiff_t(n));
  q.completed = done_before;
}

}  // namespace cudasim::detail
