// apps/training/fit.h — the training loop of the apps (MXNet's common/fit.py).
//
// fit() trains a model with SGD and a learning-rate schedule over a
// BatchSource (the in-memory BatchIterator or the record loader; the
// programs use that overload, the BatchIterator one is for tests), printing
// MXNet's log lines:
//   Epoch[0] Batch [0-50]   Speed: 812.31 samples/sec   accuracy=0.712500 ...
//   Epoch[0] Train-accuracy=0.842317
//   Epoch[0] Time cost=77.412  Speed=774.9 samples/sec  Data-wait=0.4%  Peak-RSS=391 MiB
//   Epoch[0] Validation-accuracy=0.881000
// (or a progress bar on a terminal, apps/training/progress.h), evaluates after
// every epoch, and saves PREFIX-EEEE.safetensors (+ the optimizer's .states
// file) when a model prefix is given, and every --checkpoint-steps
// (apps/training/training_checkpoint.h). A run continues exactly from any
// checkpoint (--resume); Ctrl-C or SIGTERM stops it after the current step
// with a checkpoint (apps/training/stop_signal.h); --target-accuracy stops at
// a validation accuracy and prints the time to reach it. benchmark() times
// training steps on synthetic data (MXNet's --benchmark 1), in fit_benchmark.cpp.
//
// Data-parallel (FitOptions::comm with more than one rank, net/dist/): every
// rank runs fit() on its own shard with the same options. Rank 0's weights
// are broadcast first; gradients are averaged in buckets while backward runs
// (net/dist/reducer.h); metrics and validation counts are summed over ranks
// (the logged speed is the global rate); batch-norm running statistics are
// averaged before each validation (unless --sync-bn keeps them identical);
// only rank 0 writes checkpoints.
#pragma once
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "apps/training/batch_source.h"
#include "apps/training/progress.h"
#include "apps/training/stop_signal.h"
#include "apps/training/training_checkpoint.h"
#include "data/batch_iterator.h"
#include "net/lr_schedule.h"
#include "net/dist/comm.h"
#include "net/dist/reducer.h"
#include "engine/device_work.h"
#include "net/mixed_precision.h"
#include "net/mixup.h"
#include "net/module.h"
#include "net/sgd.h"

namespace ember::apps {

// Fine-tuning (apps/finetune_resnet.cpp): the parameters under head_prefix
// are the new classifier, the rest the pretrained backbone (net/finetune.h).
struct FineTuneOptions {
  std::string head_prefix;        // empty: no backbone/head split (training from scratch)
  bool freeze_backbone = false;   // frozen for the whole run (unless unfreeze_epoch)
  int unfreeze_epoch = 0;         // > 0: frozen for the epochs before it, then everything trains
  double backbone_lr_mult = 1.0;  // the backbone's learning rate is lr * this
  bool frozen_at(int epoch) const { return unfreeze_epoch > 0 ? epoch < unfreeze_epoch : freeze_backbone; }
};

struct FitOptions {
  int num_epochs = 1;
  int begin_epoch = 0;         // > 0 when resuming (--load-epoch)
  double lr = 0.1;
  net::SgdOptions sgd;
  net::LrScheduleOptions schedule;  // steps_per_epoch/num_epochs/base_lr filled by fit
  double label_smoothing = 0.0;
  // Mixup / cutmix of every training batch (net/mixup.h); mixup needs the
  // model's input normalisation (ResNetConfig::input_norm).
  net::MixOptions mix;
  ChannelNorm input_norm{};
  int disp_batches = 50;
  std::string model_prefix;    // empty: no checkpoints
  int64_t eval_batch_size = 500;
  Device device = Device::cpu();
  // On a GPU, each batch's upload runs on a second stream during the step
  // before it (apps/training/batch_prefetch.h); false: at the start of its step.
  bool upload_ahead = true;
  // On a GPU: every full training step after the first replays one CUDA
  // graph captured from the second (apps/training/step_graph.h). One
  // process, no mixup/cutmix, no dropout.
  bool cuda_graph = false;
  std::vector<std::pair<std::string, std::string>> checkpoint_metadata;
  std::FILE* log = stdout;
  // f32, or f16 / bf16: mixed precision (net/mixed_precision.h). fit
  // converts the model to the 16-bit type at the start and back to f32 (the
  // masters) at the end. bf16 runs without loss scaling (a fixed scale of 1:
  // inf/NaN steps are still skipped and counted).
  DType precision = DType::f32;
  net::LossScalerOptions loss_scaler;  // f16 only
  // Data-parallel: null (or a world of 1) trains alone.
  net::dist::Comm* comm = nullptr;
  net::dist::ReducerOptions buckets;
  bool sync_bn = false;  // the model's batch norms are synchronised (running statistics already agree)
  FineTuneOptions finetune;
  // Long runs (apps/training/training_checkpoint.h, progress.h, stop_signal.h).
  int64_t checkpoint_steps = 0;   // > 0: also a checkpoint every N global steps (needs model_prefix)
  int keep_checkpoints = 0;       // > 0: only the newest K checkpoints of model_prefix are kept
  // Resuming (--resume): the position to continue from; the caller has
  // loaded the model from resume_model, fit loads resume_states into the
  // optimizer and the loss scaler.
  const TrainingPosition* resume = nullptr;
  std::string resume_model, resume_states;
  uint64_t seed = 0;              // recorded in checkpoints (the data order and augmentation follow it)
  double target_accuracy = 0;     // > 0: stop when validation accuracy reaches it (DAWNBench's time to accuracy)
  ProgressMode progress = ProgressMode::lines;
  std::string metrics_path;       // --metrics: one JSON line per logged step and per epoch
  std::string command_line;       // recorded in the metrics file
  const StopSignals* stop = nullptr;  // SIGINT/SIGTERM: save after the current step and return
  std::string resume_command;     // printed after such a stop
};

struct FitResult {
  double train_accuracy = 0, validation_accuracy = -1;  // of the last epoch (-1: no validation set)
  double validation_top5 = -1;                          // of the last epoch (-1: none, or < 6 classes)
  double seconds = 0;                                   // wall time of the whole fit
  int64_t steps = 0;                                    // optimizer steps taken or skipped
  int64_t skipped_steps = 0;                            // f16/bf16: steps skipped for inf/NaN gradients
  double loss_scale = 1.0;                              // f16: the loss scale at the end (bf16: 1)
  net::dist::Reducer::Stats comm;                       // data-parallel: all-reduce time, hidden share
  int epochs = 0;                  // epochs finished by this call (a resumed run counts the one it completed)
  int interrupted_by = 0;          // SIGINT or SIGTERM when a signal stopped the run (after saving)
  double time_to_target = -1;      // seconds of training until --target-accuracy was reached (-1: not reached)
  int epochs_to_target = 0;
  std::string last_checkpoint;     // the model file last saved (or resumed from); empty if none
};

// Classification accuracy of model (eval mode, no grad) over one epoch of a
// source, or over a whole in-memory set. With a communicator, each rank
// evaluates its own shard and the counts are summed over ranks.
struct Accuracy {
  double top1 = 0, top5 = 0;  // apps::in_top_k's rule: a tie with the label's logit counts against it
  int64_t samples = 0;
  int64_t classes = 0;  // logits per sample (top-5 means something above 5)
};
Accuracy evaluate_accuracy(net::Module& model, BatchSource& source, Device device, net::dist::Comm* comm = nullptr);
double evaluate(net::Module& model, BatchSource& source, Device device, net::dist::Comm* comm = nullptr);
double evaluate(net::Module& model, const data::ImageSet& set, int64_t batch_size, Device device);

// Trains; `val` may be null. With begin_epoch > 0 the caller has loaded the
// model; fit loads PREFIX-{begin_epoch}.states.safetensors into the optimizer
// when that file exists. With `resume` it continues from that position
// (mid-epoch too) and ends with the weights an uninterrupted run would have.
FitResult fit(net::Module& model, BatchSource& train, BatchSource* val, const FitOptions& options);
// The same over an in-memory set's iterator and validation set.
FitResult fit(net::Module& model, data::BatchIterator& train, const data::ImageSet* val, const FitOptions& options);

struct BenchmarkOptions {
  int64_t batch_size = 128;
  int64_t channels = 1, height = 28, width = 28, num_classes = 10;
  int warmup_batches = 3;
  int batches = 30;
  int disp_batches = 10;
  double lr = 0.1;
  net::SgdOptions sgd;
  Device device = Device::cpu();
  uint64_t seed = 0;
  std::FILE* log = stdout;
  DType precision = DType::f32;  // f16/bf16: the mixed-precision step (f16 scaled loss, finite check, masters)
  net::dist::Comm* comm = nullptr;  // data-parallel: every rank runs the benchmark on its own batch
  net::dist::ReducerOptions buckets;
  bool cuda_graph = false;  // replay each step after the first as one CUDA graph (one process)
};
struct BenchmarkResult {
  double median_speed = 0;        // img/s over the timed intervals (all ranks together)
  net::dist::Reducer::Stats comm;  // data-parallel: over the timed steps
  // What the timed steps put on the device (engine/device_work.h), not
  // counting the wait for the device that ends each timed interval.
  DeviceWorkCounts step_work;
  int64_t timed_steps = 0;
};
// Median training img/s over the timed intervals of disp_batches steps.
BenchmarkResult benchmark(net::Module& model, const BenchmarkOptions& options);

// MXNet's --test-io: draws `epochs` epochs of batches from the source and
// nothing else, printing "Epoch[e] Batch [a-b]  Speed: N samples/sec" every
// disp_batches batches and each epoch's time and rate.
struct TestIoResult {
  double median_interval_speed = 0;  // median of the printed interval speeds
  double epoch_speed = 0;            // whole epochs after the first (warm-up; all of it when epochs == 1)
};
TestIoResult test_io(BatchSource& source, int epochs, int disp_batches, std::FILE* log = stdout);

}  // namespace ember::apps
