// cuda/sim/profiler.cpp — the emulator as a profiler (CUDASIM_PROFILE=1):
// counts what a GPU's memory system would see of every warp-level access of
// an emulated kernel, per kernel and per source line.
//
// How accesses are seen. Kernel code compiled with the profiler's
// instrumentation (make's obj-simprof tree: g++ -fsanitize=thread, without
// ThreadSanitizer's runtime) calls __tsan_read4(addr), __tsan_write8(addr),
// ... before every load and store that is not kept in a register; this file
// defines those functions. Each one appends (return address, address, size)
// to the running emulated thread's buffer while a profiled launch runs.
//
// How accesses become warp requests. Lanes of a warp do not run in lockstep
// here, so a request is rebuilt afterwards: the n-th access that lane L
// makes at instruction (return address) p is the same warp-level request as
// the n-th access other lanes of its warp make at p, counted from the last
// barrier (control flow that reconverges, as SIMT does). When a barrier
// completes or a block ends, every thread has made all its accesses of that
// stretch, so the buffers are grouped, counted and emptied.
//
// What a request costs (the rules Nsight Compute counts by):
// - global memory: the distinct 32-byte sectors its lanes touch (4 per
//   request for 32 consecutive floats); ideal = the distinct bytes / 32;
// - shared memory: 32 banks of 4-byte words; a request takes as many
//   wavefronts as the most distinct words any one bank must deliver (the
//   same word to several lanes is a broadcast); 8-byte accesses are served
//   a half-warp at a time, 16-byte ones a quarter-warp at a time; bank
//   numbers count from the start of the __shared__ variable (or of the
//   dynamic shared memory).
// Other memory (the thread's own stack: what nvcc keeps in registers) is
// not counted.
//
// What the counts are: the host compiler's loads and stores of the kernel,
// after its optimisation (obj-simprof compiles at -O3 without
// vectorisation, so one source access is one instruction, as with nvcc);
// a value g++ keeps in a register where nvcc reloads it (or the reverse)
// changes the request count, not the sectors per request.
#define CUDASIM_RUNTIME_BUILD 1
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "cuda/sim/cudasim.h"
#include "cuda/sim/internal.h"
#include "cuda/sim/profiler_internal.h"

namespace cudasim::detail {

thread_local bool profile_recording = false;
unsigned profile_thread = 0;

namespace {

struct Access {
  uintptr_t pc;  // the instrumented instruction (a return address)
  uintptr_t addr;
  uint32_t size;
  bool write;
};

enum class Space : uint8_t { global, shared, other };

struct Member {
  unsigned lane;
  uintptr_t offset;  // shared: from the variable's start; global: the address
  uint32_t size;
};
struct Group {
  Space space = Space::other;
  std::vector<Member> members;
};
struct GroupKey {
  uintptr_t pc_write;  // pc * 2 + write
  uint32_t occurrence;
  bool operator==(const GroupKey& o) const { return pc_write == o.pc_write && occurrence == o.occurrence; }
};
struct GroupKeyHash {
  size_t operator()(const GroupKey& k) const { return std::hash<uintptr_t>()(k.pc_write * 0x9e3779b97f4a7c15ull ^ k.occurrence); }
};

struct Profiler {
  std::mutex mu;  // the recorded kernels (profile() may run on another host thread)
  bool env_read = false, enabled = false, report_at_exit = false;
  std::vector<RecordedKernel> kernels;
  std::unordered_map<const void*, size_t> index;
  // the launch being profiled (launches are serialised by the scheduler)
  RecordedKernel* cur = nullptr;
  unsigned nthreads = 0;
  std::vector<std::vector<Access>> buffers;
  const unsigned char* dyn = nullptr;
  size_t dyn_bytes = 0;
  std::map<uintptr_t, uintptr_t> shared_vars;  // start -> end of every __shared__ variable seen
  std::unordered_set<uint64_t> launch_sectors;
  uint64_t launch_flops = 0, launch_tensor_flops = 0;
  // grouping scratch
  std::unordered_map<GroupKey, Group, GroupKeyHash> groups;
  std::unordered_map<uintptr_t, uint32_t> occurrences;
  std::vector<std::pair<uint32_t, uint64_t>> words;
  std::vector<std::pair<uint64_t, uint64_t>> ranges;
  std::vector<uint64_t> scratch_sectors;
  uintptr_t global_lo = 0, global_hi = 0;  // the last cudaMalloc block found
};
Profiler& prof() {
  static Profiler* p = new Profiler;  // never destroyed: the report runs at exit
  return *p;
}

bool instrumented_flag = false;

void report_at_exit() { std::fputs(profile_report().c_str(), stderr); }

void read_environment(Profiler& p) {
  if (p.env_read) return;
  p.env_read = true;
  if (const char* s = std::getenv("CUDASIM_PROFILE"); s && *s && std::strcmp(s, "0") != 0) {
    p.enabled = true;
    p.report_at_exit = true;
    std::atexit(report_at_exit);
  }
}

Space classify(Profiler& p, uintptr_t a, uintptr_t* base) {
  if (p.dyn_bytes && a >= uintptr_t(p.dyn) && a < uintptr_t(p.dyn) + p.dyn_bytes) {
    *base = uintptr_t(p.dyn);
    return Space::shared;
  }
  if (!p.shared_vars.empty()) {
    auto it = p.shared_vars.upper_bound(a);
    if (it != p.shared_vars.begin() && a < (--it)->second) {
      *base = it->first;
      return Space::shared;
    }
  }
  if (a >= p.global_lo && a < p.global_hi) return Space::global;
  uintptr_t lo = 0, hi = 0;
  if (device_block_of(reinterpret_cast<const void*>(a), &lo, &hi)) {
    p.global_lo = lo;
    p.global_hi = hi;
    return Space::global;
  }
  return Space::other;
}

// The distinct bytes of the ranges of the members in lanes [lane_lo, lane_hi).
uint64_t distinct_bytes(Profiler& p, const std::vector<Member>& ms, unsigned lane_lo = 0, unsigned lane_hi = 32) {
  p.ranges.clear();
  for (const Member& m : ms)
    if (m.lane >= lane_lo && m.lane < lane_hi) p.ranges.emplace_back(m.offset, m.offset + m.size);
  std::sort(p.ranges.begin(), p.ranges.end());
  uint64_t total = 0, end = 0;
  bool any = false;
  for (auto [lo, hi] : p.ranges) {
    if (!any || lo >= end) {
      total += hi - lo;
      end = hi;
      any = true;
    } else if (hi > end) {
      total += hi - end;
      end = hi;
    }
  }
  return total;
}

AccessCounts count_global(Profiler& p, const std::vector<Member>& ms) {
  AccessCounts c;
  c.requests = 1;
  c.lanes = ms.size();
  std::vector<uint64_t>& sectors = p.scratch_sectors;
  sectors.clear();
  for (const Member& m : ms) {
    c.bytes += m.size;
    for (uint64_t s = m.offset >> 5; s <= (m.offset + m.size - 1) >> 5; ++s) sectors.push_back(s);
  }
  std::sort(sectors.begin(), sectors.end());
  sectors.erase(std::unique(sectors.begin(), sectors.end()), sectors.end());
  c.units = sectors.size();
  c.ideal_units = std::max<uint64_t>(1, (distinct_bytes(p, ms) + 31) / 32);
  for (uint64_t s : sectors) p.launch_sectors.insert(s);
  return c;
}

// Wavefronts of one phase (the lanes served together): the most distinct
// words one bank must deliver.
uint64_t phase_wavefronts(Profiler& p, const std::vector<Member>& ms, unsigned lane_lo, unsigned lane_hi) {
  p.words.clear();
  for (const Member& m : ms) {
    if (m.lane < lane_lo || m.lane >= lane_hi) continue;
    for (uint64_t w = m.offset >> 2; w <= (m.offset + m.size - 1) >> 2; ++w) p.words.emplace_back(uint32_t(w & 31), w);
  }
  if (p.words.empty()) return 0;
  std::sort(p.words.begin(), p.words.end());
  p.words.erase(std::unique(p.words.begin(), p.words.end()), p.words.end());
  uint64_t most = 0, run = 0;
  for (size_t i = 0; i < p.words.size(); ++i) {
    run = (i > 0 && p.words[i].first == p.words[i - 1].first) ? run + 1 : 1;
    most = std::max(most, run);
  }
  return most;
}

AccessCounts count_shared(Profiler& p, const std::vector<Member>& ms) {
  AccessCounts c;
  c.requests = 1;
  c.lanes = ms.size();
  uint32_t widest = 0;
  for (const Member& m : ms) {
    c.bytes += m.size;
    widest = std::max(widest, m.size);
  }
  const unsigned lanes_per_phase = widest <= 4 ? 32 : widest <= 8 ? 16 : 8;
  // The ideal: each phase that has lanes takes at least one wavefront (a
  // warp of distinct float4s takes 4 however they are laid out), and no
  // fewer than its distinct bytes / 128. Wavefronts beyond it are conflicts.
  for (unsigned lo = 0; lo < 32; lo += lanes_per_phase) {
    const uint64_t w = phase_wavefronts(p, ms, lo, lo + lanes_per_phase);
    c.units += w;
    if (w > 0) c.ideal_units += std::max<uint64_t>(1, (distinct_bytes(p, ms, lo, lo + lanes_per_phase) + 127) / 128);
  }
  c.ideal_units = std::max<uint64_t>(1, c.ideal_units);
  return c;
}

AccessCounts& slot(MemoryCounts& m, Space space, bool write) {
  if (space == Space::global) return write ? m.global_store : m.global_load;
  return write ? m.shared_store : m.shared_load;
}

}  // namespace

bool profile_enabled() {
  Profiler& p = prof();
  std::lock_guard<std::mutex> lock(p.mu);
  read_environment(p);
  return p.enabled;
}

void profile_launch_begin(const void* kernel, unsigned threads_per_block, const unsigned char* dynamic_shared,
                          size_t dynamic_bytes) {
  Profiler& p = prof();
  std::lock_guard<std::mutex> lock(p.mu);
  auto [it, added] = p.index.emplace(kernel, p.kernels.size());
  if (added) {
    p.kernels.emplace_back();
    p.kernels.back().kernel = kernel;
  }
  p.cur = &p.kernels[it->second];
  p.cur->threads_per_block = threads_per_block;
  p.cur->dynamic_shared_bytes = dynamic_bytes;
  p.nthreads = threads_per_block;
  if (p.buffers.size() < threads_per_block) p.buffers.resize(threads_per_block);
  for (auto& b : p.buffers) b.clear();
  p.dyn = dynamic_shared;
  p.dyn_bytes = dynamic_bytes;
  p.launch_sectors.clear();
  p.global_lo = p.global_hi = 0;
  p.launch_flops = p.launch_tensor_flops = 0;
  profile_recording = true;
}

void profile_shared_variable(const unsigned char* ptr, size_t n) {
  if (!profile_recording || n == 0) return;
  prof().shared_vars.emplace(uintptr_t(ptr), uintptr_t(ptr) + n);
}

void profile_segment_end() {
  Profiler& p = prof();
  std::lock_guard<std::mutex> lock(p.mu);
  if (!p.cur) return;
  RecordedKernel& k = *p.cur;
  for (unsigned w = 0; w * 32 < p.nthreads; ++w) {
    p.groups.clear();
    for (unsigned lane = 0; lane < 32 && w * 32 + lane < p.nthreads; ++lane) {
      std::vector<Access>& buf = p.buffers[w * 32 + lane];
      p.occurrences.clear();
      for (const Access& a : buf) {
        uintptr_t base = 0;
        const Space space = classify(p, a.addr, &base);
        if (space == Space::other) continue;
        const uintptr_t pcw = a.pc * 2 + (a.write ? 1 : 0);
        Group& g = p.groups[GroupKey{pcw, p.occurrences[pcw]++}];
        g.space = space;
        g.members.push_back(Member{lane, a.addr - base, a.size});
      }
      buf.clear();
    }
    for (auto& [key, g] : p.groups) {
      const AccessCounts c = g.space == Space::global ? count_global(p, g.members) : count_shared(p, g.members);
      const bool write = key.pc_write & 1;
      slot(k.counts, g.space, write) += c;
      slot(k.by_pc[key.pc_write >> 1], g.space, write) += c;
    }
  }
}

void profile_block_end(unsigned threads_ran) {
  profile_segment_end();
  Profiler& p = prof();
  std::lock_guard<std::mutex> lock(p.mu);
  if (!p.cur) return;
  ++p.cur->blocks;
  p.cur->threads += threads_ran;
}

void profile_barrier_completed() {
  if (Profiler& p = prof(); p.cur) ++p.cur->barriers;
}

void profile_warp_op_completed(unsigned lanes) {
  if (Profiler& p = prof(); p.cur) {
    ++p.cur->warp_ops;
    p.cur->warp_op_lanes += lanes;
  }
}

void profile_launch_end(bool ok) {
  Profiler& p = prof();
  std::lock_guard<std::mutex> lock(p.mu);
  profile_recording = false;
  if (!p.cur) return;
  if (ok) {
    ++p.cur->launches;
    p.cur->dram_sectors += p.launch_sectors.size();
    p.cur->flops += p.launch_flops;
    p.cur->tensor_flops += p.launch_tensor_flops;
  }
  for (auto& b : p.buffers) b.clear();
  p.cur = nullptr;
  p.dyn = nullptr;
  p.dyn_bytes = 0;
}

void count_flops(uint64_t n) noexcept {
  if (profile_recording) prof().launch_flops += n;
}
void count_tensor_flops(uint64_t n) noexcept {
  if (profile_recording) prof().launch_tensor_flops += n;
}

void count_mma_sync(uint64_t tensor_flops) noexcept {
  if (!profile_recording) return;
  Profiler& p = prof();
  p.launch_tensor_flops += tensor_flops;
  if (p.cur) ++p.cur->mma_syncs;
}
void count_ldmatrix(unsigned matrices) noexcept {
  if (!profile_recording) return;
  if (Profiler& p = prof(); p.cur) {
    ++p.cur->ldmatrix_instructions;
    p.cur->ldmatrix_matrices += matrices;
  }
}
void profile_async_copy(uint64_t bytes) noexcept {
  if (Profiler& p = prof(); profile_recording && p.cur) {
    ++p.cur->async_copies;
    p.cur->async_copy_bytes += bytes;
  }
}
void profile_async_pipeline(unsigned groups, uint64_t warp_bytes) noexcept {
  if (Profiler& p = prof(); p.cur) {
    p.cur->async_groups_in_flight = std::max(p.cur->async_groups_in_flight, groups);
    p.cur->async_warp_bytes_in_flight = std::max(p.cur->async_warp_bytes_in_flight, warp_bytes);
  }
}

std::vector<RecordedKernel> recorded_kernels() {
  Profiler& p = prof();
  std::lock_guard<std::mutex> lock(p.mu);
  return p.kernels;
}

// The hooks' common part: the running emulated thread's access, while a
// profiled launch runs blocks.
__attribute__((always_inline)) inline void record(void* addr, uint32_t size, bool write, void* pc) {
  if (!profile_recording || size == 0) return;
  prof().buffers[profile_thread].push_back(Access{uintptr_t(pc), uintptr_t(addr), size, write});
}

void profile_access(const void* addr, uint32_t size, bool write, const void* pc) noexcept {
  record(const_cast<void*>(addr), size, write, const_cast<void*>(pc));
}

}  // namespace cudasim::detail

namespace cudasim {

void set_profiling(bool on) {
  detail::Profiler& p = detail::prof();
  std::lock_guard<std::mutex> lock(p.mu);
  detail::read_environment(p);
  p.enabled = on;
}

bool profiling() { return detail::profile_enabled(); }

bool profiler_instrumented() { return detail::instrumented_flag; }

void reset_profile() {
  detail::Profiler& p = detail::prof();
  std::lock_guard<std::mutex> lock(p.mu);
  p.kernels.clear();
  p.index.clear();
}

}  // namespace cudasim

// ------------------------------------------------------------------- hooks
// ThreadSanitizer's compiler interface (what g++ -fsanitize=thread calls).
// Every translation unit compiled with it calls __tsan_init from a
// constructor: that is how profiler_instrumented() knows.
#define CUDASIM_HOOKS(n)                                                                                 \
  void __tsan_read##n(void* a) { cudasim::detail::record(a, n, false, __builtin_return_address(0)); }    \
  void __tsan_write##n(void* a) { cudasim::detail::record(a, n, true, __builtin_return_address(0)); }    \
  void __tsan_unaligned_read##n(void* a) { cudasim::detail::record(a, n, false, __builtin_return_address(0)); } \
  void __tsan_unaligned_write##n(void* a) { cudasim::detail::record(a, n, true, __builtin_return_address(0)); }
extern "C" {
void __tsan_init() { cudasim::detail::instrumented_flag = true; }
void __tsan_func_entry(void*) {}
void __tsan_func_exit() {}
void __tsan_vptr_update(void**, void*) {}
void __tsan_vptr_read(void**) {}
CUDASIM_HOOKS(1)
CUDASIM_HOOKS(2)
CUDASIM_HOOKS(4)
CUDASIM_HOOKS(8)
CUDASIM_HOOKS(16)
// Fences and the one atomic g++ emits around a function-local static's guard
// (instrumented code calls these instead): done here, not counted as memory
// traffic. __threadfence() is a signal fence on the emulator (cudasim.h).
void __tsan_atomic_signal_fence(int) { __atomic_signal_fence(__ATOMIC_SEQ_CST); }
void __tsan_atomic_thread_fence(int) { __atomic_thread_fence(__ATOMIC_SEQ_CST); }
unsigned char __tsan_atomic8_load(const volatile unsigned char* a, int) { return __atomic_load_n(a, __ATOMIC_SEQ_CST); }
// shared_ptr's reference counts (launch() keeps a captured launch's arguments in one).
int __tsan_atomic32_load(const volatile int* a, int) { return __atomic_load_n(a, __ATOMIC_SEQ_CST); }
int __tsan_atomic32_fetch_add(volatile int* a, int v, int) { return __atomic_fetch_add(a, v, __ATOMIC_SEQ_CST); }
int __tsan_atomic32_fetch_sub(volatile int* a, int v, int) { return __atomic_fetch_sub(a, v, __ATOMIC_SEQ_CST); }
void __tsan_read_range(void* a, unsigned long size) {
  cudasim::detail::record(a, uint32_t(size), false, __builtin_return_address(0));
}
void __tsan_write_range(void* a, unsigned long size) {
  cudasim::detail::record(a, uint32_t(size), true, __builtin_return_address(0));
}
}
#undef CUDASIM_HOOKS
