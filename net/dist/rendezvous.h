// net/dist/rendezvous.h — the rendezvous server's protocol without its
// sockets: what rank 0's store (net/dist/store.cpp) does with the bytes each
// connection sends, and what it answers. StoreServer's thread moves bytes
// between the sockets and this state; the fuzz target
// (tests/fuzz/fuzz_rendezvous.cpp) drives it with arbitrary bytes.
//
// Messages: a 12-byte header (magic "EBMS", payload length, type, 3 zero
// bytes) and the payload (store_wire in net/dist/store.h). A connection must
// start with hello (version, rank, world, run id, host); then set, get
// (answered when the key is set) and done. Bytes that are not a message
// drop the connection; from a rank that has joined they end the rendezvous
// for everyone, as a world size that differs or a rank claimed twice does.
// Every text taken from a connection (run ids, hosts) is quoted and cut
// before it reaches a message (json::shown), and the list of connections
// turned away is bounded.
#pragma once
#include <cstddef>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "engine/file_io.h"
#include "net/dist/store.h"

namespace ember::net::dist {

struct RendezvousConn {
  UniqueFd fd;             // the server's socket (unused by the protocol itself)
  std::string peer;        // address it came from
  std::string in, out;     // bytes received and not yet handled; bytes to send
  int rank = -1;           // after hello
  std::string host;        // the rank's own name for its host
  std::string waiting;     // key of a pending get
  bool has_waiting = false;
  bool closing = false;    // drop after flushing `out`
};

class Rendezvous {
 public:
  // `port` only names the rendezvous in messages.
  Rendezvous(const StoreIdentity& self, int port);

  // A new connection from `peer`.
  RendezvousConn& accept(const std::string& peer);
  // Bytes from c's peer: handles every whole message among them.
  void receive(RendezvousConn& c, const char* data, size_t n);
  // c's peer went away (closed, reset).
  void lost(RendezvousConn& c);
  // The deadline passed: ends the rendezvous, naming the ranks that never
  // came or never finished (once; later calls do nothing).
  void time_out(double timeout_s);
  // Forgets the connections that are closing and have nothing left to send.
  void drop_closed();

  std::vector<std::unique_ptr<RendezvousConn>>& connections() { return conns_; }
  bool all_done() const { return int(done_.size()) == self_.world; }
  // The error that ended the rendezvous ("" while it is going well); thread-safe.
  std::string error() const;
  // Ends the rendezvous with `why` if nothing has ended it yet (poll failed, the owner stopped it).
  void set_error(const std::string& why);

  static constexpr size_t kMaxTurnedAway = 8;  // connections of other runs named in the timeout message

 private:
  void handle(RendezvousConn& c, uint8_t type, const std::string& payload);
  void fatal(const std::string& why);
  std::string who(int rank) const;
  static void send(RendezvousConn& c, uint8_t type, const std::string& payload);

  StoreIdentity self_;
  int port_;
  mutable std::mutex error_mu_;
  std::string error_;  // written by the serving thread only, under error_mu_
  std::vector<std::unique_ptr<RendezvousConn>> conns_;
  std::map<std::string, std::string> kv_;
  std::map<int, std::string> joined_;  // rank -> "host, address"
  std::set<int> done_;
  std::vector<std::string> turned_away_;
  size_t turned_away_count_ = 0;
};

}  // namespace ember::net::dist
