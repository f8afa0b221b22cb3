// net/dist/tcp_comm.h — Comm over the TCP ring (net/dist/ring.h), with the
// rendezvous (net/dist/store.h) that builds the ring.
//
// Construction is the rendezvous: rank 0 serves the store at
// MASTER_ADDR:MASTER_PORT; every rank listens on --comm-port (0: an
// ephemeral port) at the address of --comm-interface (or the route to the
// master), publishes host:port, connects to the next rank and accepts the
// previous one, each connection opened by a handshake (magic, version, run
// id, rank, world) checked on both ends. Connections that fail the
// handshake (scanners, stray clients) are dropped and the rank keeps
// waiting, until --comm-timeout.
//
// Then one communication thread runs the queued collectives in order, so
// the caller's thread (the backward pass) keeps computing while gradients
// travel. A failure ends every pending and later collective with the same
// one-line error, and the neighbours are told why.
#pragma once
#include <cstddef>
#include <memory>
#include <string>

#include "net/dist/comm.h"

namespace ember::net::dist {

struct TcpCommOptions {
  int rank = 0, world = 1;
  std::string master_addr = "127.0.0.1";  // MASTER_ADDR / --master-addr
  int master_port = 29500;                // MASTER_PORT / --master-port
  std::string run_id = "ember";           // --run-id / EMBER_RUN_ID (or the launcher's job id)
  std::string interface;                  // --comm-interface / EMBER_SOCKET_IFNAME
  int comm_port = 0;                      // --comm-port (0: ephemeral)
  double timeout_s = 300;                 // --comm-timeout
  size_t segment_bytes = 1 << 20;         // ring pipelining segment (measured: docs/DECISIONS.md)
  int socket_buffer_bytes = 4 << 20;      // SO_SNDBUF/SO_RCVBUF where the system allows
};

// Runs the rendezvous and returns the connected communicator (world 1: no
// sockets at all, collectives are no-ops).
std::unique_ptr<Comm> make_tcp_comm(const TcpCommOptions& options);

}  // namespace ember::net::dist
