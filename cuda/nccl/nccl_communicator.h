// cuda/nccl/nccl_communicator.h — NCCL for ember's data-parallel training:
// one communicator per process (one GPU each), collectives on a dedicated
// communication stream ordered after the compute stream's work with events,
// and the means to notice a stuck or failed collective (asynchronous errors,
// how long a collective has been pending) and abort it.
//
// Plain C++ interface (no CUDA or NCCL types), so net/dist/nccl_comm.cpp
// adapts it to net::dist::Comm without including CUDA headers. The unique
// id travels through ember's rendezvous store. Communicators are created
// non-blocking (ncclConfig_t.blocking = 0) so that a rank that never joins
// is a timeout, not a hang.
#pragma once
#include <cstddef>
#include <memory>
#include <string>

#include "engine/dtype.h"

namespace ember::cuda {

// ncclGetUniqueId's 128 bytes (made by rank 0).
std::string nccl_unique_id();
// "2.28.9"
std::string nccl_version();

// One queued collective: events around it on the communication stream.
class NcclPending {
 public:
  virtual ~NcclPending() = default;
  // Makes `stream` (a cudaStream_t) wait for the collective (no host wait).
  virtual void order_before(void* stream) = 0;
  virtual bool done() = 0;           // finished on the device
  virtual double seconds() = 0;      // device time it took (0 until done)
  virtual double pending_seconds() = 0;  // host time since it was queued
};

class NcclCommunicator {
 public:
  // Joins the communicator of `world` ranks on `device`, waiting at most
  // timeout_s for the others.
  NcclCommunicator(int rank, int world, const std::string& unique_id, int device, double timeout_s);
  ~NcclCommunicator();
  NcclCommunicator(const NcclCommunicator&) = delete;
  NcclCommunicator& operator=(const NcclCommunicator&) = delete;

  // In place; queued on the communication stream after what `compute_stream` holds so far.
  std::shared_ptr<NcclPending> all_reduce(void* data, size_t count, DType dt, bool average, void* compute_stream);
  std::shared_ptr<NcclPending> broadcast(void* data, size_t count, DType dt, int root, void* compute_stream);

  // "" while healthy, else NCCL's asynchronous error.
  std::string async_error();
  // Aborts every collective in flight (other ranks see this rank gone).
  void abort();

  struct Impl;  // the NCCL communicator, its stream and events (nccl_communicator.cu)

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace ember::cuda
