// apps/training/distributed.h — the data-parallel side of the apps: the flags
// (MXNet's --kv-store, torchrun's --nproc-per-node as --nproc, the
// rendezvous and socket settings), starting local workers, connecting the
// communicator, and reporting a fatal error the way a cluster needs it
// (prefixed "Node[r]", and told to the other ranks before exiting).
//
//   build/train_resnet --nproc 2 ...                 two workers on this machine
//   RANK=1 WORLD_SIZE=2 MASTER_ADDR=a build/train_resnet ...   torchrun-style
//   mpirun -np 2 -H a,b build/train_resnet --master-addr a ...
//   srun build/train_resnet ...                      (SLURM)
#pragma once
#include <cstdio>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "apps/training/flags.h"
#include "net/dist/comm.h"
#include "net/dist/launch_env.h"
#include "net/dist/reducer.h"

namespace ember::apps {

struct DistSettings {
  int nproc = 0;                 // --nproc: fork this many local workers
  std::string kv_store;          // --kv-store tcp|nccl ("": nccl with GPUs, tcp otherwise)
  std::string master_addr;       // --master-addr
  int master_port = 0;           // --master-port
  std::string run_id;            // --run-id
  std::string comm_interface;    // --comm-interface (EMBER_SOCKET_IFNAME)
  int comm_port = 0;             // --comm-port
  double comm_timeout = 300;     // --comm-timeout, seconds
  bool sync_bn = false;          // --sync-bn
  double bucket_size_mb = 25;    // --bucket-size-mb
  int segment_kb = 1024;         // --comm-segment-kb
};
void declare_dist_flags(Flags& flags, DistSettings& s);
void validate_dist_settings(const DistSettings& s);

// Fork+exec this program `workers` times with RANK/WORLD_SIZE/LOCAL_RANK/
// MASTER_ADDR/MASTER_PORT/EMBER_RUN_ID set (a free port unless
// --master-port), forward SIGINT/SIGTERM to them, and wait. When one fails,
// the others get --comm-timeout + 10 s to notice and exit before they are
// killed. Returns the exit status for main (the first failure's).
int run_local_workers(int workers, const DistSettings& s, char** argv);

// True when this process must start local workers instead of training:
// --nproc N > 1 (or `gpus` > 1 devices) and no launcher variables set.
bool should_launch_workers(const DistSettings& s, int gpus);
int workers_to_launch(const DistSettings& s, int gpus);

// The run's communicator (world 1: no sockets), from the launcher's
// variables and the flags. `gpu` chooses the default --kv-store (nccl).
// nccl_factory is given by apps built with NCCL (it lives in the CUDA library).
using NcclFactory = std::function<std::unique_ptr<net::dist::Comm>(const net::dist::LaunchEnv&, const DistSettings&, int device)>;
struct DistRun {
  net::dist::LaunchEnv env;
  net::dist::Comm* comm = nullptr;  // owned by this module until finish_distributed()
  net::dist::ReducerOptions buckets;
  std::FILE* log = stdout;  // rank 0: stdout; other ranks: /dev/null (errors still go to stderr)
  bool rank0() const { return env.rank == 0; }
};
// The communicator outlives the caller's stack, so that an exception on its
// way to main() can still tell the other ranks why this one stops.
DistRun start_distributed(const DistSettings& s, const net::dist::LaunchEnv& env, bool gpu, int device,
                          const NcclFactory& nccl_factory = nullptr);
// Who this process is: the launcher's variables, overridden by the flags.
net::dist::LaunchEnv launch_env(const DistSettings& s);
// Orderly end of the run: closes the communicator (its neighbours see a goodbye).
void finish_distributed();

// The CPU threads of this process, and why that many (for the start line):
// --threads when given (threads_flag > 0), else OMP_NUM_THREADS when the user
// set it (omp_num_threads: its text, or null), else this host's `cores`
// shared out among its ranks: floor(cores / env.local_world), at least 1.
// Ranks of --nproc and --gpus know how many share the host (LOCAL_WORLD_SIZE,
// set by run_local_workers), and so do ranks started by hand that set it or
// meet on the loopback address (net/dist/launch_env.h).
struct ThreadShare {
  int threads = 1;
  std::string why;  // "--threads", "OMP_NUM_THREADS", "8 cores / 2 ranks on this host, LOCAL_WORLD_SIZE", ...
};
ThreadShare rank_threads(int threads_flag, const net::dist::LaunchEnv& env, int cores, const char* omp_num_threads);
// The cores this process may run on (its CPU affinity mask; all when unknown).
int available_cores();

// Where a rank's log lines go: stdout on rank 0, /dev/null on the others
// (their errors still reach stderr).
std::FILE* rank_log(int rank);

// main()'s catch: prints "[Node[r]: ]program: error: message" on stderr and
// tells the other ranks why this one stops. Returns main's exit status.
int report_fatal(const char* program, const std::exception& e);

}  // namespace ember::apps
