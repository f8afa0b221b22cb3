// cuda/sim/scheduler.cpp — runs a kernel launch on the CPU: every block,
// one after another, on the calling host thread; the threads of a block as
// fibers that switch at barriers and warp operations.
//
// Fibers. A fiber is a stack (mmap'd, with a PROT_NONE guard page below it)
// plus a saved stack pointer; cuda/sim/switch_x86_64.S switches between
// them. A fiber loops: take the next thread that has not started, run the
// kernel for it, repeat. A thread that blocks keeps its fiber; the next
// thread then runs on a fiber from the pool (made when the pool is empty).
// So a kernel without barriers runs all its threads as plain calls on one
// fiber, and a block with barriers needs one fiber per thread. Fibers and
// stacks live as long as the process and serve every later launch.
//
// Scheduling. A block has one run queue: first every thread in schedule
// order (forward, reverse or random), then the threads a completed barrier
// or warp operation releases, again in schedule order. Whoever blocks
// switches straight to the next thing in the queue; when the queue is empty
// control returns to the host side, which either finds the block done or
// reports the deadlock.
//
// Failures (divergent barriers, deadlocks, bad warp masks) are found while
// a thread runs; it writes the report, switches to the host side and is
// never resumed: the block's fibers are reset (no C++ unwinding across
// fibers), the launch stops, and its error becomes cudaErrorLaunchFailure.
#define CUDASIM_RUNTIME_BUILD 1
#include <cxxabi.h>
#include <dlfcn.h>
#include <elf.h>
#include <fcntl.h>
#include <link.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "cuda/sim/cudasim.h"
#include "cuda/sim/internal.h"

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/asan_interface.h>
#include <sanitizer/common_interface_defs.h>
#define CUDASIM_ASAN 1
#else
#define CUDASIM_ASAN 0
#endif

// Other hosts fall back to ucontext (a system call per switch: ~20x slower).
// -DCUDASIM_FORCE_UCONTEXT tries that path on x86-64.
#if defined(__x86_64__) && defined(__ELF__) && !defined(CUDASIM_FORCE_UCONTEXT)
#define CUDASIM_UCONTEXT 0
extern "C" void cudasim_switch(void** save_sp, void* load_sp);
extern "C" void cudasim_fiber_entry();
#else
#define CUDASIM_UCONTEXT 1
#include <ucontext.h>
#endif

// The built-in variables. Kernels declare them `extern const`; only this
// file writes them. threadIdx holds the index of the running thread.
uint3 cudasim_thread_idx asm("threadIdx") = {0, 0, 0};
uint3 cudasim_block_idx asm("blockIdx") = {0, 0, 0};
dim3 cudasim_block_dim asm("blockDim") = dim3(1, 1, 1);
dim3 cudasim_grid_dim asm("gridDim") = dim3(1, 1, 1);
int cudasim_warp_size asm("warpSize") = 32;

extern "C" [[noreturn]] __attribute__((visibility("hidden"))) void cudasim_fiber_main(void* fiber) noexcept;

namespace cudasim::detail {

unsigned long long shared_epoch = 1;

namespace {

// ------------------------------------------------------------------ state
enum class TS : uint8_t { NotStarted, Ready, Running, WaitBarrier, WaitWarp, Done };

struct Fiber {
  void* sp = nullptr;
  char* map = nullptr;  // the mapping: guard page, then the stack
  size_t map_size = 0;
  const void* stack_lo = nullptr;  // the usable stack
  size_t stack_size = 0;
  void* fake_stack = nullptr;  // AddressSanitizer's, across switches
  size_t color = 0;            // bytes left unused at the top of the stack (see reset_fiber)
  bool in_pool = false;
#if CUDASIM_UCONTEXT
  ucontext_t uc{};
#endif
};

struct Thread {
  uint3 idx;
  unsigned linear;
  TS state;
  Fiber* fiber;
  // where it waits (a barrier or a warp operation)
  const char* file;
  unsigned line;
  int op;  // a WarpOpKind, or -1 - BarrierKind
  // a warp operation's operands and result
  unsigned mask;
  int arg, width;
  unsigned long long value, result;
  int pred;
};

struct State {
  std::mutex mu;
  // schedule
  bool configured = false;
  Schedule schedule = Schedule::forward;
  uint64_t seed = 1, rng = 1;
  // fibers
  Fiber host;
  Fiber* current = nullptr;      // the fiber running now
  Fiber* switch_from = nullptr;  // the fiber that switched to the current one
  std::vector<Fiber*> fibers, pool;
  size_t stack_size = 0, page = 4096;
  size_t peak_in_use = 0;
  // the launch
  void (*run)(void*) = nullptr;
  void* ctx = nullptr;
  unsigned nthreads = 0;
  std::vector<Thread> threads;
  std::vector<unsigned> queue, scratch;
  unsigned q_head = 0, q_count = 0;
  unsigned char* dyn = nullptr;
  size_t dyn_bytes = 0;
  // the block
  Thread* cur = nullptr;
  unsigned done = 0, first_exited = 0;
  unsigned bar_waiting = 0, bar_pred = 0, bar_result = 0, bar_first = 0;
  const char* bar_file = nullptr;
  unsigned bar_line = 0;
  int bar_kind = 0;
  unsigned warp_exist[32] = {}, warp_exited[32] = {}, warp_arrived[32] = {};
  unsigned long long warp_exchange[32][32] = {};  // per warp: the lanes' values at their last wmma_exchange
  bool failed = false;
  std::string err_head, err_tail;
  Stats stats;
};
// Never destroyed: fibers and their stacks outlive static destructors (and
// LeakSanitizer, which runs after them, still finds them reachable).
union StateStorage {
  State value;
  constexpr StateStorage() : value() {}
  ~StateStorage() {}
};
constinit StateStorage state_storage;
constinit State& st = state_storage.value;
thread_local bool t_in_launch = false;

// ------------------------------------------------------------ formatting
std::string idx3(uint3 v) { return fmt("(%u,%u,%u)", v.x, v.y, v.z); }
std::string tid(unsigned linear) { return idx3(st.threads[linear].idx); }
std::string site(const char* file, unsigned line) { return fmt("%s:%u", file ? file : "?", line); }

const char* op_name(int op) {
  switch (op) {
    case -1 - kSync:
      return "__syncthreads";
    case -1 - kSyncCount:
      return "__syncthreads_count";
    case -1 - kSyncAnd:
      return "__syncthreads_and";
    case -1 - kSyncOr:
      return "__syncthreads_or";
    case kShflIdx:
      return "__shfl_sync";
    case kShflUp:
      return "__shfl_up_sync";
    case kShflDown:
      return "__shfl_down_sync";
    case kShflXor:
      return "__shfl_xor_sync";
    case kBallot:
      return "__ballot_sync";
    case kAny:
      return "__any_sync";
    case kAll:
      return "__all_sync";
    case kUni:
      return "__uni_sync";
    case kSyncWarp:
      return "__syncwarp";
    case kMatchAny:
      return "__match_any_sync";
    case kMatchAll:
      return "__match_all_sync";
    case kReduceAddU:
    case kReduceAddI:
      return "__reduce_add_sync";
    case kReduceMinU:
    case kReduceMinI:
      return "__reduce_min_sync";
    case kReduceMaxU:
    case kReduceMaxI:
      return "__reduce_max_sync";
    case kReduceAnd:
      return "__reduce_and_sync";
    case kReduceOr:
      return "__reduce_or_sync";
    case kReduceXor:
      return "__reduce_xor_sync";
    case kWmmaLoad:
      return "wmma::load_matrix_sync";
    case kWmmaStore:
      return "wmma::store_matrix_sync";
    case kWmmaMma:
      return "wmma::mma_sync";
    case kMmaSync:
      return "mma.sync";
    case kLdmatrix:
      return "ldmatrix";
  }
  return "?";
}

[[noreturn]] void fatal(const std::string& message) {
  std::fprintf(stderr, "%s\n", message.c_str());
  std::abort();
}

// ------------------------------------------------------------- schedule
uint64_t next_random() {  // splitmix64
  uint64_t z = (st.rng += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

void print_stats() {
  const Stats& s = st.stats;
  std::fprintf(stderr,
               "cudasim: %llu launches, %llu blocks, %llu threads, %llu barrier and %llu warp-operation arrivals, %llu "
               "fibers\n",
               (unsigned long long)s.launches, (unsigned long long)s.blocks, (unsigned long long)s.threads,
               (unsigned long long)s.barriers, (unsigned long long)s.warp_ops, (unsigned long long)s.fibers);
}

void configure_from_environment() {
  if (st.configured) return;
  st.configured = true;
  if (const char* s = std::getenv("CUDASIM_STATS"); s && *s && std::strcmp(s, "0") != 0) std::atexit(print_stats);
  if (const char* s = std::getenv("CUDASIM_SCHEDULE"); s && *s) {
    const std::string_view v(s);
    if (v == "forward")
      st.schedule = Schedule::forward;
    else if (v == "reverse")
      st.schedule = Schedule::reverse;
    else if (v == "random")
      st.schedule = Schedule::random;
    else
      fatal(fmt("cudasim: CUDASIM_SCHEDULE=%s: expected forward, reverse or random", s));
  }
  if (const char* s = std::getenv("CUDASIM_SEED"); s && *s) {
    char* end = nullptr;
    st.seed = std::strtoull(s, &end, 0);
    if (*end) fatal(fmt("cudasim: CUDASIM_SEED=%s is not a number", s));
  }
  st.rng = st.seed;
}

size_t configured_stack_size() {
  size_t kib = CUDASIM_ASAN ? 1024 : 256;
  if (const char* s = std::getenv("CUDASIM_STACK_KB"); s && *s) {
    char* end = nullptr;
    const unsigned long long v = std::strtoull(s, &end, 10);
    if (*end || v < 16 || v > 1024 * 1024) fatal(fmt("cudasim: CUDASIM_STACK_KB=%s: expected 16..1048576", s));
    kib = size_t(v);
  }
  return kib * 1024;
}

// ----------------------------------------------------------------- fibers
void reset_fiber(Fiber* f) {
#if CUDASIM_ASAN
  // An abandoned fiber leaves its frames' redzones poisoned.
  __asan_unpoison_memory_region(f->stack_lo, f->stack_size);
#endif
  f->fake_stack = nullptr;
#if CUDASIM_UCONTEXT
  getcontext(&f->uc);
  f->uc.uc_stack.ss_sp = const_cast<void*>(f->stack_lo);
  f->uc.uc_stack.ss_size = f->stack_size;
  f->uc.uc_link = nullptr;
  makecontext(&f->uc, reinterpret_cast<void (*)()>(&cudasim_fiber_main), 1,
              f);  // 64-bit pointer: glibc passes it whole
#else
  // Stacks start at different offsets within a page: the hot top frames of
  // hundreds of fibers would otherwise all fall into the same cache sets.
  void** top = reinterpret_cast<void**>(static_cast<char*>(const_cast<void*>(f->stack_lo)) + f->stack_size - f->color);
  top[-1] = reinterpret_cast<void*>(&cudasim_fiber_entry);  // "return address" of the first switch
  top[-2] = nullptr;                                        // rbp
  top[-3] = nullptr;                                        // rbx
  top[-4] = f;                                              // r12: the argument
  top[-5] = nullptr;                                        // r13
  top[-6] = nullptr;                                        // r14
  top[-7] = nullptr;                                        // r15
  f->sp = &top[-7];
#endif
}

Fiber* new_fiber() {
  if (!st.stack_size) {
    st.stack_size = configured_stack_size();
    st.page = size_t(sysconf(_SC_PAGESIZE));
    st.stack_size = (st.stack_size + st.page - 1) / st.page * st.page;
  }
  const size_t size = st.stack_size + st.page;
  void* m = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_STACK, -1, 0);
  if (m == MAP_FAILED)
    fatal(fmt("cudasim: cannot map a %zu-byte fiber stack (%zu fibers exist)", size, st.fibers.size()));
  if (mprotect(m, st.page, PROT_NONE) != 0) fatal("cudasim: cannot protect a fiber stack's guard page");
  Fiber* f = new Fiber;
  f->map = static_cast<char*>(m);
  f->map_size = size;
  f->stack_lo = f->map + st.page;
  f->stack_size = st.stack_size;
  f->color = (st.fibers.size() * 64 * 5) % 4096;  // a multiple of 64, all 64 cache-line offsets in turn
  reset_fiber(f);
  st.fibers.push_back(f);
  ++st.stats.fibers;
  return f;
}

Fiber* pool_pop() {
  Fiber* f;
  if (st.pool.empty()) {
    f = new_fiber();
  } else {
    f = st.pool.back();
    st.pool.pop_back();
  }
  f->in_pool = false;
  const size_t in_use = st.fibers.size() - st.pool.size();
  if (in_use > st.peak_in_use) st.peak_in_use = in_use;
  return f;
}

void pool_push(Fiber* f) {
  f->in_pool = true;
  st.pool.push_back(f);
}

inline void switch_to(Fiber* from, Fiber* to, bool from_dies = false) {
  st.current = to;
  st.switch_from = from;
#if CUDASIM_ASAN
  __sanitizer_start_switch_fiber(from_dies ? nullptr : &from->fake_stack, to->stack_lo, to->stack_size);
#else
  (void)from_dies;
#endif
#if CUDASIM_UCONTEXT
  swapcontext(&from->uc, &to->uc);
#else
  cudasim_switch(&from->sp, to->sp);
#endif
#if CUDASIM_ASAN
  // Back in `from`: learn the bounds of the stack we came from (the host's
  // the first time).
  const void* lo = nullptr;
  size_t size = 0;
  __sanitizer_finish_switch_fiber(from->fake_stack, &lo, &size);
  st.switch_from->stack_lo = lo;
  st.switch_from->stack_size = size;
#endif
}

// ------------------------------------------------------------------ queue
inline void q_push(unsigned t) {
  unsigned tail = st.q_head + st.q_count;
  if (tail >= st.nthreads) tail -= st.nthreads;
  st.queue[tail] = t;
  ++st.q_count;
}
inline unsigned q_pop() {
  const unsigned t = st.queue[st.q_head];
  if (++st.q_head == st.nthreads) st.q_head = 0;
  --st.q_count;
  return t;
}

void shuffle(unsigned* v, unsigned n) {
  for (unsigned i = n; i > 1; --i) std::swap(v[i - 1], v[next_random() % i]);
}

// Queues threads base + i for the bits i of `lanes` (a warp), or all
// threads when all_threads, in schedule order, marking them Ready.
void release(unsigned base, unsigned lanes, bool all_threads) {
  unsigned* ids = st.scratch.data();
  unsigned n = 0;
  if (all_threads) {
    for (unsigned i = 0; i < st.nthreads; ++i) ids[n++] = i;
  } else {
    for (unsigned m = lanes; m; m &= m - 1) ids[n++] = base + unsigned(__builtin_ctz(m));
  }
  if (st.schedule == Schedule::reverse) std::reverse(ids, ids + n);
  if (st.schedule == Schedule::random) shuffle(ids, n);
  for (unsigned i = 0; i < n; ++i) {
    st.threads[ids[i]].state = TS::Ready;
    q_push(ids[i]);
  }
}

// -------------------------------------------------------------- switching
inline void resume_bookkeeping(Thread* t) {
  st.cur = t;
  cudasim_thread_idx = t->idx;
  t->state = TS::Running;
  profile_thread = t->linear;
}

// Leaves fiber `me` for whatever runs next. A free fiber (one without a
// suspended thread) goes to the pool when it leaves, and returns at once if
// the next thing is a thread that has not started (the caller runs it).
__attribute__((always_inline)) inline void dispatch_from(Fiber* me, bool me_free) {
  if (st.q_count == 0) {
    if (me_free) pool_push(me);
    switch_to(me, &st.host);
    return;
  }
  Thread* t = &st.threads[st.queue[st.q_head]];
  if (t->state == TS::NotStarted) {
    if (me_free) return;
    switch_to(me, pool_pop());
    return;
  }
  q_pop();
  resume_bookkeeping(t);
  if (t->fiber == me) return;
  if (me_free) pool_push(me);
  switch_to(me, t->fiber);
}

// The running thread waits (its state already says for what): run others
// until someone resumes it.
void block_current() {
  Thread* t = st.cur;
  t->fiber = st.current;
  dispatch_from(st.current, false);
}

// Reports a failure of the running thread: the host side abandons the
// block. The report is stored first, in its own statement, so that no
// temporary std::string is left alive on a stack that never unwinds (LSan
// would call it a leak).
void set_failure(std::string head, std::string tail) {
  st.failed = true;
  st.err_head = std::move(head);
  st.err_tail = std::move(tail);
}
[[noreturn]] void leave_failed() {
  switch_to(st.current, &st.host, true);
  __builtin_unreachable();
}
#define CUDASIM_FAIL(head, tail) \
  do {                           \
    set_failure(head, tail);     \
    leave_failed();              \
  } while (0)

void run_thread(Fiber* self, Thread* t) {
  resume_bookkeeping(t);
  t->fiber = self;
  st.run(st.ctx);
  t->state = TS::Done;
  if (st.done++ == 0) st.first_exited = t->linear;
  const unsigned w = t->linear >> 5, bit = 1u << (t->linear & 31);
  st.warp_exited[w] |= bit;
  if (st.bar_waiting)
    CUDASIM_FAIL(
        fmt("thread %s exited while other threads wait at a barrier", tid(t->linear).c_str()),
        fmt(": thread %s waits in %s at %s (an early return before a __syncthreads?)", tid(st.bar_first).c_str(),
            op_name(st.threads[st.bar_first].op), site(st.bar_file, st.bar_line).c_str()));
  for (unsigned m = st.warp_arrived[w]; m; m &= m - 1) {
    const Thread& u = st.threads[w * 32 + unsigned(__builtin_ctz(m))];
    if (u.mask & bit)
      CUDASIM_FAIL(
          fmt("lane %u of warp %u exited while lanes wait for it", t->linear & 31, w),
          fmt(": thread %s waits in %s at %s with mask 0x%08x, which includes thread %s", tid(u.linear).c_str(),
              op_name(u.op), site(u.file, u.line).c_str(), u.mask, tid(t->linear).c_str()));
  }
}

}  // namespace

// ------------------------------------------------------- barriers, warps
int barrier(int kind, int predicate, const char* file, unsigned line) {
  if (!t_in_launch)
    fatal(fmt("cudasim: %s called outside a kernel at %s", op_name(-1 - kind), site(file, line).c_str()));
  Thread* t = st.cur;
  ++st.stats.barriers;
  t->op = -1 - kind;
  t->file = file;
  t->line = line;
  if (st.done)
    CUDASIM_FAIL(fmt("%s with exited threads", op_name(t->op)),
                 fmt(": thread %s waits at %s, but thread %s has already exited (an early return before a barrier?)",
                     tid(t->linear).c_str(), site(file, line).c_str(), tid(st.first_exited).c_str()));
  if (st.bar_waiting == 0) {
    st.bar_file = file;
    st.bar_line = line;
    st.bar_first = t->linear;
    st.bar_kind = kind;
  } else if (line != st.bar_line || kind != st.bar_kind ||
             (file != st.bar_file && std::strcmp(file, st.bar_file) != 0)) {
    CUDASIM_FAIL("divergent __syncthreads",
                 fmt(": thread %s waits at %s, thread %s at %s", tid(st.bar_first).c_str(),
                     site(st.bar_file, st.bar_line).c_str(), tid(t->linear).c_str(), site(file, line).c_str()));
  }
  t->state = TS::WaitBarrier;
  st.bar_pred += predicate != 0;
  if (++st.bar_waiting == st.nthreads) {
    if (profile_recording) {
      profile_segment_end();
      profile_barrier_completed();
    }
    st.bar_result = st.bar_pred;
    st.bar_waiting = 0;
    st.bar_pred = 0;
    release(0, 0, true);
  }
  block_current();
  switch (kind) {
    case kSyncCount:
      return int(st.bar_result);
    case kSyncAnd:
      return st.bar_result == st.nthreads;
    case kSyncOr:
      return st.bar_result != 0;
  }
  return 0;
}

namespace {

bool is_shuffle(int op) { return op == kShflIdx || op == kShflUp || op == kShflDown || op == kShflXor; }

// Every lane of `lanes` in warp w has arrived at a warp operation: check
// that they agree, compute each lane's result, and release them.
void complete_warp(unsigned w, unsigned lanes, const Thread* caller) {
  Thread* lane = &st.threads[w * 32];
  for (unsigned m = lanes; m; m &= m - 1) {
    const Thread& u = lane[__builtin_ctz(m)];
    if (u.op != caller->op || u.mask != caller->mask)
      CUDASIM_FAIL(
          fmt("lanes of warp %u meet at different warp operations", w),
          fmt(": thread %s is in %s at %s with mask 0x%08x, thread %s in %s at %s with mask 0x%08x",
              tid(u.linear).c_str(), op_name(u.op), site(u.file, u.line).c_str(), u.mask, tid(caller->linear).c_str(),
              op_name(caller->op), site(caller->file, caller->line).c_str(), caller->mask));
  }
  const int op = caller->op;
  if (op == kWmmaLoad || op == kWmmaStore)  // the pointer and ldm are the warp's, not each lane's
    for (unsigned m = lanes; m; m &= m - 1) {
      const Thread& u = lane[__builtin_ctz(m)];
      if (u.value != caller->value || u.arg != caller->arg)
        CUDASIM_FAIL(fmt("lanes of warp %u pass %s different arguments", w, op_name(op)),
                     fmt(": thread %s at %s passes %p with ldm %d, thread %s at %s passes %p with ldm %d",
                         tid(u.linear).c_str(), site(u.file, u.line).c_str(), reinterpret_cast<void*>(u.value), u.arg,
                         tid(caller->linear).c_str(), site(caller->file, caller->line).c_str(),
                         reinterpret_cast<void*>(caller->value), caller->arg));
    }
  const bool exchange = op == kWmmaMma || op == kMmaSync || op == kLdmatrix;
  if (exchange) {
    for (unsigned m = lanes; m; m &= m - 1) st.warp_exchange[w][__builtin_ctz(m)] = lane[__builtin_ctz(m)].value;
  }
  unsigned ballot = 0;
  for (unsigned m = lanes; m; m &= m - 1) {
    const unsigned l = unsigned(__builtin_ctz(m));
    if (lane[l].value) ballot |= 1u << l;
  }
  unsigned long long all_result = 0;
  bool uniform = true;
  switch (op) {
    case kBallot:
      all_result = ballot;
      break;
    case kAny:
      all_result = ballot != 0;
      break;
    case kAll:
      all_result = ballot == lanes;
      break;
    case kUni:
      all_result = ballot == 0 || ballot == lanes;
      break;
    case kSyncWarp:
    case kWmmaLoad:
    case kWmmaStore:
      break;
    case kWmmaMma:
    case kMmaSync:
    case kLdmatrix:
      all_result = reinterpret_cast<uintptr_t>(&st.warp_exchange[w][0]);
      break;
    case kReduceAddU:
    case kReduceAddI:
    case kReduceMinU:
    case kReduceMinI:
    case kReduceMaxU:
    case kReduceMaxI:
    case kReduceAnd:
    case kReduceOr:
    case kReduceXor: {
      bool first = true;
      for (unsigned m = lanes; m; m &= m - 1) {
        const unsigned long long v = lane[__builtin_ctz(m)].value;
        const unsigned u = unsigned(v);
        const int i = int(u);
        unsigned r = unsigned(all_result);
        if (first)
          r = u;
        else if (op == kReduceAddU || op == kReduceAddI)
          r += u;
        else if (op == kReduceMinU)
          r = u < r ? u : r;
        else if (op == kReduceMaxU)
          r = u > r ? u : r;
        else if (op == kReduceMinI)
          r = unsigned(i < int(r) ? i : int(r));
        else if (op == kReduceMaxI)
          r = unsigned(i > int(r) ? i : int(r));
        else if (op == kReduceAnd)
          r &= u;
        else if (op == kReduceOr)
          r |= u;
        else
          r ^= u;
        all_result = r;
        first = false;
      }
      break;
    }
    default:
      uniform = false;
  }
  for (unsigned m = lanes; m; m &= m - 1) {
    const unsigned l = unsigned(__builtin_ctz(m));
    Thread& u = lane[l];
    if (uniform) {
      u.result = all_result;
      continue;
    }
    if (is_shuffle(op)) {
      // PTX shfl.sync: the segment of `width` lanes holding l is
      // [lo, lo + width); a source outside it (below for up, above for
      // down/xor) gives the lane its own value.
      const unsigned width = unsigned(u.width), lo = l & ~(width - 1), hi = lo + width - 1;
      const unsigned b = unsigned(u.arg) & 31;
      int j = int(l);
      bool ok = true;
      if (op == kShflIdx)
        j = int(lo | (unsigned(u.arg) & (width - 1)));
      else if (op == kShflUp) {
        j = int(l) - int(b);
        ok = j >= int(lo);
      } else if (op == kShflDown) {
        j = int(l + b);
        ok = unsigned(j) <= hi;
      } else {
        j = int(l ^ b);
        ok = unsigned(j) <= hi;
      }
      if (!ok) j = int(l);
      u.result = (lanes >> j) & 1 ? lane[j].value : ~0ull;  // a lane outside the mask: undefined, so all ones
    } else if (op == kMatchAny) {
      unsigned r = 0;
      for (unsigned k = lanes; k; k &= k - 1)
        if (lane[__builtin_ctz(k)].value == u.value) r |= 1u << __builtin_ctz(k);
      u.result = r;
    } else if (op == kMatchAll) {
      bool same = true;
      for (unsigned k = lanes; k; k &= k - 1) same = same && lane[__builtin_ctz(k)].value == u.value;
      u.result = same ? lanes : 0;
      u.pred = same;
    }
  }
  st.warp_arrived[w] &= ~lanes;
  if (profile_recording) profile_warp_op_completed(unsigned(__builtin_popcount(lanes)));
  release(w * 32, lanes, false);
}

}  // namespace

unsigned long long warp_op(int kind, unsigned mask, unsigned long long value, int arg, int width, const char* file,
                           unsigned line, int* pred) {
  if (!t_in_launch) fatal(fmt("cudasim: %s called outside a kernel at %s", op_name(kind), site(file, line).c_str()));
  Thread* t = st.cur;
  ++st.stats.warp_ops;
  const unsigned l = t->linear & 31, w = t->linear >> 5, bit = 1u << l;
  t->op = kind;
  t->file = file;
  t->line = line;
  t->mask = mask;
  t->value = value;
  t->arg = arg;
  t->width = width;
  t->pred = 0;
  if (!(mask & bit))
    CUDASIM_FAIL(fmt("%s with a mask without the caller", op_name(kind)),
                 fmt(": thread %s (lane %u) calls it at %s with mask 0x%08x", tid(t->linear).c_str(), l,
                     site(file, line).c_str(), mask));
  if (is_shuffle(kind) && (width < 1 || width > 32 || (width & (width - 1))))
    CUDASIM_FAIL(fmt("%s with width %d", op_name(kind), width),
                 fmt(": thread %s at %s (width must be a power of 2 from 1 to 32)", tid(t->linear).c_str(),
                     site(file, line).c_str()));
  const unsigned lanes = mask & st.warp_exist[w];  // lanes past the end of the block do not exist
  if (kind >= kWmmaLoad && (mask != 0xffffffffu || st.warp_exist[w] != 0xffffffffu))
    CUDASIM_FAIL(fmt("%s without a full warp", op_name(kind)),
                 fmt(": thread %s at %s, in warp %u of %u lanes (%s needs all 32 lanes of a warp)",
                     tid(t->linear).c_str(), site(file, line).c_str(), w, unsigned(__builtin_popcount(st.warp_exist[w])),
                     kind >= kMmaSync ? op_name(kind) : "wmma"));
  if (const unsigned gone = lanes & st.warp_exited[w])
    CUDASIM_FAIL(fmt("%s waits for exited lanes", op_name(kind)),
                 fmt(": thread %s at %s with mask 0x%08x, but thread %s has already exited", tid(t->linear).c_str(),
                     site(file, line).c_str(), mask, tid(w * 32 + unsigned(__builtin_ctz(gone))).c_str()));
  st.warp_arrived[w] |= bit;
  if ((st.warp_arrived[w] & lanes) == lanes)
    complete_warp(w, lanes, t);
  else
    t->state = TS::WaitWarp;
  block_current();
  if (pred) *pred = t->pred;
  return t->result;
}

const unsigned long long* lane_exchange(int kind, unsigned long long value, const char* file, unsigned line) {
  return reinterpret_cast<const unsigned long long*>(uintptr_t(warp_op(kind, 0xffffffffu, value, 0, 32, file, line)));
}

unsigned current_thread() noexcept { return st.cur->linear; }

void kernel_error(const char* what, const char* file, unsigned line) {
  if (!t_in_launch) fatal(fmt("cudasim: %s at %s (outside a kernel)", what, site(file, line).c_str()));
  CUDASIM_FAIL(what, fmt(": thread %s at %s", tid(st.cur->linear).c_str(), site(file, line).c_str()));
}

unsigned active_mask() noexcept {
  const unsigned w = st.cur->linear >> 5;
  return st.warp_exist[w] & ~st.warp_exited[w];
}

void trap(const char* file, unsigned line) {
  if (!t_in_launch) fatal(fmt("cudasim: __trap() outside a kernel at %s", site(file, line).c_str()));
  CUDASIM_FAIL("__trap()", fmt(": called by thread %s at %s", tid(st.cur->linear).c_str(), site(file, line).c_str()));
}

namespace {

// ------------------------------------------------- ELF symbols (shared memory)
// See cudasim.h: the static locals of a function that declares __shared__
// variables are found by name: the marker cudasim_smem_mark_N of function F
// is the symbol _ZZ<F>E<len>cudasim_smem_mark_N, its other statics are
// _ZZ<F>E<len><name>[discriminator].
struct SharedFn {
  std::vector<std::pair<unsigned char*, size_t>> vars;
  std::vector<SharedMark*> marks;
};
struct Symbols {
  bool scanned = false;
  std::map<std::string, std::unique_ptr<SharedFn>, std::less<>> by_prefix;
  std::unordered_map<const SharedMark*, SharedFn*> by_mark;
  std::vector<uintptr_t> bss_objects;  // every object symbol in writable NOBITS sections (ASan redzone placement)
  bool warned = false;
};
Symbols& symbols() {
  static Symbols* s = new Symbols;  // never destroyed
  return *s;
}

constexpr std::string_view kMarkName = "cudasim_smem_mark_";

struct ElfFile {
  const unsigned char* base = nullptr;
  size_t size = 0;
  explicit ElfFile(const char* path) {
    const int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return;
    struct stat sb;
    if (fstat(fd, &sb) == 0 && sb.st_size > 0) {
      void* m = mmap(nullptr, size_t(sb.st_size), PROT_READ, MAP_PRIVATE, fd, 0);
      if (m != MAP_FAILED) {
        base = static_cast<const unsigned char*>(m);
        size = size_t(sb.st_size);
      }
    }
    close(fd);
  }
  ~ElfFile() {
    if (base) munmap(const_cast<unsigned char*>(base), size);
  }
  ElfFile(const ElfFile&) = delete;
  ElfFile& operator=(const ElfFile&) = delete;

  // Calls fn(name, sym, section) for every symbol of the .symtab.
  template <typename Fn>
  void for_each_symbol(Fn&& fn) const {
    if (!base || size < sizeof(Elf64_Ehdr) || std::memcmp(base, ELFMAG, SELFMAG) != 0 || base[EI_CLASS] != ELFCLASS64)
      return;
    const auto* eh = reinterpret_cast<const Elf64_Ehdr*>(base);
    if (eh->e_shoff == 0 || eh->e_shentsize != sizeof(Elf64_Shdr) ||
        eh->e_shoff + uint64_t(eh->e_shnum) * sizeof(Elf64_Shdr) > size)
      return;
    const auto* sh = reinterpret_cast<const Elf64_Shdr*>(base + eh->e_shoff);
    for (unsigned s = 0; s < eh->e_shnum; ++s) {
      if (sh[s].sh_type != SHT_SYMTAB || sh[s].sh_link >= eh->e_shnum) continue;
      const Elf64_Shdr& strs = sh[sh[s].sh_link];
      if (sh[s].sh_offset + sh[s].sh_size > size || strs.sh_offset + strs.sh_size > size) continue;
      const auto* sym = reinterpret_cast<const Elf64_Sym*>(base + sh[s].sh_offset);
      const char* str = reinterpret_cast<const char*>(base + strs.sh_offset);
      const size_t n = sh[s].sh_size / sizeof(Elf64_Sym);
      for (size_t i = 0; i < n; ++i) {
        if (sym[i].st_name >= strs.sh_size || sym[i].st_shndx == SHN_UNDEF || sym[i].st_shndx >= eh->e_shnum) continue;
        const char* name = str + sym[i].st_name;
        if (!std::memchr(name, 0, strs.sh_size - sym[i].st_name)) continue;
        fn(std::string_view(name), sym[i], sh[sym[i].st_shndx]);
      }
    }
  }
};

// "_ZZ...E23cudasim_smem_mark_7" -> "_ZZ...E" (empty if not a marker)
std::string_view marker_prefix(std::string_view name) {
  const size_t p = name.find(kMarkName);
  if (p == std::string_view::npos || name.substr(0, 2) != "_Z") return {};
  size_t q = p;
  while (q > 0 && name[q - 1] >= '0' && name[q - 1] <= '9') --q;
  if (q == p || q == 0 || name[q - 1] != 'E') return {};
  return name.substr(0, q);
}

// Whether `rest` is <len><identifier> plus an optional discriminator.
bool is_local_name(std::string_view rest) {
  size_t i = 0, len = 0;
  while (i < rest.size() && rest[i] >= '0' && rest[i] <= '9') len = len * 10 + size_t(rest[i++] - '0');
  if (i == 0 || len == 0 || i + len > rest.size()) return false;
  rest.remove_prefix(i + len);
  if (rest.empty()) return true;
  if (rest.size() >= 2 && rest[0] == '_' && rest[1] >= '0' && rest[1] <= '9') return rest.size() == 2;
  return rest.size() >= 4 && rest.substr(0, 2) == "__" && rest.back() == '_';
}

bool shared_candidate(const Elf64_Sym& sym, const Elf64_Shdr& sec) {
  return ELF64_ST_TYPE(sym.st_info) == STT_OBJECT && sec.sh_type == SHT_NOBITS && (sec.sh_flags & SHF_WRITE) &&
         !(sec.sh_flags & SHF_TLS);
}

void scan_object(const char* path, uintptr_t bias) {
  Symbols& syms = symbols();
  ElfFile elf(path);
  elf.for_each_symbol([&](std::string_view name, const Elf64_Sym& sym, const Elf64_Shdr& sec) {
    if (!shared_candidate(sym, sec)) return;
    syms.bss_objects.push_back(bias + sym.st_value);
    const std::string_view prefix = marker_prefix(name);
    if (prefix.empty()) return;
    auto it = syms.by_prefix.find(prefix);
    if (it == syms.by_prefix.end())
      it = syms.by_prefix.emplace(std::string(prefix), std::make_unique<SharedFn>()).first;
    it->second->marks.push_back(reinterpret_cast<SharedMark*>(bias + sym.st_value));
  });
  if (syms.by_prefix.empty()) return;
  elf.for_each_symbol([&](std::string_view name, const Elf64_Sym& sym, const Elf64_Shdr& sec) {
    if (!shared_candidate(sym, sec) || sym.st_size == 0 || name.substr(0, 3) != "_ZZ" ||
        name.find(kMarkName) != std::string_view::npos)
      return;
    for (size_t e = name.find('E'); e != std::string_view::npos; e = name.find('E', e + 1)) {
      if (e + 1 >= name.size() || name[e + 1] < '0' || name[e + 1] > '9') continue;
      const auto it = syms.by_prefix.find(name.substr(0, e + 1));
      if (it == syms.by_prefix.end() || !is_local_name(name.substr(e + 1))) continue;
      it->second->vars.emplace_back(reinterpret_cast<unsigned char*>(bias + sym.st_value), size_t(sym.st_size));
      return;
    }
  });
}

int scan_callback(dl_phdr_info* info, size_t, void* first) {
  const bool main_program = *static_cast<bool*>(first);
  *static_cast<bool*>(first) = false;
  const char* path =
      info->dlpi_name && *info->dlpi_name ? info->dlpi_name : (main_program ? "/proc/self/exe" : nullptr);
  if (path && path[0] == '/') scan_object(path, uintptr_t(info->dlpi_addr));
  return 0;
}

void scan_symbols() {
  Symbols& syms = symbols();
  if (syms.scanned) return;
  syms.scanned = true;
  bool first = true;
  dl_iterate_phdr(scan_callback, &first);
  for (auto& [prefix, fn] : syms.by_prefix)
    for (SharedMark* m : fn->marks) syms.by_mark.emplace(m, fn.get());
#if CUDASIM_ASAN
  // Redzones for the statics ASan leaves unpadded (those with vague
  // linkage: of templates and inline functions): the marker body, and the
  // padding between a variable and a marker right after it.
  std::sort(syms.bss_objects.begin(), syms.bss_objects.end());
  for (auto& [prefix, fn] : syms.by_prefix) {
    for (SharedMark* m : fn->marks)
      if (!__asan_region_is_poisoned(m, sizeof(m->redzone))) __asan_poison_memory_region(m, sizeof(m->redzone));
    for (auto& [p, n] : fn->vars) {
      const uintptr_t end = uintptr_t(p + n);
      const auto next = std::upper_bound(syms.bss_objects.begin(), syms.bss_objects.end(), end - 1);
      if (next == syms.bss_objects.end() || *next == end || *next - end >= 64) continue;
      if (!syms.by_mark.count(reinterpret_cast<const SharedMark*>(*next))) continue;
      void* gap = reinterpret_cast<void*>(end);
      if (!__asan_region_is_poisoned(gap, *next - end)) __asan_poison_memory_region(gap, *next - end);
    }
  }
#endif
}

std::string demangled_symbol_at(const void* addr) {
  std::string mangled;
  Dl_info info;
  if (dladdr(addr, &info) && info.dli_sname && info.dli_saddr == addr) {
    mangled = info.dli_sname;
  } else {
    struct Search {
      uintptr_t addr;
      std::string* out;
    } search{uintptr_t(addr), &mangled};
    dl_iterate_phdr(
        [](dl_phdr_info* i, size_t, void* p) -> int {
          auto* s = static_cast<Search*>(p);
          const bool main_program = !i->dlpi_name || !*i->dlpi_name;
          if (!main_program && i->dlpi_name[0] != '/') return 0;
          ElfFile elf(main_program ? "/proc/self/exe" : i->dlpi_name);
          elf.for_each_symbol([&](std::string_view name, const Elf64_Sym& sym, const Elf64_Shdr&) {
            if (s->out->empty() && ELF64_ST_TYPE(sym.st_info) == STT_FUNC && i->dlpi_addr + sym.st_value == s->addr)
              *s->out = std::string(name);
          });
          return s->out->empty() ? 0 : 1;
        },
        &search);
  }
  if (mangled.empty()) return {};
  int status = 0;
  char* d = abi::__cxa_demangle(mangled.c_str(), nullptr, nullptr, &status);
  std::string out = status == 0 && d ? d : mangled;
  std::free(d);
  return out;
}

}  // namespace

std::string function_name(const void* fn) { return demangled_symbol_at(fn); }

void fill_shared(SharedMark* mark) noexcept {
  if (!t_in_launch) return;  // a namespace-scope __shared__ variable's initialisation
  Symbols& syms = symbols();
  const auto it = syms.by_mark.find(mark);
  if (it == syms.by_mark.end()) {
    mark->epoch = shared_epoch;
    if (!syms.warned) {
      syms.warned = true;
      std::fprintf(stderr,
                   "cudasim: warning: no symbol table entry for a __shared__ variable (stripped binary?); its "
                   "shared memory is not filled with 0xFF before each block\n");
    }
    return;
  }
  for (auto& [p, n] : it->second->vars) {
    std::memset(p, 0xff, n);
    if (profile_recording) profile_shared_variable(p, n);
  }
  for (SharedMark* m : it->second->marks) m->epoch = shared_epoch;
}

bool is_shared_memory(const void* p, size_t n) noexcept {
  const uintptr_t a = uintptr_t(p);
  if (st.dyn && a >= uintptr_t(st.dyn) && a + n <= uintptr_t(st.dyn) + st.dyn_bytes) return true;
  // Every __shared__ variable the symbol table holds, by start (built once).
  static const std::map<uintptr_t, uintptr_t>* vars = [] {
    auto* m = new std::map<uintptr_t, uintptr_t>;  // never destroyed
    for (auto& [prefix, fn] : symbols().by_prefix)
      for (auto& [v, size] : fn->vars) m->emplace(uintptr_t(v), uintptr_t(v) + size);
    return m;
  }();
  auto it = vars->upper_bound(a);
  if (it == vars->begin()) return false;
  --it;
  return a >= it->first && a + n <= it->second;
}

// ------------------------------------------------------------------ launch
namespace {

std::string deadlock_tail() {
  for (const Thread& u : st.threads) {
    if (u.state != TS::WaitWarp) continue;
    const unsigned w = u.linear >> 5;
    for (unsigned m = u.mask & st.warp_exist[w]; m; m &= m - 1) {
      const Thread& v = st.threads[w * 32 + unsigned(__builtin_ctz(m))];
      if (v.state == TS::WaitWarp && v.op == u.op && v.mask == u.mask) continue;
      std::string what;
      if (v.state == TS::Done)
        what = "has exited";
      else if (v.state == TS::WaitBarrier)
        what = fmt("waits in %s at %s", op_name(v.op), site(v.file, v.line).c_str());
      else
        what = fmt("waits in %s at %s with mask 0x%08x", op_name(v.op), site(v.file, v.line).c_str(), v.mask);
      return fmt(": thread %s waits in %s at %s with mask 0x%08x, but thread %s (lane %u) never arrives: it %s",
                 tid(u.linear).c_str(), op_name(u.op), site(u.file, u.line).c_str(), u.mask, tid(v.linear).c_str(),
                 v.linear & 31, what.c_str());
    }
  }
  unsigned waiting = 0;
  for (const Thread& u : st.threads) waiting += u.state == TS::WaitBarrier;
  return fmt(": %u of %u threads wait in %s at %s", waiting, st.nthreads, op_name(-1 - st.bar_kind),
             site(st.bar_file, st.bar_line).c_str());
}

void abandon_block() {
  for (Fiber* f : st.fibers)
    if (!f->in_pool) {
      reset_fiber(f);
      pool_push(f);
    }
}

// Runs the current block; false when it failed (st.err_* say why).
bool run_block() {
  st.cur = nullptr;
  switch_to(&st.host, pool_pop());
  if (!st.failed && st.done != st.nthreads) {
    st.failed = true;
    st.err_head = "deadlock";
    st.err_tail = deadlock_tail();
  }
  return !st.failed;
}

std::string check_config(dim3 grid, dim3 block) {
  const uint64_t threads = uint64_t(block.x) * block.y * block.z;
  if (!grid.x || !grid.y || !grid.z || !block.x || !block.y || !block.z)
    return "cudasim: invalid configuration: a zero grid or block dimension";
  if (threads > 1024)
    return fmt("cudasim: invalid configuration: %" PRIu64 " threads per block (at most 1024)", threads);
  if (block.x > 1024 || block.y > 1024 || block.z > 64)
    return "cudasim: invalid configuration: block dimensions may be at most (1024, 1024, 64)";
  if (grid.x > 2147483647u || grid.y > 65535 || grid.z > 65535)
    return "cudasim: invalid configuration: grid dimensions may be at most (2147483647, 65535, 65535)";
  return {};
}

}  // namespace

void launch_impl(void (*run)(void*), void* ctx, const void* kernel, dim3 grid, dim3 block, size_t smem,
                 cudaStream_t stream, const Touch* touches, size_t touch_count) {
  if (t_in_launch) {
    set_error(cudaErrorNotSupported, "cudasim: a kernel launched a kernel (dynamic parallelism is not emulated)");
    return;
  }
  if (std::string bad = check_config(grid, block); !bad.empty()) {
    set_error(cudaErrorInvalidConfiguration, bad);
    return;
  }
  if (const size_t limit = max_dynamic_shared_memory(kernel); smem > limit) {
    set_error(cudaErrorInvalidValue,
              fmt("cudasim: %zu bytes of dynamic shared memory requested, the kernel may use %zu%s", smem, limit,
                  limit < kMaxSharedMemoryOptin
                      ? " (raise it with cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, n))"
                      : ""));
    return;
  }
  if (!valid_stream(stream)) {
    set_error(cudaErrorInvalidResourceHandle, "cudasim: launch on a stream that does not exist (destroyed?)");
    return;
  }
  if (stream_order_operation(stream, Op{Op::Kind::kernel, kernel}, touches, touch_count) != cudaSuccess) return;

  std::lock_guard<std::mutex> lock(st.mu);
  configure_from_environment();
  scan_symbols();
  st.dyn = static_cast<unsigned char*>(std::malloc(smem));  // exactly smem bytes: ASan sees overruns
  st.dyn_bytes = smem;
  if (smem && !st.dyn) {
    set_error(cudaErrorMemoryAllocation, fmt("cudasim: cannot allocate %zu bytes of dynamic shared memory", smem));
    return;
  }
  t_in_launch = true;
  st.run = run;
  st.ctx = ctx;
  st.nthreads = block.x * block.y * block.z;
  st.threads.resize(st.nthreads);
  st.queue.resize(st.nthreads);
  st.scratch.resize(st.nthreads);
  for (unsigned z = 0, i = 0; z < block.z; ++z)
    for (unsigned y = 0; y < block.y; ++y)
      for (unsigned x = 0; x < block.x; ++x, ++i) {
        Thread& t = st.threads[i];
        t = Thread{};
        t.idx = uint3{x, y, z};
        t.linear = i;
      }
  for (unsigned w = 0; w < 32; ++w) {
    const unsigned first = w * 32;
    st.warp_exist[w] =
        first >= st.nthreads ? 0u : (st.nthreads - first >= 32 ? ~0u : (1u << (st.nthreads - first)) - 1);
  }
  cudasim_block_dim = block;
  cudasim_grid_dim = grid;
  st.peak_in_use = st.fibers.size() - st.pool.size();
  ++st.stats.launches;
  const bool profiled = profile_enabled();
  if (profiled) profile_launch_begin(kernel, st.nthreads, st.dyn, smem);

  bool ok = true;
  for (unsigned bz = 0; bz < grid.z && ok; ++bz)
    for (unsigned by = 0; by < grid.y && ok; ++by)
      for (unsigned bx = 0; bx < grid.x && ok; ++bx) {
        cudasim_block_idx = uint3{bx, by, bz};
        for (unsigned i = 0; i < st.nthreads; ++i) st.threads[i].state = TS::NotStarted;
        for (unsigned i = 0; i < st.nthreads; ++i) st.queue[i] = i;
        if (st.schedule == Schedule::reverse) std::reverse(st.queue.begin(), st.queue.end());
        if (st.schedule == Schedule::random) shuffle(st.queue.data(), st.nthreads);
        st.q_head = 0;
        st.q_count = st.nthreads;
        st.done = 0;
        st.bar_waiting = st.bar_pred = 0;
        std::fill(std::begin(st.warp_exited), std::end(st.warp_exited), 0u);
        std::fill(std::begin(st.warp_arrived), std::end(st.warp_arrived), 0u);
        st.failed = false;
        ++shared_epoch;
        if (smem) std::memset(st.dyn, 0xff, smem);
        async_copy_block_begin(st.nthreads);
        ok = run_block();
        async_copy_block_end(profiled && ok);
        ++st.stats.blocks;
        st.stats.threads += st.done;
        if (profiled && ok) profile_block_end(st.done);
      }
  if (profiled) profile_launch_end(ok);
  st.stats.last_launch_peak_fibers = st.peak_in_use;
  std::free(st.dyn);
  st.dyn = nullptr;
  st.dyn_bytes = 0;
  st.cur = nullptr;
  t_in_launch = false;
  if (!ok) {
    abandon_block();
    const std::string name = demangled_symbol_at(kernel);
    std::string message = "cudasim: " + st.err_head + " in block " + idx3(cudasim_block_idx) +
                          (name.empty() ? std::string() : " of kernel " + name) + st.err_tail;
    std::fprintf(stderr, "%s\n", message.c_str());
    set_error(cudaErrorLaunchFailure, std::move(message));
  }
}

}  // namespace cudasim::detail

// ------------------------------------------------------------- fiber main
extern "C" void cudasim_fiber_main(void* arg) noexcept {
  using namespace cudasim::detail;
  auto* self = static_cast<Fiber*>(arg);
#if CUDASIM_ASAN
  const void* lo = nullptr;
  size_t size = 0;
  __sanitizer_finish_switch_fiber(nullptr, &lo, &size);
  st.switch_from->stack_lo = lo;
  st.switch_from->stack_size = size;
#endif
  for (;;) {
    // Take the next thread that has not started, or leave for what is next.
    while (!(st.q_count && st.threads[st.queue[st.q_head]].state == TS::NotStarted)) dispatch_from(self, true);
    run_thread(self, &st.threads[q_pop()]);
  }
}

// ------------------------------------------------------------- public API
namespace cudasim {

void set_schedule(Schedule schedule, uint64_t seed) {
  std::lock_guard<std::mutex> lock(detail::st.mu);
  detail::configure_from_environment();
  detail::st.schedule = schedule;
  detail::st.seed = seed;
  detail::st.rng = seed;
}

Schedule schedule() {
  std::lock_guard<std::mutex> lock(detail::st.mu);
  detail::configure_from_environment();
  return detail::st.schedule;
}

uint64_t schedule_seed() {
  std::lock_guard<std::mutex> lock(detail::st.mu);
  detail::configure_from_environment();
  return detail::st.seed;
}

void* dynamic_shared_memory() noexcept { return detail::st.dyn; }

Stats stats() {
  std::lock_guard<std::mutex> lock(detail::st.mu);
  Stats s = detail::st.stats;
  s.stack_bytes = detail::st.stack_size;
  return s;
}

}  // namespace cudasim

#if CUDASIM_ASAN
// Called by AddressSanitizer before it reports: say which emulated thread it was.
extern "C" void __asan_on_error() {
  using namespace cudasim::detail;
  if (!t_in_launch || !st.cur) return;
  std::fprintf(stderr, "cudasim: AddressSanitizer error in thread (%u,%u,%u) of block (%u,%u,%u) of a kernel launch\n",
               st.cur->idx.x, st.cur->idx.y, st.cur->idx.z, cudasim_block_idx.x, cudasim_block_idx.y,
               cudasim_block_idx.z);
}
#endif
