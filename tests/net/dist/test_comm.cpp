// tests/net/dist/test_comm.cpp — the TCP ring communicator (net/dist/) with its ranks
// as threads on loopback: all-reduce against a local sum for 1-5 ranks and
// every awkward size (0, 1, P-1, odd, several MiB, one and many segments)
// in f32/f64/f16/bf16, sum and average; broadcast from every root; barrier;
// long runs of collectives; and the faults that must be errors, not hangs:
// mismatched collectives, a silent rank, bad rendezvous partners, strays on
// the listening ports. Launcher variables (torchrun, Open MPI, SLURM) too.
// Process-level faults (SIGKILL, SIGSTOP, mpirun, network namespaces) are in
// tests/net/dist/test_dist_processes.cpp.
#include <doctest/doctest.h>

#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cmath>
#include <map>
#include <mutex>

#include "data/crc32c.h"
#include "engine/half.h"
#include "net/dist/frame.h"
#include "net/dist/launch_env.h"
#include "net/dist/store.h"
#include "tests/support/comm_test_helpers.h"
#include "tests/support/test_helpers.h"

namespace {

using namespace ember;
using namespace ember::net::dist;
using ember::testing::contains;
using ember::testing::loopback_options;
using ember::testing::RankResult;
using ember::testing::run_ranks;

void require_all_passed(const std::vector<RankResult>& results) {
  for (size_t r = 0; r < results.size(); ++r) {
    INFO("rank ", r, ": ", results[r].error);
    CHECK(results[r].error.empty());
  }
}

// Rank r's value at element i (exact in every dtype, and so are the sums).
double value_at(DType dt, int r, int64_t i) {
  return is_16bit_float(dt) ? double((r + 1) + i % 5) : (r + 1) * 0.5 + double(i % 17) * 0.25;
}

Tensor filled(DType dt, int r, int64_t n) {
  std::vector<double> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[size_t(i)] = value_at(dt, r, i);
  return Tensor::from_vector(v, Shape{n}, dt);
}

// Checks every element against sum_r value_at (or its average); throws a description of the first miss.
void check_result(const Tensor& t, DType dt, int world, ReduceOp op, const std::string& what) {
  const std::vector<double> got = t.to_double_vector();
  // 16-bit averages divide before summing, so each value and each partial sum is rounded once
  // (bf16: 8x f16's roundoff).
  const double tol = dt == DType::f16 ? 2e-3 : dt == DType::bf16 ? 1.6e-2 : (dt == DType::f32 ? 1e-6 : 1e-12);
  for (size_t i = 0; i < got.size(); ++i) {
    double want = 0;
    for (int r = 0; r < world; ++r) want += value_at(dt, r, int64_t(i));
    if (op == ReduceOp::average) want /= world;
    if (std::abs(got[i] - want) > tol * std::abs(want))
      fail(cat(what, ": element ", i, " is ", got[i], ", expected ", want));
  }
}

uint32_t crc_of(const Tensor& t) { return data::crc32c(t.raw_data(), t.nbytes()); }

}  // namespace

TEST_CASE("comm: all-reduce equals the local sum and average for 1-5 ranks, every size, f32/f64/f16/bf16") {
  for (int world = 1; world <= 5; ++world) {
    for (size_t segment : {size_t(8) << 10, size_t(512) << 10}) {
      CAPTURE(world);
      CAPTURE(segment);
      TcpCommOptions o = loopback_options(world);
      o.segment_bytes = segment;
      std::mutex mu;
      std::map<std::string, std::vector<uint32_t>> crcs;  // per case: each rank's result CRC
      const std::vector<int64_t> sizes = {0, 1, world - 1, 7, 1001, 3 * 262144 + 5};
      const auto results = run_ranks(o, [&](Comm& comm, int r) {
        for (DType dt : {DType::f32, DType::f64, DType::f16, DType::bf16}) {
          for (ReduceOp op : {ReduceOp::sum, ReduceOp::average}) {
            for (int64_t n : sizes) {
              if (dt != DType::f32 && n > 100000 && segment > 8192) continue;  // big buffers: f32 enough here
              Tensor t = filled(dt, r, n);
              const std::string what = cat(dtype_name(dt), " ", reduce_op_name(op), " of ", n);
              all_reduce_now(comm, t, op, what);
              check_result(t, dt, world, op, what);
              std::lock_guard<std::mutex> lock(mu);
              auto& v = crcs[what];
              v.resize(size_t(world));
              v[size_t(r)] = crc_of(t);
            }
          }
        }
      });
      require_all_passed(results);
      for (const auto& [what, v] : crcs) {
        INFO(what);
        for (int r = 1; r < world; ++r) CHECK(v[size_t(r)] == v[0]);  // every rank ends with the same bits
      }
    }
  }
}

TEST_CASE("comm: broadcast from every root, any dtype and size") {
  for (int world : {2, 3, 5}) {
    CAPTURE(world);
    TcpCommOptions o = loopback_options(world);
    o.segment_bytes = 16 << 10;
    require_all_passed(run_ranks(o, [&](Comm& comm, int r) {
      for (int root = 0; root < world; ++root) {
        for (int64_t n : {int64_t(0), int64_t(1), int64_t(999), int64_t(300000)}) {
          Tensor t = Tensor::zeros({n}, DType::i64);
          int64_t* p = t.data<int64_t>();
          for (int64_t i = 0; i < n; ++i) p[i] = r == root ? i * 7 + root : -1;
          broadcast_now(comm, t, root, "test");
          for (int64_t i = 0; i < n; ++i)
            if (p[i] != i * 7 + root) fail(cat("root ", root, " n ", n, ": element ", i, " is ", p[i]));
        }
      }
    }));
  }
}

TEST_CASE("comm: a barrier lets no rank through before the last one arrives") {
  const int world = 4;
  std::vector<double> arrive(world), leave(world);
  const auto start = std::chrono::steady_clock::now();
  auto now = [&] { return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(); };
  require_all_passed(run_ranks(loopback_options(world), [&](Comm& comm, int r) {
    comm.barrier("warm-up");
    std::this_thread::sleep_for(std::chrono::milliseconds(60 * r));
    arrive[size_t(r)] = now();
    comm.barrier("test");
    leave[size_t(r)] = now();
  }));
  const double last = *std::max_element(arrive.begin(), arrive.end());
  for (int r = 0; r < world; ++r) CHECK(leave[size_t(r)] >= last);
}

TEST_CASE("comm: hundreds of collectives in a row, interleaved, stay in step") {
  const int world = 3;
  require_all_passed(run_ranks(loopback_options(world), [&](Comm& comm, int r) {
    std::vector<std::shared_ptr<Work>> pending;
    std::vector<Tensor> bufs;
    for (int k = 0; k < 300; ++k) {
      const int64_t n = (k * 37) % 257;
      bufs.push_back(Tensor::full({n}, double(r + k % 3), DType::f32));
      pending.push_back(comm.all_reduce(bufs.back(), ReduceOp::sum, cat("buffer ", k)));  // queued, not waited
      if (k % 50 == 49) comm.barrier(cat("barrier ", k));
    }
    for (auto& w : pending) w->wait();
    for (int k = 0; k < 300; ++k) {
      const double want = double(world * (k % 3)) + world * (world - 1) / 2.0;
      for (double v : bufs[size_t(k)].to_double_vector())
        if (v != want) fail(cat("buffer ", k, " holds ", v, ", expected ", want));
    }
  }));
}

TEST_CASE("comm: mismatched collectives are errors naming both ranks, on every rank") {
  SUBCASE("sizes") {
    const auto results = run_ranks(loopback_options(3), [&](Comm& comm, int r) {
      Tensor t = Tensor::zeros({r == 1 ? 100 : 101});
      all_reduce_now(comm, t, ReduceOp::sum, "gradient bucket 1");
    });
    for (const auto& res : results) {
      INFO(res.error);
      CHECK(contains(res.error, "collective mismatch"));
      CHECK(res.error.find('\n') == std::string::npos);
    }
    // Ranks 1 and 2 each read a neighbour of the other size, so each may find
    // the mismatch first hand; whichever aborts first, its report reaches the
    // others (relayed: "rank 0 (...) reported: rank 1 (...) reported: ..."),
    // so every error names both sizes and the collective's tag, and at least
    // one names a rank of each size first hand.
    bool first_hand = false;
    for (const auto& res : results) {
      INFO(res.error);
      CHECK(contains(res.error, "100 f32"));
      CHECK(contains(res.error, "101 f32"));
      CHECK(contains(res.error, "[gradient bucket 1]"));
      first_hand = first_hand || contains(res.error, "this rank (2) is in all_reduce #1 of 101 f32") ||
                   contains(res.error, "this rank (1) is in all_reduce #1 of 100 f32");
    }
    CHECK(first_hand);
  }
  SUBCASE("dtypes") {
    const auto results = run_ranks(loopback_options(2), [&](Comm& comm, int r) {
      Tensor t = Tensor::zeros({10}, r == 0 ? DType::f32 : DType::f16);
      all_reduce_now(comm, t, ReduceOp::sum, "x");
    });
    for (const auto& res : results) CHECK(contains(res.error, "collective mismatch"));
  }
  SUBCASE("order of collectives") {
    const auto results = run_ranks(loopback_options(2), [&](Comm& comm, int r) {
      Tensor t = Tensor::zeros({10});
      if (r == 0) broadcast_now(comm, t, 0, "params");
      all_reduce_now(comm, t, ReduceOp::sum, "grads");
      if (r == 1) broadcast_now(comm, t, 0, "params");
    });
    // Rank 1 meets rank 0's broadcast inside its all_reduce #1; rank 0 (a
    // broadcast root waits for nobody) meets rank 1's all_reduce #1 inside
    // its all_reduce #2. Whoever sees it first, both learn it, and the
    // report says the ranks are a collective apart (which of the two views
    // it gives depends on who read first).
    for (const auto& res : results) {
      INFO(res.error);
      CHECK(contains(res.error, "collective mismatch"));
      CHECK(contains(res.error, "all_reduce #1"));
      CHECK((contains(res.error, "is in broadcast #1") || contains(res.error, "this rank (0) is in all_reduce #2") ||
             (contains(res.error, "rank 0 (127.0.0.1:") && contains(res.error, "is in all_reduce #2"))));
    }
  }
}

TEST_CASE("comm: a rank that stops answering is reported by every other rank within the timeout") {
  // Rank 1 goes silent (as SIGSTOP or a pulled cable would leave it) for
  // longer than the timeout; its neighbours time out on it, the rank that is
  // not its neighbour hears it through the ring's abort frames.
  const double timeout = 1.5;
  const auto results = run_ranks(loopback_options(4, timeout), [&](Comm& comm, int r) {
    Tensor t = Tensor::full({100000}, 1.0);
    all_reduce_now(comm, t, ReduceOp::sum, "warm");
    if (r == 1) std::this_thread::sleep_for(std::chrono::duration<double>(timeout + 2.5));
    all_reduce_now(comm, t, ReduceOp::sum, "gradient bucket 2");
  });
  for (int r : {0, 2, 3}) {
    INFO("rank ", r, ": ", results[size_t(r)].error);
    CHECK(contains(results[size_t(r)].error, "rank 1 (127.0.0.1:"));
    CHECK(contains(results[size_t(r)].error, "all_reduce #2"));
    CHECK(results[size_t(r)].seconds < timeout + 5.0);
  }
  CHECK(contains(results[2].error, "sent nothing for 1.5 s"));  // rank 2 waits on rank 1 directly
  CHECK(!results[1].error.empty());                              // rank 1 itself learns why when it wakes
}

TEST_CASE("comm: rendezvous errors name both sides") {
  SUBCASE("world size mismatch") {
    TcpCommOptions o = loopback_options(2, 5);
    const auto results = run_ranks(o, [](Comm&, int) {}, [](TcpCommOptions& c, int r) {
      if (r == 1) c.world = 3;
    });
    for (const auto& res : results) {
      INFO(res.error);
      CHECK(contains(res.error, "world size mismatch"));
      CHECK(contains(res.error, "has world size 3, rank 0"));
    }
  }
  SUBCASE("another run's rank is turned away; the run waits for its own and times out naming it") {
    TcpCommOptions o = loopback_options(2, 2);
    const auto results = run_ranks(o, [](Comm&, int) {}, [](TcpCommOptions& c, int r) {
      if (r == 1) c.run_id = "stale-run";
    });
    INFO(results[0].error, " / ", results[1].error);
    CHECK(contains(results[1].error, "run id mismatch: this rank is in run 'stale-run'"));
    CHECK(contains(results[0].error, "rank(s) 1 never joined"));
    CHECK(contains(results[0].error, "turned away rank 1"));
  }
  SUBCASE("MASTER_PORT in use") {
    UniqueFd taken = listen_tcp("", 0);
    TcpCommOptions o = loopback_options(2, 2);
    o.master_port = local_port(taken.get());
    o.rank = 0;
    CHECK_ERROR_HAS(make_tcp_comm(o), cat("MASTER_PORT ", o.master_port, " is already in use"));
    CHECK_ERROR_HAS(make_tcp_comm(o), "--master-port or MASTER_PORT");
  }
  SUBCASE("nobody serves the rendezvous") {
    TcpCommOptions o = loopback_options(2, 1);
    o.rank = 1;
    CHECK_ERROR_HAS(make_tcp_comm(o), cat("cannot reach the rendezvous of rank 0 at 127.0.0.1:", o.master_port));
  }
}

namespace {
// Connect-and-close, connect-and-send-garbage, and one idle connection.
struct Stray {
  std::vector<UniqueFd> idle;
  void visit(int port) {
    const Deadline d = deadline_in(5);
    { UniqueFd a = connect_tcp("127.0.0.1", port, d); }
    {
      UniqueFd b = connect_tcp("127.0.0.1", port, d);
      std::string junk(1024, '\0');
      for (size_t i = 0; i < junk.size(); ++i) junk[i] = char((i * 131 + 7) & 0xff);
      send_exact(b.get(), junk.data(), junk.size(), d);
    }
    idle.push_back(connect_tcp("127.0.0.1", port, d));
  }
};
}  // namespace

TEST_CASE("comm: scanners, garbage and idle strays on the rendezvous and ring ports are waited past") {
  TcpCommOptions o = loopback_options(3, 8);
  const int ring_port = ember::testing::free_port();
  Stray stray;
  std::atomic<bool> store_visited{false};
  const auto results = run_ranks(
      o,
      [&](Comm& comm, int r) {
        Tensor t = Tensor::full({5000}, double(r));
        all_reduce_now(comm, t, ReduceOp::sum, "after strays");
        for (double v : t.to_double_vector())
          if (v != 3.0) fail(cat("sum is ", v));
      },
      [&](TcpCommOptions& c, int r) {
        if (r == 2) {
          // Rank 2 listens on a known port; strays reach it before rank 1 does.
          c.comm_port = ring_port;
        }
        if (r == 1) {
          // Rank 1 joins only after strays have visited the store and rank 2's ring port.
          for (int i = 0; i < 500 && !store_visited.load(); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
        }
        if (r == 0) {
          std::thread([&] {
            std::this_thread::sleep_for(std::chrono::milliseconds(200));  // rank 0's store is up by now
            stray.visit(o.master_port);
            stray.visit(ring_port);
            store_visited = true;
          }).detach();
        }
      });
  require_all_passed(results);
}

TEST_CASE("comm: one rank needs no sockets and its collectives are the identity") {
  TcpCommOptions o;
  o.world = 1;
  auto comm = make_tcp_comm(o);
  Tensor t = Tensor::full({4}, 2.5);
  all_reduce_now(*comm, t, ReduceOp::average, "x");
  broadcast_now(*comm, t, 0, "x");
  comm->barrier("x");
  CHECK(t.to_double_vector() == std::vector<double>{2.5, 2.5, 2.5, 2.5});
  CHECK_ERROR_HAS(comm->all_reduce(Tensor::zeros({3}, DType::i32), ReduceOp::sum, "x"), "f32, f16, bf16 or f64");
}

// ------------------------------------------------------------ launch variables

namespace {
GetEnv env_of(std::map<std::string, std::string> vars) {
  auto shared = std::make_shared<std::map<std::string, std::string>>(std::move(vars));
  return [shared](const char* n) -> const char* {
    auto it = shared->find(n);
    return it == shared->end() ? nullptr : it->second.c_str();
  };
}
}  // namespace

TEST_CASE("comm: who is who comes from torchrun, Open MPI or SLURM variables, flags first") {
  {
    const LaunchEnv e = detect_launch_env({}, env_of({}));
    CHECK(e.world == 1);
    CHECK(!e.distributed());
  }
  {
    const LaunchEnv e = detect_launch_env({}, env_of({{"RANK", "3"}, {"WORLD_SIZE", "4"}, {"LOCAL_RANK", "1"}, {"LOCAL_WORLD_SIZE", "2"},
                                                      {"MASTER_ADDR", "node7"}, {"MASTER_PORT", "1234"},
                                                      {"TORCHELASTIC_RUN_ID", "job9"}}));
    CHECK(e.rank == 3);
    CHECK(e.world == 4);
    CHECK(e.local_rank == 1);
    CHECK(e.local_world == 2);
    CHECK(e.master_addr == "node7");
    CHECK(e.master_port == 1234);
    CHECK(e.run_id == "job9");
  }
  {
    const LaunchEnv e = detect_launch_env({"10.0.0.1", 4000, "mine"},
                                          env_of({{"OMPI_COMM_WORLD_RANK", "1"}, {"OMPI_COMM_WORLD_SIZE", "2"},
                                                  {"OMPI_COMM_WORLD_LOCAL_RANK", "0"}, {"OMPI_MCA_ess_base_jobid", "77"}}));
    CHECK(e.source == "Open MPI");
    CHECK(e.rank == 1);
    CHECK(e.local_rank == 0);
    CHECK(e.master_addr == "10.0.0.1");
    CHECK(e.master_port == 4000);
    CHECK(e.run_id == "mine");
  }
  {
    const LaunchEnv e = detect_launch_env({}, env_of({{"SLURM_PROCID", "5"}, {"SLURM_NTASKS", "8"}, {"SLURM_LOCALID", "1"},
                                                      {"SLURM_JOB_NODELIST", "gpu[07-09,12],cpu1"}, {"SLURM_NTASKS_PER_NODE", "2(x4)"},
                                                      {"SLURM_JOB_ID", "4242"}, {"SLURM_STEP_ID", "0"}}));
    CHECK(e.source == "SLURM");
    CHECK(e.rank == 5);
    CHECK(e.world == 8);
    CHECK(e.local_rank == 1);
    CHECK(e.master_addr == "gpu07");
    CHECK(e.local_world == 2);
    CHECK(e.run_id == "slurm-4242.0");
  }
  CHECK_ERROR_HAS(detect_launch_env({}, env_of({{"RANK", "0"}})), "WORLD_SIZE is missing");
  CHECK_ERROR_HAS(detect_launch_env({}, env_of({{"RANK", "4"}, {"WORLD_SIZE", "4"}, {"MASTER_ADDR", "a"}})),
                  "RANK=4 is not a rank of WORLD_SIZE=4");
  CHECK_ERROR_HAS(detect_launch_env({}, env_of({{"RANK", "x"}, {"WORLD_SIZE", "4"}})), "RANK='x'");
  CHECK_ERROR_HAS(detect_launch_env({}, env_of({{"OMPI_COMM_WORLD_RANK", "0"}, {"OMPI_COMM_WORLD_SIZE", "2"}})),
                  "--master-addr");
  CHECK_ERROR_HAS(detect_launch_env({}, env_of({{"RANK", "0"}, {"WORLD_SIZE", "2"}})), "no MASTER_ADDR");
  CHECK_ERROR_HAS(detect_launch_env({}, env_of({{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "a"},
                                               {"MASTER_PORT", "70000"}})),
                  "MASTER_PORT=70000");
}

TEST_CASE("comm: SLURM host lists expand as scontrol show hostnames does") {
  CHECK(expand_slurm_hostlist("node1") == std::vector<std::string>{"node1"});
  CHECK(expand_slurm_hostlist("a[1-3],b") == std::vector<std::string>{"a1", "a2", "a3", "b"});
  CHECK(expand_slurm_hostlist("gpu[01-02,7,10-11]") ==
        std::vector<std::string>{"gpu01", "gpu02", "gpu7", "gpu10", "gpu11"});
  CHECK(expand_slurm_hostlist("r[1-2]-n[08-09]") == std::vector<std::string>{"r1-n08", "r1-n09", "r2-n08", "r2-n09"});
  CHECK(expand_slurm_hostlist("x[098-101]") == std::vector<std::string>{"x098", "x099", "x100", "x101"});
  CHECK_ERROR_HAS(expand_slurm_hostlist("a[1-3"), "unbalanced");
  CHECK_ERROR_HAS(expand_slurm_hostlist("a[3-1]"), "bad range");
  CHECK_ERROR_HAS(expand_slurm_hostlist("a[x]"), "not a number");
}

TEST_CASE("comm: the local address follows --comm-interface (NCCL_SOCKET_IFNAME syntax) or the route") {
  CHECK(choose_local_address("", "127.0.0.1") == "127.0.0.1");
  CHECK(choose_local_address("", "localhost") == "127.0.0.1");
  // This host's own name may resolve to loopback (Debian: 127.0.1.1): the rank publishes a real address then.
  std::string own;
  try {
    own = choose_local_address("", this_host_name());
  } catch (const Error& e) {
    MESSAGE("this host's name does not resolve here: " << e.what());
  }
  std::string first_real;  // the first interface that is not loopback, if there is one
  try {
    first_real = choose_local_address("^lo", "127.0.0.1");
  } catch (const Error&) {
  }
  if (!own.empty() && !first_real.empty())
    CHECK_MESSAGE(own.rfind("127.", 0) != 0, "named by its host name, this host published loopback " << own);
  CHECK(choose_local_address("lo", "127.0.0.1") == "127.0.0.1");
  CHECK(choose_local_address("=lo", "127.0.0.1") == "127.0.0.1");
  CHECK_ERROR_HAS(choose_local_address("=nonexistent0", "127.0.0.1"), "no network interface matches '=nonexistent0'");
  std::string every_letter = "^";
  for (char c = 'a'; c <= 'z'; ++c) every_letter += cat(c == 'a' ? "" : ",", c);
  CHECK_ERROR_HAS(choose_local_address(every_letter, "127.0.0.1"), "this host has: ");
  CHECK_ERROR_HAS(choose_local_address(every_letter, "127.0.0.1"), "lo 127.0.0.1");
}

// The ring handshake's checks (net/dist/frame.cpp), which tcp_comm.cpp applies
// to every connection on the ring port: the peer's run id is escaped onto
// one line (a newline in it was a two-line message; found by fuzz_ring,
// tests/fuzz/corpus/fuzz_ring/regress-hello-run-id-newline.bin).
TEST_CASE("comm: a ring hello of another run, rank, world or role is refused on one line") {
  CHECK(ring_hello_mismatch(make_ring_hello(0, 1, 2, "run"), 0, 1, 2, "run").empty());
  CHECK(contains(ring_hello_mismatch(make_ring_hello(0, 1, 2, "other\nrun"), 0, 1, 2, "run"),
                 "run id \"other\\nrun\" (this run is 'run')"));
  CHECK(contains(ring_hello_mismatch(make_ring_hello(0, 1, 3, "run"), 0, 1, 2, "run"), "world size 3"));
  CHECK(contains(ring_hello_mismatch(make_ring_hello(0, 2, 3, "run"), 0, 1, 3, "run"), "rank 2 (role 0) where rank 1"));
  CHECK(contains(ring_hello_mismatch(make_ring_hello(0, 1, 2, "run"), 1, 1, 2, "run"), "an answer as rank 1 (role 0)"));
  RingHello torn = make_ring_hello(0, 1, 2, "run");
  torn.rank = 5;  // the CRC no longer fits
  CHECK(ring_hello_mismatch(torn, 0, 5, 2, "run") == "handshake CRC mismatch");
}
