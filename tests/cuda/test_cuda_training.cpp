// tests/cuda/test_cuda_training.cpp — training on the CUDA backend end to end:
// a ResNet moved to the device, the uint8 batch normalised on the device by
// the model's first op, forward, loss, backward and SGD steps, compared with
// the same steps on the CPU; and fit() running on the device, where it must
// learn (a separable 5-class set: from chance to >= 50% in 6 steps). On the
// emulator (build/test_sim) this runs every kernel a training step needs.
#include <cmath>
#include <cstdio>
#include <string>

#include "apps/training/fit.h"
#include "cuda/allocator.h"
#include "net/resnet.h"
#include "net/sgd.h"
#include "ops/ops.h"
#include "tests/cuda/cuda_test_env.h"

namespace {

using namespace ember;

// A fixed batch of uint8 images and labels on the host.
std::pair<Tensor, Tensor> batch(int64_t n) {
  Tensor x = Tensor::empty({n, 1, 10, 10}, DType::u8), y = Tensor::empty({n}, DType::i64);
  PhiloxStream rng(3, 4);
  for (int64_t i = 0; i < x.numel(); ++i) x.data<uint8_t>()[i] = uint8_t(rng.next_u32());
  for (int64_t i = 0; i < n; ++i) y.data<int64_t>()[i] = int64_t(rng.below(5));
  return {x, y};
}

// Two SGD steps (Nesterov, weight decay, label smoothing) on `device`.
std::vector<std::vector<double>> train_two_steps(Device device, DType dt) {
  Generator gen(11);
  net::ResNet model(testing::tiny_resnet_config(dt), gen);
  model.to(device);
  net::SGD opt(model.named_parameters(), {0.9, 5e-4, true});
  auto [x, y] = batch(6);
  const Tensor xd = x.to(device), yd = y.to(device);
  for (int step = 0; step < 2; ++step) {
    const Tensor loss = ops::cross_entropy(model(xd), yd, 0.1);
    opt.zero_grad();
    loss.backward();
    opt.step(0.05);
  }
  std::vector<std::vector<double>> state;
  for (auto& [name, t] : model.state()) state.push_back(t->to_double_vector());
  return state;
}

}  // namespace

TEST_CASE("cuda training: two SGD steps of a ResNet on the device match the CPU" * ember::testing::kNeedsCudaDevice) {
  REQUIRE(testing::cuda_available());
  for (DType dt : {DType::f64, DType::f32}) {
    CAPTURE(dtype_name(dt));
    const auto cpu = train_two_steps(Device::cpu(), dt);
    const auto gpu = train_two_steps(Device::cuda(0), dt);
    REQUIRE(cpu.size() == gpu.size());
    double worst = 0;
    for (size_t i = 0; i < cpu.size(); ++i)
      for (size_t j = 0; j < cpu[i].size(); ++j)
        worst = std::max(worst, std::abs(cpu[i][j] - gpu[i][j]) / (1.0 + std::abs(cpu[i][j])));
    MESSAGE("largest relative difference of the model state after two steps: " << worst);
    CHECK(worst < (dt == DType::f64 ? 1e-10 : 1e-4));
  }
}

TEST_CASE("cuda training: fit() and evaluate() on the device" * ember::testing::kNeedsCudaDevice) {
  REQUIRE(testing::cuda_available());
  const data::ImageSet set = testing::separable_image_set();
  Generator gen(1);
  net::ResNet model(testing::tiny_resnet_config(DType::f32), gen);
  model.to(Device::cuda(0));
  data::BatchIterator::Options io;
  io.batch_size = 16;
  data::BatchIterator it(set, io);
  apps::FitOptions fo;
  fo.num_epochs = 2;
  fo.lr = 0.05;
  fo.device = Device::cuda(0);
  fo.disp_batches = 1000;
  fo.log = std::tmpfile();
  REQUIRE(fo.log != nullptr);
  const double before = apps::evaluate(model, set, 16, Device::cuda(0));
  const auto r = apps::fit(model, it, &set, fo);
  std::rewind(fo.log);
  std::string log;
  for (int c; (c = std::fgetc(fo.log)) != EOF;) log += char(c);
  std::fclose(fo.log);
  // The epoch line gives the device's peak memory beside the host's.
  CHECK(log.find("Epoch[1] Time cost=") != std::string::npos);
  const size_t peak = log.find("Peak-device-memory=");
  REQUIRE(peak != std::string::npos);
  const long shown = std::stol(log.substr(peak + 19));
  MESSAGE("epoch line: Peak-device-memory=" << shown << " MiB");
  CHECK(shown == std::lround(double(cuda::device_allocator_stats().peak_bytes_in_use) / 1048576.0));
  CHECK(shown > 0);
  MESSAGE("accuracy on the 48 images: " << before << " before, " << r.validation_accuracy << " after "
                                        << r.steps << " steps, train accuracy " << r.train_accuracy);
  CHECK(r.steps == 6);
  // It learns: 5 classes (chance 0.2; 0.21 before), 0.79 after the 6 steps on
  // the emulator (either schedule); 0.5 leaves room for a GPU's sum orders.
  CHECK(before < 0.4);
  CHECK(r.validation_accuracy >= 0.5);
  CHECK(apps::evaluate(model, set, 16, Device::cuda(0)) == doctest::Approx(r.validation_accuracy));
  for (auto& p : model.named_parameters()) CHECK(p.tensor->device() == Device::cuda(0));
}

TEST_CASE("cuda training: after the first step the caching allocator serves every allocation" *
          ember::testing::kNeedsCudaDevice) {
  REQUIRE(testing::cuda_available());
  Generator gen(2);
  net::ResNet model(testing::tiny_resnet_config(DType::f32), gen);
  model.to(Device::cuda(0));
  net::SGD opt(model.named_parameters(), {0.9, 5e-4, false});
  auto [x, y] = batch(8);
  auto step = [&] {
    const Tensor loss = ops::cross_entropy(model(x.to(Device::cuda(0))), y.to(Device::cuda(0)));
    opt.zero_grad();
    loss.backward();
    opt.step(0.05);
    return loss.item();
  };
  // Warm-up: step 1 creates the momentum buffers; step 2 is the first to run
  // its forward while the previous step's gradients are still alive (they go
  // at zero_grad), the most memory a step holds at once. From then on every
  // step allocates the same blocks.
  step();
  step();
  const size_t mallocs = cuda::device_allocator_stats().cuda_malloc_calls;
  for (int i = 0; i < 3; ++i) CHECK(std::isfinite(step()));
  CHECK(cuda::device_allocator_stats().cuda_malloc_calls == mallocs);
  MESSAGE("cudaMalloc calls after warm-up: " << mallocs << ", device bytes in use at peak: "
                                              << cuda::device_allocator_stats().peak_bytes_in_use);
}

TEST_CASE("cuda training: with pinned_host, host tensors are page-locked and still copy both ways" *
          ember::testing::kNeedsCudaDevice) {
  REQUIRE(testing::cuda_available());
  const Tensor before = Tensor::full({1000}, 3.0, DType::f32);  // from the default source
  cuda::init(0, cuda::ConvBackend::native, /*pinned_host=*/true);
  testing::select_native_kernels();
  Tensor batch = Tensor::full({64, 1, 28, 28}, 7.0, DType::u8);
  cudaPointerAttributes attr{};
  REQUIRE(cudaPointerGetAttributes(&attr, batch.raw_data()) == cudaSuccess);
  CHECK(attr.type == cudaMemoryTypeHost);
  const Tensor on_device = batch.to(Device::cuda(0));
  CHECK(on_device.to(Device::cpu()).to_double_vector() == batch.to_double_vector());
  // Blocks from before the switch go back to their own source.
  CHECK(before.to_double_vector()[999] == 3.0);
}
