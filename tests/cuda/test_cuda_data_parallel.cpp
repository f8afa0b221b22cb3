// tests/cuda/test_cuda_data_parallel.cpp — data-parallel training with GPU
// tensors over the TCP ring: the gradient buckets and the synchronised batch
// norm's sums are staged through host memory (the ring takes host buffers).
// Rank 0 trains on the CUDA device (the emulator in build/test_sim, a real
// GPU in build/test_ember), rank 1 on the CPU, as threads with real TCP
// communicators on loopback; both must end where one process with the whole
// batch ends. (Only rank 0 touches the device, so the emulator is used from
// one thread.)
#include <cmath>
#include <mutex>

#include "net/dist/data_parallel.h"
#include "net/dist/reducer.h"
#include "net/layers.h"
#include "net/resnet.h"
#include "net/sgd.h"
#include "ops/ops.h"
#include "tests/support/comm_test_helpers.h"
#include "tests/cuda/cuda_test_env.h"

namespace {

using namespace ember;

// Images i = first, first + step, ... of a fixed batch of 8.
std::pair<Tensor, Tensor> images(int first, int step) {
  const int64_t n = (8 - first + step - 1) / step;
  Tensor x = Tensor::empty({n, 1, 10, 10}, DType::u8), y = Tensor::empty({n}, DType::i64);
  for (int64_t k = 0; k < n; ++k) {
    const int64_t i = first + k * step;
    PhiloxStream rng(21, uint64_t(i));
    for (int p = 0; p < 100; ++p) x.data<uint8_t>()[k * 100 + p] = uint8_t(rng.next_u32());
    y.data<int64_t>()[k] = i % 5;
  }
  return {x, y};
}

// Two SGD steps; with a communicator, rank r takes images r, r + 2, ... and batch norm is synchronised.
std::vector<std::vector<double>> train(net::dist::Comm* comm, Device device) {
  Generator gen(13);
  net::ResNet model(testing::tiny_resnet_config(DType::f64), gen);
  model.to(device);
  if (comm) net::set_sync_batch_norm(model, net::dist::make_batch_norm_sync(*comm));
  net::SGD opt(model.named_parameters(), {0.9, 1e-3, true});
  std::unique_ptr<net::dist::Reducer> reducer;
  if (comm) {
    net::dist::ReducerOptions ro;
    ro.first_bucket_bytes = 8 << 10;
    ro.bucket_bytes = 32 << 10;  // several buckets
    reducer = std::make_unique<net::dist::Reducer>(*comm, model.named_parameters(), ro);
  }
  auto [x, y] = comm ? images(comm->rank(), 2) : images(0, 1);
  const Tensor xd = x.to(device), yd = y.to(device);
  for (int step = 0; step < 2; ++step) {
    const Tensor loss = ops::cross_entropy(model(xd), yd);
    opt.zero_grad();
    if (reducer) reducer->prepare();
    loss.backward();
    if (reducer) reducer->finish();
    opt.step(0.1);
  }
  std::vector<std::vector<double>> state;
  for (auto& [name, t] : model.state()) state.push_back(t->to_double_vector());
  return state;
}

double worst_difference(const std::vector<std::vector<double>>& a, const std::vector<std::vector<double>>& b) {
  double worst = 0;
  for (size_t i = 0; i < b.size(); ++i)
    for (size_t j = 0; j < b[i].size(); ++j) worst = std::max(worst, std::abs(a[i][j] - b[i][j]) / (1 + std::abs(b[i][j])));
  return worst;
}

}  // namespace

TEST_CASE("cuda data-parallel: a GPU rank and a CPU rank average through the TCP ring like one process" *
          ember::testing::kNeedsCudaDevice) {
  REQUIRE(testing::cuda_available());
  const auto single = train(nullptr, Device::cpu());
  std::vector<std::vector<std::vector<double>>> ranks(2);
  const auto results = testing::run_ranks(testing::loopback_options(2, 60), [&](net::dist::Comm& comm, int r) {
    ranks[size_t(r)] = train(&comm, r == 0 ? Device::cuda(0) : Device::cpu());
  });
  for (const auto& res : results) {
    INFO(res.error);
    REQUIRE(res.error.empty());
  }
  REQUIRE(ranks[0].size() == single.size());
  const double gpu = worst_difference(ranks[0], single), cpu = worst_difference(ranks[1], single);
  MESSAGE("largest relative difference from one process: GPU rank " << gpu << ", CPU rank " << cpu);
  CHECK(gpu < 1e-10);
  CHECK(cpu < 1e-10);
}
