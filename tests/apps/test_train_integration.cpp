// tests/apps/test_train_integration.cpp — end to end on real data: a small ResNet
// trained on Fashion-MNIST (Debian's dataset-fashion-mnist) through the same
// fit() loop train_resnet uses, then checkpointed and resumed.
//
// Budget: 5,000 training images, 1,000 test images, ResNet-14 (CIFAR-style),
// batch 32, cosine learning rate from 0.05, no augmentation. ONE epoch of 5k
// images reaches only 75-79% here, and PyTorch 1.13 with the same model and
// recipe measured the same (77-79% over 4 seeds; wider nets, Adam, other
// learning rates did not pass 80%), so the test trains THREE epochs over the
// same 5k images (83.5-85.5% measured over 3 seeds, ~17 s on 2 cores) and
// asserts >= 80% on the first 1k test images.
#include <doctest/doctest.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <map>

#include "apps/training/fit.h"
#include "data/fashion_mnist.h"
#include "net/checkpoint.h"
#include "net/resnet.h"
#include "tests/support/skip.h"
#include "tests/support/test_helpers.h"
#include "tests/support/train_recipe.h"

namespace {

using namespace ember;
using ember::testing::small_recipe;
using ember::testing::small_resnet_config;
using ember::testing::TempDir;

data::BatchIterator::Options iterator_options() {
  data::BatchIterator::Options io;
  io.batch_size = 32;
  io.shuffle = true;
  io.seed = 0;
  return io;
}

// The 5k/3-epoch run in a precision; each precision trains once per process
// (the fp16 and bf16 tests compare with the fp32 run of the same seed).
struct SmallRun {
  apps::FitResult result;
  double seconds = 0, evaluated_after = 0;
};
const SmallRun& small_run(DType precision) {
  static std::map<DType, SmallRun> runs;
  if (auto it = runs.find(precision); it != runs.end()) return it->second;
  const data::ImageSet train = data::subset(data::load_fashion_mnist(data::kFashionMnistDir, true), 0, 5000);
  const data::ImageSet test = data::subset(data::load_fashion_mnist(data::kFashionMnistDir, false), 0, 1000);
  Generator gen(0);
  net::ResNet model(small_resnet_config(), gen);
  data::BatchIterator it(train, iterator_options());
  apps::FitOptions fo = small_recipe(3);
  fo.precision = precision;
  SmallRun run;
  const auto t0 = std::chrono::steady_clock::now();
  run.result = apps::fit(model, it, &test, fo);
  run.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  // fit hands the model back in f32 (the masters, for fp16 and bf16).
  for (auto& p : model.named_parameters()) CHECK(p.tensor->dtype() == DType::f32);
  run.evaluated_after = apps::evaluate(model, test, 250, Device::cpu());
  return runs[precision] = run;
}

}  // namespace

TEST_CASE("integration: ResNet-14 on 5k Fashion-MNIST images reaches >= 80% on 1k test images") {
  const SmallRun& run = small_run(DType::f32);
  const apps::FitResult& r = run.result;
  MESSAGE("ResNet-14, 3 epochs over 5k images: test accuracy " << r.validation_accuracy << " on 1k images, "
                                                                 << run.seconds << " s");
  CHECK(r.validation_accuracy >= 0.80);
  CHECK(r.steps == 3 * ((5000 + 31) / 32));
  // The evaluation helper agrees with what fit() reported.
  CHECK(run.evaluated_after == doctest::Approx(r.validation_accuracy));
}

TEST_CASE("integration: the same run in fp16 (f32 masters, dynamic loss scaling) lands with fp32" *
          ember::testing::slow_variant) {
  const SmallRun& half = small_run(DType::f16);
  const SmallRun& full = small_run(DType::f32);
  MESSAGE("fp16: test accuracy " << half.result.validation_accuracy << " (fp32 " << full.result.validation_accuracy
                                 << "), " << half.result.skipped_steps << " skipped steps, final loss scale "
                                 << half.result.loss_scale << ", " << half.seconds << " s (fp32 " << full.seconds
                                 << " s)");
  CHECK(half.result.validation_accuracy >= 0.80);
  // 1k test images: one standard error of an accuracy near 85% is ~1.1 points,
  // so the bound is 2.5 points here; the full runs are in docs/benchmarks.md.
  CHECK(std::abs(half.result.validation_accuracy - full.result.validation_accuracy) <= 0.025);
  // The scaler started at 2^16; a handful of early overflows at most.
  CHECK(half.result.skipped_steps <= 20);
  CHECK(half.result.loss_scale >= 1.0);
  // Evaluating the f32 masters after training agrees with the f16 model's last evaluation.
  CHECK(std::abs(half.evaluated_after - half.result.validation_accuracy) <= 0.01);
}

TEST_CASE("integration: the same run in bf16 (f32 masters, no loss scaling) lands with fp32" *
          ember::testing::slow_variant) {
  const SmallRun& half = small_run(DType::bf16);
  const SmallRun& full = small_run(DType::f32);
  MESSAGE("bf16: test accuracy " << half.result.validation_accuracy << " (fp32 " << full.result.validation_accuracy
                                 << "), " << half.result.skipped_steps << " skipped steps, " << half.seconds
                                 << " s (fp32 " << full.seconds << " s)");
  CHECK(half.result.validation_accuracy >= 0.80);
  // The same 2.5-point bound as fp16 (one standard error on 1k images is ~1.1 points).
  CHECK(std::abs(half.result.validation_accuracy - full.result.validation_accuracy) <= 0.025);
  // No loss scale: the scale stays 1, and nothing overflows in f32's exponent range.
  CHECK(half.result.loss_scale == 1.0);
  CHECK(half.result.skipped_steps == 0);
  CHECK(std::abs(half.evaluated_after - half.result.validation_accuracy) <= 0.01);
}

TEST_CASE("integration: checkpoints every epoch, and --load-epoch resumes where training stopped") {
  const TempDir tmp;
  const std::filesystem::path& dir = tmp.path;
  const std::string prefix = (dir / "sub" / "r14").string();  // fit creates missing directories
  const data::ImageSet train = data::subset(data::load_fashion_mnist(data::kFashionMnistDir, true), 0, 640);

  // Run A: two epochs straight.
  Generator gen_a(7);
  net::ResNet a(small_resnet_config(), gen_a);
  data::BatchIterator it_a(train, iterator_options());
  apps::FitOptions fa = small_recipe(2);
  fa.model_prefix = prefix;
  apps::fit(a, it_a, nullptr, fa);
  CHECK(std::filesystem::exists(net::checkpoint_path(prefix, 1)));
  CHECK(std::filesystem::exists(net::optimizer_state_path(prefix, 1)));
  CHECK(std::filesystem::exists(net::checkpoint_path(prefix, 2)));

  // Run B: a fresh model (other seed) loads epoch 1 and its optimizer state,
  // then trains epoch 2 with the same schedule: it must end where A ended.
  Generator gen_b(99);
  net::ResNet b(small_resnet_config(), gen_b);
  const auto meta = net::load_model(net::checkpoint_path(prefix, 1), b);
  CHECK(meta.at("epoch") == "1");
  data::BatchIterator it_b(train, iterator_options());
  apps::FitOptions fb = small_recipe(2);
  fb.begin_epoch = 1;
  fb.model_prefix = (dir / "resumed").string();
  // fit() reads the optimizer state from <model_prefix>-0001.states: point it at run A's.
  std::filesystem::copy_file(net::optimizer_state_path(prefix, 1), net::optimizer_state_path(fb.model_prefix, 1));
  apps::fit(b, it_b, nullptr, fb);

  auto sa = a.state(), sb = b.state();
  REQUIRE(sa.size() == sb.size());
  double max_diff = 0;
  for (size_t i = 0; i < sa.size(); ++i) {
    const auto va = sa[i].second->to_double_vector(), vb = sb[i].second->to_double_vector();
    for (size_t j = 0; j < va.size(); ++j) max_diff = std::max(max_diff, std::abs(va[j] - vb[j]));
  }
  MESSAGE("largest difference between straight and resumed training: " << max_diff);
  CHECK(max_diff < 1e-4);  // same arithmetic; only thread scheduling of reductions may differ

  // Loading into a model of another shape is a clear error naming the file.
  net::ResNetConfig other = small_resnet_config();
  other.num_classes = 7;
  Generator gen_c(1);
  net::ResNet c(other, gen_c);
  CHECK_THROWS_WITH_AS(net::load_model(net::checkpoint_path(prefix, 2), c),
                       doctest::Contains("r14-0002.safetensors: tensor \"fc.weight\" has shape [10, 64]"), Error);
}
