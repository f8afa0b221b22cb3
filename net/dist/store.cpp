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

// Reads fields from a payload, bounds-checked.
struct Cursor {
  const std::string& s;
  size_t pos = 0;
  bool ok = true;
  uint32_t u32() {
    if (pos + 4 > s.size()) return ok = false, 0;
    uint32_t v;
    std::memcpy(&v, s.data() + pos, 4);
    pos += 4;
    return v;
  }
  std::string str() {
    const uint32_t n = u32();
    if (!ok || pos + n > s.size()) return ok = false, std::string();
    std::string out = s.substr(pos, n);
    pos += n;
    return out;
  }
};

}  // namespace

// ------------------------------------------------------------------- server

struct StoreServer::State {
  UniqueFd listen_fd;
  int wake_fd = -1;
  StoreIdentity self;
  double timeout_s = 0;
  std::string error;  // written by the serving thread only, under error_mu
  mutable std::mutex error_mu;
  struct Conn {
    UniqueFd fd;
    std::string peer;       // address it came from
    std::string in, out;    // buffered bytes
    int rank = -1;          // after hello
    std::string host;       // the rank's own name for its host
    std::string waiting;    // key of a pending get
    bool closing = false;   // drop after flushing `out`
  };
  std::vector<std::unique_ptr<Conn>> conns;
  std::map<std::string, std::string> kv;
  std::map<int, std::string> joined;  // rank -> "host (address)"
  std::set<int> done;
  std::vector<std::string> turned_away;
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
  state_->self = self;
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

std::string StoreServer::failure() const {
  std::lock_guard<std::mutex> lock(state_->error_mu);
  return state_->error;
}

void StoreServer::serve() {
  State& st = *state_;
  const Deadline deadline = deadline_in(st.timeout_s);
  const int world = st.self.world;
  auto send = [](State::Conn& c, uint8_t type, const std::string& payload) { c.out += message(type, payload); };
  // Ends the rendezvous for everyone with `why`.
  auto set_error = [&](const std::string& why) {
    std::lock_guard<std::mutex> lock(st.error_mu);
    if (st.error.empty()) st.error = why;
  };
  auto fatal = [&](const std::string& why) {
    if (!st.error.empty()) return;
    set_error(why);
    for (auto& c : st.conns)
      if (c->rank >= 0) send(*c, error, str(why)), c->closing = true;
  };
  auto who = [&](int rank) { return cat("rank ", rank, " (", st.joined.count(rank) ? st.joined[rank] : "?", ")"); };

  auto handle = [&](State::Conn& c, uint8_t type, const std::string& payload) {
    Cursor in{payload};
    if (c.rank < 0 && type != hello) return void(c.closing = true);  // not speaking the protocol
    if (!st.error.empty()) {  // the rendezvous has failed: every message gets the reason
      send(c, error, str(st.error));
      return void(c.closing = true);
    }
    switch (type) {
      case hello: {
        const uint32_t version = in.u32(), rank = in.u32(), w = in.u32();
        const std::string run_id = in.str(), host = in.str();
        if (!in.ok || c.rank >= 0) return void(c.closing = true);
        const std::string them = cat("rank ", rank, " (", host, ", ", c.peer, ")");
        if (version != kVersion) {
          send(c, error, str(cat(them, " speaks rendezvous version ", version, ", rank 0 speaks ", kVersion)));
          return void(c.closing = true);
        }
        if (run_id != st.self.run_id) {
          // Another run's rank (a stale process, a mistyped id): turn it away, keep waiting.
          st.turned_away.push_back(cat(them, " of run '", run_id, "'"));
          send(c, error, str(cat("run id mismatch: this rank is in run '", run_id, "', the rendezvous of rank 0 (",
                                 st.self.host, ") is for run '", st.self.run_id, "' (--run-id / EMBER_RUN_ID)")));
          return void(c.closing = true);
        }
        if (int(w) != world) {
          fatal(cat("world size mismatch: ", them, " has world size ", w, ", rank 0 (", st.self.host, ") has ", world,
                    " (WORLD_SIZE / --nproc)"));
          send(c, error, str(st.error));
          return void(c.closing = true);
        }
        if (int(rank) >= world) {
          fatal(cat(them, " is not a rank of a world of ", world));
          send(c, error, str(st.error));
          return void(c.closing = true);
        }
        if (st.joined.count(int(rank))) {
          fatal(cat("rank ", rank, " joined twice: from ", st.joined[int(rank)], " and from ", host, " (", c.peer,
                    "): two processes claim the same rank"));
          send(c, error, str(st.error));
          return void(c.closing = true);
        }
        c.rank = int(rank);
        c.host = host;
        st.joined[c.rank] = cat(host, ", ", c.peer);
        send(c, ok, "");
        return;
      }
      case set: {
        const std::string key = in.str(), value = in.str();
        if (!in.ok) return fatal(cat(who(c.rank), " sent a malformed rendezvous message"));
        st.kv[key] = value;
        for (auto& o : st.conns)
          if (o->waiting == key) send(*o, store_wire::value, str(value)), o->waiting.clear();
        send(c, ok, "");
        return;
      }
      case get: {
        const std::string key = in.str();
        if (!in.ok) return fatal(cat(who(c.rank), " sent a malformed rendezvous message"));
        if (auto it = st.kv.find(key); it != st.kv.end())
          send(c, store_wire::value, str(it->second));
        else
          c.waiting = key;
        return;
      }
      case done:
        st.done.insert(c.rank);
        send(c, ok, "");
        return;
      default:
        return fatal(cat(who(c.rank), " sent rendezvous message type ", int(type)));
    }
  };

  for (;;) {
    const bool all_done = int(st.done.size()) == world;
    bool flushing = false;
    for (auto& c : st.conns) flushing = flushing || !c->out.empty();
    if (all_done && !flushing) break;
    // After a fatal error the server stays up until its deadline (or its
    // owner stops it), answering every hello with the error: a rank that
    // connects late (rank 0's own client, too) learns it at once.
    if (!st.error.empty() && Clock::now() >= deadline && !flushing) break;
    if (st.error.empty() && Clock::now() >= deadline) {
      std::string missing, unfinished;
      for (int r = 0; r < world; ++r) {
        if (!st.joined.count(r)) missing += cat(missing.empty() ? "" : ", ", r);
        else if (!st.done.count(r)) unfinished += cat(unfinished.empty() ? "" : ", ", r);
      }
      std::string why = cat("rendezvous at ", st.self.host, ":", port_, " timed out after ", st.timeout_s, " s: ");
      if (!missing.empty()) why += cat("rank(s) ", missing, " never joined");
      if (!unfinished.empty()) why += cat(missing.empty() ? "" : "; ", "rank(s) ", unfinished, " joined but could not connect the ring");
      for (const auto& t : st.turned_away) why += cat("; turned away ", t);
      fatal(why);
      continue;
    }
    std::vector<pollfd> fds;
    fds.push_back({st.wake_fd, POLLIN, 0});
    fds.push_back({st.listen_fd.get(), POLLIN, 0});
    for (auto& c : st.conns) fds.push_back({c->fd.get(), short(POLLIN | (c->out.empty() ? 0 : POLLOUT)), 0});
    const int rc = ::poll(fds.data(), fds.size(), std::max(1, std::min(ms_until(deadline), 1000)));
    if (rc < 0 && errno != EINTR) return set_error(cat("rendezvous: poll: ", std::strerror(errno)));
    if (rc <= 0) continue;
    if (fds[0].revents & POLLIN) {  // the owner is going away
      if (st.error.empty() && !all_done) set_error("rendezvous stopped");
      break;
    }
    if (fds[1].revents & POLLIN) {
      for (int k = 0; k < 16; ++k) {
        sockaddr_storage ss{};
        socklen_t len = sizeof ss;
        const int fd = ::accept4(st.listen_fd.get(), reinterpret_cast<sockaddr*>(&ss), &len, SOCK_CLOEXEC | SOCK_NONBLOCK);
        if (fd < 0) break;
        auto c = std::make_unique<State::Conn>();
        c->fd = UniqueFd(fd);
        char host[64] = "?";
        if (ss.ss_family == AF_INET) inet_ntop(AF_INET, &reinterpret_cast<sockaddr_in*>(&ss)->sin_addr, host, sizeof host);
        c->peer = host;
        st.conns.push_back(std::move(c));
      }
    }
    for (size_t i = 0; i + 2 < fds.size(); ++i) {
      State::Conn& c = *st.conns[i];
      const short ev = fds[i + 2].revents;
      if (ev & POLLOUT) {
        const ssize_t k = ::send(c.fd.get(), c.out.data(), c.out.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
        if (k > 0) c.out.erase(0, size_t(k));
        else if (k < 0 && errno != EAGAIN && errno != EINTR) c.out.clear(), c.closing = true;
      }
      if (ev & (POLLIN | POLLHUP | POLLERR)) {
        char buf[4096];
        const ssize_t k = ::recv(c.fd.get(), buf, sizeof buf, MSG_DONTWAIT);
        if (k > 0) {
          c.in.append(buf, size_t(k));
        } else if (k == 0 || (errno != EAGAIN && errno != EINTR)) {
          // Gone. A rank that leaves before it is done has died or given up.
          if (c.rank >= 0 && !st.done.count(c.rank))
            fatal(cat(who(c.rank), " left the rendezvous before its ring was connected (it failed or was killed)"));
          c.out.clear();
          c.closing = true;
          c.in.clear();
        }
        // Whole messages.
        while (!c.closing && c.in.size() >= kHeader) {
          uint32_t magic, len;
          std::memcpy(&magic, c.in.data(), 4);
          std::memcpy(&len, c.in.data() + 4, 4);
          if (magic != kMagic || len > kMaxMessage) {
            if (c.rank >= 0) fatal(cat(who(c.rank), " sent bytes that are not a rendezvous message"));
            c.closing = true;
            break;
          }
          if (c.in.size() < kHeader + len) break;
          const uint8_t type = uint8_t(c.in[8]);
          const std::string payload = c.in.substr(kHeader, len);
          c.in.erase(0, kHeader + len);
          handle(c, type, payload);
        }
      }
    }
    // Drop closed connections once their last words are out.
    std::erase_if(st.conns, [](const std::unique_ptr<State::Conn>& c) { return c->closing && c->out.empty(); });
  }
  // Let the last replies reach their clients before the sockets close.
  for (auto& c : st.conns)
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
  send_message(hello, u32(kVersion) + u32(uint32_t(self.rank)) + u32(uint32_t(self.world)) + str(self.run_id) +
                          str(self.host));
  read_reply("its hello");
}

void StoreClient::send_message(uint8_t type, const std::string& payload) {
  const std::string m = message(type, payload);
  try {
    send_exact(fd_.get(), m.data(), m.size(), deadline_);
  } catch (const Error& e) {
    fail(cat("rendezvous at ", server_.str(), ": ", e.what()));
  }
}

StoreClient::Reply StoreClient::read_reply(const char* waiting_for) {
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
  } catch (const Error& e) {
    fail(cat("rendezvous at ", server_.str(), " (waiting for ", waiting_for, "): ", e.what()));
  }
  if (r.type == error) fail(r.text);
  return r;
}

void StoreClient::set(const std::string& key, const std::string& value) {
  send_message(store_wire::set, str(key) + str(value));
  read_reply("a set");
}

std::string StoreClient::get(const std::string& key) {
  send_message(store_wire::get, str(key));
  Reply r = read_reply(key.c_str());
  EMBER_CHECK(r.type == value, "rendezvous at ", server_.str(), ": unexpected reply to get '", key, "'");
  return r.text;
}

void StoreClient::done() {
  send_message(store_wire::done, "");
  read_reply("done");
}

}  // namespace ember::net::dist
