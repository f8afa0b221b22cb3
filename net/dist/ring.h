// net/dist/ring.h — the collectives of one rank over its two ring
// connections (to the next rank, from the previous one).
//
// All-reduce is the bandwidth-optimal ring: the buffer is cut into P chunks;
// in P-1 reduce-scatter steps each rank sends one chunk to the next rank and
// adds the chunk it receives from the previous one into its own copy, so
// rank r ends owning the full sum of chunk (r+1) mod P; P-1 all-gather steps
// pass the finished chunks around. Each rank sends 2(P-1)/P of the buffer.
// Chunks are cut into segments (RingOptions::segment_bytes) and the steps
// are pipelined by segment: segment j of step s+1 leaves as soon as segment
// j of step s has arrived and been reduced, while the next segment is still
// on the wire. One thread drives both sockets, non-blocking, with poll(), so
// sending and receiving overlap (full duplex) whatever the socket buffers.
// Broadcast is a pipelined chain from the root; a barrier is an all-reduce
// of nothing (every rank must hear, through the ring, from every other).
//
// f16 and bf16 travel as themselves and are summed in f32 (each partial sum
// rounded to the 16-bit type once per hop, as NCCL does); their averages
// divide by P before the sum (so f16 partial sums cannot overflow where the
// average would not; bf16 does the same, for one rule); f32/f64
// averages divide the owned chunk by P before the all-gather. Every rank
// ends with the same bits.
//
// Faults (net/dist/frame.h for the wire): a closed or reset connection is a
// lost rank; a neighbour that sends nothing while this rank waits on it for
// `timeout_s` (waiting ranks send heartbeats, so only a hung, stopped or
// cut-off rank stays silent) is a timeout; a frame that disagrees with this
// rank's collective (op, dtype, count, sequence number) is a mismatch naming
// both ranks. Each is an ember::Error with one line naming the rank, its
// address and the collective; the ring then tells both neighbours (an abort
// frame) so the error travels around the ring instead of a silence.
#pragma once
#include <atomic>
#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

#include "engine/error.h"
#include "engine/file_io.h"
#include "net/dist/frame.h"

namespace ember::net::dist {

struct RingOptions {
  double timeout_s = 300;              // --comm-timeout
  size_t segment_bytes = 1 << 20;      // pipelining granularity
};

// Who a neighbour is, for messages.
struct RingPeer {
  int rank = 0;
  std::string address;  // host:port it listened on
  std::string str() const { return cat("rank ", rank, " (", address, ")"); }
};

// Lets another thread interrupt a collective in progress: set() records the
// reason and wakes the ring's poll.
class AbortSignal {
 public:
  AbortSignal();
  ~AbortSignal();
  AbortSignal(const AbortSignal&) = delete;
  AbortSignal& operator=(const AbortSignal&) = delete;
  void set(const std::string& reason);
  bool is_set() const { return set_.load(); }
  std::string reason() const;
  int fd() const { return fd_; }

 private:
  int fd_ = -1;  // eventfd
  std::atomic<bool> set_{false};
  mutable std::mutex mu_;
  std::string reason_;
};

class Ring {
 public:
  // world >= 2; the sockets are connected and handshaken (net/dist/tcp_comm.cpp).
  Ring(int rank, int world, UniqueFd to_next, UniqueFd from_prev, RingPeer next, RingPeer prev,
       const RingOptions& options, const AbortSignal* abort_signal = nullptr);

  // In place. `what` names the buffer in errors ("gradient bucket 3").
  void all_reduce(void* data, uint64_t count, DType dtype, ReduceOp op, const std::string& what);
  void broadcast(void* data, uint64_t count, DType dtype, int root, const std::string& what);
  void barrier(const std::string& what);

  // After an error: tells both neighbours (best effort, a few seconds at
  // most) why this rank stops. Neighbours that reported the error themselves
  // are not told again.
  void send_abort(const std::string& reason);
  // Orderly close: a goodbye frame to both neighbours (only with `goodbye`
  // and no failure), then shutdown, and reading until the neighbours close
  // too (half a second at most), so an abort frame just sent is not lost to
  // a reset.
  void close(bool goodbye = true);

  uint64_t collectives_done() const { return seq_; }
  const RingPeer& next() const { return next_; }
  const RingPeer& prev() const { return prev_; }
  // The error that ended this ring ("" while healthy).
  const std::string& failure() const { return failure_; }

 private:
  struct SendFrame {
    const char* data;
    uint32_t bytes, step, segment;
    uint64_t needs_received;  // frames that must have arrived (and been reduced) first
  };
  enum class Arrival : uint8_t { reduce, reduce_then_scale, copy };
  struct RecvFrame {
    char* data;
    uint32_t bytes, step, segment;
    Arrival action;
  };
  struct Collective {
    FrameOp op;
    DType dtype;
    ReduceOp reduce;
    int root;
    uint64_t count;
    uint64_t seq;
    std::string what;
    std::vector<SendFrame> sends;
    std::vector<RecvFrame> recvs;
  };
  // The frame being written to the next rank, kept across a failure so an
  // abort can finish it first (the neighbour must find the abort at a frame
  // boundary, not inside a payload).
  struct Outgoing {
    FrameHeader header;
    const char* payload = nullptr;
    size_t done = sizeof(FrameHeader);  // bytes of header + payload written (none pending by default)
    size_t total() const { return sizeof header + header.payload_bytes; }
    bool active() const { return done < total(); }
  };
  void run(Collective& c);
  [[noreturn]] void fail_with(const std::string& message, int told_already = -1);
  std::string where(const Collective& c) const;

  int rank_, world_;
  UniqueFd to_next_, from_prev_;
  RingPeer next_, prev_;
  RingOptions options_;
  const AbortSignal* abort_signal_;
  uint64_t seq_ = 0;
  std::string failure_;
  std::vector<char> staging_;  // one segment received for reduction
  Outgoing out_;
  bool next_gone_ = false;     // the next rank closed its end (goodbye or EOF) outside a collective
  std::string next_gone_why_;
  int told_ = -1;              // rank that told us of the failure (not told again)
};

}  // namespace ember::net::dist
