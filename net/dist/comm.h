// net/dist/comm.h — the one interface data-parallel training talks to:
// all-reduce (sum or average) of f32/f16/bf16/f64 buffers, broadcast, barrier,
// across the ranks of a run. Two implementations: the TCP ring written here
// (net/dist/tcp_comm.h, host buffers) and NCCL (net/dist/nccl_comm.h, GPU
// buffers).
//
// Collectives are asynchronous: each call queues the operation and returns
// a Work; wait() blocks until it is done (TCP) or orders the device's
// compute stream after it (NCCL). Every rank must issue the same collectives
// in the same order with the same sizes; each one carries a sequence number
// and its size, so a rank that disagrees is an error naming both ranks, not
// a hang or a wrong sum. A lost or silent rank fails every pending and later
// collective with one line naming that rank, its host and the collective.
#pragma once
#include <memory>
#include <string>

#include "engine/tensor.h"
#include "net/dist/frame.h"

namespace ember::net::dist {

class Work {
 public:
  virtual ~Work() = default;
  // Throws the collective's error (an ember::Error) if it failed.
  virtual void wait() = 0;
  // Seconds the collective itself ran (0 until done; what overlap is measured with).
  virtual double seconds() const = 0;
};

class Comm {
 public:
  virtual ~Comm() = default;
  virtual int rank() const = 0;
  virtual int world_size() const = 0;
  virtual const char* backend() const = 0;  // "tcp", "nccl"
  // Where buffers must live: the CPU (TCP) or this rank's GPU (NCCL).
  virtual Device buffer_device() const = 0;

  // In place across ranks; `what` names the buffer in errors ("gradient bucket 3").
  // The collective keeps a reference to the tensor's storage until it is
  // done; the caller must not touch the data before wait() returns.
  virtual std::shared_ptr<Work> all_reduce(const Tensor& t, ReduceOp op, const std::string& what) = 0;
  virtual std::shared_ptr<Work> broadcast(const Tensor& t, int root, const std::string& what) = 0;
  virtual void barrier(const std::string& what) = 0;

  // Ends every pending and later collective with `reason` and tells the
  // other ranks why this one stops (best effort, a few seconds at most).
  virtual void abort(const std::string& reason) = 0;
};

// Blocking conveniences.
inline void all_reduce_now(Comm& c, const Tensor& t, ReduceOp op, const std::string& what) {
  c.all_reduce(t, op, what)->wait();
}
inline void broadcast_now(Comm& c, const Tensor& t, int root, const std::string& what) {
  c.broadcast(t, root, what)->wait();
}

}  // namespace ember::net::dist
