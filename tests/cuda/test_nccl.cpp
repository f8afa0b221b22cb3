// tests/cuda/test_nccl.cpp — the NCCL communicator (--kv-store nccl,
// net/dist/nccl_comm.h) on real GPUs. Built only with CUDA and NCCL, and not
// for the emulator (NCCL needs a driver). Without a GPU (or, for the
// programs, without two) its tests are skipped, with the reason. With one
// GPU: a communicator of one rank in this process (the collectives are
// identities, which still checks streams, events, buffers and the
// reducer's plumbing); with two or more: the programs themselves,
// one rank per GPU (bench_allreduce checks every sum; train_resnet runs
// data-parallel steps), over NCCL and over the TCP ring with GPU buffers.
#if defined(EMBER_NCCL) && !defined(EMBER_CUDASIM)
#include <cstdlib>
#include <filesystem>
#include <unistd.h>

#include "net/dist/nccl_comm.h"
#include "net/dist/reducer.h"
#include "net/layers.h"
#include "ops/ops.h"
#include "tests/cuda/cuda_test_env.h"

namespace {

using namespace ember;

std::string program(const char* name) {
  return (std::filesystem::read_symlink("/proc/self/exe").parent_path() / name).string();
}

// Runs a shell command with a time limit; its exit status.
int run_bounded(const std::string& command, int seconds) {
  const std::string line = "timeout -k 5 " + std::to_string(seconds) + " " + command;
  std::printf("[nccl tests] %s\n", line.c_str());
  const int status = std::system(line.c_str());
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128;
}

bool two_gpus() { return cuda::device_count() >= 2; }
constexpr testing::needs kNeedsTwoGpus{"fewer than 2 GPUs on this machine", two_gpus};

}  // namespace

TEST_CASE("nccl: one rank's collectives on the GPU, and the reducer over them" * ember::testing::kNeedsCudaDevice) {
  REQUIRE(testing::cuda_available());
  net::dist::NcclCommOptions o;
  o.world = 1;
  o.device = 0;
  o.timeout_s = 60;
  auto comm = net::dist::make_nccl_comm(o);
  CHECK(std::string(comm->backend()) == "nccl");
  Tensor t = Tensor::from_vector({1, 2, 3, 4}, Shape{4}, DType::f32, Device::cuda(0));
  net::dist::all_reduce_now(*comm, t, net::dist::ReduceOp::sum, "x");
  net::dist::broadcast_now(*comm, t, 0, "x");
  comm->barrier("x");
  CHECK(t.to_double_vector() == std::vector<double>{1, 2, 3, 4});
  CHECK_THROWS(comm->all_reduce(Tensor::zeros({2}), net::dist::ReduceOp::sum, "cpu buffer"));

  net::Linear fc(8, 3);
  fc.to(Device::cuda(0));
  net::dist::Reducer reducer(*comm, fc.named_parameters());
  Tensor x = Tensor::full({2, 8}, 0.5, DType::f32, Device::cuda(0));
  reducer.prepare();
  ops::sum(fc(x)).backward();
  reducer.finish();
  for (double g : fc.bias.grad().to_double_vector()) CHECK(g == 2.0);  // d(sum)/d(bias) = batch size
}

TEST_CASE("nccl: one rank per GPU through the programs (NCCL and the TCP ring on GPU buffers)" *
          ember::testing::kNeedsCudaDevice * kNeedsTwoGpus) {
  REQUIRE(testing::cuda_available());
  const int gpus = cuda::device_count();
  REQUIRE(gpus >= 2);
  const std::string list = gpus >= 4 ? "0,1,2,3" : "0,1";
  CHECK(run_bounded(program("bench_allreduce") + " --gpus " + list + " --sizes 1,8 --iters 3", 180) == 0);
  CHECK(run_bounded(program("bench_allreduce") + " --gpus " + list + " --kv-store tcp --sizes 1,8 --iters 3", 180) == 0);
  CHECK(run_bounded(program("train_resnet") + " --gpus " + list +
                        " --benchmark 1 --num-layers 20 --batch-size 32 --num-batches 4 --disp-batches 2",
                    300) == 0);
}
#endif
