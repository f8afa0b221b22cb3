// net/dist/tcp_comm.cpp — rendezvous, ring handshakes and the communication
// thread of the TCP communicator (net/dist/tcp_comm.h).
#include "net/dist/tcp_comm.h"

#include <condition_variable>
#include <cstdio>
#include <deque>
#include <mutex>
#include <thread>

#include "engine/error.h"
#include "net/dist/ring.h"
#include "net/dist/store.h"

namespace ember::net::dist {
namespace {

// ------------------------------------------------------------ the rendezvous

std::string rank_key(int rank) { return cat("addr/", rank); }

// Accepts connections until one says it is `expected_prev` of this run;
// strays (scanners, garbage, other runs) are dropped and waited past.
UniqueFd accept_previous(int listen_fd, const TcpCommOptions& o, int expected_prev, const std::string& prev_addr,
                         Deadline deadline, std::string& turned_away) {
  for (;;) {
    UniqueFd fd;
    std::string peer;
    try {
      fd = accept_tcp(listen_fd, deadline, &peer);
    } catch (const Error& e) {
      fail(cat("rank ", expected_prev, " (", prev_addr, ") never connected to this rank's ring port within ",
               o.timeout_s, " s (", e.what(), ")", turned_away.empty() ? "" : "; dropped: " + turned_away));
    }
    RingHello h;
    std::string problem;
    try {
      // A stray connection gets a few seconds to say something sensible.
      const Deadline short_deadline = std::min(deadline, deadline_in(std::min(5.0, o.timeout_s / 4)));
      recv_exact(fd.get(), &h, sizeof h, short_deadline);
      problem = ring_hello_mismatch(h, 0, expected_prev, o.world, o.run_id);
    } catch (const Error& e) {
      problem = e.what();
    }
    if (problem.empty()) {
      const RingHello reply = make_ring_hello(1, o.rank, o.world, o.run_id);
      send_exact(fd.get(), &reply, sizeof reply, deadline);
      return fd;
    }
    turned_away += cat(turned_away.empty() ? "" : "; ", peer, ": ", problem);
  }
}

// The ring's two connections, through the rendezvous: publish this rank's
// address, learn the neighbours', connect to the next, accept the previous.
void connect_ring(const TcpCommOptions& o, const StoreIdentity& self, Deadline deadline, UniqueFd& listener,
                  const std::string& my_addr, StoreServer* server, UniqueFd& to_next, UniqueFd& from_prev,
                  std::string& next_addr, std::string& prev_addr) {
  const int next = (o.rank + 1) % o.world, prev = (o.rank + o.world - 1) % o.world;
  StoreClient store(o.master_addr, o.master_port, self, deadline);
  store.set(rank_key(o.rank), my_addr);
  next_addr = store.get(rank_key(next));
  prev_addr = store.get(rank_key(prev));

  // Connect to the next rank (it listens already: it published after listening) ...
  const HostPort next_hp = parse_host_port(next_addr, "rank address");
  try {
    to_next = connect_tcp(next_hp.host, next_hp.port, deadline);
  } catch (const Error& e) {
    fail(cat("cannot connect to rank ", next, " (", next_addr, "): ", e.what(),
             " (is that address reachable from this host? --comm-interface / EMBER_SOCKET_IFNAME chooses it)"));
  }
  const RingHello hello = make_ring_hello(0, o.rank, o.world, o.run_id);
  send_exact(to_next.get(), &hello, sizeof hello, deadline);
  // ... accept the previous one ...
  std::string turned_away;
  from_prev = accept_previous(listener.get(), o, prev, prev_addr, deadline, turned_away);
  listener.reset();  // no more connections: later scanners get "connection refused"
  // ... and check the next rank's reply.
  RingHello reply;
  try {
    recv_exact(to_next.get(), &reply, sizeof reply, deadline);
  } catch (const Error& e) {
    fail(cat("rank ", next, " (", next_addr, ") did not answer the ring handshake: ", e.what()));
  }
  const std::string problem = ring_hello_mismatch(reply, 1, next, o.world, o.run_id);
  EMBER_CHECK(problem.empty(), "ring handshake with rank ", next, " (", next_addr, ") failed: ", problem);

  tune_stream_socket(to_next.get(), o.socket_buffer_bytes);
  tune_stream_socket(from_prev.get(), o.socket_buffer_bytes);
  store.done();
  if (server) {
    const std::string error = server->join();  // every rank's ring stands
    EMBER_CHECK(error.empty(), error);
  }
}

// ------------------------------------------------------------------- Work

class TcpWork final : public Work {
 public:
  void wait() override {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [&] { return done_; });
    if (!error_.empty()) throw Error(error_);
  }
  double seconds() const override {
    std::lock_guard<std::mutex> lock(mu_);
    return seconds_;
  }
  void finish(const std::string& error, double seconds) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      done_ = true;
      error_ = error;
      seconds_ = seconds;
    }
    cv_.notify_all();
  }

 private:
  mutable std::mutex mu_;
  std::condition_variable cv_;
  bool done_ = false;
  std::string error_;
  double seconds_ = 0;
};

std::shared_ptr<TcpWork> finished_work() {
  auto w = std::make_shared<TcpWork>();
  w->finish("", 0);
  return w;
}

// ---------------------------------------------------------------- TcpComm

class TcpComm final : public Comm {
 public:
  explicit TcpComm(const TcpCommOptions& o);
  ~TcpComm() override;

  int rank() const override { return options_.rank; }
  int world_size() const override { return options_.world; }
  const char* backend() const override { return "tcp"; }
  Device buffer_device() const override { return Device::cpu(); }
  std::shared_ptr<Work> all_reduce(const Tensor& t, ReduceOp op, const std::string& what) override;
  std::shared_ptr<Work> broadcast(const Tensor& t, int root, const std::string& what) override;
  void barrier(const std::string& what) override;
  void abort(const std::string& reason) override;

 private:
  enum class Kind { all_reduce, broadcast, barrier, abort, close };
  struct Op {
    Kind kind;
    Tensor tensor;
    ReduceOp reduce = ReduceOp::sum;
    int root = 0;
    std::string what;
    std::shared_ptr<TcpWork> work;
  };
  std::shared_ptr<Work> enqueue(Op op);
  void worker();
  void check_buffer(const Tensor& t, const char* op) const;

  TcpCommOptions options_;
  AbortSignal abort_signal_;
  std::unique_ptr<Ring> ring_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Op> queue_;
  std::string failure_;       // the first error; every later collective fails with it
  bool abort_sent_ = false;   // the neighbours were told (worker thread only)
  std::thread thread_;
};

TcpComm::TcpComm(const TcpCommOptions& o) : options_(o) {
  EMBER_CHECK(o.world >= 1 && o.rank >= 0 && o.rank < o.world, "rank ", o.rank, " is not in a world of ", o.world);
  EMBER_CHECK(o.timeout_s > 0, "--comm-timeout must be positive");
  if (o.world == 1) return;
  const Deadline deadline = deadline_in(o.timeout_s);
  const int next = (o.rank + 1) % o.world, prev = (o.rank + o.world - 1) % o.world;

  StoreIdentity self{o.rank, o.world, o.run_id, this_host_name()};
  std::unique_ptr<StoreServer> server;
  if (o.rank == 0) server = std::make_unique<StoreServer>(o.master_port, self, o.timeout_s);

  const std::string local = choose_local_address(o.interface, o.master_addr);
  UniqueFd listener;
  try {
    listener = listen_tcp(local, o.comm_port);
  } catch (const Error& e) {
    if (o.comm_port != 0 && std::string(e.what()).rfind("address already in use", 0) == 0)
      fail(cat("--comm-port ", o.comm_port, " is already in use on ", local, ": choose another or 0 (any free port)"));
    throw;
  }
  const std::string my_addr = HostPort{local, local_port(listener.get())}.str();

  // Rank 0: when the rendezvous itself failed, its message says more than the client's.
  auto rethrow_with_server_error = [&](const Error& e) {
    if (server) {
      const std::string why = server->failure();
      if (!why.empty()) fail(why);
    }
    throw e;
  };
  UniqueFd to_next, from_prev;
  std::string next_addr, prev_addr;
  try {
    connect_ring(o, self, deadline, listener, my_addr, server.get(), to_next, from_prev, next_addr, prev_addr);
  } catch (const Error& e) {
    rethrow_with_server_error(e);
  }
  RingOptions ro;
  ro.timeout_s = o.timeout_s;
  ro.segment_bytes = o.segment_bytes;
  ring_ = std::make_unique<Ring>(o.rank, o.world, std::move(to_next), std::move(from_prev), RingPeer{next, next_addr},
                                 RingPeer{prev, prev_addr}, ro, &abort_signal_);
  thread_ = std::thread([this] { worker(); });
}

TcpComm::~TcpComm() {
  if (!thread_.joinable()) return;
  {
    std::lock_guard<std::mutex> lock(mu_);
    queue_.push_back(Op{Kind::close, Tensor(), ReduceOp::sum, 0, "", std::make_shared<TcpWork>()});
  }
  cv_.notify_all();
  thread_.join();
}

void TcpComm::check_buffer(const Tensor& t, const char* op) const {
  EMBER_CHECK(t.defined() && t.device().is_cpu(), op, ": the TCP ring takes CPU tensors, got ",
              t.defined() ? t.str() : "an undefined tensor");
}

std::shared_ptr<Work> TcpComm::enqueue(Op op) {
  op.work = std::make_shared<TcpWork>();
  std::shared_ptr<Work> w = op.work;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!failure_.empty()) {
      op.work->finish(failure_, 0);
      return w;
    }
    queue_.push_back(std::move(op));
  }
  cv_.notify_all();
  return w;
}

std::shared_ptr<Work> TcpComm::all_reduce(const Tensor& t, ReduceOp op, const std::string& what) {
  check_buffer(t, "all_reduce");
  EMBER_CHECK(t.dtype() == DType::f32 || t.dtype() == DType::f64 || is_16bit_float(t.dtype()),
              "all_reduce: f32, f16, bf16 or f64 buffers, got ", t.str());
  if (!ring_) return finished_work();  // one rank: the sum and the average are the buffer itself
  return enqueue(Op{Kind::all_reduce, t, op, 0, what, nullptr});
}

std::shared_ptr<Work> TcpComm::broadcast(const Tensor& t, int root, const std::string& what) {
  check_buffer(t, "broadcast");
  EMBER_CHECK(root >= 0 && root < options_.world, "broadcast: root ", root, " is not a rank of ", options_.world);
  if (!ring_) return finished_work();
  return enqueue(Op{Kind::broadcast, t, ReduceOp::sum, root, what, nullptr});
}

void TcpComm::barrier(const std::string& what) {
  if (!ring_) return;
  enqueue(Op{Kind::barrier, Tensor(), ReduceOp::sum, 0, what, nullptr})->wait();
}

void TcpComm::abort(const std::string& reason) {
  if (!ring_) return;
  abort_signal_.set(reason);  // interrupts a collective in progress
  std::shared_ptr<TcpWork> w = std::make_shared<TcpWork>();
  {
    std::lock_guard<std::mutex> lock(mu_);
    queue_.push_front(Op{Kind::abort, Tensor(), ReduceOp::sum, 0, reason, w});
  }
  cv_.notify_all();
  try {
    w->wait();
  } catch (const Error&) {
  }
}

void TcpComm::worker() {
  for (;;) {
    Op op;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return !queue_.empty(); });
      op = std::move(queue_.front());
      queue_.pop_front();
    }
    if (op.kind == Kind::close) {
      ring_->close(/*goodbye=*/failure_.empty());  // after a failure: no goodbye, but no reset either
      op.work->finish("", 0);
      return;
    }
    std::string error;
    const auto t0 = Clock::now();
    {
      std::lock_guard<std::mutex> lock(mu_);
      error = failure_;
    }
    if (error.empty()) {
      try {
        switch (op.kind) {
          case Kind::all_reduce:
            ring_->all_reduce(op.tensor.raw_data(), uint64_t(op.tensor.numel()), op.tensor.dtype(), op.reduce, op.what);
            break;
          case Kind::broadcast:
            ring_->broadcast(op.tensor.raw_data(), uint64_t(op.tensor.numel()), op.tensor.dtype(), op.root, op.what);
            break;
          case Kind::barrier: ring_->barrier(op.what); break;
          case Kind::abort: error = op.what; break;
          case Kind::close: break;
        }
      } catch (const Error& e) {
        error = e.what();
      }
    }
    if (!error.empty() && !abort_sent_) {
      abort_sent_ = true;
      ring_->send_abort(error);
      std::lock_guard<std::mutex> lock(mu_);
      if (failure_.empty()) failure_ = error;
    }
    op.work->finish(error, std::chrono::duration<double>(Clock::now() - t0).count());
  }
}

}  // namespace

std::unique_ptr<Comm> make_tcp_comm(const TcpCommOptions& options) { return std::make_unique<TcpComm>(options); }

}  // namespace ember::net::dist
