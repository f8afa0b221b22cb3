// apps/training/train_program.h — the whole of a training program, shared by
// train_resnet (from scratch) and finetune_resnet (from pretrained weights).
//
// run_train_program parses the common flags (apps/training/train_settings.h),
// starts the local workers or joins a data-parallel run
// (apps/training/distributed.h), builds the data (apps/training/train_data.h)
// and the ResNet, prints a short first line saying what it trains on
// ("training resnet-20 on Fashion-MNIST (60000 train / 10000 validation
// images, 1x28x28, 10 classes)"), then a line with every setting (MXNet's
// "Start training with"), and hands over to fit() (apps/training/fit.h), or
// runs --benchmark / --test-io. A program adds its own flags and changes only
// what differs, through the hooks below.
#pragma once
#include <cstdio>
#include <functional>
#include <string>

#include "apps/training/distributed.h"
#include "apps/training/fit.h"
#include "apps/training/flags.h"
#include "apps/training/train_data.h"
#include "apps/training/train_settings.h"
#include "net/resnet.h"

namespace ember::apps {

struct TrainProgram {
  std::string name;     // "train_resnet": --help, the start line, checkpoint metadata
  std::string summary;  // one line for --help
  std::string verb = "training";  // the first line: "training resnet-20 on ..."
  // Defaults of the common flags that differ for this program (before parsing).
  std::function<void(TrainSettings&)> defaults;
  // More flags after the common ones, and their checks.
  std::function<void(Flags&)> declare_flags;
  std::function<void(const TrainSettings&)> validate;
  // In each worker, before the data is built: settings the program takes
  // from elsewhere unless the flags gave them (finetune_resnet: the
  // pretrained file's depth, image shape, normalisation and pooling).
  // Returns a line for the log, printed after the first one ("": none).
  std::function<std::string(TrainSettings&, const Flags&)> adopt;
  // Before the model is built from the data's shape and the flags: may
  // change its structure (a pretrained file's width and stem).
  std::function<void(net::ResNetConfig&, const TrainSettings&, const TrainingData&, std::FILE* log)> configure;
  // After the model is built (CPU, f32) and before --load-epoch's checkpoint
  // (when resuming) is loaded and it moves to the device: load weights, set
  // FitOptions::finetune, add checkpoint metadata.
  std::function<void(net::ResNet&, bool resuming, FitOptions&, std::FILE* log)> prepare;
  // On rank 0 after a run that finished (not one a signal stopped): work on
  // the result (finetune_resnet --export-mxnet). `out` is the run's output.
  std::function<void(const FitResult&, std::FILE* out)> finish;
  // --kv-store nccl: set by the program's main from apps/training/nccl_factory.h
  // (header-only, so that only programs link NCCL); empty: not available.
  NcclFactory nccl;
};

// The program's main (exceptions reach the caller: see apps::report_fatal).
int run_train_program(const TrainProgram& program, int argc, char** argv);

}  // namespace ember::apps
