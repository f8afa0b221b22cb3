// tests/net/dist/test_dist_processes.cpp — data-parallel training as it is really
// run: the programs build/train_resnet and build/bench_allreduce (found next
// to this test binary) started as separate processes, one per rank, through
// each launcher ember supports (--nproc, torchrun-style variables, Open MPI's
// mpirun, and one rank per emulated host in network namespaces), and the
// faults a cluster sees: a rank SIGKILLed or SIGSTOPped mid-training, ranks
// that disagree at the rendezvous (world size, run id; also a wrong hello
// that beats rank 0's own), a rendezvous port already taken, port scanners
// and garbage on the rendezvous port.
//
// How: tests/support/process_helpers.h forks and execs each rank as the leader of
// its own session, stdout and stderr captured into files of a TempDir,
// waits with a deadline, and SIGKILLs the whole session of whatever is still
// alive at scope exit, so a test fails instead of hanging. Runs are tiny (512
// Fashion-MNIST images, batch 32 per rank, one thread per rank): the file
// takes 20-35 s on 2 idle cores, ~45 s with both busy. Timing bounds are
// generous against a loaded machine but well under what a hang or a missed
// detection would take; the measured times are printed (MESSAGE). The Open
// MPI and network-namespace tests are skipped, with the reason
// (tests/support/skip.h), where mpirun, root or namespaces are not available.
#include <doctest/doctest.h>

#include <unistd.h>

#include <cmath>
#include <memory>
#include <regex>
#include <string>
#include <vector>

#include "engine/error.h"
#include "net/dist/store.h"
#include "net/safetensors.h"
#include "tests/support/process_helpers.h"
#include "tests/support/skip.h"
#include "tests/support/test_helpers.h"

namespace {

using namespace ember;
using ember::testing::contains;
using ember::testing::TempDir;
using namespace ember::testing::process;

std::string program(const char* name) {
  const std::string path = binary_dir() + "/" + name;
  REQUIRE_MESSAGE(::access(path.c_str(), X_OK) == 0, path << " is missing: build it with `make all`");
  return path;
}

// The small training every test runs; `epochs` large keeps ranks training until the test stops them.
std::vector<std::string> train_args(const std::string& exe, int epochs = 1, int batch = 32) {
  return {exe,
          "--num-examples", "512", "--num-val-examples", "200", "--num-epochs", std::to_string(epochs),
          "--batch-size", std::to_string(batch), "--disp-batches", "4", "--threads", "1"};
}
std::vector<std::string> operator+(std::vector<std::string> a, const std::vector<std::string>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

std::string unique_run_id() {
  static int n = 0;
  return cat("dist-process-test-", ::getpid(), "-", n++);
}

// torchrun-style variables of one rank.
Env rank_env(int rank, int world, int port, const std::string& run_id, const std::string& master = "127.0.0.1") {
  return {{"RANK", std::to_string(rank)},
          {"WORLD_SIZE", std::to_string(world)},
          {"LOCAL_RANK", std::to_string(rank)},
          {"MASTER_ADDR", master},
          {"MASTER_PORT", std::to_string(port)},
          {"EMBER_RUN_ID", run_id}};
}

// Starts `world` ranks of `args` with torchrun-style variables.
std::vector<std::unique_ptr<Process>> start_ranks(int world, const std::vector<std::string>& args, int port,
                                                  const std::string& run_id, const std::string& dir) {
  std::vector<std::unique_ptr<Process>> ranks;
  for (int r = 0; r < world; ++r)
    ranks.push_back(std::make_unique<Process>(cat("rank", r), args, rank_env(r, world, port, run_id), dir));
  return ranks;
}

std::vector<Process*> pointers(const std::vector<std::unique_ptr<Process>>& ps) {
  std::vector<Process*> out;
  for (const auto& p : ps) out.push_back(p.get());
  return out;
}

std::string describe_all(const std::vector<Process*>& ps) {
  std::string s;
  for (const Process* p : ps) s += "\n  " + p->describe();
  return s;
}

// A failing rank's stderr must be exactly one line, "Node[r]: <program>: error: ...";
// returns it ("" after failing the check).
std::string one_error_line(const Process& p, int rank, const std::string& prog = "train_resnet") {
  const std::vector<std::string> lines = lines_of(p.err());
  const std::string prefix = cat("Node[", rank, "]: ", prog, ": error: ");
  INFO(p.describe());
  CHECK_MESSAGE(lines.size() == 1, p.name() << " printed " << lines.size() << " lines on stderr, expected one");
  for (const std::string& l : lines)
    if (l.rfind(prefix, 0) == 0) return l;
  FAIL_CHECK(p.name() << ": no stderr line starts with '" << prefix << "'");
  return "";
}

// ------------------------------------------------------------- checkpoints

struct TensorDiff {
  std::string worst_name;
  double worst = 0;  // max |a - b| / (1 + max |b|) over the tensors compared
};

// Compares the tensors of two checkpoints, the running statistics or the
// rest; every name must be in both with the same shape.
TensorDiff compare_checkpoints(const SafetensorsFile& a, const SafetensorsFile& b, bool running_stats) {
  TensorDiff d;
  for (const auto& [name, tb] : b.tensors) {
    if (contains(name, "running_") != running_stats) continue;
    const Tensor* ta = a.find(name);
    REQUIRE_MESSAGE(ta != nullptr, "tensor " << name << " is missing");
    REQUIRE_MESSAGE(ta->shape() == tb.shape(), name << ": shapes differ");
    const std::vector<double> va = ta->to_double_vector(), vb = tb.to_double_vector();
    double diff = 0, mag = 0;
    for (size_t i = 0; i < vb.size(); ++i) {
      diff = std::max(diff, std::abs(va[i] - vb[i]));
      mag = std::max(mag, std::abs(vb[i]));
    }
    const double rel = diff / (1 + mag);
    if (rel >= d.worst) d.worst = rel, d.worst_name = name;
  }
  return d;
}

// "Epoch[0] Batch [0-4]" ranges of a log, in order.
std::vector<std::string> batch_ranges(const std::string& log) {
  std::vector<std::string> out;
  static const std::regex re(R"(Epoch\[(\d+)\] Batch \[(\d+-\d+)\])");
  for (const std::string& line : lines_of(log)) {
    std::smatch m;
    if (std::regex_search(line, m, re)) out.push_back(m[1].str() + ":" + m[2].str());
  }
  return out;
}

// The value of "Epoch[0] Train-accuracy=0.123456" (its line must have that exact form); -1 if absent.
double train_accuracy(const std::string& log) {
  static const std::regex re(R"(^Epoch\[0\] Train-accuracy=(\d\.\d{6})$)");
  for (const std::string& line : lines_of(log)) {
    std::smatch m;
    if (std::regex_match(line, m, re)) return std::stod(m[1].str());
  }
  return -1;
}

}  // namespace

// ---------------------------------------------------------------- 1. equivalence

TEST_CASE("dist process: --nproc 2 --sync-bn 1 with batch 32 ends with the weights of one process with batch 64") {
  const TempDir tmp;
  const std::string exe = program("train_resnet");
  // Rank r takes positions r, r+2, ... of the global order, and augmentation
  // is seeded per sample, so the two ranks' batches of step k together are
  // the single process's batch k; with synchronised batch norm and averaged
  // gradients the runs are the same computation in another order.
  //
  // Tolerance. In f64 the two are the same sums in another order
  // (tests/net/dist/test_data_parallel.cpp checks 1e-10, and the synchronised batch
  // norm op matches the fused training kernel to f32 rounding: 2.4e-7 on
  // the input gradient). In f32 the early steps of training from scratch
  // amplify rounding differences: one process with --threads 1 and with
  // --threads 2 (the same sums in another order, nothing else) ends these 8
  // steps at the default one-cycle peak lr 0.2 13% apart on running
  // variances; --nproc 2 against one process, 9% on parameters and 21% on
  // running variances (lr 0.02: 0.7% / 1.6%). So the runs use --lr 0.001
  // (one-cycle). As max|a-b| / (1 + max|b|) per tensor, seed 7 (used here)
  // measured 6.0e-5 on parameters and 1.5e-4 on running statistics; seeds
  // 0-3: 2.3e-5..6.7e-5 and 0.9e-4..2.8e-4. The bounds are 3e-4 and 1e-3.
  // Averaging wrongly (the sum instead of the mean: twice the gradient, much
  // like twice the learning rate) gives 1.3e-3..3.1e-3 and 3.5e-3..4.0e-2
  // over the same seeds; planted in net/dist/reducer.cpp it gave 1.7e-3 and
  // 8.9e-3 here, and this test failed.
  const double param_tol = 3e-4, stats_tol = 1e-3;
  const std::vector<std::string> common = {"--lr", "0.001", "--sync-bn", "1", "--seed", "7"};
  const std::string dp_prefix = tmp.file("dp"), single_prefix = tmp.file("single");

  Process dp("dp", train_args(exe, 1, 32) + common + std::vector<std::string>{"--nproc", "2", "--model-prefix", dp_prefix},
             {}, tmp.path.string());
  REQUIRE_MESSAGE(dp.wait_for(120), "--nproc 2 did not finish within 120 s: " << dp.describe());
  REQUIRE_MESSAGE(dp.exit_code() == 0, dp.describe());
  Process single("single", train_args(exe, 1, 64) + common + std::vector<std::string>{"--model-prefix", single_prefix},
                 {}, tmp.path.string());
  REQUIRE_MESSAGE(single.wait_for(120), "the single process did not finish within 120 s: " << single.describe());
  REQUIRE_MESSAGE(single.exit_code() == 0, single.describe());
  MESSAGE("--nproc 2: " << dp.run_seconds() << " s, one process: " << single.run_seconds() << " s");

  {
    const std::string dp_log = dp.out(), single_log = single.out();
    INFO("--nproc 2 log:\n", dp_log, "\none process log:\n", single_log);
    CHECK(contains(dp_log, "data-parallel: 2 ranks"));
    CHECK(contains(dp_log, "global batch 64 = --batch-size 32 x 2"));
    CHECK(contains(dp_log, "synchronised batch norm"));
    CHECK_FALSE(contains(single_log, "data-parallel"));
    // The same steps: 512 images / 64 per step = 8, printed every 4.
    const std::vector<std::string> dp_batches = batch_ranges(dp_log), single_batches = batch_ranges(single_log);
    CHECK(dp_batches == std::vector<std::string>{"0:0-4", "0:4-8"});
    CHECK(dp_batches == single_batches);
    const double dp_acc = train_accuracy(dp_log), single_acc = train_accuracy(single_log);
    CHECK(dp_acc >= 0);
    CHECK(single_acc >= 0);
    CHECK(std::abs(dp_acc - single_acc) <= 2.0 / 512);  // the global accuracy over the same 512 images
  }

  const SafetensorsFile a = load_safetensors(dp_prefix + "-0001.safetensors");
  const SafetensorsFile b = load_safetensors(single_prefix + "-0001.safetensors");
  CHECK(a.tensors.size() == b.tensors.size());
  CHECK(a.metadata.count("world_size") == 1);
  if (a.metadata.count("world_size")) CHECK(a.metadata.at("world_size") == "2");
  CHECK(b.metadata.count("world_size") == 0);
  const TensorDiff params = compare_checkpoints(a, b, false), stats = compare_checkpoints(a, b, true);
  MESSAGE("largest difference: parameters " << params.worst << " (" << params.worst_name << "), running statistics "
                                           << stats.worst << " (" << stats.worst_name << ")");
  CHECK_MESSAGE(params.worst <= param_tol, "parameters differ by " << params.worst << " at " << params.worst_name);
  CHECK_MESSAGE(stats.worst <= stats_tol, "running statistics differ by " << stats.worst << " at " << stats.worst_name);
  // Only rank 0 writes checkpoints.
  CHECK(tmp.entries() == std::vector<std::string>{"dp-0001.safetensors", "dp-0001.states.safetensors", "dp.err",
                                                  "dp.out", "single-0001.safetensors", "single-0001.states.safetensors",
                                                  "single.err", "single.out"});

  // Negative control: with --sync-bn 0 each rank normalises its own 32
  // images, which is not the single process's computation, and the
  // comparison above must see it (or it could not fail). Measured with seed
  // 7: parameters 7.2e-4 (2.4x param_tol), running statistics 4.7e-3 (4.7x
  // stats_tol; each rank's running statistics averaged at the epoch's end,
  // which misses the spread between the two halves' means).
  const std::string nosync_prefix = tmp.file("nosync");
  Process nosync("nosync",
                 train_args(exe, 1, 32) +
                     std::vector<std::string>{"--lr", "0.001", "--sync-bn", "0", "--seed", "7", "--nproc", "2",
                                              "--model-prefix", nosync_prefix},
                 {}, tmp.path.string());
  REQUIRE_MESSAGE(nosync.wait_for(120), "--nproc 2 --sync-bn 0 did not finish within 120 s: " << nosync.describe());
  REQUIRE_MESSAGE(nosync.exit_code() == 0, nosync.describe());
  CHECK_FALSE(contains(nosync.out(), "synchronised batch norm"));
  const SafetensorsFile c = load_safetensors(nosync_prefix + "-0001.safetensors");
  const TensorDiff nosync_params = compare_checkpoints(c, b, false), nosync_stats = compare_checkpoints(c, b, true);
  MESSAGE("--sync-bn 0 against one process: parameters " << nosync_params.worst << " (" << nosync_params.worst_name
                                                         << "), running statistics " << nosync_stats.worst << " ("
                                                         << nosync_stats.worst_name << ")");
  CHECK_MESSAGE(nosync_stats.worst > stats_tol,
                "without sync-BN the running statistics differ by only " << nosync_stats.worst);
  CHECK_MESSAGE(nosync_params.worst > param_tol,
                "without sync-BN the parameters differ by only " << nosync_params.worst);
}

// ------------------------------------------------------- 2, 3. a rank lost mid-training

namespace {

// Three torchrun-style ranks training "forever"; returns once rank 0 printed its first progress line.
std::vector<std::unique_ptr<Process>> start_training_ranks(const TempDir& tmp, double comm_timeout) {
  const std::vector<std::string> args =
      train_args(program("train_resnet"), 100000) +
      std::vector<std::string>{"--comm-timeout", cat(comm_timeout)};
  auto ranks = start_ranks(3, args, pick_port(), unique_run_id(), tmp.path.string());
  const bool training = ranks[0]->wait_for_output("Epoch[0] Batch", 90);
  REQUIRE_MESSAGE(training, "rank 0 printed no 'Epoch[0] Batch' line within 90 s:" << describe_all(pointers(ranks))
                                                                                   << "\nrank 0 stdout: " << ranks[0]->out());
  for (const auto& r : ranks) REQUIRE_MESSAGE(!r->exited(), "a rank ended early:" << describe_all(pointers(ranks)));
  return ranks;
}

// Ranks 0 and 2 after rank 1 was stopped or killed at `t0`: both must end
// non-zero within `limit` s with one stderr line naming rank 1. Returns the
// later of their exit times, in seconds after t0.
double check_survivors(std::vector<std::unique_ptr<Process>>& ranks, Clock::time_point t0, double limit) {
  const bool ended = wait_all({ranks[0].get(), ranks[2].get()}, limit);
  CHECK_MESSAGE(ended, "ranks 0 and 2 did not both exit within " << limit << " s after rank 1 was stopped:"
                                                                 << describe_all({ranks[0].get(), ranks[2].get()}));
  if (!ended) return -1;
  double latest = 0;
  for (int r : {0, 2}) {
    Process& p = *ranks[size_t(r)];
    const double t = std::chrono::duration<double>(p.ended_at() - t0).count();
    latest = std::max(latest, t);
    CAPTURE(r);
    CHECK_MESSAGE(p.exit_code() == 1, p.describe());
    const std::string line = one_error_line(p, r);
    CHECK_MESSAGE(contains(line, "rank 1"), "the error does not name rank 1: " << line);
    MESSAGE("rank " << r << " exited " << t << " s after rank 1 was stopped: " << line);
  }
  return latest;
}

}  // namespace

TEST_CASE("dist process: a rank SIGKILLed mid-training: the others stop at once, naming it") {
  const TempDir tmp;
  auto ranks = start_training_ranks(tmp, 20);
  const auto t0 = Clock::now();
  ranks[1]->signal(SIGKILL);
  REQUIRE(ranks[1]->wait_for(10));
  CHECK(ranks[1]->exit_code() == -SIGKILL);
  // A dead peer closes its sockets: detection must not wait for --comm-timeout 20.
  const double detected = check_survivors(ranks, t0, 5.0);
  if (detected >= 0) MESSAGE("SIGKILL of rank 1 detected by ranks 0 and 2 within " << detected << " s (--comm-timeout 20)");
}

TEST_CASE("dist process: a rank SIGSTOPped mid-training: the others stop after --comm-timeout, naming it") {
  const TempDir tmp;
  const double timeout = 4;
  auto ranks = start_training_ranks(tmp, timeout);
  const auto t0 = Clock::now();
  ranks[1]->signal(SIGSTOP);
  // A stopped peer keeps its connections open and silent: only the timeout can tell.
  const double detected = check_survivors(ranks, t0, timeout + 5);
  // Not before the timeout (less one heartbeat interval): nothing else may end the run.
  if (detected >= 0) CHECK(detected >= timeout - 1);
  if (detected >= 0)
    MESSAGE("SIGSTOP of rank 1 detected by ranks 0 and 2 within " << detected << " s (--comm-timeout " << timeout << ")");
  CHECK_FALSE(ranks[1]->exited());  // stopped, not dead
  ranks[1]->kill_all();
  CHECK(ranks[1]->exited());
}

// ---------------------------------------------------------------- 4. rendezvous errors

TEST_CASE("dist process: rendezvous: ranks with different world sizes both stop with 'world size mismatch'") {
  const TempDir tmp;
  const std::vector<std::string> args =
      train_args(program("train_resnet")) + std::vector<std::string>{"--comm-timeout", "10"};
  const int port = pick_port();
  const std::string id = unique_run_id();
  Process r0("rank0", args, rank_env(0, 2, port, id), tmp.path.string());
  Process r1("rank1", args, rank_env(1, 3, port, id), tmp.path.string());
  const auto t0 = Clock::now();
  const bool ended = wait_all({&r0, &r1}, 10 + 10);
  REQUIRE_MESSAGE(ended, "the ranks did not exit within 20 s:" << describe_all({&r0, &r1}));
  MESSAGE("rank 0 exited after " << std::chrono::duration<double>(r0.ended_at() - t0).count() << " s, rank 1 after "
                                 << std::chrono::duration<double>(r1.ended_at() - t0).count() << " s");
  for (Process* p : {&r0, &r1}) {
    const int rank = p == &r0 ? 0 : 1;
    CHECK_MESSAGE(p->exit_code() == 1, p->describe());
    const std::string line = one_error_line(*p, rank);
    CHECK_MESSAGE(contains(line, "world size mismatch"), line);
    // The mismatch is known as soon as rank 1 says hello: no rank may sit out --comm-timeout 10 first.
    const double t = std::chrono::duration<double>(p->ended_at() - t0).count();
    CHECK_MESSAGE(t <= 5, p->name() << " took " << t << " s to stop after a world size mismatch (--comm-timeout 10)");
  }
}

TEST_CASE("dist process: rendezvous: a wrong world size that arrives before rank 0's own hello still stops rank 0 at once") {
  // The race the test above meets only by chance (under load): here the
  // test itself is "rank 1 with WORLD_SIZE=3", connecting in a tight loop
  // while rank 0 starts, so its hello reaches the rendezvous before rank 0's
  // own client has said hello.
  const TempDir tmp;
  const double timeout = 8;
  const int port = pick_port();
  const std::string id = unique_run_id();
  Process r0("rank0", train_args(program("train_resnet")) + std::vector<std::string>{"--comm-timeout", cat(timeout)},
             rank_env(0, 2, port, id), tmp.path.string());
  Socket s;
  const auto start = Clock::now();
  for (long i = 0; s.fd < 0; ++i) {
    s = connect_local(port);
    if (i % 1000 == 0 && (r0.exited() || seconds_since(start) > 60)) break;
  }
  REQUIRE_MESSAGE(s.fd >= 0, "rank 0's rendezvous never listened on port " << port << ": " << r0.describe());
  using namespace ember::net::dist::store_wire;
  const std::string hello_message =
      message(hello, u32(kVersion) + u32(1) + u32(3) + str(id) + str("test-process"));
  REQUIRE(::send(s.fd, hello_message.data(), hello_message.size(), MSG_NOSIGNAL) == ssize_t(hello_message.size()));
  const auto t0 = Clock::now();
  std::string reply;
  for (;;) {  // the rendezvous answers with an error, then closes
    pollfd p{s.fd, POLLIN, 0};
    if (::poll(&p, 1, 10000) <= 0) break;
    char buf[4096];
    const ssize_t k = ::recv(s.fd, buf, sizeof buf, 0);
    if (k <= 0) break;
    reply.append(buf, size_t(k));
  }
  CHECK_MESSAGE(contains(reply, "world size mismatch"), "the rendezvous answered: " << reply);
  const bool ended = r0.wait_for(timeout + 5 + 5);
  REQUIRE_MESSAGE(ended, "rank 0 did not exit within " << timeout + 10 << " s: " << r0.describe());
  const double t = std::chrono::duration<double>(r0.ended_at() - t0).count();
  MESSAGE("rank 0 exited " << t << " s after the wrong hello (--comm-timeout " << timeout << ")");
  CHECK_MESSAGE(r0.exit_code() == 1, r0.describe());
  CHECK_MESSAGE(contains(one_error_line(r0, 0), "world size mismatch"), r0.describe());
  CHECK_MESSAGE(t <= 4, "rank 0 took " << t << " s to stop after a world size mismatch (--comm-timeout " << timeout
                                       << "): it waited for its own client's reply instead of failing at once");
}

TEST_CASE("dist process: rendezvous: a rank of another run id is turned away; rank 0 reports it never joined") {
  const TempDir tmp;
  const double timeout = 3;
  const std::vector<std::string> args =
      train_args(program("train_resnet")) + std::vector<std::string>{"--comm-timeout", cat(timeout)};
  const int port = pick_port();
  const std::string id = unique_run_id();
  Process r0("rank0", args, rank_env(0, 2, port, id), tmp.path.string());
  Process r1("rank1", args, rank_env(1, 2, port, id + "-other"), tmp.path.string());
  const auto t0 = Clock::now();
  const bool ended = wait_all({&r0, &r1}, timeout + 5);
  CHECK_MESSAGE(ended, "the ranks did not exit within " << timeout + 5 << " s:" << describe_all({&r0, &r1}));
  if (!ended) return;
  MESSAGE("rank 1 exited after " << std::chrono::duration<double>(r1.ended_at() - t0).count() << " s, rank 0 after "
                                 << std::chrono::duration<double>(r0.ended_at() - t0).count() << " s");
  CHECK_MESSAGE(r1.exit_code() == 1, r1.describe());
  CHECK_MESSAGE(contains(one_error_line(r1, 1), "run id mismatch"), r1.describe());
  CHECK_MESSAGE(r0.exit_code() == 1, r0.describe());
  const std::string line = one_error_line(r0, 0);
  CHECK_MESSAGE(contains(line, "never joined"), line);
  CHECK_MESSAGE(contains(line, "rank(s) 1"), line);
}

TEST_CASE("dist process: rendezvous: a MASTER_PORT already in use fails at once, naming the port and --master-port") {
  const TempDir tmp;
  int port = 0;
  Socket holder;
  for (int i = 0; i < 20 && holder.fd < 0; ++i) holder = listen_on(port = pick_port());
  REQUIRE_MESSAGE(holder.fd >= 0, "could not hold a listening port");
  Process r0("rank0", train_args(program("train_resnet")) + std::vector<std::string>{"--comm-timeout", "10"},
             rank_env(0, 2, port, unique_run_id()), tmp.path.string());
  REQUIRE_MESSAGE(r0.wait_for(15), "rank 0 did not exit within 15 s: " << r0.describe());
  MESSAGE("rank 0 exited after " << r0.run_seconds() << " s");
  CHECK_MESSAGE(r0.exit_code() == 1, r0.describe());
  const std::string line = one_error_line(r0, 0);
  CHECK_MESSAGE(contains(line, std::to_string(port)), line);
  CHECK_MESSAGE(contains(line, "--master-port"), line);
}

// ---------------------------------------------------------------- 5. scanners

TEST_CASE("dist process: port scanners and garbage on the rendezvous port do not disturb training") {
  const TempDir tmp;
  const std::vector<std::string> args =
      train_args(program("train_resnet")) + std::vector<std::string>{"--comm-timeout", "60"};
  const int port = pick_port();
  const std::string id = unique_run_id();
  Process r0("rank0", args, rank_env(0, 2, port, id), tmp.path.string());
  // Wait until rank 0's rendezvous listens (each probe is itself a connect-and-close).
  const auto t0 = Clock::now();
  bool listening = false;
  while (!listening && seconds_since(t0) < 60 && !r0.exited()) {
    listening = connect_local(port).fd >= 0;
    if (!listening) sleep_ms(20);
  }
  REQUIRE_MESSAGE(listening, "rank 0's rendezvous never listened on port " << port << ": " << r0.describe());
  {
    Socket s = connect_local(port);  // connect and close
    CHECK(s.fd >= 0);
  }
  {
    Socket s = connect_local(port);  // 1 KiB of random bytes, then close
    REQUIRE(s.fd >= 0);
    std::mt19937 rng(1234);
    std::vector<unsigned char> junk(1024);
    for (auto& c : junk) c = static_cast<unsigned char>(rng());
    junk[0] = 'G';  // not the rendezvous magic, whatever the generator gives
    size_t sent = 0;
    while (sent < junk.size()) {
      const ssize_t k = ::send(s.fd, junk.data() + sent, junk.size() - sent, MSG_NOSIGNAL);
      if (k <= 0) break;
      sent += size_t(k);
    }
    CHECK(sent == junk.size());
  }
  Socket idle = connect_local(port);  // kept open, silent, until training is over
  CHECK(idle.fd >= 0);
  sleep_ms(200);  // let rank 0 see all three before rank 1 arrives
  Process r1("rank1", args, rank_env(1, 2, port, id), tmp.path.string());
  const bool ended = wait_all({&r0, &r1}, 120);
  REQUIRE_MESSAGE(ended, "training did not finish within 120 s:" << describe_all({&r0, &r1}));
  CHECK_MESSAGE(r0.exit_code() == 0, r0.describe());
  CHECK_MESSAGE(r1.exit_code() == 0, r1.describe());
  CHECK_MESSAGE(contains(r0.out(), "Finished 1 epochs"), r0.out());
  CHECK(r1.out().empty());  // only rank 0 logs
}

// ---------------------------------------------------------------- 6. Open MPI

namespace {
bool have_mpirun() { return !find_program("mpirun").empty(); }
constexpr ember::testing::needs kNeedsMpirun{"mpirun is not on the PATH (Debian: openmpi-bin)", have_mpirun};
}  // namespace

TEST_CASE("dist process: mpirun -np 2 trains, ranks and size from Open MPI's variables" * kNeedsMpirun) {
  const std::string mpirun = find_program("mpirun");
  REQUIRE(!mpirun.empty());
  const TempDir tmp;
  const int port = pick_port();
  Process mpi("mpirun",
              std::vector<std::string>{mpirun, "-np", "2", "--allow-run-as-root", "--oversubscribe"} +
                  train_args(program("train_resnet")) +
                  std::vector<std::string>{"--master-addr", "127.0.0.1", "--master-port", std::to_string(port),
                                           "--comm-timeout", "60"},
              {}, tmp.path.string());
  REQUIRE_MESSAGE(mpi.wait_for(120), "mpirun did not finish within 120 s: " << mpi.describe() << "\nstdout: " << mpi.out());
  MESSAGE("mpirun -np 2: " << mpi.run_seconds() << " s");
  const std::string out = mpi.out();
  CHECK_MESSAGE(mpi.exit_code() == 0, mpi.describe() << "\nstdout: " << out);
  CHECK_MESSAGE(contains(out, "data-parallel: 2 ranks (Open MPI)"), out);
  CHECK_MESSAGE(contains(out, cat("rendezvous 127.0.0.1:", port)), out);
  CHECK_MESSAGE(contains(out, "Finished 1 epochs"), out);
}

// ---------------------------------------------------------------- 7. separate hosts

namespace {

// An emulated cluster (scripts/netns_cluster.sh), always torn down at scope exit.
struct NetnsCluster {
  std::string script, prefix, dir;
  int hosts;
  bool up = false;
  std::string up_output;
  NetnsCluster(const std::string& script_, const std::string& prefix_, int hosts_, const std::string& dir_)
      : script(script_), prefix(prefix_), dir(dir_), hosts(hosts_) {
    up = run_command({"bash", script, "up", std::to_string(hosts), "--rate", "none", "--prefix", prefix}, 60, dir,
                     prefix + "-up", &up_output) == 0;
  }
  ~NetnsCluster() {
    std::string output;
    const int rc = run_command({"bash", script, "down", "--prefix", prefix}, 60, dir, prefix + "-down", &output);
    if (rc != 0) MESSAGE("netns_cluster.sh down --prefix " << prefix << " failed: " << output);
  }
  NetnsCluster(const NetnsCluster&) = delete;
  NetnsCluster& operator=(const NetnsCluster&) = delete;

  // Rank i of `args` inside host i; outputs named <prefix>-<tag>-rank<i>.
  std::vector<std::unique_ptr<Process>> start(const std::string& tag, const std::vector<std::string>& args,
                                              const std::string& master, int port, const std::string& run_id) const {
    std::vector<std::unique_ptr<Process>> ranks;
    for (int i = 0; i < hosts; ++i)
      ranks.push_back(std::make_unique<Process>(
          cat(prefix, "-", tag, "-rank", i),
          std::vector<std::string>{"bash", script, "exec", "--prefix", prefix, std::to_string(i)} + args,
          rank_env(i, hosts, port, run_id, master), dir));
    return ranks;
  }
};

std::vector<std::string> our_namespaces(const std::string& prefix, const std::string& dir) {
  std::string out;
  run_command({"ip", "netns", "list"}, 20, dir, "netns-list", &out);
  std::vector<std::string> found;
  for (const std::string& l : lines_of(out))
    if (l.rfind(prefix, 0) == 0) found.push_back(l);
  return found;
}

}  // namespace

namespace {
std::string netns_script() { return (std::filesystem::current_path() / "scripts" / "netns_cluster.sh").string(); }
// The script is there (the tests run from the repository root), we are root,
// and its `check` makes a namespace.
bool netns_possible() {
  if (!std::filesystem::exists(netns_script()) || ::geteuid() != 0) return false;
  const TempDir tmp;
  std::string out;
  return run_command({"bash", netns_script(), "check"}, 30, tmp.path.string(), "check", &out) == 0;
}
constexpr ember::testing::needs kNeedsNetns{
    "network namespaces cannot be made here (they need root, scripts/netns_cluster.sh from the repository root "
    "and its `check` passing)",
    netns_possible};
}  // namespace

TEST_CASE("dist process: one rank per emulated host (network namespaces): all-reduce benchmark and training" *
          kNeedsNetns) {
  const std::string script = netns_script();
  REQUIRE(std::filesystem::exists(script));
  REQUIRE(::geteuid() == 0);
  const TempDir tmp;
  const std::string dir = tmp.path.string();
  std::string check_output;
  REQUIRE_MESSAGE(run_command({"bash", script, "check"}, 30, dir, "check", &check_output) == 0, check_output);
  std::string master;
  REQUIRE(run_command({"bash", script, "addr", "0"}, 10, dir, "addr", &master) == 0);
  master = lines_of(master).at(0);
  const std::string bench = program("bench_allreduce"), train = program("train_resnet");
  const std::string prefix = cat("embertest", ::getpid());
  {
    NetnsCluster two(script, prefix + "a", 2, dir), four(script, prefix + "b", 4, dir);
    REQUIRE_MESSAGE(two.up, "netns_cluster.sh up 2 failed: " << two.up_output);
    REQUIRE_MESSAGE(four.up, "netns_cluster.sh up 4 failed: " << four.up_output);

    for (NetnsCluster* c : {&two, &four}) {
      CAPTURE(c->hosts);
      auto ranks = c->start("bench", {bench, "--sizes", "1,4", "--iters", "3", "--comm-timeout", "30"}, master, pick_port(),
                            unique_run_id());
      const bool ended = wait_all(pointers(ranks), 60);
      CHECK_MESSAGE(ended, "bench_allreduce did not finish within 60 s:" << describe_all(pointers(ranks)));
      if (!ended) continue;
      for (const auto& r : ranks) CHECK_MESSAGE(r->exit_code() == 0, r->describe());
      const std::string out = ranks[0]->out();
      MESSAGE(c->hosts << " hosts, bench_allreduce in " << ranks[0]->run_seconds() << " s:\n" << out);
      CHECK_MESSAGE(contains(out, cat("# ember all-reduce: tcp, ", c->hosts, " ranks")), out);
      CHECK_MESSAGE(contains(out, "1048576"), out);  // one row per size
      CHECK_MESSAGE(contains(out, "4194304"), out);
    }

    auto ranks = two.start("train", train_args(train) + std::vector<std::string>{"--comm-timeout", "30"}, master, pick_port(),
                           unique_run_id());
    const bool ended = wait_all(pointers(ranks), 120);
    CHECK_MESSAGE(ended, "training on 2 hosts did not finish within 120 s:" << describe_all(pointers(ranks)));
    if (ended) {
      for (const auto& r : ranks) CHECK_MESSAGE(r->exit_code() == 0, r->describe());
      const std::string out = ranks[0]->out();
      MESSAGE("2 hosts, train_resnet in " << ranks[0]->run_seconds() << " s");
      CHECK_MESSAGE(contains(out, cat("data-parallel: 2 ranks (torchrun-style RANK/WORLD_SIZE), rendezvous ", master)),
                    out);
      CHECK_MESSAGE(contains(out, "Finished 1 epochs"), out);
    }
  }
  // Torn down, whatever happened above.
  CHECK(our_namespaces(prefix, dir).empty());
}
