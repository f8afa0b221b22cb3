// apps/bench_allreduce.cpp — all-reduce bus bandwidth of ember's TCP ring
// (what nccl-tests' all_reduce_perf reports), launched like training:
//
//   build/bench_allreduce --nproc 4 --sizes 1,16,256            # four ranks on loopback
//   RANK=i WORLD_SIZE=P MASTER_ADDR=h0 build/bench_allreduce    # one rank per host
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

#include "apps/common/distributed.h"
#include "apps/common/flags.h"
#include "engine/error.h"
#include "engine/half.h"
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
  apps::DistSettings dist;
};

std::vector<double> parse_sizes(const std::string& text) {
  std::vector<double> out;
  std::stringstream ss(text);
  std::string item;
  while (std::getline(ss, item, ',')) {
    char* end = nullptr;
    const double v = std::strtod(item.c_str(), &end);
    EMBER_CHECK(!item.empty() && *end == '\0' && v > 0 && v <= 4096, "--sizes: '", text,
                "' is not a list of sizes in MiB (0 < size <= 4096)");
    out.push_back(v);
  }
  return out;
}

int run(int argc, char** argv) {
  Settings s;
  apps::Flags f("bench_allreduce", "All-reduce bus bandwidth of ember's TCP ring (nccl-tests' busbw).");
  f.group("benchmark");
  f.add("sizes", &s.sizes, "buffer sizes in MiB, comma-separated");
  f.add("dtype", &s.dtype, "f32 or f16");
  f.add("iters", &s.iters, "timed all-reduces per size (the median is printed)");
  f.add("warmup", &s.warmup, "untimed all-reduces per size first");
  f.add("op", &s.op, "sum or average");
  apps::declare_dist_flags(f, s.dist);
  if (!f.parse(argc, argv)) return 0;
  apps::validate_dist_settings(s.dist);
  EMBER_CHECK(s.dtype == "f32" || s.dtype == "f16", "--dtype: f32 or f16");
  EMBER_CHECK(s.op == "sum" || s.op == "average", "--op: sum or average");
  EMBER_CHECK(s.iters > 0 && s.warmup >= 0, "--iters must be positive, --warmup >= 0");
  const std::vector<double> sizes = parse_sizes(s.sizes);
  if (apps::should_launch_workers(s.dist, 0)) return apps::run_local_workers(s.dist.nproc, s.dist, argc, argv);

  const apps::DistRun run = apps::start_distributed(s.dist, false, 0);
  net::dist::Comm& comm = *run.comm;
  const int P = comm.world_size(), r = comm.rank();
  const DType dt = s.dtype == "f16" ? DType::f16 : DType::f32;
  const net::dist::ReduceOp op = s.op == "sum" ? net::dist::ReduceOp::sum : net::dist::ReduceOp::average;
  std::FILE* out = run.log;
  std::fprintf(out, "# ember all-reduce: %s, %d ranks, %s, %s, segment %d KiB\n", comm.backend(), P, s.dtype.c_str(),
               s.op.c_str(), s.dist.segment_kb);
  std::fprintf(out, "#        bytes    ms(med)  algbw GB/s  busbw GB/s\n");
  std::fflush(out);
  for (const double mib : sizes) {
    const int64_t bytes = int64_t(mib * double(1 << 20));
    const int64_t n = std::max<int64_t>(1, bytes / int64_t(dtype_size(dt)));
    Tensor buf = Tensor::empty({n}, dt);
    // Rank r holds r + 1 everywhere: the sum is P(P+1)/2, exact in f16 for P <= 90.
    auto fill = [&] { for (int64_t i = 0; i < n; ++i) {
        if (dt == DType::f32) buf.data<float>()[i] = float(r + 1);
        else buf.data<f16>()[i] = f16{float_to_half(float(r + 1))};
      } };
    fill();
    net::dist::all_reduce_now(comm, buf, op, "benchmark buffer");
    const double expect = op == net::dist::ReduceOp::sum ? double(P) * (P + 1) / 2 : double(P + 1) / 2;
    const double got = dt == DType::f32 ? double(buf.data<float>()[n - 1]) : double(half_to_float(buf.data<f16>()[n - 1].bits));
    EMBER_CHECK(std::abs(got - expect) <= 1e-3 * expect, "all-reduce of ", mib, " MiB gave ", got, ", expected ", expect);
    for (int i = 0; i < s.warmup; ++i) net::dist::all_reduce_now(comm, buf, op, "benchmark buffer");
    std::vector<double> times;
    for (int i = 0; i < s.iters; ++i) {
      comm.barrier("benchmark barrier");
      const auto t0 = Clock::now();
      net::dist::all_reduce_now(comm, buf, op, "benchmark buffer");
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
