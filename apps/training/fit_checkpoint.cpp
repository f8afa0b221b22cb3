// apps/training/fit_checkpoint.cpp — checkpoints and stops inside fit()
// (fit_run.h): the position a checkpoint taken after a step resumes from,
// saving the model and the training state (rank 0; the newest
// --keep-checkpoints are kept), and stopping on SIGINT/SIGTERM with a
// checkpoint and the command that resumes it.
#include <csignal>
#include <map>

#include "apps/training/fit_run.h"
#include "net/checkpoint.h"
#include "net/dist/data_parallel.h"

namespace ember::apps::detail {

// Where a run resumes if a checkpoint is taken after the step just done.
TrainingPosition FitRun::position_after_step(EpochState& e) {
  read_stats(e);
  TrainingPosition p;
  p.epoch = e.epoch, p.batch = batches_->position(), p.global_step = global_step_, p.elapsed_seconds = elapsed();
  p.epoch_samples = e.samples, p.epoch_correct = e.correct, p.epoch_loss_sum = e.loss_sum;
  return p;
}

// Saves the model and the training state at `p` (rank 0), keeps the newest --keep-checkpoints.
void FitRun::save_checkpoint(const std::string& path, TrainingPosition p) {
  if (o_.model_prefix.empty() || !rank0_) return;
  std::map<std::string, std::string> meta(o_.checkpoint_metadata.begin(), o_.checkpoint_metadata.end());
  meta["epoch"] = std::to_string(p.epoch);
  if (p.batch > 0) meta["batch"] = std::to_string(p.batch);
  if (val_ && p.batch == 0 && result_.validation_accuracy >= 0)
    meta["validation_accuracy"] = std::to_string(result_.validation_accuracy);
  if (mixed_) meta["precision"] = cat(scaled_ ? "fp16" : "bf16", " (f32 master weights saved)");
  const net::LossScaler::Snapshot scaler = scaler_.read();
  p.loss_scale = scaler.scale;
  p.scaler_clean = scaler.clean;
  p.scaler_skipped = scaler.skipped;
  p.scaler_consecutive = scaler.consecutive;
  p.seed = int64_t(o_.seed);
  p.batch_size = train_.batch_size();
  if (o_.device.is_cpu()) p.cpu = current_cpu_choices(mixed_ && !scaled_);
  save_training_checkpoint(path, model_, opt_, meta, p);
  last_checkpoint_ = path;
  if (show_bar_) bar_.clear();
  std::fprintf(o_.log, "Saved checkpoint to \"%s\" (%s)\n", path.c_str(), checkpoint_size_text(path).c_str());
  for (const std::string& gone : prune_checkpoints(o_.model_prefix, o_.keep_checkpoints))
    std::fprintf(o_.log, "Removed old checkpoint \"%s\" (--keep-checkpoints %d)\n", gone.c_str(), o_.keep_checkpoints);
}

// A stop request (Ctrl-C, SIGTERM) after a step: a step checkpoint and the
// command that resumes from it; every rank stops after the same step.
void FitRun::stop_in_epoch(EpochState& e, int sig) {
  result_.interrupted_by = sig;
  if (show_bar_) bar_.clear();
  std::fprintf(o_.log, "Stopping at Epoch[%d] Batch [%lld] (step %lld): %s received\n", e.epoch,
               (long long)e.batch_index, (long long)global_step_, sig == SIGINT ? "SIGINT (Ctrl-C)" : "SIGTERM");
  if (!o_.model_prefix.empty()) {
    save_checkpoint(step_checkpoint_path(o_.model_prefix, e.epoch, batches_->position()), position_after_step(e));
    if (rank0_) std::fprintf(o_.log, "Resume with: %s\n", o_.resume_command.c_str());
  } else {
    std::fprintf(o_.log, "No --model-prefix: nothing was saved\n");
  }
}

// At the end of an epoch: the signal the ranks agree on (one collective), or
// this process's own alone.
int FitRun::stop_signal_at_epoch_end() const {
  if (!comm_) return local_signal();
  return agreed_stop_signal(net::dist::sum_over_ranks(*comm_, {double(local_signal())})[0], local_signal());
}

}  // namespace ember::apps::detail
