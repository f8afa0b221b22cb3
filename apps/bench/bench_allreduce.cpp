// apps/bench/bench_allreduce.cpp — all-reduce bus bandwidth of ember's TCP ring
// (what nccl-tests' all_reduce_perf reports), launched like training:
//
//   build/bench_allreduce --nproc 4 --sizes 1,16,256            # four ranks on loopback
//   RANK=i WORLD_SIZE=P MASTER_ADDR=h0 build/bench_allreduce    # one rank per host
//   build/bench_allreduce --gpus 0,1,2,3                         # NCCL, one rank per GPU
//   build/bench_allreduce --gpus 0,1 --kv-store tcp              # the TCP ring staging GPU buffers
//
// For each buffer size (MiB) every rank fills its buffer, all-reduces it
// --warmup times, then --iters times each after a barrier; rank 0 prints the
// median time, the algorithm bandwidth (bytes / time) and the bus bandwidth
// (algbw x 2(P-1)/P: the bytes each rank's link carried per second, so it
// compares directly with the link rate). Each size's result is checked
// against the exact sum once. scripts/cluster_allreduce.sh runs it over an
// emulated cluster next to torch.distributed's gloo.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <sstream>
#include <vector>

#if defined(EMBER_CUDA)
#include "cuda/cuda_device.h"
#endif

#include "apps/training/distributed.h"
#include "apps/training/flags.h"
#include "apps/training/nccl_factory.h"
#include "engine/error.h"
#include "engine/half.h"
#include "net/dist/data_parallel.h"
#include "engine/tensor.h"

namespace {

using namespace ember;
using Clock = std::chrono::steady_clock;

struct Settings {
  std::string sizes = "1,4,16,64,256";
  std::string dtype = "f32";
  int iters = 10;
  int warmup = 2;
  std::string op = "sum";
  std::vector<int> gpus;
  apps::DistSettings dist;
};

int run(int argc, char** argv) {
  Settings s;
  apps::Flags f("bench_allreduce", "All-reduce bus bandwidth of ember's TCP ring (nccl-tests' busbw).");
  f.group("benchmark");
  f.add("sizes", &s.sizes, "buffer sizes in MiB, comma-separated");
  f.add("dtype", &s.dtype, "f32 or f16");
  f.add("iters", &s.iters, "timed all-reduces per size (the median is printed)");
  f.add("warmup", &s.warmup, "untimed all-reduces per size first");
  f.add("op", &s.op, "sum or average");
  f.add("gpus", &s.gpus, "GPUs, one rank each (e.g. 0,1,2,3): buffers on the GPU, NCCL by default");
  apps::declare_dist_flags(f, s.dist);
  if (!f.parse(argc, argv)) return 0;
  apps::validate_dist_settings(s.dist);
  EMBER_CHECK(s.dtype == "f32" || s.dtype == "f16", "--dtype: f32 or f16");
  EMBER_CHECK(s.op == "sum" || s.op == "average", "--op: sum or average");
  EMBER_CHECK(s.iters > 0 && s.warmup >= 0, "--iters must be positive, --warmup >= 0");
  const std::vector<double> sizes = apps::parse_number_list(s.sizes, "sizes");
  for (double v : sizes) EMBER_CHECK(v > 0 && v <= 4096, "--sizes: ", v, " MiB is not in (0, 4096]");
  for (int g : s.gpus) EMBER_CHECK(g >= 0, "--gpus: device indices are >= 0, got ", g);
  const int gpus = int(s.gpus.size());
  if (apps::should_launch_workers(s.dist, gpus))
    return apps::run_local_workers(apps::workers_to_launch(s.dist, gpus), s.dist, argv);

  const net::dist::LaunchEnv env = apps::launch_env(s.dist);
  Device device = Device::cpu();
  apps::NcclFactory nccl;
  if (gpus > 0) {
#if defined(EMBER_CUDA)
    EMBER_CHECK(env.local_rank < gpus, "--gpus lists no device for local rank ", env.local_rank);
    cuda::init(s.gpus[size_t(env.local_rank)]);
    device = Device::cuda(s.gpus[size_t(env.local_rank)]);
#if defined(EMBER_NCCL)
    nccl = apps::nccl_comm_factory();
#endif
#else
    fail("--gpus: this build of ember has no CUDA");
#endif
  }
  const apps::DistRun run = apps::start_distributed(s.dist, env, !device.is_cpu(), device.index, nccl);
  net::dist::Comm& comm = *run.comm;
  const int P = comm.world_size(), r = comm.rank();
  const DType dt = s.dtype == "f16" ? DType::f16 : DType::f32;
  const net::dist::ReduceOp op = s.op == "sum" ? net::dist::ReduceOp::sum : net::dist::ReduceOp::average;
  std::FILE* out = run.log;
  std::fprintf(out, "# ember all-reduce: %s, %d ranks, %s, %s, segment %d KiB, buffers on %s\n", comm.backend(), P,
               s.dtype.c_str(), s.op.c_str(), s.dist.segment_kb, device.str().c_str());
  std::fprintf(out, "#        bytes    ms(med)  algbw GB/s  busbw GB/s\n");
  std::fflush(out);
  for (const double mib : sizes) {
    const int64_t bytes = int64_t(mib * double(1 << 20));
    const int64_t n = std::max<int64_t>(1, bytes / int64_t(dtype_size(dt)));
    // Rank r holds r + 1 everywhere: the sum is P(P+1)/2, exact in f16 for P <= 90.
    Tensor buf = Tensor::full({n}, double(r + 1), dt, device);
    // Done when the host can see it (NCCL's wait only orders the GPU's stream).
    auto reduce = [&] {
      net::dist::all_reduce_tensor(comm, buf, op, "benchmark buffer");
      if (!device.is_cpu()) (void)buf.view_at(0, Shape{1}).item();
    };
    reduce();
    const double expect = op == net::dist::ReduceOp::sum ? double(P) * (P + 1) / 2 : double(P + 1) / 2;
    const double got = buf.view_at(n - 1, Shape{1}).item();
    EMBER_CHECK(std::abs(got - expect) <= 1e-3 * expect, "all-reduce of ", mib, " MiB gave ", got, ", expected ", expect);
    for (int i = 0; i < s.warmup; ++i) reduce();
    std::vector<double> times;
    for (int i = 0; i < s.iters; ++i) {
      comm.barrier("benchmark barrier");
      const auto t0 = Clock::now();
      reduce();
      times.push_back(std::chrono::duration<double>(Clock::now() - t0).count());
    }
    std::sort(times.begin(), times.end());
    const double t = times[times.size() / 2];
    const double real_bytes = double(n) * double(dtype_size(dt));
    const double algbw = real_bytes / t / 1e9, busbw = algbw * 2.0 * (P - 1) / P;
    std::fprintf(out, "%14.0f %10.3f %11.3f %11.3f\n", real_bytes, t * 1e3, algbw, busbw);
    std::fflush(out);
  }
  apps::finish_distributed();
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const std::exception& e) {
    return apps::report_fatal("bench_allreduce", e);
  }
}
