// apps/training/fit_run.h — one call of fit() as an object: the state a
// training run carries from step to step, and its parts, each in its own
// file so that a reader can hold one at a time:
//
//   fit.cpp             fit() and the run from start to end: setting up
//                       (precision, optimizer, fine-tuning, data-parallel
//                       buckets, where to start) and the loop over epochs
//   fit_step.cpp        one training step (forward, loss, backward, update)
//                       and reading the step statistics back
//   fit_epoch.cpp       one epoch: the loop over batches with its progress
//                       lines and stops, then the epoch's summary
//   evaluate.cpp        evaluation: accuracy over a validation source
//   fit_checkpoint.cpp  saving a checkpoint, and stopping on a signal
//
// Only fit's own files include this header; the programs see fit.h.
#pragma once
#include <memory>
#include <optional>
#include <string>

#include "apps/training/batch_prefetch.h"
#include "apps/training/fit.h"
#include "apps/training/fit_helpers.h"
#include "apps/training/progress.h"
#include "apps/training/step_graph.h"
#include "apps/training/step_stats.h"

namespace ember::apps::detail {

// What one epoch has counted so far (resumed mid-epoch: from the checkpoint).
struct EpochState {
  int epoch = 0;
  Clock::time_point start = Clock::now();
  int64_t first_batch = 0;    // where this epoch started (> 0 when resumed mid-epoch)
  int64_t batch_index = 0;    // batches done
  int64_t samples = 0, correct = 0, timed_samples = 0;
  double loss_sum = 0, data_wait = 0;
  Interval interval;          // since the last progress line
  StepStats stats;            // the steps not yet read back from the device
  explicit EpochState(Device device) : stats(device) {}
};

class FitRun {
 public:
  FitRun(net::Module& model, BatchSource& train, BatchSource* val, const FitOptions& o);
  FitResult run();

 private:
  // Setting up (fit.cpp).
  void announce_precision() const;
  void start_reducer();
  void set_backbone(int epoch);
  void find_start();
  void check_outputs() const;

  // One epoch (fit_epoch.cpp). train_epoch returns false when a signal
  // stopped it; finish_epoch returns true when the run should end here.
  bool train_epoch(EpochState& e);
  void log_progress(EpochState& e);
  void show_bar(const EpochState& e);
  bool finish_epoch(EpochState& e);
  void write_epoch_metrics(const EpochState& e, const std::vector<double>& totals, double seconds, double speed,
                           double wait_share, double peak_mib, const Accuracy& a);
  bool check_target(const EpochState& e, const Accuracy& a);

  // Validation at the end of an epoch (evaluate.cpp).
  Accuracy validate(int epoch);

  // One step (fit_step.cpp).
  void train_step(EpochState& e, const data::Batch& b, const DeviceBatch& on_device);
  // --cuda-graph 1: the step as a replay (fit_step.cpp); and its device work
  // on given inputs (the graph's fixed buffers, or a short last batch).
  void train_step_graph(EpochState& e, const data::Batch& b, const DeviceBatch& on_device);
  void graph_step_body(EpochState& e, const Tensor& images, const Tensor& labels, int64_t batch);
  void read_stats(EpochState& e);

  // Checkpoints and stops (fit_checkpoint.cpp).
  TrainingPosition position_after_step(EpochState& e);
  void save_checkpoint(const std::string& path, TrainingPosition p);
  void stop_in_epoch(EpochState& e, int sig);
  int local_signal() const { return o_.stop ? o_.stop->requested() : 0; }
  int stop_signal_at_epoch_end() const;

  // Sums over ranks (the values themselves alone).
  std::vector<double> global(std::vector<double> v) const;
  double elapsed() const { return start_.elapsed_seconds + seconds_since(run_start_); }

  // f32 weights back in the model however fit ends (mixed precision).
  struct RestoreF32 {
    net::Module& model;
    net::SGD& opt;
    bool on;
    ~RestoreF32();
  };

  net::Module& model_;
  BatchSource& train_;
  BatchSource* val_;
  const FitOptions& o_;
  const int64_t steps_per_epoch_;
  const bool mixed_;     // f16 or bf16
  const bool scaled_;    // f16: a loss scale (bf16 needs none: f32's exponent range)
  net::dist::Comm* const comm_;  // null when alone
  const bool rank0_;
  net::SGD opt_;
  net::LossScaler scaler_;
  net::LossScaler::Snapshot scaler_seen_;  // the scaler as read_stats() last read it
  RestoreF32 restore_;
  bool has_dropout_ = false;  // then every step keys its masks (net::set_dropout_step)
  const bool split_;          // fine-tuning: backbone and head
  int backbone_state_ = -1;   // 1 frozen, 0 trainable, -1 not set yet
  std::unique_ptr<net::dist::Reducer> reducer_;
  net::LrScheduleOptions schedule_options_;
  std::optional<net::LrSchedule> schedule_;
  TrainingPosition start_;
  std::optional<MetricsLog> metrics_;
  ProgressBar bar_;
  const bool show_lines_, show_bar_;
  FitResult result_;
  Clock::time_point run_start_;
  std::string last_checkpoint_;
  int agreed_stop_ = 0;  // data-parallel: the stop the ranks agreed on at the last progress line
  int64_t global_step_ = 0;
  double lr_ = 0, momentum_ = 0;
  std::optional<BatchPrefetcher> batches_;
  std::unique_ptr<StepGraph> graph_;        // --cuda-graph 1
  Tensor graph_images_, graph_labels_;      // the batch the graph reads, copied in before each replay
  Tensor graph_totals_;                     // the step statistics' sums the graph adds into (every epoch)
};

}  // namespace ember::apps::detail
