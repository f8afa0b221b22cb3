// tests/cuda/test_cuda_upload_ahead.cpp — the next batch uploaded on the
// copy stream while the current step computes (cuda/host_staging.h's copies
// ahead, Tensor::to_ahead, apps/training/batch_prefetch.h).
//
// On the emulator every copy runs at once, so wrong numbers cannot show a
// missing event; its stream-order checker (cuda/sim/stream_order.cpp) fails
// any copy or kernel that a GPU would let race with work on the other
// stream, and these tests count on it: the orderings the copies ahead rely
// on are each exercised, and fit() with its batches uploaded ahead must run
// without a reported race and train exactly as with plain uploads.
#include <algorithm>
#include <string>
#include <vector>

#include "apps/training/fit.h"
#include "cuda/host_staging.h"
#include "cuda/host_sync.h"
#include "engine/memory.h"
#include "net/resnet.h"
#include "ops/ops.h"
#include "tests/cuda/cuda_test_env.h"
#include "tests/support/test_helpers.h"

namespace {

using namespace ember;

Tensor host_values(int64_t n, double v) { return Tensor::full({n}, v, DType::f32); }

struct FitRun {
  std::vector<std::vector<double>> weights;
  std::vector<std::string> checkpoints;
  int64_t host_waits = 0;
  double train_accuracy = 0;
};

FitRun fit_tiny(bool upload_ahead) {
  const data::ImageSet set = testing::separable_image_set();
  Generator gen(4);
  net::ResNet model(testing::tiny_resnet_config(DType::f32), gen);
  model.to(Device::cuda(0));
  data::BatchIterator::Options io;
  io.batch_size = 16;  // 3 steps an epoch
  data::BatchIterator it(set, io);
  testing::TempDir dir;
  apps::FitOptions fo;
  fo.num_epochs = 2;
  fo.lr = 0.05;
  fo.device = Device::cuda(0);
  fo.disp_batches = 1000;
  fo.upload_ahead = upload_ahead;
  fo.model_prefix = dir.file("m");
  fo.checkpoint_steps = 2;  // after steps 2 (epoch 0, batch 2) and 4 (epoch 1, batch 1)
  fo.log = std::fopen("/dev/null", "w");
  FitRun run;
  const int64_t before = cuda::host_wait_count();
  const apps::FitResult r = apps::fit(model, it, nullptr, fo);
  run.host_waits = cuda::host_wait_count() - before;
  std::fclose(fo.log);
  run.train_accuracy = r.train_accuracy;
  for (const net::NamedParameter& p : model.named_parameters()) run.weights.push_back(p.tensor->to_double_vector());
  run.checkpoints = dir.entries();
  return run;
}

}  // namespace

TEST_CASE("cuda upload ahead: the copy is read after finish_copies_ahead; read before it, the emulator reports a race" *
          ember::testing::kNeedsCudaDevice) {
  REQUIRE(testing::cuda_available());
  const Device gpu = Device::cuda(0);
  const Tensor dev = host_values(1000, 3.0).to_ahead(gpu);
  if (cuda::is_simulated()) {  // a GPU would race silently
    const std::string m = testing::thrown_message([&] { ops::relu(dev); });
    CHECK(testing::contains(m, "stream race"));
    CHECK(testing::contains(m, "reads the"));
  }
  finish_copies_ahead(gpu);
  const std::vector<double> back = ops::relu(dev).to_double_vector();
  CHECK(back.front() == 3.0);
  CHECK(back.back() == 3.0);
}

TEST_CASE("cuda upload ahead: a copy into a block that compute work used waits for that work" *
          ember::testing::kNeedsCudaDevice) {
  REQUIRE(testing::cuda_available());
  const Device gpu = Device::cuda(0);
  finish_copies_ahead(gpu);
  for (int round = 0; round < 3; ++round) {
    CAPTURE(round);
    {
      Tensor used = Tensor::empty({4096}, DType::f32, gpu);
      ops::fill_(used, 1.0);  // compute work writes the block, then it goes back to the cache
    }
    const Tensor next = host_values(4096, 2.0 + round).to_ahead(gpu);  // the same block, most likely
    finish_copies_ahead(gpu);
    CHECK(ops::relu(next).to_double_vector()[17] == 2.0 + round);
  }
}

TEST_CASE("cuda upload ahead: a batch uploaded ahead and dropped unused may be freed at once" *
          ember::testing::kNeedsCudaDevice) {
  REQUIRE(testing::cuda_available());
  const Device gpu = Device::cuda(0);
  finish_copies_ahead(gpu);
  { const Tensor dropped = host_values(2048, 5.0).to_ahead(gpu); }  // an interrupted epoch's next batch
  // Its block goes to the next compute allocation of that size: the compute
  // stream must already be ordered after the copy.
  Tensor reused = Tensor::empty({2048}, DType::f32, gpu);
  ops::fill_(reused, 7.0);
  CHECK(reused.to_double_vector()[100] == 7.0);
}

TEST_CASE("cuda upload ahead: fit() with each batch uploaded during the step before trains exactly as without, "
          "checkpoints at the same batches, and adds no host wait" *
          ember::testing::kNeedsCudaDevice) {
  REQUIRE(testing::cuda_available());
  const FitRun plain = fit_tiny(false);
  const FitRun ahead = fit_tiny(true);
  REQUIRE(plain.weights.size() == ahead.weights.size());
  for (size_t i = 0; i < plain.weights.size(); ++i) CHECK(plain.weights[i] == ahead.weights[i]);
  CHECK(plain.train_accuracy == ahead.train_accuracy);
  // The step checkpoints name the batch a resume starts from: the loader is
  // one batch ahead with uploads ahead, the position is not.
  CHECK(ahead.checkpoints == plain.checkpoints);
  CHECK(std::count(ahead.checkpoints.begin(), ahead.checkpoints.end(), "m-0000-000002.safetensors") == 1);
  CHECK(std::count(ahead.checkpoints.begin(), ahead.checkpoints.end(), "m-0001-000001.safetensors") == 1);
  CHECK(ahead.host_waits == plain.host_waits);
}
