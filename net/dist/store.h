// net/dist/store.h — the rendezvous: a tiny key-value store that rank 0
// serves at MASTER_ADDR:MASTER_PORT while the ranks find each other
// (torch.distributed's TCPStore, reduced to what a ring needs).
//
// Every rank (rank 0 too) connects as a client and says hello with its run
// id, rank and world size; the server checks them against its own (a world
// size that differs, or a rank claimed twice, ends the rendezvous for
// everyone with a message naming both sides; a client of another run id is
// turned away and the server keeps waiting). Then ranks set and get string
// values ("addr/3" = "10.0.0.4:41234"; a get waits until the key is set),
// and say done once their ring connections stand. The server stops when all
// ranks are done, or fails everyone at the deadline naming the ranks that
// never came. Connections that do not speak the protocol (port scanners,
// stray bytes) are dropped without disturbing the rendezvous.
#pragma once
#include <cstring>
#include <memory>
#include <string>
#include <thread>

#include "net/dist/socket.h"

namespace ember::net::dist {

struct StoreIdentity {
  int rank = 0, world = 1;
  std::string run_id;
  std::string host;  // this rank's host, for the server's messages
};

class StoreServer {
 public:
  // Binds port on every interface; the error for a port in use names it and
  // how to change it. Serves on a thread until every rank is done, the
  // deadline passes, or the server is destroyed.
  StoreServer(int port, const StoreIdentity& self, double timeout_s);
  ~StoreServer();
  StoreServer(const StoreServer&) = delete;
  StoreServer& operator=(const StoreServer&) = delete;

  int port() const { return port_; }
  // Waits for the serving thread to end; returns its error ("" when every rank finished).
  std::string join();
  // The error that ended the rendezvous so far ("" while it is going well).
  std::string failure() const;

 private:
  struct State;
  void serve();
  int port_ = 0;
  std::unique_ptr<State> state_;
  std::thread thread_;
};

class StoreClient {
 public:
  // Connects to the rendezvous (retrying until the deadline, rank 0 may
  // start later) and says hello; errors name the address and the cause.
  // Replies are awaited a few seconds past the deadline: the server's own
  // deadline ends the rendezvous with the better message (who never came).
  StoreClient(const std::string& host, int port, const StoreIdentity& self, Deadline deadline);
  // Over a connection already made (tests, the fuzz target): says hello.
  StoreClient(UniqueFd connected, const HostPort& server, const StoreIdentity& self, Deadline deadline);
  void set(const std::string& key, const std::string& value);
  std::string get(const std::string& key);  // waits until the key is set (or the deadline)
  void done();                              // this rank's ring stands

 private:
  struct Reply {
    uint8_t type;
    std::string text;
  };
  void say_hello(const StoreIdentity& self);
  void send_message(uint8_t type, const std::string& payload);
  Reply read_reply(const char* waiting_for, uint8_t expected);
  HostPort server_;
  Deadline deadline_;
  UniqueFd fd_;
};

// Message encoding shared by both ends (exposed for the tests' bad clients).
namespace store_wire {
constexpr uint32_t kMagic = 0x534d4245;  // "EBMS"
constexpr uint32_t kVersion = 1;
constexpr uint32_t kMaxMessage = 1 << 16;
enum Type : uint8_t { hello = 1, set = 2, get = 3, done = 4, ok = 10, value = 11, error = 12 };
// header (magic, payload length, type) + payload
std::string message(uint8_t type, const std::string& payload);
std::string str(const std::string& s);  // u32 length + bytes
std::string u32(uint32_t v);
// Reads a payload's fields, bounds-checked: after a read past the end, ok is false.
struct Cursor {
  const std::string& s;
  size_t pos = 0;
  bool ok = true;
  uint32_t u32() {
    if (s.size() - pos < 4) return ok = false, 0;
    uint32_t v;
    std::memcpy(&v, s.data() + pos, 4);
    pos += 4;
    return v;
  }
  std::string str() {
    const uint32_t n = u32();
    if (!ok || n > s.size() - pos) return ok = false, std::string();
    std::string out = s.substr(pos, n);
    pos += n;
    return out;
  }
};
}  // namespace store_wire

}  // namespace ember::net::dist
