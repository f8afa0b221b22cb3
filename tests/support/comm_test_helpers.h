// tests/support/comm_test_helpers.h — running P ranks of the TCP communicator as
// threads of the test process, on loopback (tests/net/dist/test_comm.cpp,
// tests/net/dist/test_data_parallel.cpp).
//
// Each rank thread builds its own communicator (the rendezvous runs for
// real: rank 0 serves the store on a free port), runs the test's function,
// and on an error does what a program's main() does: aborts the
// communicator with the reason, so the other ranks hear it instead of
// waiting. run_ranks returns each rank's error message ("" when it passed).
#pragma once
#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "net/dist/socket.h"
#include "net/dist/tcp_comm.h"

namespace ember::testing {

inline int free_port() {
  UniqueFd fd = net::dist::listen_tcp("127.0.0.1", 0);
  return net::dist::local_port(fd.get());
}

inline net::dist::TcpCommOptions loopback_options(int world, double timeout_s = 20) {
  net::dist::TcpCommOptions o;
  o.world = world;
  o.master_addr = "127.0.0.1";
  o.master_port = free_port();
  o.run_id = "test-" + std::to_string(o.master_port);
  o.timeout_s = timeout_s;
  return o;
}

struct RankResult {
  std::string error;   // "" when the rank's function returned normally
  double seconds = 0;  // from the start of its thread to its end
};

// Runs fn(comm, rank) on `world` threads; `configure` may change each rank's options.
inline std::vector<RankResult> run_ranks(
    const net::dist::TcpCommOptions& base, const std::function<void(net::dist::Comm&, int)>& fn,
    const std::function<void(net::dist::TcpCommOptions&, int)>& configure = nullptr) {
  std::vector<RankResult> results(size_t(base.world));
  std::vector<std::thread> threads;
  for (int r = 0; r < base.world; ++r) {
    threads.emplace_back([&, r] {
      const auto t0 = std::chrono::steady_clock::now();
      net::dist::TcpCommOptions o = base;
      o.rank = r;
      if (configure) configure(o, r);
      std::unique_ptr<net::dist::Comm> comm;
      try {
        comm = net::dist::make_tcp_comm(o);
        fn(*comm, r);
      } catch (const std::exception& e) {
        results[size_t(r)].error = e.what();
        if (comm) comm->abort("rank " + std::to_string(r) + " stopped: " + e.what());
      }
      comm.reset();
      results[size_t(r)].seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    });
  }
  for (auto& t : threads) t.join();
  return results;
}

}  // namespace ember::testing
