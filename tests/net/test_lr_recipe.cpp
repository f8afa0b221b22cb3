// tests/net/test_lr_recipe.cpp — net/lr_schedule.h's default-recipe
// arithmetic: Goyal et al.'s linear scaling rule (lr per 256 images x global
// batch / 256) and the epochs of a run that takes at least a number of
// steps (max(epochs, ceil(steps / steps per epoch))).
#include <doctest/doctest.h>

#include "engine/error.h"
#include "net/lr_schedule.h"

using namespace ember;

TEST_CASE("lr recipe: linear scaling rule, lr per 256 images x global batch / 256") {
  CHECK(net::linear_scaled_lr(0.1, 256) == doctest::Approx(0.1));
  CHECK(net::linear_scaled_lr(0.1, 128) == doctest::Approx(0.05));   // train_resnet's default batch
  CHECK(net::linear_scaled_lr(0.1, 32) == doctest::Approx(0.0125));
  CHECK(net::linear_scaled_lr(0.1, 8192) == doctest::Approx(3.2));   // Goyal et al.'s 8k batch
  CHECK(net::linear_scaled_lr(0.4, 512) == doctest::Approx(0.8));
  CHECK_THROWS_AS(net::linear_scaled_lr(0.1, 0), Error);
  CHECK_THROWS_AS(net::linear_scaled_lr(0.0, 128), Error);
}

TEST_CASE("lr recipe: epochs for at least a number of steps") {
  CHECK(net::epochs_for_min_steps(10, 200, 469) == 10);  // Fashion-MNIST at batch 128: the minimum epochs
  CHECK(net::epochs_for_min_steps(10, 200, 20) == 10);   // exactly 200 steps in 10 epochs
  CHECK(net::epochs_for_min_steps(10, 200, 19) == 11);   // 10 epochs would be 190 steps
  CHECK(net::epochs_for_min_steps(10, 200, 2) == 100);   // 192 photos at batch 128: 2 steps an epoch
  CHECK(net::epochs_for_min_steps(10, 200, 3) == 67);    // rounds up: 67 x 3 = 201 >= 200
  CHECK(net::epochs_for_min_steps(10, 200, 1) == 200);
  CHECK(net::epochs_for_min_steps(5, 0, 7) == 5);
  CHECK_THROWS_AS(net::epochs_for_min_steps(10, 200, 0), Error);
  CHECK_THROWS_AS(net::epochs_for_min_steps(0, 200, 2), Error);
}
