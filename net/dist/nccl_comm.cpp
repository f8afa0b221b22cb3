// net/dist/nccl_comm.cpp — the NCCL communicator behind net::dist::Comm (net/dist/nccl_comm.h).
#if defined(EMBER_CUDA) && defined(EMBER_NCCL)
#include "net/dist/nccl_comm.h"

#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <mutex>
#include <thread>

#include "cuda/nccl/nccl_communicator.h"
#include "engine/error.h"
#include "net/dist/socket.h"
#include "net/dist/store.h"
#include "ops/kernels.h"

namespace ember::net::dist {
namespace {

// The unique id through the rendezvous (rank 0 makes it).
std::string exchange_unique_id(const NcclCommOptions& o) {
  if (o.world == 1) return cuda::nccl_unique_id();
  StoreIdentity self{o.rank, o.world, o.run_id, this_host_name()};
  std::unique_ptr<StoreServer> server;
  if (o.rank == 0) server = std::make_unique<StoreServer>(o.master_port, self, o.timeout_s);
  try {
    StoreClient store(o.master_addr, o.master_port, self, deadline_in(o.timeout_s));
    if (o.rank == 0) store.set("nccl_id", cuda::nccl_unique_id());
    const std::string id = store.get("nccl_id");
    store.done();
    if (server) EMBER_CHECK(server->join().empty(), server->failure());
    return id;
  } catch (const Error&) {
    if (server && !server->failure().empty()) fail(server->failure());
    throw;
  }
}

class NcclWork final : public Work {
 public:
  NcclWork(std::shared_ptr<cuda::NcclPending> p, Tensor keep, Stream stream, const std::string* failure, std::mutex* mu)
      : pending_(std::move(p)), keep_(std::move(keep)), stream_(stream), failure_(failure), mu_(mu) {}
  void wait() override {
    {
      std::lock_guard<std::mutex> lock(*mu_);
      if (!failure_->empty()) throw Error(*failure_);
    }
    pending_->order_before(stream_);
  }
  double seconds() const override { return pending_->seconds(); }
  const std::shared_ptr<cuda::NcclPending>& pending() const { return pending_; }

 private:
  std::shared_ptr<cuda::NcclPending> pending_;
  Tensor keep_;  // the buffer stays allocated while NCCL may use it
  Stream stream_;
  const std::string* failure_;
  std::mutex* mu_;
};

class NcclComm final : public Comm {
 public:
  explicit NcclComm(const NcclCommOptions& o)
      : o_(o), device_(Device::cuda(o.device)), nccl_(o.rank, o.world, exchange_unique_id(o), o.device, o.timeout_s) {
    watchdog_ = std::thread([this] { watch(); });
  }
  ~NcclComm() override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    watchdog_.join();
  }
  int rank() const override { return o_.rank; }
  int world_size() const override { return o_.world; }
  const char* backend() const override { return "nccl"; }
  Device buffer_device() const override { return device_; }

  std::shared_ptr<Work> all_reduce(const Tensor& t, ReduceOp op, const std::string& what) override {
    check(t, "all_reduce");
    return track(nccl_.all_reduce(t.raw_data(), size_t(t.numel()), t.dtype(), op == ReduceOp::average,
                                  stream_for(device_)),
                 t, cat("all_reduce #", ++seq_, " of ", t.numel(), " ", dtype_name(t.dtype()), " [", what, "]"));
  }
  std::shared_ptr<Work> broadcast(const Tensor& t, int root, const std::string& what) override {
    check(t, "broadcast");
    return track(nccl_.broadcast(t.raw_data(), size_t(t.numel()), t.dtype(), root, stream_for(device_)), t,
                 cat("broadcast #", ++seq_, " of ", t.numel(), " ", dtype_name(t.dtype()), " [", what, "]"));
  }
  void barrier(const std::string& what) override {
    Tensor t = Tensor::zeros({1}, DType::f32, device_);
    all_reduce(t, ReduceOp::sum, what)->wait();
    (void)t.item();  // the host waits too
  }
  void abort(const std::string& reason) override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (failure_.empty()) failure_ = reason;
    }
    nccl_.abort();
  }

 private:
  void check(const Tensor& t, const char* op) {
    EMBER_CHECK(t.defined() && t.device() == device_, op, ": NCCL takes tensors on ", device_.str(), ", got ",
                t.defined() ? t.str() : "an undefined tensor");
    std::lock_guard<std::mutex> lock(mu_);
    if (!failure_.empty()) throw Error(failure_);
  }
  std::shared_ptr<Work> track(std::shared_ptr<cuda::NcclPending> p, const Tensor& t, std::string what) {
    auto w = std::make_shared<NcclWork>(p, t, stream_for(device_), &failure_, &mu_);
    std::lock_guard<std::mutex> lock(mu_);
    in_flight_.push_back({p, std::move(what)});
    return w;
  }
  // Polls every 100 ms: NCCL's asynchronous error, and the oldest collective's age.
  void watch() {
    std::unique_lock<std::mutex> lock(mu_);
    while (!stop_) {
      cv_.wait_for(lock, std::chrono::milliseconds(100));
      if (stop_ || !failure_.empty()) continue;
      while (!in_flight_.empty() && in_flight_.front().first->done()) in_flight_.pop_front();
      std::string why = nccl_.async_error();
      if (why.empty() && !in_flight_.empty() && in_flight_.front().first->pending_seconds() > o_.timeout_s)
        why = cat(in_flight_.front().second, " has not finished after ", o_.timeout_s,
                  " s: a rank is hung, gone or unreachable (--comm-timeout)");
      else if (!why.empty())
        why = cat("NCCL reported: ", why, in_flight_.empty() ? "" : " during " + in_flight_.front().second);
      if (why.empty()) continue;
      failure_ = why;
      lock.unlock();
      nccl_.abort();
      lock.lock();
      // The program normally stops at its next wait(); a host blocked on the GPU may not.
      if (cv_.wait_for(lock, std::chrono::seconds(5), [&] { return stop_; })) return;
      std::fprintf(stderr, "Node[%d]: error: %s\n", o_.rank, why.c_str());
      std::fflush(stderr);
      std::_Exit(1);
    }
  }

  NcclCommOptions o_;
  Device device_;
  cuda::NcclCommunicator nccl_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::string failure_;
  bool stop_ = false;
  uint64_t seq_ = 0;
  std::deque<std::pair<std::shared_ptr<cuda::NcclPending>, std::string>> in_flight_;
  std::thread watchdog_;
};

}  // namespace

std::unique_ptr<Comm> make_nccl_comm(const NcclCommOptions& options) { return std::make_unique<NcclComm>(options); }

}  // namespace ember::net::dist
#endif
