// cuda/sim/cudasim.h — what a kernel may use when its .cu file is compiled
// by g++ for the CPU emulator (g++ -x c++ -DEMBER_CUDASIM; see
// cuda/sim/README.md).
//
// cuda/common.cuh includes <cuda_fp16.h> and <cuda_runtime.h>, then this
// header. Compiled by a host compiler, CUDA's headers erase the execution
// spaces (__global__, __device__, __shared__ become nothing) and declare no
// device functions. This header puts back what kernels need:
//
//   __shared__               block-shared static storage, poisoned with 0xFF
//                            before each block (see "Shared memory" below)
//   threadIdx blockIdx blockDim gridDim warpSize
//   __syncthreads() and _count/_and/_or, __syncwarp(mask)
//   __shfl_sync/_up_sync/_down_sync/_xor_sync (int, unsigned, long, unsigned
//   long, long long, unsigned long long, float, double, __half, __half2),
//   __ballot_sync __any_sync __all_sync __uni_sync __activemask
//   __match_any_sync __match_all_sync __reduce_{add,min,max,and,or,xor}_sync
//   atomicAdd/Sub/Exch/Min/Max/Inc/Dec/CAS/And/Or/Xor (CUDA's overloads,
//   including float, double, __half and __half2 atomicAdd), and the _block
//   and _system variants
//   __threadfence(_block/_system) __ldg/__ldcg/... __stcg/... clock64
//   __nanosleep __trap
//   fast-math and rounding intrinsics (__expf __logf __powf __sinf __cosf
//   __fdividef __saturatef rsqrtf __frcp_rn __fsqrt_rn __fmaf_rn
//   __float2int_rn ...), bit casts (__float_as_int ...), integer intrinsics
//   (__popc __clz __ffs __brev __byte_perm __mulhi ...), min/max overloads,
//   and the device-only __half functions (__hfma hsqrt hexp hlog hrsqrt
//   __half2int_rn h2exp ...) that cuda_fp16.h gives only to nvcc
//   cudasim::launch(kernel, grid, block, smem, stream, args...)
//   cudasim::dynamic_shared_memory()
//
// Threads of a block run as fibers on the launching host thread; blocks run
// one after another. Everything blocking (barriers, warp operations) names
// its call site, so a failure report says which line of which kernel file.
#pragma once
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include "cuda/sim/argument_pointers.h"
#include "cuda/sim/touch.h"

#include <array>
#include <chrono>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <map>
#include <memory>
#include <source_location>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

// ---------------------------------------------------------------- qualifiers
// host_defines.h leaves __launch_bounds__ undefined for a host compiler and
// turns __maxnreg__/__cluster_dims__ into attributes g++ does not know.
#undef __launch_bounds__
#define __launch_bounds__(...)
#undef __maxnreg__
#define __maxnreg__(n)
#undef __cluster_dims__
#define __cluster_dims__(...)

namespace cudasim {

// The order in which the threads of a block run between two barriers.
enum class Schedule { forward, reverse, random };

// The schedule of later launches (initially from CUDASIM_SCHEDULE and
// CUDASIM_SEED: forward, seed 1). For tests that try all three.
void set_schedule(Schedule schedule, uint64_t seed = 1);
Schedule schedule();
uint64_t schedule_seed();

// The current launch's dynamic shared memory (its smem bytes, filled with
// 0xFF before each block). Kernels use EMBER_DYNAMIC_SHARED instead.
void* dynamic_shared_memory() noexcept;

// Counters for tests and the benchmark (CUDASIM_STATS=1 prints them at exit).
struct Stats {
  uint64_t launches = 0, blocks = 0, threads = 0;
  uint64_t barriers = 0, warp_ops = 0;   // arrivals of threads at __syncthreads and at warp operations
  uint64_t fibers = 0;                   // fibers (stacks) created so far
  uint64_t last_launch_peak_fibers = 0;  // most fibers in use at once during the last launch
  size_t stack_bytes = 0;                // usable stack per fiber
};
Stats stats();

// ------------------------------------------------------------------ profiler
// The emulator as a profiler (cuda/sim/README.md, "Profiling"): with
// CUDASIM_PROFILE=1 or set_profiling(true), every launch is counted per
// kernel and per source line, and the report is printed at exit. Memory
// accesses are seen only in code compiled with the profiler's
// instrumentation (make's obj-simprof tree: -fsanitize=thread, whose hooks
// cuda/sim/profiler.cpp implements); barriers and warp operations always.
//
// A *request* is one warp-level instruction: the accesses that the lanes of
// one warp make at the same instruction for the same time (the n-th time
// each lane executes it) between two barriers.
struct AccessCounts {
  uint64_t requests = 0;  // warp-level instructions
  uint64_t lanes = 0;     // active lanes, summed over the requests
  uint64_t bytes = 0;     // bytes the lanes asked for
  // global memory: 32-byte sectors touched per request, summed;
  // shared memory: wavefronts (1 per request when free of bank conflicts)
  uint64_t units = 0;
  uint64_t ideal_units = 0;  // the least that the requested bytes need
  AccessCounts& operator+=(const AccessCounts& o) {
    requests += o.requests;
    lanes += o.lanes;
    bytes += o.bytes;
    units += o.units;
    ideal_units += o.ideal_units;
    return *this;
  }
};
struct MemoryCounts {
  AccessCounts global_load, global_store, shared_load, shared_store;
  MemoryCounts& operator+=(const MemoryCounts& o) {
    global_load += o.global_load;
    global_store += o.global_store;
    shared_load += o.shared_load;
    shared_store += o.shared_store;
    return *this;
  }
};
struct LineProfile {
  std::string where;  // "file:line (function)", or the address when it cannot be resolved
  MemoryCounts counts;
};
struct KernelProfile {
  std::string name;  // demangled
  uint64_t launches = 0, blocks = 0, threads = 0;
  unsigned threads_per_block = 0;   // of the last launch
  size_t dynamic_shared_bytes = 0;  // of the last launch
  uint64_t barriers = 0;                    // completed __syncthreads (per block)
  uint64_t warp_ops = 0, warp_op_lanes = 0;  // completed warp operations, and their lanes
  uint64_t dram_sectors = 0;  // distinct 32-byte sectors of global memory each launch touched, summed
  uint64_t flops = 0;         // declared by the kernel (EMBER_PROFILE_FLOPS)
  uint64_t tensor_flops = 0;  // of wmma::mma_sync and mma.sync (2 M N K per warp)
  uint64_t mma_syncs = 0;     // PTX mma.sync warp instructions
  uint64_t ldmatrix_instructions = 0, ldmatrix_matrices = 0;  // warp instructions, and the 8x8 matrices they load
  uint64_t async_copies = 0, async_copy_bytes = 0;  // cp.async, per thread
  // The pipeline: the most committed cp.async groups one thread had in
  // flight when it reached a cp.async.wait_group (its stages), and the most
  // bytes one warp's lanes had in flight then (each lane's peak, summed).
  unsigned async_groups_in_flight = 0;
  uint64_t async_warp_bytes_in_flight = 0;
  MemoryCounts counts;
  std::vector<LineProfile> lines;  // by source line, the most units first
};

void set_profiling(bool on);
bool profiling();
// Whether any code compiled with the profiler's instrumentation is linked
// in (otherwise no memory access is counted).
bool profiler_instrumented();
// What was counted since the start or the last reset, one entry per kernel
// in order of first launch. Resolving source lines runs addr2line once.
std::vector<KernelProfile> profile();
void reset_profile();
// The static half: what ptxas reported for a kernel when nvcc built it
// (make keeps it in build/ptx/<file>.ptxas.log; read from CUDASIM_PTXAS_DIR,
// default ptx/ next to the program), for the newest architecture built.
// found is false when there is no report for `demangled_name`.
struct KernelResources {
  bool found = false;
  int sm = 0;  // 90 for sm_90
  int registers = 0, stack_bytes = 0, spill_store_bytes = 0, spill_load_bytes = 0, static_shared_bytes = 0;
  std::string source;  // the report's file name
};
KernelResources kernel_resources(const std::string& demangled_name);
// Every kernel of the *.ptxas.log files under `directory`, by demangled name.
std::map<std::string, KernelResources> read_ptxas_reports(const std::string& directory);
// The instruction mix of a kernel's PTX (static counts over its body; the
// CUDA build keeps the PTX as build/ptx/<file>.ptx, found like the ptxas
// reports): fma against mma (tensor cores), global and shared loads and
// stores, barriers, shuffles, integer div/rem (the slow ones), branches.
struct PtxMix {
  bool found = false;
  int total = 0, fma = 0, mma = 0, ld_global = 0, st_global = 0, ld_shared = 0, st_shared = 0;
  int barriers = 0, shuffles = 0, int_div_rem = 0, branches = 0;
  std::string source;  // the PTX file's name
};
PtxMix ptx_mix(const std::string& demangled_name);
std::map<std::string, PtxMix> read_ptx_mix(const std::string& directory);

// Theoretical occupancy on r.sm at a launch shape: resident blocks per SM,
// the fraction of the SM's 64 warps, and what limits it ("registers",
// "shared memory", "threads", "blocks").
struct Occupancy {
  int blocks_per_sm = 0;
  double fraction = 0;
  std::string limit;
};
Occupancy occupancy(const KernelResources& r, int threads_per_block, int dynamic_shared_bytes);

// A roofline bound of one launch of `kernel` (its averages) on each of a
// few named GPUs, and the unit that binds ("DRAM", "L1", "shared", "FP32", "tensor"):
// the assumptions are at the top of cuda/sim/profile_report.cpp.
struct Estimate {
  std::string gpu;
  double seconds;
  std::string bound;
};
std::vector<Estimate> estimate(const KernelProfile& kernel);
// The report CUDASIM_PROFILE=1 prints at exit: per kernel, the counters and
// a time estimate on a few GPUs (cuda/sim/profile_report.cpp).
std::string profile_report();
// The report's lines about ptxas's resources and the occupancy of `kernel`,
// and about its PTX instruction mix.
std::string resources_line(const KernelProfile& kernel);
// One kernel's part of the report (everything but its name), with at most
// `max_lines` source lines; kernel_lab_sim prints it per op.
std::string kernel_report(const KernelProfile& kernel, int max_lines);
std::string ptx_mix_line(const KernelProfile& kernel);

namespace detail {
void count_flops(uint64_t n) noexcept;
void count_tensor_flops(uint64_t n) noexcept;  // wmma::mma_sync's, per lane
void count_mma_sync(uint64_t tensor_flops) noexcept;  // one warp's mma.sync (called by lane 0)
void count_ldmatrix(unsigned matrices) noexcept;      // one warp's ldmatrix (called by lane 0)

// ---------------------------------------------------------- shared memory
// `__shared__ T buf[N];` becomes a static local preceded by a marker:
//
//   [[gnu::used]] static SharedMark cudasim_smem_mark_7;
//   const bool cudasim_smem_enter_7 = enter_shared(cudasim_smem_mark_7);
//   static T buf[N];
//
// The first thread of a block to reach the declaration fills the function's
// static locals with 0xFF (found once, by name, in the ELF symbol table;
// the marker ties them to their function). A named section would be simpler
// but g++ 12 ignores section attributes on statics of function templates
// (GCC PR 70435) and rejects one section shared by inline and non-inline
// functions ("section type conflict"). Under AddressSanitizer the marker
// doubles as a poisoned redzone next to the variable, for the statics ASan
// does not pad itself (those of templates and inline functions).
struct alignas(8) SharedMark {
#if defined(__SANITIZE_ADDRESS__)
  unsigned char redzone[56];
#endif
  unsigned long long epoch;
};
extern unsigned long long shared_epoch;  // changes with every block
void fill_shared(SharedMark* mark) noexcept;
inline bool enter_shared(SharedMark& mark) noexcept {
  if (__builtin_expect(mark.epoch != shared_epoch, 0)) fill_shared(&mark);
  return true;
}

// ------------------------------------------------------ barriers and warps
enum BarrierKind : int { kSync, kSyncCount, kSyncAnd, kSyncOr };
int barrier(int kind, int predicate, const char* file, unsigned line);

enum WarpOpKind : int {
  kShflIdx,
  kShflUp,
  kShflDown,
  kShflXor,
  kBallot,
  kAny,
  kAll,
  kUni,
  kSyncWarp,
  kMatchAny,
  kMatchAll,
  kReduceAddU,
  kReduceAddI,
  kReduceMinU,
  kReduceMinI,
  kReduceMaxU,
  kReduceMaxI,
  kReduceAnd,
  kReduceOr,
  kReduceXor,
  // nvcuda::wmma (cuda/sim/wmma.h): warp-wide, every lane of a full warp.
  // Loads and stores check that all lanes pass the same pointer and ldm;
  // mma_sync exchanges the lanes' operand addresses (wmma_exchange below).
  kWmmaLoad,
  kWmmaStore,
  kWmmaMma,
  // PTX's mma.sync and ldmatrix (cuda/sim/ptx_instructions.h): warp-wide
  // exchanges of the lanes' operands, like kWmmaMma.
  kMmaSync,
  kLdmatrix,
};
// Waits until every lane in `mask` has reached a warp operation of the same
// kind, then returns this lane's result (value bits, ballot mask, ...).
// *pred receives the second result of __match_all_sync.
unsigned long long warp_op(int kind, unsigned mask, unsigned long long value, int arg, int width, const char* file,
                           unsigned line, int* pred = nullptr);
unsigned active_mask() noexcept;
// A warp operation of kind kWmmaMma, kMmaSync or kLdmatrix: waits for all
// 32 lanes, then returns the 32 lanes' `value`s, valid until the warp's next
// warp operation.
const unsigned long long* lane_exchange(int kind, unsigned long long value, const char* file, unsigned line);
inline const unsigned long long* wmma_exchange(unsigned long long value, const char* file, unsigned line) {
  return lane_exchange(kWmmaMma, value, file, line);
}
// Whether [p, p + n) lies in one __shared__ variable or in the dynamic
// shared memory of the running block.
bool is_shared_memory(const void* p, size_t n) noexcept;
// cp.async (cuda/sim/async_copy.cpp): async_copy_check fails the launch
// unless dst is shared memory and src device memory, both aligned to
// `bytes`, and 0 <= src_bytes <= bytes; async_copy_queue then queues the
// copy of `data` (the source's bytes, read by the caller, zero-filled) into
// the calling thread's open group and fills dst with 0xFF until the copy
// completes, at the cp.async.wait_group that lets its group go: the latest
// moment PTX allows, so a read before the wait sees the 0xFF bytes.
void async_copy_check(const void* dst, const void* src, unsigned bytes, int src_bytes, const char* file,
                      unsigned line);
void async_copy_queue(void* dst, const unsigned char* data, unsigned bytes);
void async_copy_commit() noexcept;
void async_copy_wait(unsigned pending);
// Fails the launch: "`what`: thread (x,y,z) at file:line".
[[noreturn]] void kernel_error(const char* what, const char* file, unsigned line);
[[noreturn]] void trap(const char* file, unsigned line);

template <typename T>
inline unsigned long long to_bits(T v) noexcept {
  static_assert(sizeof(T) <= 8, "warp operations move at most 64 bits");
  unsigned long long b = 0;
  std::memcpy(&b, static_cast<const void*>(&v), sizeof(T));
  return b;
}
template <typename T>
inline T from_bits(unsigned long long b) noexcept {
  T v;
  std::memcpy(static_cast<void*>(&v), &b, sizeof(T));  // __half2's copy assignment is user-provided
  return v;
}

// ------------------------------------------------------------------ launch
void launch_impl(void (*run)(void*), void* ctx, const void* kernel, dim3 grid, dim3 block, size_t smem,
                 cudaStream_t stream, const Touch* touches, size_t touch_count);

// Stream capture (graph.cpp): whether `stream` is capturing, and the launch
// it records instead of running (ctx: the kernel and its arguments, kept
// alive by the graph).
bool stream_capturing(cudaStream_t stream);
void capture_kernel(cudaStream_t stream, std::shared_ptr<void> ctx, void (*run)(void*), const void* kernel, dim3 grid,
                    dim3 block, size_t smem, const Touch* touches, size_t touch_count);

template <typename Ctx>
void run_kernel(void* p) noexcept {
  Ctx* c = static_cast<Ctx*>(p);
  std::apply(c->kernel, c->args);  // each thread gets its own copies of the arguments
}

}  // namespace detail

// Runs kernel(args...) for every thread of every block. A bad configuration
// or a kernel failure (divergent barrier, deadlock, ...) becomes the last
// error (cudaGetLastError); cudaGetErrorString(code) then gives the details.
template <typename... Params, typename... Args>
void launch(void (*kernel)(Params...), dim3 grid, dim3 block, size_t smem, cudaStream_t stream, Args&&... args) {
  static_assert(sizeof...(Params) == sizeof...(Args), "cudasim::launch: wrong number of kernel arguments");
  struct Ctx {
    void (*kernel)(Params...);
    std::tuple<std::decay_t<Params>...> args;
  };
  Ctx ctx{kernel, std::tuple<std::decay_t<Params>...>(std::forward<Args>(args)...)};
  // Memory the launch touches, for the stream-order checker: every pointer
  // of every argument, inside structs too (cuda/sim/argument_pointers.h).
  std::vector<detail::Touch> touches;
  std::apply([&touches](const auto&... a) { (detail::add_touches(a, touches), ...); }, ctx.args);
  if (detail::stream_capturing(stream)) {  // recorded into the stream's graph, run by cudaGraphLaunch
    detail::capture_kernel(stream, std::make_shared<Ctx>(std::move(ctx)), &detail::run_kernel<Ctx>,
                           reinterpret_cast<const void*>(kernel), grid, block, smem, touches.data(), touches.size());
    return;
  }
  detail::launch_impl(&detail::run_kernel<Ctx>, &ctx, reinterpret_cast<const void*>(kernel), grid, block, smem, stream,
                      touches.data(), touches.size());
}

}  // namespace cudasim

// ------------------------------------------------------------- __shared__
#undef __shared__
#define CUDASIM_SHARED_2(n)                                                                                    \
  [[gnu::used]] static ::cudasim::detail::SharedMark cudasim_smem_mark_##n;                                    \
  [[maybe_unused]] const bool cudasim_smem_enter_##n = ::cudasim::detail::enter_shared(cudasim_smem_mark_##n); \
  static
#define CUDASIM_SHARED_1(n) CUDASIM_SHARED_2(n)
#define __shared__ CUDASIM_SHARED_1(__COUNTER__)

// ---------------------------------------------------------- index variables
// Real globals (not macros, so host code may still name a variable
// blockDim): the scheduler copies the running thread's index into threadIdx
// at every switch. Read-only for kernels.
#if !defined(CUDASIM_RUNTIME_BUILD)
extern const uint3 threadIdx;
extern const uint3 blockIdx;
extern const dim3 blockDim;
extern const dim3 gridDim;
extern const int warpSize;
#endif

// ----------------------------------------------------------------- barriers
inline void __syncthreads(std::source_location loc = std::source_location::current()) {
  ::cudasim::detail::barrier(::cudasim::detail::kSync, 0, loc.file_name(), loc.line());
}
inline int __syncthreads_count(int predicate, std::source_location loc = std::source_location::current()) {
  return ::cudasim::detail::barrier(::cudasim::detail::kSyncCount, predicate, loc.file_name(), loc.line());
}
inline int __syncthreads_and(int predicate, std::source_location loc = std::source_location::current()) {
  return ::cudasim::detail::barrier(::cudasim::detail::kSyncAnd, predicate, loc.file_name(), loc.line());
}
inline int __syncthreads_or(int predicate, std::source_location loc = std::source_location::current()) {
  return ::cudasim::detail::barrier(::cudasim::detail::kSyncOr, predicate, loc.file_name(), loc.line());
}
inline void __syncwarp(unsigned mask = 0xffffffffu, std::source_location loc = std::source_location::current()) {
  ::cudasim::detail::warp_op(::cudasim::detail::kSyncWarp, mask, 0, 0, 32, loc.file_name(), loc.line());
}

// ----------------------------------------------------------------- shuffles
// CUDA's rule for a source lane outside the caller's segment of `width`
// lanes (up: below it, down/xor: above it): the caller gets its own value.
// A source lane that is not in `mask` (undefined on a GPU) gives all-ones
// bits: NaN or -1.
#define CUDASIM_SHUFFLES(T)                                                                                            \
  inline T __shfl_sync(unsigned mask, T var, int srcLane, int width = 32,                                              \
                       std::source_location loc = std::source_location::current()) {                                   \
    return ::cudasim::detail::from_bits<T>(::cudasim::detail::warp_op(::cudasim::detail::kShflIdx, mask,               \
                                                                      ::cudasim::detail::to_bits(var), srcLane, width, \
                                                                      loc.file_name(), loc.line()));                   \
  }                                                                                                                    \
  inline T __shfl_up_sync(unsigned mask, T var, unsigned delta, int width = 32,                                        \
                          std::source_location loc = std::source_location::current()) {                                \
    return ::cudasim::detail::from_bits<T>(::cudasim::detail::warp_op(::cudasim::detail::kShflUp, mask,                \
                                                                      ::cudasim::detail::to_bits(var), int(delta),     \
                                                                      width, loc.file_name(), loc.line()));            \
  }                                                                                                                    \
  inline T __shfl_down_sync(unsigned mask, T var, unsigned delta, int width = 32,                                      \
                            std::source_location loc = std::source_location::current()) {                              \
    return ::cudasim::detail::from_bits<T>(::cudasim::detail::warp_op(::cudasim::detail::kShflDown, mask,              \
                                                                      ::cudasim::detail::to_bits(var), int(delta),     \
                                                                      width, loc.file_name(), loc.line()));            \
  }                                                                                                                    \
  inline T __shfl_xor_sync(unsigned mask, T var, int laneMask, int width = 32,                                         \
                           std::source_location loc = std::source_location::current()) {                               \
    return ::cudasim::detail::from_bits<T>(::cudasim::detail::warp_op(::cudasim::detail::kShflXor, mask,               \
                                                                      ::cudasim::detail::to_bits(var), laneMask,       \
                                                                      width, loc.file_name(), loc.line()));            \
  }
CUDASIM_SHUFFLES(int)
CUDASIM_SHUFFLES(unsigned int)
CUDASIM_SHUFFLES(long)
CUDASIM_SHUFFLES(unsigned long)
CUDASIM_SHUFFLES(long long)
CUDASIM_SHUFFLES(unsigned long long)
CUDASIM_SHUFFLES(float)
CUDASIM_SHUFFLES(double)
CUDASIM_SHUFFLES(__half)
CUDASIM_SHUFFLES(__half2)
#undef CUDASIM_SHUFFLES

// ------------------------------------------------------------ votes, match
inline unsigned __ballot_sync(unsigned mask, int predicate,
                              std::source_location loc = std::source_location::current()) {
  return unsigned(
      ::cudasim::detail::warp_op(::cudasim::detail::kBallot, mask, predicate != 0, 0, 32, loc.file_name(), loc.line()));
}
inline int __any_sync(unsigned mask, int predicate, std::source_location loc = std::source_location::current()) {
  return int(
      ::cudasim::detail::warp_op(::cudasim::detail::kAny, mask, predicate != 0, 0, 32, loc.file_name(), loc.line()));
}
inline int __all_sync(unsigned mask, int predicate, std::source_location loc = std::source_location::current()) {
  return int(
      ::cudasim::detail::warp_op(::cudasim::detail::kAll, mask, predicate != 0, 0, 32, loc.file_name(), loc.line()));
}
inline int __uni_sync(unsigned mask, int predicate, std::source_location loc = std::source_location::current()) {
  return int(
      ::cudasim::detail::warp_op(::cudasim::detail::kUni, mask, predicate != 0, 0, 32, loc.file_name(), loc.line()));
}
// The lanes of the caller's warp that have not exited (a GPU gives the
// lanes converged at the call; the emulator has no notion of convergence).
inline unsigned __activemask() { return ::cudasim::detail::active_mask(); }

#define CUDASIM_MATCH(T)                                                                                              \
  inline unsigned __match_any_sync(unsigned mask, T value,                                                            \
                                   std::source_location loc = std::source_location::current()) {                      \
    return unsigned(::cudasim::detail::warp_op(::cudasim::detail::kMatchAny, mask, ::cudasim::detail::to_bits(value), \
                                               0, 32, loc.file_name(), loc.line()));                                  \
  }                                                                                                                   \
  inline unsigned __match_all_sync(unsigned mask, T value, int* pred,                                                 \
                                   std::source_location loc = std::source_location::current()) {                      \
    return unsigned(::cudasim::detail::warp_op(::cudasim::detail::kMatchAll, mask, ::cudasim::detail::to_bits(value), \
                                               0, 32, loc.file_name(), loc.line(), pred));                            \
  }
CUDASIM_MATCH(int)
CUDASIM_MATCH(unsigned int)
CUDASIM_MATCH(long)
CUDASIM_MATCH(unsigned long)
CUDASIM_MATCH(long long)
CUDASIM_MATCH(unsigned long long)
CUDASIM_MATCH(float)
CUDASIM_MATCH(double)
#undef CUDASIM_MATCH

#define CUDASIM_REDUCE(name, T, kind)                                                                            \
  inline T name(unsigned mask, T value, std::source_location loc = std::source_location::current()) {            \
    return T(::cudasim::detail::warp_op(::cudasim::detail::kind, mask, ::cudasim::detail::to_bits(value), 0, 32, \
                                        loc.file_name(), loc.line()));                                           \
  }
CUDASIM_REDUCE(__reduce_add_sync, unsigned, kReduceAddU)
CUDASIM_REDUCE(__reduce_add_sync, int, kReduceAddI)
CUDASIM_REDUCE(__reduce_min_sync, unsigned, kReduceMinU)
CUDASIM_REDUCE(__reduce_min_sync, int, kReduceMinI)
CUDASIM_REDUCE(__reduce_max_sync, unsigned, kReduceMaxU)
CUDASIM_REDUCE(__reduce_max_sync, int, kReduceMaxI)
CUDASIM_REDUCE(__reduce_and_sync, unsigned, kReduceAnd)
CUDASIM_REDUCE(__reduce_or_sync, unsigned, kReduceOr)
CUDASIM_REDUCE(__reduce_xor_sync, unsigned, kReduceXor)
#undef CUDASIM_REDUCE

// ------------------------------------------------------------------ atomics
// Threads of a launch never run at the same time, so a plain
// read-modify-write is atomic: each atomic returns the old value o and
// stores `update` (of o and the operand v). Integer arithmetic wraps as on
// a GPU.
#define CUDASIM_ATOMIC(name, T, update) \
  inline T name(T* a, T v) {            \
    const T o = *a;                     \
    *a = update;                        \
    return o;                           \
  }
CUDASIM_ATOMIC(atomicAdd, int, int(unsigned(o) + unsigned(v)))
CUDASIM_ATOMIC(atomicAdd, unsigned, o + v)
CUDASIM_ATOMIC(atomicAdd, unsigned long long, o + v)
CUDASIM_ATOMIC(atomicAdd, float, o + v)
CUDASIM_ATOMIC(atomicAdd, double, o + v)
CUDASIM_ATOMIC(atomicAdd, __half, __float2half_rn(__half2float(o) + __half2float(v)))
CUDASIM_ATOMIC(atomicAdd, __half2,
               __halves2half2(__float2half_rn(__low2float(o) + __low2float(v)),
                              __float2half_rn(__high2float(o) + __high2float(v))))
CUDASIM_ATOMIC(atomicSub, int, int(unsigned(o) - unsigned(v)))
CUDASIM_ATOMIC(atomicSub, unsigned, o - v)
CUDASIM_ATOMIC(atomicExch, int, v)
CUDASIM_ATOMIC(atomicExch, unsigned, v)
CUDASIM_ATOMIC(atomicExch, unsigned long long, v)
CUDASIM_ATOMIC(atomicExch, float, v)
CUDASIM_ATOMIC(atomicExch, double, v)
CUDASIM_ATOMIC(atomicInc, unsigned, o >= v ? 0u : o + 1u)
CUDASIM_ATOMIC(atomicDec, unsigned, (o == 0 || o > v) ? v : o - 1u)
#define CUDASIM_MINMAX_ATOMIC(T)              \
  CUDASIM_ATOMIC(atomicMin, T, v < o ? v : o) \
  CUDASIM_ATOMIC(atomicMax, T, v > o ? v : o)
CUDASIM_MINMAX_ATOMIC(int)
CUDASIM_MINMAX_ATOMIC(unsigned)
CUDASIM_MINMAX_ATOMIC(long long)
CUDASIM_MINMAX_ATOMIC(unsigned long long)
#undef CUDASIM_MINMAX_ATOMIC
#define CUDASIM_BIT_ATOMIC(T)         \
  CUDASIM_ATOMIC(atomicAnd, T, o & v) \
  CUDASIM_ATOMIC(atomicOr, T, o | v)  \
  CUDASIM_ATOMIC(atomicXor, T, o ^ v)
CUDASIM_BIT_ATOMIC(int)
CUDASIM_BIT_ATOMIC(unsigned)
CUDASIM_BIT_ATOMIC(unsigned long long)
#undef CUDASIM_BIT_ATOMIC
#undef CUDASIM_ATOMIC
#define CUDASIM_CAS_ATOMIC(T)                \
  inline T atomicCAS(T* a, T compare, T v) { \
    const T o = *a;                          \
    if (o == compare) *a = v;                \
    return o;                                \
  }
CUDASIM_CAS_ATOMIC(int)
CUDASIM_CAS_ATOMIC(unsigned)
CUDASIM_CAS_ATOMIC(unsigned long long)
CUDASIM_CAS_ATOMIC(unsigned short)
#undef CUDASIM_CAS_ATOMIC
// The scoped variants (sm_60+) behave the same on one CPU thread.
#define CUDASIM_SCOPED_ATOMIC(name)                                  \
  template <typename P, typename... A>                               \
  inline auto name##_block(P* p, A... a)->decltype(name(p, a...)) {  \
    return name(p, a...);                                            \
  }                                                                  \
  template <typename P, typename... A>                               \
  inline auto name##_system(P* p, A... a)->decltype(name(p, a...)) { \
    return name(p, a...);                                            \
  }
CUDASIM_SCOPED_ATOMIC(atomicAdd)
CUDASIM_SCOPED_ATOMIC(atomicSub)
CUDASIM_SCOPED_ATOMIC(atomicExch)
CUDASIM_SCOPED_ATOMIC(atomicMin)
CUDASIM_SCOPED_ATOMIC(atomicMax)
CUDASIM_SCOPED_ATOMIC(atomicInc)
CUDASIM_SCOPED_ATOMIC(atomicDec)
CUDASIM_SCOPED_ATOMIC(atomicCAS)
CUDASIM_SCOPED_ATOMIC(atomicAnd)
CUDASIM_SCOPED_ATOMIC(atomicOr)
CUDASIM_SCOPED_ATOMIC(atomicXor)
#undef CUDASIM_SCOPED_ATOMIC

// ------------------------------------------------- fences, loads, misc
inline void __threadfence() { __atomic_signal_fence(__ATOMIC_SEQ_CST); }
inline void __threadfence_block() { __atomic_signal_fence(__ATOMIC_SEQ_CST); }
inline void __threadfence_system() { __atomic_signal_fence(__ATOMIC_SEQ_CST); }
template <typename T>
inline T __ldg(const T* p) {
  return *p;
}
template <typename T>
inline T __ldcg(const T* p) {
  return *p;
}
template <typename T>
inline T __ldca(const T* p) {
  return *p;
}
template <typename T>
inline T __ldcs(const T* p) {
  return *p;
}
template <typename T>
inline T __ldlu(const T* p) {
  return *p;
}
template <typename T>
inline T __ldcv(const T* p) {
  return *p;
}
template <typename T>
inline void __stwb(T* p, T v) {
  *p = v;
}
template <typename T>
inline void __stcg(T* p, T v) {
  *p = v;
}
template <typename T>
inline void __stcs(T* p, T v) {
  *p = v;
}
template <typename T>
inline void __stwt(T* p, T v) {
  *p = v;
}
inline long long clock64() {
#if defined(__x86_64__)
  return (long long)__builtin_ia32_rdtsc();
#else
  return (long long)std::chrono::steady_clock::now().time_since_epoch().count();
#endif
}
inline void __nanosleep(unsigned) {}
[[noreturn]] inline void __trap(std::source_location loc = std::source_location::current()) {
  ::cudasim::detail::trap(loc.file_name(), loc.line());
}

// ------------------------------------------------------- float intrinsics
// glibc already declares __expf, __logf, ... (its internal names) without
// defining them for programs; these definitions complete those
// declarations. The approximations follow the GPU's recipe (exp2 of a
// product rounded to float), not its exact error.
extern "C" {
inline float __expf(float x) noexcept { return exp2f(x * 1.44269504088896341f); }
inline float __exp10f(float x) noexcept { return exp2f(x * 3.32192809488736235f); }
inline float __logf(float x) noexcept { return log2f(x) * 0.693147180559945309f; }
inline float __log2f(float x) noexcept { return log2f(x); }
inline float __log10f(float x) noexcept { return log2f(x) * 0.301029995663981195f; }
inline float __powf(float x, float y) noexcept { return exp2f(y * log2f(x)); }
inline float __sinf(float x) noexcept { return sinf(x); }
inline float __cosf(float x) noexcept { return cosf(x); }
inline float __tanf(float x) noexcept { return tanf(x); }
inline void __sincosf(float x, float* s, float* c) noexcept {
  *s = sinf(x);
  *c = cosf(x);
}
}
inline float __fdividef(float x, float y) { return x / y; }
inline float fdividef(float x, float y) { return x / y; }
inline float __saturatef(float x) { return x > 0.0f ? (x < 1.0f ? x : 1.0f) : 0.0f; }  // NaN -> 0
inline float rsqrtf(float x) { return 1.0f / sqrtf(x); }
inline double rsqrt(double x) { return 1.0 / sqrt(x); }
inline float rcbrtf(float x) { return 1.0f / cbrtf(x); }
inline double rcbrt(double x) { return 1.0 / cbrt(x); }
inline float sinpif(float x) { return sinf(x * 3.14159265358979323846f); }
inline float cospif(float x) { return cosf(x * 3.14159265358979323846f); }
inline double sinpi(double x) { return sin(x * 3.14159265358979323846); }
inline double cospi(double x) { return cos(x * 3.14159265358979323846); }
inline void sincospif(float x, float* s, float* c) {
  *s = sinpif(x);
  *c = cospif(x);
}
inline float normcdff(float x) { return 0.5f * erfcf(-x * 0.707106781186547524f); }
inline double normcdf(double x) { return 0.5 * erfc(-x * 0.707106781186547524); }
inline float __frcp_rn(float x) { return 1.0f / x; }
inline float __fsqrt_rn(float x) { return sqrtf(x); }
inline float __frsqrt_rn(float x) { return float(1.0 / sqrt(double(x))); }
inline float __fmaf_rn(float a, float b, float c) { return fmaf(a, b, c); }
inline float __fadd_rn(float a, float b) { return a + b; }
inline float __fsub_rn(float a, float b) { return a - b; }
inline float __fmul_rn(float a, float b) { return a * b; }
inline float __fdiv_rn(float a, float b) { return a / b; }
inline double __dadd_rn(double a, double b) { return a + b; }
inline double __dsub_rn(double a, double b) { return a - b; }
inline double __dmul_rn(double a, double b) { return a * b; }
inline double __ddiv_rn(double a, double b) { return a / b; }
inline double __drcp_rn(double x) { return 1.0 / x; }
inline double __dsqrt_rn(double x) { return sqrt(x); }
inline double __fma_rn(double a, double b, double c) { return fma(a, b, c); }

namespace cudasim::detail {
// Float-to-integer conversions saturate and map NaN to 0, as cvt does.
template <typename I, typename F>
inline I cvt(F r) {
  if (r != r) return 0;
  if (r <= F(std::numeric_limits<I>::min())) return std::numeric_limits<I>::min();
  if (r >= F(std::numeric_limits<I>::max())) return std::numeric_limits<I>::max();
  return I(r);
}
}  // namespace cudasim::detail
#define CUDASIM_CVT(name, I, F)                                                    \
  inline I name##_rn(F x) { return ::cudasim::detail::cvt<I>(std::nearbyint(x)); } \
  inline I name##_rz(F x) { return ::cudasim::detail::cvt<I>(std::trunc(x)); }     \
  inline I name##_rd(F x) { return ::cudasim::detail::cvt<I>(std::floor(x)); }     \
  inline I name##_ru(F x) { return ::cudasim::detail::cvt<I>(std::ceil(x)); }
CUDASIM_CVT(__float2int, int, float)
CUDASIM_CVT(__float2uint, unsigned, float)
CUDASIM_CVT(__float2ll, long long, float)
CUDASIM_CVT(__float2ull, unsigned long long, float)
CUDASIM_CVT(__double2int, int, double)
CUDASIM_CVT(__double2uint, unsigned, double)
CUDASIM_CVT(__double2ll, long long, double)
CUDASIM_CVT(__double2ull, unsigned long long, double)
#undef CUDASIM_CVT
inline float __double2float_rn(double x) { return float(x); }
inline float __int2float_rn(int x) { return float(x); }
inline float __uint2float_rn(unsigned x) { return float(x); }
inline float __ll2float_rn(long long x) { return float(x); }
inline float __ull2float_rn(unsigned long long x) { return float(x); }
inline double __int2double_rn(int x) { return double(x); }
inline double __uint2double_rn(unsigned x) { return double(x); }
inline double __ll2double_rn(long long x) { return double(x); }
inline double __ull2double_rn(unsigned long long x) { return double(x); }
inline int __float_as_int(float x) { return ::cudasim::detail::from_bits<int>(::cudasim::detail::to_bits(x)); }
inline unsigned __float_as_uint(float x) {
  return ::cudasim::detail::from_bits<unsigned>(::cudasim::detail::to_bits(x));
}
inline float __int_as_float(int x) { return ::cudasim::detail::from_bits<float>(::cudasim::detail::to_bits(x)); }
inline float __uint_as_float(unsigned x) { return ::cudasim::detail::from_bits<float>(::cudasim::detail::to_bits(x)); }
inline long long __double_as_longlong(double x) {
  return ::cudasim::detail::from_bits<long long>(::cudasim::detail::to_bits(x));
}
inline double __longlong_as_double(long long x) {
  return ::cudasim::detail::from_bits<double>(::cudasim::detail::to_bits(x));
}
inline int __double2hiint(double x) { return int(__double_as_longlong(x) >> 32); }
inline int __double2loint(double x) { return int(__double_as_longlong(x) & 0xffffffff); }
inline double __hiloint2double(int hi, int lo) {
  return __longlong_as_double((long long)((unsigned long long)(unsigned)hi << 32 | (unsigned)lo));
}

// ------------------------------------------------------ integer intrinsics
inline int __popc(unsigned x) { return __builtin_popcount(x); }
inline int __popcll(unsigned long long x) { return __builtin_popcountll(x); }
inline int __clz(int x) { return x == 0 ? 32 : __builtin_clz(unsigned(x)); }
inline int __clzll(long long x) { return x == 0 ? 64 : __builtin_clzll((unsigned long long)x); }
inline int __ffs(int x) { return __builtin_ffs(x); }
inline int __ffsll(long long x) { return __builtin_ffsll(x); }
inline unsigned __brev(unsigned x) {
  x = ((x >> 1) & 0x55555555u) | ((x & 0x55555555u) << 1);
  x = ((x >> 2) & 0x33333333u) | ((x & 0x33333333u) << 2);
  x = ((x >> 4) & 0x0f0f0f0fu) | ((x & 0x0f0f0f0fu) << 4);
  return __builtin_bswap32(x);
}
inline unsigned long long __brevll(unsigned long long x) {
  return (unsigned long long)__brev(unsigned(x)) << 32 | __brev(unsigned(x >> 32));
}
inline int __mulhi(int a, int b) { return int(((long long)a * b) >> 32); }
inline unsigned __umulhi(unsigned a, unsigned b) { return unsigned(((unsigned long long)a * b) >> 32); }
inline long long __mul64hi(long long a, long long b) { return (long long)(((__int128)a * b) >> 64); }
inline unsigned long long __umul64hi(unsigned long long a, unsigned long long b) {
  return (unsigned long long)(((unsigned __int128)a * b) >> 64);
}
inline int __mul24(int a, int b) { return int(unsigned((a << 8) >> 8) * unsigned((b << 8) >> 8)); }
inline unsigned __umul24(unsigned a, unsigned b) { return (a & 0xffffffu) * (b & 0xffffffu); }
inline int __hadd(int a, int b) { return int(((long long)a + b) >> 1); }
inline int __rhadd(int a, int b) { return int(((long long)a + b + 1) >> 1); }
inline unsigned __uhadd(unsigned a, unsigned b) { return unsigned(((unsigned long long)a + b) >> 1); }
inline unsigned __urhadd(unsigned a, unsigned b) { return unsigned(((unsigned long long)a + b + 1) >> 1); }
inline unsigned __sad(int a, int b, unsigned c) { return c + unsigned(a > b ? (long long)a - b : (long long)b - a); }
inline unsigned __usad(unsigned a, unsigned b, unsigned c) { return c + (a > b ? a - b : b - a); }
inline unsigned __byte_perm(unsigned x, unsigned y, unsigned s) {
  const unsigned long long v = (unsigned long long)y << 32 | x;
  unsigned r = 0;
  for (int i = 0; i < 4; ++i) r |= unsigned((v >> (8 * ((s >> (4 * i)) & 7))) & 0xff) << (8 * i);
  return r;
}
inline unsigned __funnelshift_l(unsigned lo, unsigned hi, unsigned shift) {
  return unsigned((((unsigned long long)hi << 32 | lo) << (shift & 31)) >> 32);
}
inline unsigned __funnelshift_lc(unsigned lo, unsigned hi, unsigned shift) {
  return unsigned((((unsigned long long)hi << 32 | lo) << (shift < 32 ? shift : 32)) >> 32);
}
inline unsigned __funnelshift_r(unsigned lo, unsigned hi, unsigned shift) {
  return unsigned(((unsigned long long)hi << 32 | lo) >> (shift & 31));
}
inline unsigned __funnelshift_rc(unsigned lo, unsigned hi, unsigned shift) {
  return unsigned(((unsigned long long)hi << 32 | lo) >> (shift < 32 ? shift : 32));
}

// min/max as CUDA's math_functions.hpp gives them to device code.
#define CUDASIM_MINMAX(A, B, R)                                                                                    \
  inline R min(A a, B b) { return static_cast<R>(a) < static_cast<R>(b) ? static_cast<R>(a) : static_cast<R>(b); } \
  inline R max(A a, B b) { return static_cast<R>(a) > static_cast<R>(b) ? static_cast<R>(a) : static_cast<R>(b); }
CUDASIM_MINMAX(int, int, int)
CUDASIM_MINMAX(unsigned, unsigned, unsigned)
CUDASIM_MINMAX(int, unsigned, unsigned)
CUDASIM_MINMAX(unsigned, int, unsigned)
CUDASIM_MINMAX(long, long, long)
CUDASIM_MINMAX(unsigned long, unsigned long, unsigned long)
CUDASIM_MINMAX(long, unsigned long, unsigned long)
CUDASIM_MINMAX(unsigned long, long, unsigned long)
CUDASIM_MINMAX(long long, long long, long long)
CUDASIM_MINMAX(unsigned long long, unsigned long long, unsigned long long)
CUDASIM_MINMAX(long long, unsigned long long, unsigned long long)
CUDASIM_MINMAX(unsigned long long, long long, unsigned long long)
#undef CUDASIM_MINMAX
inline float min(float a, float b) { return fminf(a, b); }
inline float max(float a, float b) { return fmaxf(a, b); }
inline double min(double a, double b) { return fmin(a, b); }
inline double max(double a, double b) { return fmax(a, b); }
inline double min(float a, double b) { return fmin(double(a), b); }
inline double max(float a, double b) { return fmax(double(a), b); }
inline double min(double a, float b) { return fmin(a, double(b)); }
inline double max(double a, float b) { return fmax(a, double(b)); }

// --------------------------------------------------- device-only __half math
// Computed in float (double for the fused forms) and rounded once.
inline __half __hfma(__half a, __half b, __half c) {
  return __double2half(std::fma(double(__half2float(a)), double(__half2float(b)), double(__half2float(c))));
}
inline __half __hfma_sat(__half a, __half b, __half c) {
  const double r = std::fma(double(__half2float(a)), double(__half2float(b)), double(__half2float(c)));
  return __double2half(r != r ? 0.0 : (r < 0.0 ? 0.0 : (r > 1.0 ? 1.0 : r)));
}
inline __half __hfma_relu(__half a, __half b, __half c) {
  const __half r = __hfma(a, b, c);
  return __hisnan(r) ? r : (__half2float(r) < 0.0f ? __float2half(0.0f) : r);
}
inline __half2 __hfma2(__half2 a, __half2 b, __half2 c) {
  return __halves2half2(__hfma(__low2half(a), __low2half(b), __low2half(c)),
                        __hfma(__high2half(a), __high2half(b), __high2half(c)));
}
inline __half2 __hfma2_sat(__half2 a, __half2 b, __half2 c) {
  return __halves2half2(__hfma_sat(__low2half(a), __low2half(b), __low2half(c)),
                        __hfma_sat(__high2half(a), __high2half(b), __high2half(c)));
}
inline __half2 __hfma2_relu(__half2 a, __half2 b, __half2 c) {
  return __halves2half2(__hfma_relu(__low2half(a), __low2half(b), __low2half(c)),
                        __hfma_relu(__high2half(a), __high2half(b), __high2half(c)));
}
#define CUDASIM_HALF_MATH(name, expr) \
  inline __half h##name(__half h) {   \
    const float x = __half2float(h);  \
    return __float2half_rn(expr);     \
  }                                   \
  inline __half2 h2##name(__half2 h) { return __halves2half2(h##name(__low2half(h)), h##name(__high2half(h))); }
CUDASIM_HALF_MATH(sqrt, sqrtf(x))
CUDASIM_HALF_MATH(rsqrt, 1.0f / sqrtf(x))
CUDASIM_HALF_MATH(rcp, 1.0f / x)
CUDASIM_HALF_MATH(exp, expf(x))
CUDASIM_HALF_MATH(exp2, exp2f(x))
CUDASIM_HALF_MATH(exp10, exp10f(x))
CUDASIM_HALF_MATH(log, logf(x))
CUDASIM_HALF_MATH(log2, log2f(x))
CUDASIM_HALF_MATH(log10, log10f(x))
CUDASIM_HALF_MATH(sin, sinf(x))
CUDASIM_HALF_MATH(cos, cosf(x))
CUDASIM_HALF_MATH(tanh, tanhf(x))
CUDASIM_HALF_MATH(tanh_approx, tanhf(x))
CUDASIM_HALF_MATH(floor, floorf(x))
CUDASIM_HALF_MATH(ceil, ceilf(x))
CUDASIM_HALF_MATH(trunc, truncf(x))
CUDASIM_HALF_MATH(rint, nearbyintf(x))
#undef CUDASIM_HALF_MATH
#define CUDASIM_HALF_CVT(name, I)                                                                     \
  inline I name##_rn(__half h) { return ::cudasim::detail::cvt<I>(std::nearbyint(__half2float(h))); } \
  inline I name##_rd(__half h) { return ::cudasim::detail::cvt<I>(std::floor(__half2float(h))); }     \
  inline I name##_ru(__half h) { return ::cudasim::detail::cvt<I>(std::ceil(__half2float(h))); }
CUDASIM_HALF_CVT(__half2int, int)
CUDASIM_HALF_CVT(__half2uint, unsigned)
CUDASIM_HALF_CVT(__half2short, short)
CUDASIM_HALF_CVT(__half2ushort, unsigned short)
CUDASIM_HALF_CVT(__half2ll, long long)
CUDASIM_HALF_CVT(__half2ull, unsigned long long)
#undef CUDASIM_HALF_CVT
