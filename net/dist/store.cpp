// net/dist/store.cpp — the rendezvous key-value store (net/dist/store.h).
#include "net/dist/store.h"

#include <arpa/inet.h>
#include <cerrno>
#include <netinet/in.h>
#include <cstring>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <map>
#include <mutex>
#include <set>
#include <vector>

#include "engine/error.h"
#include "net/dist/rendezvous.h"

namespace ember::net::dist {

// ----------------------------------------------------------------- encoding

namespace store_wire {
std::string u32(uint32_t v) { return std::string(reinterpret_cast<const char*>(&v), 4); }
std::string str(const std::string& s) { return u32(uint32_t(s.size())) + s; }
std::string message(uint8_t type, const std::string& payload) {
  return u32(kMagic) + u32(uint32_t(payload.size())) + std::string(1, char(type)) + std::string(3, '\0') + payload;
}
}  // namespace store_wire

namespace {
using namespace store_wire;
constexpr size_t kHeader = 12;
}  // namespace

// ------------------------------------------------------------------- server

struct StoreServer::State {
  UniqueFd listen_fd;
  int wake_fd = -1;
  double timeout_s = 0;
  std::unique_ptr<Rendezvous> rendezvous;  // the protocol; this file moves the bytes
};

StoreServer::StoreServer(int port, const StoreIdentity& self, double timeout_s) : state_(std::make_unique<State>()) {
  try {
    state_->listen_fd = listen_tcp("", port);
  } catch (const Error& e) {
    if (std::string(e.what()).rfind("address already in use", 0) == 0)
      fail(cat("MASTER_PORT ", port, " is already in use on this host (another run, or a rank 0 still alive?): "
               "choose another with --master-port or MASTER_PORT"));
    fail(cat("rendezvous: ", e.what(), " (MASTER_PORT ", port, ")"));
  }
  port_ = local_port(state_->listen_fd.get());
  state_->wake_fd = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  EMBER_CHECK(state_->wake_fd >= 0, "eventfd: ", std::strerror(errno));
  state_->rendezvous = std::make_unique<Rendezvous>(self, port_);
  state_->timeout_s = timeout_s;
  set_nonblocking(state_->listen_fd.get(), true);
  thread_ = std::thread([this] { serve(); });
}

StoreServer::~StoreServer() {
  if (thread_.joinable()) {
    const uint64_t one = 1;
    (void)!::write(state_->wake_fd, &one, sizeof one);
    thread_.join();
  }
  ::close(state_->wake_fd);
}

std::string StoreServer::join() {
  if (thread_.joinable()) thread_.join();
  return failure();
}

std::string StoreServer::failure() const { return state_->rendezvous->error(); }

void StoreServer::serve() {
  State& st = *state_;
  Rendezvous& rdv = *st.rendezvous;
  const Deadline deadline = deadline_in(st.timeout_s);
  for (;;) {
    const bool all_done = rdv.all_done();
    bool flushing = false;
    for (auto& c : rdv.connections()) flushing = flushing || !c->out.empty();
    if (all_done && !flushing) break;
    // After a fatal error the server stays up until its deadline (or its
    // owner stops it), answering every hello with the error: a rank that
    // connects late (rank 0's own client, too) learns it at once.
    const bool failed = !rdv.error().empty();
    if (failed && Clock::now() >= deadline && !flushing) break;
    if (!failed && Clock::now() >= deadline) {
      rdv.time_out(st.timeout_s);
      continue;
    }
    auto& conns = rdv.connections();
    std::vector<pollfd> fds;
    fds.push_back({st.wake_fd, POLLIN, 0});
    fds.push_back({st.listen_fd.get(), POLLIN, 0});
    for (auto& c : conns) fds.push_back({c->fd.get(), short(POLLIN | (c->out.empty() ? 0 : POLLOUT)), 0});
    const int rc = ::poll(fds.data(), fds.size(), std::max(1, std::min(ms_until(deadline), 1000)));
    if (rc < 0 && errno != EINTR) return rdv.set_error(cat("rendezvous: poll: ", std::strerror(errno)));
    if (rc <= 0) continue;
    if (fds[0].revents & POLLIN) {  // the owner is going away
      if (rdv.error().empty() && !all_done) rdv.set_error("rendezvous stopped");
      break;
    }
    const size_t polled = fds.size() - 2;  // connections accepted below are polled next time
    if (fds[1].revents & POLLIN) {
      for (int k = 0; k < 16; ++k) {
        sockaddr_storage ss{};
        socklen_t len = sizeof ss;
        const int fd = ::accept4(st.listen_fd.get(), reinterpret_cast<sockaddr*>(&ss), &len, SOCK_CLOEXEC | SOCK_NONBLOCK);
        if (fd < 0) break;
        char host[64] = "?";
        if (ss.ss_family == AF_INET) inet_ntop(AF_INET, &reinterpret_cast<sockaddr_in*>(&ss)->sin_addr, host, sizeof host);
        rdv.accept(host).fd = UniqueFd(fd);
      }
    }
    for (size_t i = 0; i < polled; ++i) {
      RendezvousConn& c = *conns[i];
      const short ev = fds[i + 2].revents;
      if (ev & POLLOUT) {
        const ssize_t k = ::send(c.fd.get(), c.out.data(), c.out.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
        if (k > 0) c.out.erase(0, size_t(k));
        else if (k < 0 && errno != EAGAIN && errno != EINTR) c.out.clear(), c.closing = true;
      }
      if (ev & (POLLIN | POLLHUP | POLLERR)) {
        char buf[4096];
        const ssize_t k = ::recv(c.fd.get(), buf, sizeof buf, MSG_DONTWAIT);
        if (k > 0) rdv.receive(c, buf, size_t(k));
        else if (k == 0 || (errno != EAGAIN && errno != EINTR)) rdv.lost(c);
      }
    }
    // Drop closed connections once their last words are out.
    rdv.drop_closed();
  }
  // Let the last replies reach their clients before the sockets close.
  for (auto& c : rdv.connections())
    if (!c->out.empty()) {
      try {
        send_exact(c->fd.get(), c->out.data(), c->out.size(), deadline_in(1.0));
      } catch (const Error&) {
      }
    }
}

// ------------------------------------------------------------------- client

StoreClient::StoreClient(const std::string& host, int port, const StoreIdentity& self, Deadline deadline)
    : server_{host, port}, deadline_(deadline + std::chrono::seconds(5)) {
  try {
    fd_ = connect_tcp(host, port, deadline);
  } catch (const Error& e) {
    fail(cat("cannot reach the rendezvous of rank 0 at ", server_.str(), " (", e.what(),
             "): is rank 0 running, and are MASTER_ADDR/MASTER_PORT (--master-addr/--master-port) right?"));
  }
  say_hello(self);
}

StoreClient::StoreClient(UniqueFd connected, const HostPort& server, const StoreIdentity& self, Deadline deadline)
    : server_(server), deadline_(deadline), fd_(std::move(connected)) {
  say_hello(self);
}

void StoreClient::say_hello(const StoreIdentity& self) {
  send_message(hello, u32(kVersion) + u32(uint32_t(self.rank)) + u32(uint32_t(self.world)) + str(self.run_id) +
                          str(self.host));
  read_reply("its hello", ok);
}

void StoreClient::send_message(uint8_t type, const std::string& payload) {
  const std::string m = message(type, payload);
  try {
    send_exact(fd_.get(), m.data(), m.size(), deadline_);
  } catch (const Error& e) {
    fail(cat("rendezvous at ", server_.str(), ": ", e.what()));
  }
}

StoreClient::Reply StoreClient::read_reply(const char* waiting_for, uint8_t expected) {
  char header[kHeader];
  Reply r;
  try {
    recv_exact(fd_.get(), header, kHeader, deadline_);
    uint32_t magic, len;
    std::memcpy(&magic, header, 4);
    std::memcpy(&len, header + 4, 4);
    EMBER_CHECK(magic == kMagic && len <= kMaxMessage, "the reply is not a rendezvous message");
    r.type = uint8_t(header[8]);
    std::string payload(len, '\0');
    recv_exact(fd_.get(), payload.data(), len, deadline_);
    Cursor in{payload};
    if (r.type == value || r.type == error) r.text = in.str();
    EMBER_CHECK(in.ok, "malformed reply");
    EMBER_CHECK(r.type == expected || r.type == error, "reply of type ", int(r.type), " where ", int(expected),
                " was expected");
  } catch (const Error& e) {
    fail(cat("rendezvous at ", server_.str(), " (waiting for ", waiting_for, "): ", e.what()));
  }
  // (The server's own words, cut: a reply is at most 64 KiB.)
  if (r.type == error) fail(r.text.size() > 1000 ? r.text.substr(0, 1000) + "..." : r.text);
  return r;
}

void StoreClient::set(const std::string& key, const std::string& value) {
  send_message(store_wire::set, str(key) + str(value));
  read_reply("a set", ok);
}

std::string StoreClient::get(const std::string& key) {
  send_message(store_wire::get, str(key));
  return read_reply(key.c_str(), value).text;
}

void StoreClient::done() {
  send_message(store_wire::done, "");
  read_reply("done", ok);
}

}  // namespace ember::net::dist
