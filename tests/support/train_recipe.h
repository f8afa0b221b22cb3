// tests/support/train_recipe.h — the small Fashion-MNIST model and recipe that the
// integration trainings share (tests/apps/test_train_integration.cpp on the IDX
// images, tests/apps/test_train_records.cpp through record files), so both runs
// and their >= 80% bound are about the same thing: ResNet-14 on 1x28x28
// images, SGD (momentum 0.9, weight decay 5e-4, Nesterov) with a cosine
// learning rate from 0.05, no label smoothing.
#pragma once
#include "apps/training/fit.h"
#include "net/resnet.h"

namespace ember::testing {

inline net::ResNetConfig small_resnet_config() {
  net::ResNetConfig cfg;
  cfg.num_layers = 14;
  cfg.num_classes = 10;
  cfg.in_channels = 1;
  cfg.image_size = 28;
  cfg.input_norm.channels = 1;
  cfg.input_norm.mean[0] = 0.2860f;
  cfg.input_norm.inv_std[0] = 1.0f / 0.3530f;
  return cfg;
}

inline apps::FitOptions small_recipe(int epochs) {
  apps::FitOptions fo;
  fo.num_epochs = epochs;
  fo.lr = 0.05;
  fo.sgd = {0.9, 5e-4, true};
  fo.schedule.kind = net::LrScheduleKind::cosine;
  fo.label_smoothing = 0.0;
  fo.disp_batches = 40;
  fo.eval_batch_size = 500;  // evaluating an ImageSet; a loader brings its own batch size
  return fo;
}

}  // namespace ember::testing
