// tests/net/dist/test_rendezvous.cpp — rank 0's rendezvous protocol without
// sockets (net/dist/rendezvous.cpp): connections' bytes in, answers out.
// The multi-process tests (test_dist_processes.cpp) drive it through real
// ranks; these check what hostile or broken peers send: ranks past 2^31,
// an empty key, control characters and megabytes in names, a flood of
// strangers, replies of the wrong type to a client.
#include <doctest/doctest.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstring>
#include <string>
#include <vector>

#include "engine/error.h"
#include "engine/file_io.h"
#include "net/dist/rendezvous.h"
#include "net/dist/store.h"
#include "tests/support/test_helpers.h"

using namespace ember;
using namespace ember::net::dist;
using namespace ember::net::dist::store_wire;
using ember::testing::contains;

namespace {

std::string hello_of(uint32_t rank, uint32_t world, const std::string& run, const std::string& host = "h") {
  return message(hello, u32(kVersion) + u32(rank) + u32(world) + str(run) + str(host));
}

struct Answer {
  uint8_t type;
  std::string text;
};
// The answers in c.out (cleared), parsed.
std::vector<Answer> answers(RendezvousConn& c) {
  std::vector<Answer> out;
  size_t pos = 0;
  while (pos + 12 <= c.out.size()) {
    uint32_t len;
    std::memcpy(&len, c.out.data() + pos + 4, 4);
    const std::string payload = c.out.substr(pos + 12, len);
    Cursor in{payload};
    Answer a{uint8_t(c.out[pos + 8]), ""};
    if (a.type == value || a.type == error) a.text = in.str();
    out.push_back(a);
    pos += 12 + len;
  }
  c.out.clear();
  return out;
}

void send_to(Rendezvous& r, RendezvousConn& c, const std::string& bytes) { r.receive(c, bytes.data(), bytes.size()); }

}  // namespace

TEST_CASE("rendezvous: ranks join, set and get, a get waits for its key, done ends it") {
  Rendezvous r(StoreIdentity{0, 2, "run", "rank0"}, 29500);
  RendezvousConn& a = r.accept("10.0.0.1");
  RendezvousConn& b = r.accept("10.0.0.2");
  send_to(r, a, hello_of(0, 2, "run"));
  send_to(r, b, hello_of(1, 2, "run"));
  CHECK(answers(a).size() == 1);
  CHECK(answers(b).size() == 1);
  send_to(r, b, message(get, str("addr/0")));
  CHECK(answers(b).empty());  // waits
  send_to(r, a, message(set, str("addr/0") + str("10.0.0.1:4000")));
  const std::vector<Answer> got = answers(b);
  REQUIRE(got.size() == 1);
  CHECK(got[0].type == value);
  CHECK(got[0].text == "10.0.0.1:4000");
  send_to(r, a, message(done, ""));
  send_to(r, b, message(done, ""));
  CHECK(r.all_done());
  CHECK(r.error().empty());
}

TEST_CASE("rendezvous: a set of the empty key answers only a get that waits for it") {
  Rendezvous r(StoreIdentity{0, 3, "run", "rank0"}, 29500);
  RendezvousConn& a = r.accept("10.0.0.1");
  RendezvousConn& b = r.accept("10.0.0.2");
  RendezvousConn& c = r.accept("10.0.0.3");
  send_to(r, a, hello_of(0, 3, "run"));
  send_to(r, b, hello_of(1, 3, "run"));
  send_to(r, c, hello_of(2, 3, "run"));
  answers(a), answers(b), answers(c);
  send_to(r, c, message(get, str("")));  // c waits for ""
  send_to(r, a, message(set, str("") + str("x")));
  CHECK(answers(b).empty());  // b never asked: no stray value
  const std::vector<Answer> got = answers(c);
  REQUIRE(got.size() == 1);
  CHECK(got[0].text == "x");
}

TEST_CASE("rendezvous: a rank number past 2^31 is not a rank, and ends the rendezvous") {
  Rendezvous r(StoreIdentity{0, 2, "run", "rank0"}, 29500);
  RendezvousConn& a = r.accept("10.0.0.9");
  send_to(r, a, hello_of(0x80000001u, 2, "run"));
  CHECK(a.rank == -1);
  CHECK(a.closing);
  CHECK(contains(r.error(), "rank 2147483649"));
  CHECK(contains(r.error(), "is not a rank of a world of 2"));
}

TEST_CASE("rendezvous: hosts and run ids from the network reach messages on one short line") {
  Rendezvous r(StoreIdentity{0, 2, "run", "rank0"}, 29500);
  // A stranger whose run id is a megabyte with line breaks: turned away, on one line, cut.
  RendezvousConn& s = r.accept("10.0.0.7");
  const std::string hostile(60000, '\n');
  send_to(r, s, hello_of(1, 2, "other\nrun" + hostile, "evil\nhost"));
  const std::vector<Answer> got = answers(s);
  REQUIRE(got.size() == 1);
  CHECK(got[0].type == error);
  CHECK(contains(got[0].text, "run id mismatch"));
  CHECK(got[0].text.find('\n') == std::string::npos);
  CHECK(got[0].text.size() < 600);
  // Many strangers: the timeout names the first few and counts the rest.
  for (int i = 0; i < 50; ++i) send_to(r, r.accept("10.0.1." + std::to_string(i)), hello_of(1, 2, "stale"));
  r.time_out(5);
  const std::string e = r.error();
  CHECK(contains(e, "rank(s) 0, 1 never joined"));
  CHECK(contains(e, "and 43 more connections of other runs"));
  CHECK(e.find('\n') == std::string::npos);
  CHECK(e.size() < 3000);
}

TEST_CASE("rendezvous: bytes that are not a message drop a stranger, and end the rendezvous from a rank") {
  Rendezvous r(StoreIdentity{0, 2, "run", "rank0"}, 29500);
  RendezvousConn& stranger = r.accept("10.0.0.5");
  send_to(r, stranger, std::string("GET / HTTP/1.1\r\n\r\n"));
  CHECK(stranger.closing);
  CHECK(r.error().empty());
  RendezvousConn& a = r.accept("10.0.0.1");
  send_to(r, a, hello_of(0, 2, "run"));
  answers(a);
  send_to(r, a, std::string(16, 'x'));
  CHECK(contains(r.error(), "rank 0 (h, 10.0.0.1) sent bytes that are not a rendezvous message"));
  // A length past the limit is refused from its header, never buffered.
  RendezvousConn& big = r.accept("10.0.0.6");
  send_to(r, big, u32(kMagic) + u32(kMaxMessage + 1) + std::string(4, '\1'));
  CHECK(big.closing);
  CHECK(big.in.empty());
}

TEST_CASE("rendezvous client: a reply of the wrong type or a long error is one short line naming the rendezvous") {
  auto client_error = [](const std::string& replies) {
    int fds[2];
    REQUIRE(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds) == 0);
    UniqueFd ours(fds[0]), theirs(fds[1]);
    REQUIRE(::write(theirs.get(), replies.data(), replies.size()) == ssize_t(replies.size()));
    ::shutdown(theirs.get(), SHUT_WR);
    try {
      StoreClient client(std::move(ours), HostPort{"rank0", 29500}, StoreIdentity{1, 2, "run", "rank1"},
                         deadline_in(2));
      client.set("k", "v");
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  // hello answered with a value instead of ok
  std::string e = client_error(message(value, str("x")));
  CHECK(contains(e, "rendezvous at rank0:29500"));
  CHECK(contains(e, "reply of type 11 where 10 was expected"));
  // an error reply of 60 KB: cut
  e = client_error(message(error, str(std::string(60000, 'z'))));
  CHECK(e.size() < 1100);
  CHECK(contains(e, "zzz..."));
  // the server goes away after hello
  e = client_error(message(ok, ""));
  CHECK(contains(e, "waiting for a set"));
}
