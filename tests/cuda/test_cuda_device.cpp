// tests/cuda/test_cuda_device.cpp — device discovery's words: why there is no
// device (a driver older than the runtime, named with both versions), and
// the compute capability init() checks this build's code against. The first
// case needs no device; the second runs on a GPU and on the emulator.
#include <string>

#include <cuda_runtime.h>

#include "tests/cuda/cuda_test_env.h"

namespace {

using namespace ember;

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

}  // namespace

TEST_CASE("cuda device: no device is explained, and a driver older than the runtime is named with both versions") {
  const std::string old_driver = cuda::describe_no_device(int(cudaErrorInsufficientDriver), 12040, 13000);
  CHECK(contains(old_driver, "supports CUDA up to 12.4"));
  CHECK(contains(old_driver, "CUDA 13.0 runtime"));
  CHECK(contains(old_driver, "update the driver"));
  CHECK(cuda::describe_no_device(int(cudaErrorNoDevice), 13000, 13000) ==
        "no CUDA device (none found, or CUDA_VISIBLE_DEVICES hides them)");
  CHECK(cuda::describe_no_device(int(cudaErrorInsufficientDriver), 0, 13000) ==
        "no CUDA device (no NVIDIA driver is loaded)");
  const std::string other = cuda::describe_no_device(int(cudaErrorUnknown), 13000, 13000);
  CHECK(other.rfind("no usable CUDA device: ", 0) == 0);
  CHECK(other.size() > std::string("no usable CUDA device: ").size() + 10);
}

TEST_CASE("cuda device: the compute capability is the one in the device's name" * ember::testing::kNeedsCudaDevice) {
  REQUIRE(testing::cuda_available());  // init() ran: this build has code the device runs
  const int cc = cuda::compute_capability(0);
  CHECK(cc >= 10);
  CHECK(contains(cuda::device_name(0), "(sm_" + std::to_string(cc) + ","));
}
