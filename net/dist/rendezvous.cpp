// net/dist/rendezvous.cpp — the rendezvous server's protocol (net/dist/rendezvous.h).
#include "net/dist/rendezvous.h"

#include <cstring>

#include "engine/error.h"
#include "net/json.h"

namespace ember::net::dist {
namespace {

using namespace store_wire;
constexpr size_t kHeader = 12;

// A text a connection sent (a host name, a run id) as messages show it:
// plain when it is a short run of printable characters, else quoted,
// escaped and cut (json::shown), so that no peer can put a line break or a
// megabyte into another rank's error.
std::string tame(const std::string& s) {
  bool plain = s.size() <= 64;
  for (unsigned char ch : s) plain = plain && ch >= 0x20 && ch < 0x7f && ch != '\'' && ch != '"';
  return plain ? s : json::shown(s);
}

}  // namespace

Rendezvous::Rendezvous(const StoreIdentity& self, int port) : self_(self), port_(port) {}

RendezvousConn& Rendezvous::accept(const std::string& peer) {
  conns_.push_back(std::make_unique<RendezvousConn>());
  conns_.back()->peer = peer;
  return *conns_.back();
}

std::string Rendezvous::error() const {
  std::lock_guard<std::mutex> lock(error_mu_);
  return error_;
}

void Rendezvous::set_error(const std::string& why) {
  std::lock_guard<std::mutex> lock(error_mu_);
  if (error_.empty()) error_ = why;
}

void Rendezvous::send(RendezvousConn& c, uint8_t type, const std::string& payload) { c.out += message(type, payload); }

// Ends the rendezvous for everyone with `why`.
void Rendezvous::fatal(const std::string& why) {
  if (!error().empty()) return;
  set_error(why);
  for (auto& c : conns_)
    if (c->rank >= 0) send(*c, store_wire::error, str(why)), c->closing = true;
}

std::string Rendezvous::who(int rank) const {
  const auto it = joined_.find(rank);
  return cat("rank ", rank, " (", it != joined_.end() ? it->second : "?", ")");
}

void Rendezvous::handle(RendezvousConn& c, uint8_t type, const std::string& payload) {
  Cursor in{payload};
  if (c.rank < 0 && type != hello) return void(c.closing = true);  // not speaking the protocol
  if (const std::string failed = error(); !failed.empty()) {       // every message gets the reason
    send(c, store_wire::error, str(failed));
    return void(c.closing = true);
  }
  const int world = self_.world;
  switch (type) {
    case hello: {
      const uint32_t version = in.u32(), rank = in.u32(), w = in.u32();
      const std::string run_id = in.str(), host = in.str();
      if (!in.ok || c.rank >= 0) return void(c.closing = true);
      const std::string them = cat("rank ", rank, " (", tame(host), ", ", c.peer, ")");
      if (version != kVersion) {
        send(c, store_wire::error, str(cat(them, " speaks rendezvous version ", version, ", rank 0 speaks ", kVersion)));
        return void(c.closing = true);
      }
      if (run_id != self_.run_id) {
        // Another run's rank (a stale process, a mistyped id): turn it away, keep waiting.
        if (turned_away_.size() < kMaxTurnedAway) turned_away_.push_back(cat(them, " of run '", tame(run_id), "'"));
        ++turned_away_count_;
        send(c, store_wire::error, str(cat("run id mismatch: this rank is in run '", tame(run_id), "', the rendezvous of rank 0 (",
                               self_.host, ") is for run '", self_.run_id, "' (--run-id / EMBER_RUN_ID)")));
        return void(c.closing = true);
      }
      if (int64_t(w) != world) {
        fatal(cat("world size mismatch: ", them, " has world size ", w, ", rank 0 (", self_.host, ") has ", world,
                  " (WORLD_SIZE / --nproc)"));
        send(c, store_wire::error, str(error()));
        return void(c.closing = true);
      }
      if (int64_t(rank) >= world) {
        fatal(cat(them, " is not a rank of a world of ", world));
        send(c, store_wire::error, str(error()));
        return void(c.closing = true);
      }
      if (joined_.count(int(rank))) {
        fatal(cat("rank ", rank, " joined twice: from ", joined_[int(rank)], " and from ", tame(host), " (", c.peer,
                  "): two processes claim the same rank"));
        send(c, store_wire::error, str(error()));
        return void(c.closing = true);
      }
      c.rank = int(rank);
      c.host = host;
      joined_[c.rank] = cat(tame(host), ", ", c.peer);
      send(c, ok, "");
      return;
    }
    case set: {
      const std::string key = in.str(), value = in.str();
      if (!in.ok) return fatal(cat(who(c.rank), " sent a malformed rendezvous message"));
      kv_[key] = value;
      for (auto& o : conns_)
        if (o->has_waiting && o->waiting == key) {
          send(*o, store_wire::value, str(value));
          o->waiting.clear();
          o->has_waiting = false;
        }
      send(c, ok, "");
      return;
    }
    case get: {
      const std::string key = in.str();
      if (!in.ok) return fatal(cat(who(c.rank), " sent a malformed rendezvous message"));
      if (auto it = kv_.find(key); it != kv_.end()) {
        send(c, store_wire::value, str(it->second));
      } else {
        c.waiting = key;
        c.has_waiting = true;
      }
      return;
    }
    case done:
      done_.insert(c.rank);
      send(c, ok, "");
      return;
    default:
      return fatal(cat(who(c.rank), " sent rendezvous message type ", int(type)));
  }
}

void Rendezvous::receive(RendezvousConn& c, const char* data, size_t n) {
  if (c.closing) return;
  c.in.append(data, n);
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
  if (c.closing) c.in.clear();
}

void Rendezvous::lost(RendezvousConn& c) {
  // A rank that leaves before it is done has died or given up.
  if (c.rank >= 0 && !done_.count(c.rank))
    fatal(cat(who(c.rank), " left the rendezvous before its ring was connected (it failed or was killed)"));
  c.out.clear();
  c.in.clear();
  c.closing = true;
}

void Rendezvous::time_out(double timeout_s) {
  if (!error().empty()) return;
  std::string missing, unfinished;
  for (int r = 0; r < self_.world; ++r) {
    if (!joined_.count(r)) missing += cat(missing.empty() ? "" : ", ", r);
    else if (!done_.count(r)) unfinished += cat(unfinished.empty() ? "" : ", ", r);
  }
  std::string why = cat("rendezvous at ", self_.host, ":", port_, " timed out after ", timeout_s, " s: ");
  if (!missing.empty()) why += cat("rank(s) ", missing, " never joined");
  if (!unfinished.empty()) why += cat(missing.empty() ? "" : "; ", "rank(s) ", unfinished, " joined but could not connect the ring");
  for (const auto& t : turned_away_) why += cat("; turned away ", t);
  if (turned_away_count_ > turned_away_.size())
    why += cat("; and ", turned_away_count_ - turned_away_.size(), " more connections of other runs");
  fatal(why);
}

void Rendezvous::drop_closed() {
  std::erase_if(conns_, [](const std::unique_ptr<RendezvousConn>& c) { return c->closing && c->out.empty(); });
}

}  // namespace ember::net::dist
