// tests/apps/test_default_recipe.cpp — train_resnet's default recipe
// (apps/training/train_settings.h): --lr 0 is 0.1 x global batch / 256,
// --num-epochs 0 is 10 epochs or enough for 100 steps; both are written into
// the settings before the start line prints them, and explicit values stay.
#include <doctest/doctest.h>

#include <string>

#include "apps/training/train_settings.h"
#include "engine/error.h"

using namespace ember;

namespace {
bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }
}  // namespace

TEST_CASE("default lr recipe: lr from the global batch, epochs from the steps an epoch") {
  apps::TrainSettings s;
  CHECK(s.lr == 0);  // the defaults are the recipe's
  CHECK(s.num_epochs == 0);
  CHECK(apps::effective_lr(s, 1) == doctest::Approx(0.05));  // 0.1 x 128 / 256
  CHECK(apps::effective_lr(s, 4) == doctest::Approx(0.2));   // global batch 512

  // Fashion-MNIST at batch 128: 469 steps an epoch, 10 epochs.
  std::string line = apps::resolve_default_recipe(s, 1, 469);
  CHECK(s.lr == doctest::Approx(0.05));
  CHECK(s.num_epochs == 10);
  CHECK(line == "default recipe: lr 0.05 = 0.1 x global batch 128 / 256; 10 epochs (--lr, --num-epochs set them)");

  // 192 photos: 2 steps an epoch, so 50 epochs for 100 steps.
  s = apps::TrainSettings{};
  line = apps::resolve_default_recipe(s, 1, 2);
  CHECK(s.num_epochs == 50);
  CHECK(contains(line, "; 50 epochs, for at least 100 steps at 2 steps an epoch"));
  s = apps::TrainSettings{};
  CHECK(contains(apps::resolve_default_recipe(s, 1, 1), "; 100 epochs, for at least 100 steps at 1 step an epoch"));
  s = apps::TrainSettings{};
  apps::resolve_default_recipe(s, 1, 10);  // 1200 photos: 10 epochs are 100 steps
  CHECK(s.num_epochs == 10);

  // Two ranks of batch 64 and --lr-scaling linear: --lr is read per 256 images, so it becomes 0.1.
  s = apps::TrainSettings{};
  s.batch_size = 64;
  s.lr_scaling = "linear";
  line = apps::resolve_default_recipe(s, 2, 50);
  CHECK(s.lr == doctest::Approx(0.1));
  CHECK(apps::effective_lr(s, 2) == doctest::Approx(0.05));
  CHECK(contains(line, "lr 0.05 = 0.1 x global batch 128 / 256"));

  // Explicit values stay as given; nothing to say.
  s = apps::TrainSettings{};
  s.lr = 0.2;
  s.num_epochs = 3;
  CHECK(apps::resolve_default_recipe(s, 1, 2).empty());
  CHECK(s.lr == 0.2);
  CHECK(s.num_epochs == 3);
  CHECK(apps::effective_lr(s, 1) == 0.2);

  // No data (--benchmark): the minimum epochs.
  s = apps::TrainSettings{};
  apps::resolve_default_recipe(s, 1, 0);
  CHECK(s.num_epochs == 10);

  s = apps::TrainSettings{};
  s.lr = -0.1;
  CHECK_THROWS_WITH_AS(apps::validate_train_settings(s), doctest::Contains("--lr must be positive"), Error);
}
