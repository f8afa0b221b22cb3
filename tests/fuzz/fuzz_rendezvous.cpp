// tests/fuzz/fuzz_rendezvous.cpp — libFuzzer target of the rendezvous
// messages (net/dist/rendezvous.cpp, net/dist/store.cpp): both ends of the
// store that ranks meet at.
//
// Input: byte 0 even — the server: rank 0's protocol state (a world of 3,
// run "fuzz-run") gets the rest as chunks, each [op][length][bytes]: op bits
// 0-1 name one of four connections, bits 6-7 what happens on it (0, 1: the
// bytes arrive; 2: the peer goes away; 3: the deadline passes). Byte 0
// odd — the client: a rank's StoreClient says hello, sets, gets (and
// parses the address it got, as tcp_comm.cpp does) and says done over a
// socket pair whose other end answers with the rest of the input, then
// closes.
// Seeds: tests/fuzz/corpus/fuzz_rendezvous (tests/fuzz/make_seeds.cpp:
// ember's own messages of a 3-rank rendezvous, and the replies a client
// gets); dictionary tests/fuzz/fuzz_rendezvous.dict.
// Expected, server: every answer is a whole, well-formed message (ok, value
// or error with a string), no connection buffers more than one message, the
// rendezvous' error is one line and short. Client: success or an
// ember::Error of one line. Anything else (crash, sanitizer report, leak,
// > 1 s) is a bug.
#include <sys/socket.h>
#include <unistd.h>

#include <cstring>
#include <string>

#include "engine/file_io.h"
#include "net/dist/rendezvous.h"
#include "net/dist/store.h"
#include "tests/fuzz/fuzz_util.h"

using namespace ember;
using namespace ember::net::dist;

namespace {

constexpr size_t kHeader = 12;

// `out` must be a run of whole answers of the server.
void check_answers(const std::string& out) {
  size_t pos = 0;
  while (pos < out.size()) {
    if (out.size() - pos < kHeader) fuzz::fuzz_fail("an answer cut inside its header");
    uint32_t magic, len;
    std::memcpy(&magic, out.data() + pos, 4);
    std::memcpy(&len, out.data() + pos + 4, 4);
    const uint8_t type = uint8_t(out[pos + 8]);
    if (magic != store_wire::kMagic || len > store_wire::kMaxMessage || out.size() - pos - kHeader < len)
      fuzz::fuzz_fail("an answer that is not a whole rendezvous message");
    const std::string payload = out.substr(pos + kHeader, len);
    store_wire::Cursor in{payload};
    if (type == store_wire::value || type == store_wire::error) {
      const std::string text = in.str();
      if (!in.ok || in.pos != payload.size()) fuzz::fuzz_fail("an answer whose string does not fill it");
      if (type == store_wire::error && text.find('\n') != std::string::npos)
        fuzz::fuzz_fail("an error answer on two lines: " + text);
    } else if (type != store_wire::ok || len != 0) {
      fuzz::fuzz_fail("an answer of type " + std::to_string(type));
    }
    pos += kHeader + len;
  }
}

void fuzz_server(const uint8_t* data, size_t size) {
  Rendezvous rdv(StoreIdentity{0, 3, "fuzz-run", "rank0-host"}, 29500);
  RendezvousConn* conns[4] = {};
  size_t pos = 0;
  while (pos + 2 <= size) {
    const uint8_t op = data[pos], len = data[pos + 1];
    pos += 2;
    const size_t n = std::min<size_t>(len, size - pos);
    const int k = op & 3;
    if (!conns[k]) conns[k] = &rdv.accept("10.0.0." + std::to_string(k + 1));
    switch (op >> 6) {
      case 0:
      case 1: rdv.receive(*conns[k], reinterpret_cast<const char*>(data + pos), n); break;
      case 2: rdv.lost(*conns[k]); break;
      default: rdv.time_out(1.0); break;
    }
    pos += n;
    for (auto& c : rdv.connections()) {
      if (c->in.size() > kHeader + store_wire::kMaxMessage) fuzz::fuzz_fail("a connection buffers more than a message");
      check_answers(c->out);
      c->out.clear();  // sent
    }
    // Closed connections go (as the server drops them); a later op on that slot opens another.
    for (auto*& c : conns)
      if (c && c->closing) c = nullptr;
    rdv.drop_closed();
    const std::string error = rdv.error();
    if (error.find('\n') != std::string::npos || error.size() > 4000)
      fuzz::fuzz_fail("the rendezvous error is not one short line: " + error.substr(0, 300));
  }
}

void fuzz_client(const uint8_t* data, size_t size) {
  int fds[2];
  if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds) != 0) {
    std::perror("socketpair");
    std::abort();
  }
  UniqueFd ours(fds[0]), theirs(fds[1]);
  const int bytes = 1 << 20;
  ::setsockopt(fds[1], SOL_SOCKET, SO_SNDBUF, &bytes, sizeof bytes);
  size_t written = 0;
  while (written < size) {
    const ssize_t w = ::write(theirs.get(), data + written, size - written);
    if (w <= 0) {
      std::perror("write");
      std::abort();
    }
    written += size_t(w);
  }
  ::shutdown(theirs.get(), SHUT_WR);
  try {
    StoreClient client(std::move(ours), HostPort{"rank0-host", 29500}, StoreIdentity{1, 3, "fuzz-run", "rank1-host"},
                       deadline_in(0.5));
    client.set("addr/1", "10.0.0.2:41234");
    // The next rank's address, parsed as tcp_comm.cpp does before connecting.
    const HostPort next = parse_host_port(client.get("addr/2"), "rank address");
    if (next.port < 0 || next.port > 65535) fuzz::fuzz_fail("a port out of range: " + std::to_string(next.port));
    client.done();
  } catch (const Error& e) {
    fuzz::check_one_line(e);
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  if (data[0] & 1)
    fuzz_client(data + 1, size - 1);
  else
    fuzz_server(data + 1, size - 1);
  return 0;
}
