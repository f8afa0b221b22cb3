// apps/training/fit_epoch.cpp — one epoch of fit() (fit_run.h): the loop
// over batches (a step each, fit_step.cpp) with MXNet's progress lines or the
// progress bar, the metrics records, stopping on a signal and the step
// checkpoints; then the epoch's summary lines, validation (evaluate.cpp),
// the time-to-accuracy target and the epoch's checkpoint.
#include <algorithm>
#include <cmath>

#include "apps/training/fit_run.h"
#include "net/checkpoint.h"
#include "net/dist/data_parallel.h"

namespace ember::apps::detail {
namespace {

// What a progress line adds in mixed precision: the loss scale (fp16) and
// the skipped steps (fp16, bf16).
std::string progress_precision(DType precision, const net::LossScaler::Snapshot& scaler) {
  if (precision == DType::f16) return cat("\tloss-scale=", scaler.scale, "\tskipped=", scaler.skipped);
  if (precision == DType::bf16) return cat("\tskipped=", scaler.skipped);
  return "";
}

}  // namespace

bool FitRun::train_epoch(EpochState& e) {
  e.start = Clock::now();
  e.first_batch = e.epoch == start_.epoch ? start_.batch : 0;
  if (split_) set_backbone(e.epoch);
  batches_->start_epoch(e.epoch, e.first_batch);
  if (const int size = train_.image_size(e.epoch);
      size > 0 && (e.epoch == start_.epoch || size != train_.image_size(e.epoch - 1)))
    std::fprintf(o_.log, "Epoch[%d] Image size=%d\n", e.epoch, size);
  e.interval.reset();
  e.batch_index = e.first_batch;
  if (e.first_batch > 0) e.samples = start_.epoch_samples, e.correct = start_.epoch_correct, e.loss_sum = start_.epoch_loss_sum;
  // Loss and accuracy are summed on the device (apps/training/step_stats.h),
  // and the loss scaler's state lives there: read after every step on the
  // CPU (free), else only where the numbers are needed, so a GPU step never
  // waits for the device, in any precision.
  const bool read_every_step = o_.device.is_cpu();
  data::Batch b;
  DeviceBatch on_device;  // b on the device, uploaded during the step before (a GPU without mixup)
  for (;;) {
    const auto wait_start = Clock::now();
    if (!batches_->next(b, on_device)) break;
    e.data_wait += seconds_since(wait_start);
    train_step(e, b, on_device);
    const bool log_point = e.batch_index % o_.disp_batches == 0;
    if (read_every_step || log_point) read_stats(e);
    if (log_point) log_progress(e);
    if (show_bar_) show_bar(e);
    if (const int sig = comm_ ? agreed_stop_ : local_signal()) {
      stop_in_epoch(e, sig);
      return false;
    }
    if (o_.checkpoint_steps > 0 && global_step_ % o_.checkpoint_steps == 0 &&
        batches_->position() < steps_per_epoch_)
      save_checkpoint(step_checkpoint_path(o_.model_prefix, e.epoch, batches_->position()), position_after_step(e));
  }
  return true;
}

// Every --disp-batches steps: the interval's speed, accuracy and loss over
// all ranks (MXNet's Speedometer line and a metrics record). Data-parallel
// ranks also agree here on stopping (no extra collective per step).
void FitRun::log_progress(EpochState& e) {
  Interval& in = e.interval;
  const auto g = global({double(in.samples), double(in.correct), in.loss_sum, double(local_signal())});
  agreed_stop_ = agreed_stop_signal(g[3], local_signal());
  const double dt = seconds_since(in.start);
  if (show_lines_) {
    std::fprintf(o_.log,
                 "Epoch[%d] Batch [%lld-%lld]\tSpeed: %.2f samples/sec\taccuracy=%.6f\tcross-entropy=%.6f\t"
                 "lr=%.6g%s\n",
                 e.epoch, (long long)(e.batch_index - in.batches), (long long)e.batch_index, g[0] / dt, g[1] / g[0],
                 g[2] / g[0], lr_, progress_precision(o_.precision, scaler_seen_).c_str());
    std::fflush(o_.log);
  }
  if (metrics_->enabled()) {
    json::Object rec = {{"kind", "step"},        {"step", global_step_},
                        {"epoch", e.epoch},      {"batch", e.batch_index},
                        {"loss", metric(g[2] / g[0])}, {"train_accuracy", metric(g[1] / g[0])},
                        {"lr", metric(lr_)},     {"momentum", metric(momentum_)},
                        {"img_per_sec", metric(g[0] / dt)}, {"wall_time", metric(elapsed())}};
    if (mixed_) rec.emplace_back("loss_scale", metric(scaler_seen_.scale));
    metrics_->write(std::move(rec));
  }
  in.reset();
}

// The progress bar on a terminal (rank 0): the epoch so far and the ETAs.
void FitRun::show_bar(const EpochState& e) {
  ProgressView v;
  v.epoch = e.epoch, v.num_epochs = o_.num_epochs, v.batch = e.batch_index, v.batches = steps_per_epoch_;
  const double t = seconds_since(e.start);
  const double rate = t > 0 ? double(e.timed_samples) / t : 0;  // this rank's images per second
  v.img_per_sec = rate * (comm_ ? comm_->world_size() : 1);
  v.loss = e.samples > 0 ? e.loss_sum / double(e.samples) : 0;
  v.accuracy = e.samples > 0 ? double(e.correct) / double(e.samples) : 0;
  const double per_step = e.batch_index > e.first_batch ? t / double(e.batch_index - e.first_batch) : -1;
  if (per_step > 0) {
    v.epoch_eta = per_step * double(steps_per_epoch_ - e.batch_index);
    v.run_eta = per_step * double(int64_t(o_.num_epochs) * steps_per_epoch_ - global_step_);
  }
  bar_.update(v, e.batch_index == steps_per_epoch_);  // the last batch always shows: the bar ends full
}

// The end of an epoch: its summary lines, validation, the metrics record,
// the target accuracy and the epoch's checkpoint. True: the run ends here.
bool FitRun::finish_epoch(EpochState& e) {
  read_stats(e);
  if (show_bar_) bar_.clear();
  const double seconds = seconds_since(e.start);
  const auto totals = global({double(e.samples), double(e.correct), e.loss_sum, double(e.timed_samples)});
  result_.train_accuracy = totals[1] / std::max(1.0, totals[0]);
  const double speed = totals[3] / std::max(1e-9, seconds);
  const double wait_share = seconds > 0 ? e.data_wait / seconds : 0;
  const double peak_mib = peak_rss_mib();
  std::fprintf(o_.log, "Epoch[%d] Train-accuracy=%.6f\n", e.epoch, result_.train_accuracy);
  const std::string device_peak =
      o_.device.is_cpu() ? std::string() : cat("\tPeak-device-memory=", std::lround(device_peak_bytes(o_.device) / 1048576.0), " MiB");
  std::fprintf(o_.log, "Epoch[%d] Time cost=%.3f\tSpeed=%.2f samples/sec\tData-wait=%.1f%%\tPeak-RSS=%.0f MiB%s\n",
               e.epoch, seconds, speed, 100.0 * wait_share, peak_mib, device_peak.c_str());
  if (scaled_)
    std::fprintf(o_.log, "Epoch[%d] Loss-scale=%g Skipped-steps=%lld\n", e.epoch, scaler_seen_.scale,
                 (long long)scaler_seen_.skipped);
  else if (mixed_)
    std::fprintf(o_.log, "Epoch[%d] Skipped-steps=%lld\n", e.epoch, (long long)scaler_seen_.skipped);
  if (comm_ && !o_.sync_bn) net::dist::average_buffers(*comm_, model_);  // one model to validate and save
  const Accuracy a = validate(e.epoch);
  write_epoch_metrics(e, totals, seconds, speed, wait_share, peak_mib, a);
  const bool reached = check_target(e, a);
  ++result_.epochs;
  TrainingPosition next;
  next.epoch = e.epoch + 1, next.global_step = global_step_, next.elapsed_seconds = elapsed();
  save_checkpoint(net::checkpoint_path(o_.model_prefix, e.epoch + 1), next);
  std::fflush(o_.log);
  if (reached) return true;
  if (const int sig = stop_signal_at_epoch_end()) {  // arrived during validation: the epoch's checkpoint is the resume point
    result_.interrupted_by = sig;
    if (!o_.model_prefix.empty() && rank0_)
      std::fprintf(o_.log, "Stopping: resume with: %s\n", o_.resume_command.c_str());
    return true;
  }
  return false;
}

void FitRun::write_epoch_metrics(const EpochState& e, const std::vector<double>& totals, double seconds,
                                 double speed, double wait_share, double peak_mib, const Accuracy& a) {
  if (!metrics_->enabled()) return;
  json::Object rec = {{"kind", "epoch"},
                      {"step", global_step_},
                      {"epoch", e.epoch},
                      {"loss", metric(totals[2] / std::max(1.0, totals[0]))},
                      {"train_accuracy", metric(result_.train_accuracy)},
                      {"lr", metric(lr_)},
                      {"momentum", metric(momentum_)},
                      {"img_per_sec", metric(speed)},
                      {"epoch_time", metric(seconds)},
                      {"wall_time", metric(elapsed())},
                      {"peak_rss_mb", metric(peak_mib)},
                      {"data_wait_share", metric(wait_share)}};
  if (val_) rec.emplace_back("val_accuracy", metric(a.top1));
  if (val_ && a.classes > 5) rec.emplace_back("val_top5", metric(a.top5));
  if (mixed_) rec.emplace_back("loss_scale", metric(scaler_seen_.scale));
  metrics_->write(std::move(rec));
}

// --target-accuracy (DAWNBench's time to accuracy): true when this epoch's
// validation reached it; prints the time and records it.
bool FitRun::check_target(const EpochState& e, const Accuracy& a) {
  if (!(o_.target_accuracy > 0 && val_ && a.top1 >= o_.target_accuracy)) return false;
  result_.time_to_target = elapsed();
  result_.epochs_to_target = e.epoch + 1;
  std::fprintf(o_.log, "Time to %.3f: %.1f s (%d epochs)\n", o_.target_accuracy, result_.time_to_target, e.epoch + 1);
  if (metrics_->enabled())
    metrics_->write({{"kind", "time_to_accuracy"},
                     {"target", o_.target_accuracy},
                     {"seconds", metric(result_.time_to_target)},
                     {"epochs", e.epoch + 1},
                     {"step", global_step_},
                     {"wall_time", metric(result_.time_to_target)}});
  return true;
}

}  // namespace ember::apps::detail
