// cuda/sim/stream_order.cpp — the emulator's stream-order checker: reports
// work on two streams that touches the same memory with nothing ordering
// the two (a data race on a GPU; none here, where all work runs at once).
//
// The emulator runs every copy, memset and kernel when it is called, so
// work queued on a second stream without the event a GPU needs still gives
// the right numbers. This file keeps what a GPU would guarantee instead, as
// vector clocks (happens-before):
// - each stream has a clock (one counter per stream); an operation on
//   stream s ticks s's own counter and is stamped (s, tick);
// - cudaEventRecord(e, s) copies s's clock into e; cudaStreamWaitEvent(s, e)
//   merges e's clock into s's;
// - the host learns a stream's or event's clock when it waits for it
//   (cudaStreamSynchronize, cudaEventSynchronize, a cudaEventQuery or
//   cudaStreamQuery that says done, cudaDeviceSynchronize, cudaFree and the
//   synchronous cudaMemcpy/cudaMemset), and every operation it issues later
//   starts from what the host knows;
// - the legacy default stream (0) waits for earlier work of every blocking
//   stream and they wait for it; streams made with cudaStreamNonBlocking do
//   neither, as on a GPU.
// Every cudaMalloc/cudaMallocHost block remembers its last writer and, per
// stream, its last reader. An operation that writes a block must come after
// all of them, one that reads it after the last writer; otherwise the call
// fails with cudaErrorIllegalState and a message naming both operations,
// their streams and the block. A kernel's touches are the pointers its
// arguments hold (cudasim::launch, cuda/sim/argument_pointers.h): pointer
// arguments and the pointers inside struct arguments (the GEMM's and the
// convolutions' operand functors), however deep; a pointer to const reads
// the block it points into, any other pointer writes it. Pointers inside
// types that are not aggregates (classes with constructors, closures) are
// not seen (a race through them is missed, never invented), nor is host
// code that reads or writes memory directly (not through a copy).
#define CUDASIM_RUNTIME_BUILD 1
#include <algorithm>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "cuda/sim/cudasim.h"
#include "cuda/sim/internal.h"

namespace cudasim::detail {
namespace {

using Clock = std::vector<uint64_t>;  // by stream number

void merge(Clock& into, const Clock& from) {
  if (into.size() < from.size()) into.resize(from.size(), 0);
  for (size_t i = 0; i < from.size(); ++i) into[i] = std::max(into[i], from[i]);
}

struct StreamState {
  bool blocking;  // waits for, and is waited for by, the legacy stream
  Clock clock;
};

// One operation, as a block's history keeps it.
struct Stamp {
  int stream = -1;  // -1: none
  uint64_t tick = 0;
  Op op;
};

struct BlockHistory {
  Stamp last_write;
  std::vector<Stamp> last_read;  // by stream number
};

struct State {
  std::mutex mu;
  std::vector<StreamState> streams;  // 0: the legacy default stream
  std::unordered_map<cudaStream_t, int> number;
  std::unordered_map<cudaEvent_t, Clock> events;
  Clock host;  // what every operation the host issues from now on comes after
  std::unordered_map<uintptr_t, BlockHistory> blocks;  // by block base
};

State& state() {
  static State* s = [] {
    auto* st = new State;  // never destroyed: streams and frees may come from static destructors
    st->streams.push_back(StreamState{true, {}});
    return st;
  }();
  return *s;
}

// The stream's number, registering a stream seen for the first time (caller holds the lock).
int stream_number(State& s, cudaStream_t stream) {
  if (stream == nullptr || stream == cudaStreamLegacy) return 0;
  if (auto it = s.number.find(stream); it != s.number.end()) return it->second;
  unsigned flags = 0;
  if (stream != cudaStreamPerThread) flags = stream->flags;
  const int n = int(s.streams.size());
  s.streams.push_back(StreamState{(flags & cudaStreamNonBlocking) == 0, {}});
  s.number.emplace(stream, n);
  return n;
}

std::string stream_text(const State& s, int n) {
  if (n == 0) return "the legacy default stream";
  return fmt("stream %d (%s)", n, s.streams[size_t(n)].blocking ? "blocking" : "non-blocking");
}

std::string op_text(const Op& op) {
  switch (op.kind) {
    case Op::Kind::kernel:
      return "kernel " + function_name(op.kernel);
    case Op::Kind::copy:
      return "a copy";
    case Op::Kind::fill:
      return "a memset";
  }
  return "?";
}

bool ordered_before(const Stamp& earlier, const Clock& now) {
  return earlier.stream < 0 || (size_t(earlier.stream) < now.size() && now[size_t(earlier.stream)] >= earlier.tick);
}

}  // namespace

cudaError_t stream_order_operation(cudaStream_t stream, const Op& op, const Touch* touches, size_t n) {
  State& s = state();
  std::unique_lock<std::mutex> lock(s.mu);
  const int me = stream_number(s, stream);
  Clock now = s.streams[size_t(me)].clock;
  merge(now, s.host);
  if (me == 0) {
    for (const StreamState& o : s.streams)
      if (o.blocking) merge(now, o.clock);
  } else if (s.streams[size_t(me)].blocking) {
    merge(now, s.streams[0].clock);
  }
  if (now.size() <= size_t(me)) now.resize(size_t(me) + 1, 0);
  const Stamp stamp{me, ++now[size_t(me)], op};
  s.streams[size_t(me)].clock = now;

  // The blocks touched, each looked up once: checked first, recorded only if none races.
  struct Touched {
    BlockHistory* history;
    uintptr_t lo, hi;
    bool writes;
  };
  std::vector<Touched> touched;
  touched.reserve(n);
  for (size_t i = 0; i < n; ++i) {
    uintptr_t lo = 0, hi = 0;
    if (touches[i].p && device_block_of(touches[i].p, &lo, &hi))
      touched.push_back({&s.blocks[lo], lo, hi, touches[i].writes});
  }
  std::string race;
  for (const Touched& t : touched) {
    const BlockHistory& h = *t.history;
    const Stamp* conflict = nullptr;
    const char* earlier_did = "wrote";
    if (!ordered_before(h.last_write, now)) conflict = &h.last_write;
    if (!conflict && t.writes)
      for (const Stamp& r : h.last_read)
        if (!ordered_before(r, now)) {
          conflict = &r, earlier_did = "read";
          break;
        }
    if (conflict) {
      race = fmt("cudasim: stream race: %s on %s %s the %zu-byte block at %p, which %s on %s %s with no event, stream "
                 "wait or host synchronisation ordering the two (record an event on stream %d after that and make "
                 "stream %d wait for it)",
                 op_text(op).c_str(), stream_text(s, me).c_str(), t.writes ? "writes" : "reads",
                 size_t(t.hi - t.lo), reinterpret_cast<const void*>(t.lo), op_text(conflict->op).c_str(),
                 stream_text(s, conflict->stream).c_str(), earlier_did, conflict->stream, me);
      break;
    }
  }
  if (!race.empty()) {
    lock.unlock();
    return set_error(cudaErrorIllegalState, race);
  }
  for (const Touched& t : touched) {  // (unordered_map keeps element addresses across inserts)
    BlockHistory& h = *t.history;
    if (t.writes) {
      h.last_write = stamp;
      h.last_read.clear();  // every read so far is ordered before this write
    } else {
      if (h.last_read.size() <= size_t(me)) h.last_read.resize(size_t(me) + 1);
      h.last_read[size_t(me)] = stamp;
    }
  }
  return cudaSuccess;
}

void stream_order_record(cudaEvent_t event, cudaStream_t stream) {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mu);
  const int me = stream_number(s, stream);
  Clock c = s.streams[size_t(me)].clock;
  merge(c, s.host);  // recorded after all the host has waited for, as any operation it issues
  s.events[event] = std::move(c);
}

void stream_order_wait_event(cudaStream_t stream, cudaEvent_t event) {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mu);
  const int me = stream_number(s, stream);
  if (auto it = s.events.find(event); it != s.events.end()) merge(s.streams[size_t(me)].clock, it->second);
}

void stream_order_host_waits_stream(cudaStream_t stream) {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mu);
  const int me = stream_number(s, stream);
  merge(s.host, s.streams[size_t(me)].clock);
  if (me == 0)  // the legacy stream's work includes what it waited for
    for (const StreamState& o : s.streams)
      if (o.blocking) merge(s.host, o.clock);
}

void stream_order_host_waits_event(cudaEvent_t event) {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mu);
  if (auto it = s.events.find(event); it != s.events.end()) merge(s.host, it->second);
}

void stream_order_host_waits_all() {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mu);
  for (const StreamState& o : s.streams) merge(s.host, o.clock);
}

void stream_order_forget_block(uintptr_t base) {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mu);
  s.blocks.erase(base);
}

void stream_order_forget_event(cudaEvent_t event) {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mu);
  s.events.erase(event);
}

void stream_order_forget_stream(cudaStream_t stream) {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mu);
  // Its number stays taken (block histories may name it); a new stream at
  // the same address gets a new number.
  // cudaStreamDestroy does not wait for the stream's work: the host learns nothing.
  s.number.erase(stream);
}

}  // namespace cudasim::detail
