// apps/training/nccl_factory.h — the --kv-store nccl communicator for the
// apps' main files. Header-only on purpose: only programs that include it
// link NCCL (the emulator tests link apps/common without the CUDA library).
#pragma once
#if defined(EMBER_CUDA) && defined(EMBER_NCCL)
#include "apps/training/distributed.h"
#include "net/dist/nccl_comm.h"

namespace ember::apps {

inline NcclFactory nccl_comm_factory() {
  return [](const net::dist::LaunchEnv& env, const DistSettings& s, int device) {
    net::dist::NcclCommOptions o;
    o.rank = env.rank;
    o.world = env.world;
    o.master_addr = env.master_addr;
    o.master_port = env.master_port;
    o.run_id = env.run_id;
    o.device = device;
    o.timeout_s = s.comm_timeout;
    return net::dist::make_nccl_comm(o);
  };
}

}  // namespace ember::apps
#endif
