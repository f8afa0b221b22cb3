// apps/training/distributed.cpp — data-parallel flags, local workers, the
// communicator and fatal errors for the apps (apps/training/distributed.h).
#include "apps/training/distributed.h"

#include <algorithm>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <random>
#include <sched.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <thread>

#include "engine/error.h"
#include "net/dist/socket.h"
#include "net/dist/tcp_comm.h"

namespace ember::apps {
namespace {

// The process's communicator and rank, for report_fatal.
std::unique_ptr<net::dist::Comm> g_comm;
int g_rank = -1;

std::vector<pid_t> g_children;
void forward_signal(int sig) {
  for (pid_t p : g_children) ::kill(p, sig);
}

std::string random_run_id() {
  std::random_device rd;
  return cat("local-", std::hex, (uint64_t(rd()) << 32) ^ rd());
}

// A port nobody listens on right now (bind to 0 and give it back).
int free_port() {
  UniqueFd fd = net::dist::listen_tcp("127.0.0.1", 0);
  return net::dist::local_port(fd.get());
}

bool launcher_env_present() {
  for (const char* v : {"RANK", "WORLD_SIZE", "OMPI_COMM_WORLD_RANK", "SLURM_PROCID"})
    if (const char* x = std::getenv(v); x && *x) return true;
  return false;
}

}  // namespace

void declare_dist_flags(Flags& f, DistSettings& s) {
  f.group("distributed (data-parallel)");
  f.add("nproc", &s.nproc, "start N worker processes on this machine (torchrun's --nproc-per-node)");
  f.add("kv-store", &s.kv_store, "gradient all-reduce: tcp (ember's ring) or nccl (GPUs); empty: nccl with --gpus (in a build with NCCL), else tcp");
  f.add("master-addr", &s.master_addr, "host of rank 0's rendezvous (default: MASTER_ADDR, SLURM's first host)");
  f.add("master-port", &s.master_port, "port of rank 0's rendezvous (default: MASTER_PORT, else 29500; a free one with --nproc)");
  f.add("run-id", &s.run_id, "id shared by the ranks of one run (default: EMBER_RUN_ID or the launcher's job id)");
  f.add("comm-interface", &s.comm_interface, "network interface(s) for the ring, NCCL_SOCKET_IFNAME syntax: eth0 | =eth0 | ^docker,lo (default: EMBER_SOCKET_IFNAME, else the route to the master)");
  f.add("comm-port", &s.comm_port, "port this rank's ring listens on (0: any free port)");
  f.add("comm-timeout", &s.comm_timeout, "seconds a silent or unreachable rank is waited for before every rank stops");
  f.add("sync-bn", &s.sync_bn, "1: batch-norm statistics over all ranks' batches (synchronised batch norm)");
  f.add("bucket-size-mb", &s.bucket_size_mb, "gradient bucket size in MiB (the first one is 1 MiB)");
  f.add("comm-segment-kb", &s.segment_kb, "TCP ring: pipelining segment in KiB");
}

void validate_dist_settings(const DistSettings& s) {
  EMBER_CHECK(s.nproc >= 0, "--nproc must be >= 0");
  EMBER_CHECK(s.kv_store.empty() || s.kv_store == "tcp" || s.kv_store == "nccl", "--kv-store '", s.kv_store,
              "': tcp or nccl");
  EMBER_CHECK(s.comm_timeout > 0, "--comm-timeout must be positive");
  EMBER_CHECK(s.comm_port >= 0 && s.comm_port < 65536, "--comm-port must be 0-65535");
  EMBER_CHECK(s.master_port >= 0 && s.master_port < 65536, "--master-port must be 0-65535");
  EMBER_CHECK(s.bucket_size_mb > 0, "--bucket-size-mb must be positive");
  EMBER_CHECK(s.segment_kb >= 4 && s.segment_kb <= (1 << 20), "--comm-segment-kb must be 4 to 1048576");
}

int workers_to_launch(const DistSettings& s, int gpus) { return s.nproc > 0 ? s.nproc : gpus; }

bool should_launch_workers(const DistSettings& s, int gpus) {
  return workers_to_launch(s, gpus) > 1 && !launcher_env_present();
}

int run_local_workers(int workers, const DistSettings& s, char** argv) {
  const int port = s.master_port > 0 ? s.master_port : free_port();
  const std::string run_id = !s.run_id.empty() ? s.run_id
                             : std::getenv("EMBER_RUN_ID") ? std::getenv("EMBER_RUN_ID")
                                                           : random_run_id();
  std::fflush(nullptr);
  for (int r = 0; r < workers; ++r) {
    const pid_t pid = ::fork();
    EMBER_CHECK(pid >= 0, "fork: ", std::strerror(errno));
    if (pid == 0) {
      // A process group of its own: a terminal's Ctrl-C reaches the launcher
      // only, which forwards it once (twice would be "quit at once" to the
      // worker's handler, apps/training/stop_signal.h).
      ::setpgid(0, 0);
      ::setenv("RANK", std::to_string(r).c_str(), 1);
      ::setenv("LOCAL_RANK", std::to_string(r).c_str(), 1);
      ::setenv("WORLD_SIZE", std::to_string(workers).c_str(), 1);
      ::setenv("LOCAL_WORLD_SIZE", std::to_string(workers).c_str(), 1);
      ::setenv("MASTER_ADDR", s.master_addr.empty() ? "127.0.0.1" : s.master_addr.c_str(), 1);
      ::setenv("MASTER_PORT", std::to_string(port).c_str(), 1);
      ::setenv("EMBER_RUN_ID", run_id.c_str(), 1);
      ::execv("/proc/self/exe", argv);
      std::fprintf(stderr, "cannot start worker %d: %s\n", r, std::strerror(errno));
      ::_exit(127);
    }
    g_children.push_back(pid);
  }
  struct sigaction sa{};
  sa.sa_handler = forward_signal;
  ::sigaction(SIGINT, &sa, nullptr);
  ::sigaction(SIGTERM, &sa, nullptr);

  int status_out = 0;
  size_t alive = g_children.size();
  std::vector<bool> done(g_children.size(), false);
  std::chrono::steady_clock::time_point kill_at = std::chrono::steady_clock::time_point::max();
  while (alive > 0) {
    int status = 0;
    const pid_t pid = ::waitpid(-1, &status, WNOHANG);
    if (pid < 0 && errno != EINTR) break;
    if (pid <= 0) {
      if (std::chrono::steady_clock::now() >= kill_at) {
        for (size_t i = 0; i < g_children.size(); ++i)
          if (!done[i]) {
            std::fprintf(stderr, "worker %zu (pid %d) did not stop %.0f s after a failure: killing it\n", i,
                         int(g_children[i]), s.comm_timeout + 10);
            ::kill(g_children[i], SIGKILL);
          }
        kill_at = std::chrono::steady_clock::time_point::max();
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
      continue;
    }
    size_t i = 0;
    while (i < g_children.size() && g_children[i] != pid) ++i;
    if (i == g_children.size()) continue;
    done[i] = true;
    --alive;
    int code = 0;
    if (WIFSIGNALED(status)) {
      code = 128 + WTERMSIG(status);
      std::fprintf(stderr, "worker %zu (pid %d) was killed by signal %d (%s)\n", i, int(pid), WTERMSIG(status),
                   strsignal(WTERMSIG(status)));
    } else if (WIFEXITED(status)) {
      code = WEXITSTATUS(status);
    }
    if (code != 0 && status_out == 0) {
      status_out = code;
      kill_at = std::chrono::steady_clock::now() + std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                                                       std::chrono::duration<double>(s.comm_timeout + 10));
    }
  }
  g_children.clear();
  return status_out;
}

net::dist::LaunchEnv launch_env(const DistSettings& s) {
  return net::dist::detect_launch_env({s.master_addr, s.master_port, s.run_id});
}

DistRun start_distributed(const DistSettings& s, const net::dist::LaunchEnv& env, bool gpu, int device,
                          const NcclFactory& nccl_factory) {
  DistRun run;
  run.env = env;
  run.buckets.bucket_bytes = size_t(s.bucket_size_mb * double(1 << 20));
  g_rank = run.env.world > 1 ? run.env.rank : -1;
  const std::string kv = !s.kv_store.empty() ? s.kv_store : (gpu && nccl_factory ? "nccl" : "tcp");
  if (kv == "nccl") {
    EMBER_CHECK(gpu, "--kv-store nccl needs GPUs (--gpus); on the CPU use --kv-store tcp");
    EMBER_CHECK(nccl_factory != nullptr, "--kv-store nccl: this build of ember has no NCCL (nccl.h was not found when "
                                         "it was built); use --kv-store tcp");
    g_comm = nccl_factory(run.env, s, device);
  } else {
    net::dist::TcpCommOptions o;
    o.rank = run.env.rank;
    o.world = run.env.world;
    o.master_addr = run.env.master_addr;
    o.master_port = run.env.master_port;
    o.run_id = run.env.run_id;
    o.interface = s.comm_interface;
    if (o.interface.empty())
      if (const char* v = std::getenv("EMBER_SOCKET_IFNAME")) o.interface = v;
    o.comm_port = s.comm_port;
    o.timeout_s = s.comm_timeout;
    o.segment_bytes = size_t(s.segment_kb) << 10;
    g_comm = net::dist::make_tcp_comm(o);
  }
  run.comm = g_comm.get();
  run.log = rank_log(run.env.rank);
  return run;
}

ThreadShare rank_threads(int threads_flag, const net::dist::LaunchEnv& env, int cores, const char* omp_num_threads) {
  if (threads_flag > 0) return {threads_flag, "--threads"};
  if (omp_num_threads && *omp_num_threads) {
    // OpenMP's syntax: a number, or a list for nested levels ("4,2": 4 at the top).
    char* end = nullptr;
    const long n = std::strtol(omp_num_threads, &end, 10);
    if (n > 0 && n < (1L << 20) && (*end == '\0' || *end == ',')) return {int(n), "OMP_NUM_THREADS"};
  }
  cores = std::max(1, cores);
  const int share = std::max(1, cores / std::max(1, env.local_world));
  const std::string core_text = cat(cores, cores == 1 ? " core" : " cores");
  if (env.local_world > 1)
    return {share, cat(core_text, " / ", env.local_world, " ranks on this host, ", env.local_world_from)};
  if (env.world > 1 && env.local_world_from.empty())
    return {share, cat(core_text, "; LOCAL_WORLD_SIZE is not set: if several ranks share this host, set it to "
                                  "their number, or OMP_NUM_THREADS")};
  return {share, core_text};
}

int available_cores() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (::sched_getaffinity(0, sizeof set, &set) == 0 && CPU_COUNT(&set) > 0) return CPU_COUNT(&set);
  return std::max(1, int(std::thread::hardware_concurrency()));
}

std::FILE* rank_log(int rank) {
  if (rank == 0) return stdout;
  static std::FILE* null = std::fopen("/dev/null", "w");
  EMBER_CHECK(null, "cannot open /dev/null: ", std::strerror(errno));
  return null;
}

void finish_distributed() { g_comm.reset(); }

int report_fatal(const char* program, const std::exception& e) {
  std::fflush(stdout);  // the log so far comes before the error
  const std::string node = g_rank >= 0 ? cat("Node[", g_rank, "]: ") : "";
  std::fprintf(stderr, "%s%s: error: %s\n", node.c_str(), program, e.what());
  std::fflush(stderr);
  if (g_comm && g_comm->world_size() > 1)
    g_comm->abort(cat("rank ", g_rank, " (", net::dist::this_host_name(), ") stopped: ", e.what()));
  g_comm.reset();
  return 1;
}

}  // namespace ember::apps
