// net/dist/launch_env.h — who is who in a data-parallel run, from what the
// launchers already set (DESIGN.md "Data-parallel"), in this order:
//   1. torchrun-style: RANK WORLD_SIZE [LOCAL_RANK] MASTER_ADDR [MASTER_PORT]
//      (also what --nproc and --gpus 0,1,.. give their workers);
//   2. Open MPI: OMPI_COMM_WORLD_RANK/SIZE/LOCAL_RANK; the master from
//      --master-addr (or MASTER_ADDR: mpirun -x MASTER_ADDR);
//   3. SLURM (srun): SLURM_PROCID SLURM_NTASKS SLURM_LOCALID; the master is
//      the first host of SLURM_JOB_NODELIST, expanded as `scontrol show
//      hostnames` would ("gpu[01-03,7]" -> gpu01).
// The ranks on this host (local_world) come from LOCAL_WORLD_SIZE,
// OMPI_COMM_WORLD_LOCAL_SIZE or SLURM_NTASKS_PER_NODE; without them, a
// master on the loopback address (127.0.0.1, localhost, ::1) means every
// rank is on this host.
// Flags (--master-addr, --master-port, --run-id) override the environment.
// The run id keeps ranks of different runs apart at the rendezvous: the
// flag, else EMBER_RUN_ID, else the launcher's job id (TORCHELASTIC_RUN_ID,
// the Open MPI job, SLURM_JOB_ID.SLURM_STEP_ID), else "ember".
#pragma once
#include <functional>
#include <string>
#include <vector>

namespace ember::net::dist {

struct LaunchFlags {
  std::string master_addr;  // --master-addr ("" = from the environment)
  int master_port = 0;      // --master-port (0 = from the environment, else 29500)
  std::string run_id;       // --run-id
};

struct LaunchEnv {
  int rank = 0, world = 1, local_rank = 0;
  int local_world = 1;  // ranks on this host (LOCAL_WORLD_SIZE, OMPI_COMM_WORLD_LOCAL_SIZE, SLURM_NTASKS_PER_NODE)
  // Where local_world came from: the variable, "MASTER_ADDR <loopback>" (a
  // rendezvous on this host's loopback address: every rank is on this host),
  // or "" when a run of several ranks does not say (each assumes it is alone).
  std::string local_world_from;
  std::string master_addr = "127.0.0.1";
  int master_port = 29500;
  std::string run_id = "ember";
  std::string source = "a single process";  // which launcher's variables were found
  bool distributed() const { return world > 1; }
};

using GetEnv = std::function<const char*(const char*)>;
// Reads the environment (getenv by default); errors name the variable that is wrong.
LaunchEnv detect_launch_env(const LaunchFlags& flags, const GetEnv& getenv = nullptr);

// SLURM's compressed host list -> every host name, in order:
// "a[1-3,07],b" -> a1 a2 a3 a07 b; nested groups "r[1-2]-n[01-02]" expand as
// a product. Errors on unbalanced brackets or bad ranges.
std::vector<std::string> expand_slurm_hostlist(const std::string& list);

}  // namespace ember::net::dist
