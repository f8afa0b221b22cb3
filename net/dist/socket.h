// net/dist/socket.h — the TCP plumbing under the rendezvous store and the
// ring: listening, connecting with retries until a deadline, exact reads and
// writes with a deadline, socket options, and which local address a rank
// publishes (NCCL_SOCKET_IFNAME's conventions, or the route to MASTER_ADDR).
//
// Every failure is an ember::Error with a one-line message; callers add who
// the peer was. Sockets are owned by engine/file_io.h's UniqueFd.
#pragma once
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>

#include "engine/file_io.h"

namespace ember::net::dist {

using Clock = std::chrono::steady_clock;
using Deadline = Clock::time_point;
inline Deadline deadline_in(double seconds) {
  return Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds));
}
// Milliseconds left until `d` (0 when past), capped for poll().
int ms_until(Deadline d);

// "host:port" of a peer as it is published and printed.
struct HostPort {
  std::string host;
  int port = 0;
  std::string str() const;
};
// Parses "host:port" or "[v6addr]:port"; errors name `what`.
HostPort parse_host_port(const std::string& text, const char* what);

// A listening TCP socket on host:port (host "" = every interface; port 0 =
// an ephemeral port). Errors carry errno's text; EADDRINUSE's message starts
// with "address already in use" so callers can name their flag.
UniqueFd listen_tcp(const std::string& host, int port, int backlog = 64);
// The port a bound socket got.
int local_port(int fd);

// Connects to host:port, retrying refused/unreachable attempts every 50-500 ms
// until `deadline`; then errors with the last errno's text.
UniqueFd connect_tcp(const std::string& host, int port, Deadline deadline);

// Accepts one connection, waiting until `deadline` (errors on timeout);
// `peer` receives the caller's address.
UniqueFd accept_tcp(int listen_fd, Deadline deadline, std::string* peer = nullptr);

// Exact I/O on a blocking or non-blocking socket, polling until `deadline`.
// recv_exact errors "connection closed" on EOF before n bytes.
void send_exact(int fd, const void* data, size_t n, Deadline deadline);
void recv_exact(int fd, void* data, size_t n, Deadline deadline);

void set_nonblocking(int fd, bool on);
// TCP_NODELAY, keep-alive, and send/receive buffers of `buffer_bytes` where
// the system allows that much (else the kernel's autotuning is kept).
void tune_stream_socket(int fd, int buffer_bytes);

// The IPv4 address this rank publishes for its ring connections:
//  * spec non-empty (--comm-interface / EMBER_SOCKET_IFNAME): the first
//    interface matching it, NCCL_SOCKET_IFNAME's syntax: "eth0,ib" prefixes,
//    "=eth0" exact names, "^docker,lo" excluded prefixes;
//  * otherwise the address the kernel would route from toward master_host;
//    when that is loopback but the master was named by a host name (Debian
//    maps a host's own name to 127.0.1.1), the first non-loopback address,
//    so ranks on other hosts can reach it.
std::string choose_local_address(const std::string& spec, const std::string& master_host);

// The host name of this machine (for messages).
std::string this_host_name();

}  // namespace ember::net::dist
