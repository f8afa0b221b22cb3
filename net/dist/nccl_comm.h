// net/dist/nccl_comm.h — Comm over NCCL (GPU buffers), for builds with
// CUDA and NCCL (EMBER_NCCL); the NCCL calls themselves are in
// cuda/nccl/nccl_communicator.cu.
//
// Set-up: the rendezvous of the TCP ring (net/dist/store.h) carries rank
// 0's NCCL unique id to every rank (with the same run-id and world-size
// checks); then one NCCL communicator per process, on its GPU. Collectives
// are queued on NCCL's own stream after the work already on the compute
// stream; Work::wait() makes the compute stream wait for them (the host does
// not block). A watchdog thread polls ncclCommGetAsyncError and how long the
// oldest collective has been running: past --comm-timeout it aborts the
// communicator (ncclCommAbort), and if the program has not stopped on the
// error 5 s later, it prints the error and exits the process: a GPU stuck
// in a collective would otherwise never return to the host.
#pragma once
#include <memory>
#include <string>

#include "net/dist/comm.h"

namespace ember::net::dist {

struct NcclCommOptions {
  int rank = 0, world = 1;
  std::string master_addr = "127.0.0.1";
  int master_port = 29500;
  std::string run_id = "ember";
  int device = 0;  // this rank's GPU (cuda::init has made it current)
  double timeout_s = 300;
};

std::unique_ptr<Comm> make_nccl_comm(const NcclCommOptions& options);

}  // namespace ember::net::dist
