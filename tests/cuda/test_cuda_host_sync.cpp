// tests/cuda/test_cuda_host_sync.cpp — a training step on the device never
// waits for it (cuda/host_sync.h): the batch goes up through the staging
// ring (cuda/host_staging.h), a bad label is recorded on the device and
// thrown at the host's next wait, and fit() reads its loss and accuracy only
// at its log points (apps/training/step_stats.h). On the emulator every call
// runs at once, so these tests count the waits the host asks for; the
// overlap they allow is a GPU's to show.
#include <cmath>
#include <string>

#include "apps/training/fit.h"
#include "cuda/host_staging.h"
#include "cuda/host_sync.h"
#include "engine/memory.h"
#include "net/resnet.h"
#include "net/sgd.h"
#include "ops/ops.h"
#include "tests/cuda/cuda_test_env.h"

namespace {

using namespace ember;

std::pair<Tensor, Tensor> host_batch(int64_t n, int64_t classes, uint64_t seed) {
  Tensor x = Tensor::empty({n, 1, 10, 10}, DType::u8), y = Tensor::empty({n}, DType::i64);
  PhiloxStream rng(seed, 1);
  for (int64_t i = 0; i < x.numel(); ++i) x.data<uint8_t>()[i] = uint8_t(rng.next_u32());
  for (int64_t i = 0; i < n; ++i) y.data<int64_t>()[i] = int64_t(rng.below(uint64_t(classes)));
  return {x, y};
}

// Host waits during fit() of `epochs` epochs of 3 steps, logging every disp_batches.
int64_t waits_during_fit(int disp_batches, int epochs, apps::FitResult* out = nullptr) {
  const data::ImageSet set = testing::separable_image_set();
  Generator gen(1);
  net::ResNet model(testing::tiny_resnet_config(DType::f32), gen);
  model.to(Device::cuda(0));
  data::BatchIterator::Options io;
  io.batch_size = 16;
  data::BatchIterator it(set, io);
  apps::FitOptions fo;
  fo.num_epochs = epochs;
  fo.lr = 0.05;
  fo.device = Device::cuda(0);
  fo.disp_batches = disp_batches;
  fo.log = std::fopen("/dev/null", "w");
  const int64_t before = cuda::host_wait_count();
  const apps::FitResult r = apps::fit(model, it, nullptr, fo);
  const int64_t waits = cuda::host_wait_count() - before;
  std::fclose(fo.log);
  if (out) *out = r;
  return waits;
}

}  // namespace

TEST_CASE("cuda host sync: a training step (upload, forward, loss, backward, SGD) does not wait for the device" *
          ember::testing::kNeedsCudaDevice) {
  REQUIRE(testing::cuda_available());
  Generator gen(2);
  net::ResNet model(testing::tiny_resnet_config(DType::f32), gen);
  model.to(Device::cuda(0));
  net::SGD opt(model.named_parameters(), {0.9, 5e-4, true});
  auto step = [&](uint64_t seed) {
    auto [x, y] = host_batch(8, 5, seed);
    const Tensor loss = ops::cross_entropy(model(x.to(Device::cuda(0))), y.to(Device::cuda(0)), 0.1);
    opt.zero_grad();
    loss.backward();
    opt.step(0.05);
    return loss;
  };
  step(1);  // warm-up: buffers, records, staging slots
  const int64_t waits = cuda::host_wait_count(), staged = cuda::staging_wait_count();
  Tensor last;
  for (uint64_t s = 2; s < 6; ++s) last = step(s);
  CHECK(cuda::host_wait_count() == waits);
  CHECK(cuda::staging_wait_count() == staged);  // (the emulator finishes every copy at once)
  // Reading the loss is the one wait, and it sees a finite value.
  CHECK(std::isfinite(last.item()));
  CHECK(cuda::host_wait_count() == waits + 1);
}

TEST_CASE("cuda host sync: a host tensor may change or go as soon as its upload returns" *
          ember::testing::kNeedsCudaDevice) {
  REQUIRE(testing::cuda_available());
  for (int64_t n : {int64_t(1), int64_t(1000), int64_t(300000)}) {  // slots grow to fit
    CAPTURE(n);
    Tensor host = Tensor::full({n}, 5.0, DType::f32);
    const Tensor dev = host.to(Device::cuda(0));
    ops::fill_(host, -1.0);  // the DMA must not see this
    host = Tensor();
    const std::vector<double> back = dev.to_double_vector();
    CHECK(back.front() == 5.0);
    CHECK(back.back() == 5.0);
  }
}

TEST_CASE("cuda host sync: a bad label in a training step fails at the next read, naming row and label" *
          ember::testing::kNeedsCudaDevice) {
  REQUIRE(testing::cuda_available());
  Generator gen(3);
  net::ResNet model(testing::tiny_resnet_config(DType::f32), gen);
  model.to(Device::cuda(0));
  auto [x, y] = host_batch(8, 5, 9);
  y.data<int64_t>()[6] = 7;  // 5 classes
  y.data<int64_t>()[3] = -2;
  const Tensor loss = ops::cross_entropy(model(x.to(Device::cuda(0))), y.to(Device::cuda(0)));  // no throw: queued
  CHECK_THROWS_WITH_AS(loss.item(),
                       "softmax_cross_entropy_forward: label -2 of row 3 is outside [0, 5) for 5 classes", Error);
  // Reported once: the device record is clear again, and good labels train on.
  memory_backend(DeviceType::CUDA).synchronize(0);
  y.data<int64_t>()[6] = 1;
  y.data<int64_t>()[3] = 2;
  CHECK(std::isfinite(ops::cross_entropy(model(x.to(Device::cuda(0))), y.to(Device::cuda(0))).item()));
}

TEST_CASE("cuda host sync: fit() waits for the device at its log points, not at every step" *
          ember::testing::kNeedsCudaDevice) {
  REQUIRE(testing::cuda_available());
  // 2 epochs of 3 steps (48 images, batch 16). Logging every 1000 steps,
  // fit reads its sums once per epoch; every step, once per step (plus the
  // same fixed waits in both runs, e.g. the epoch's totals).
  apps::FitResult r;
  const int64_t quiet = waits_during_fit(1000, 2, &r);
  const int64_t every = waits_during_fit(1, 2);
  MESSAGE("host waits in fit(): " << quiet << " logging every 1000 steps, " << every << " logging every step");
  CHECK(r.steps == 6);
  CHECK(quiet < r.steps);
  CHECK(every - quiet == r.steps - 2);  // 6 reads instead of 2 (one at each epoch's end)
  CHECK(r.train_accuracy > 0.0);        // the sums made it to the host
}
