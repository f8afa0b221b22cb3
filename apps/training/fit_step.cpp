// apps/training/fit_step.cpp — one training step of fit() (fit_run.h):
// forward, cross-entropy, backward (scaled in fp16), the data-parallel
// all-reduce and the SGD update at the schedule's lr, eagerly or as a CUDA
// graph's replay (--cuda-graph 1, apps/training/step_graph.h); and reading
// the step statistics (loss, correct count) summed on the device back into
// the epoch's counts.
#include <cmath>

#include "apps/training/fit_run.h"
#include "engine/autograd.h"
#include "net/layers.h"

namespace ember::apps::detail {

void FitRun::train_step(EpochState& e, const data::Batch& b, const DeviceBatch& on_device) {
  if (graph_) return train_step_graph(e, b, on_device);
  Tensor logits, loss;
  Tensor count_labels;  // what training accuracy is counted against, on the device
  // Dropout masks: drawn from (seed, global step, rank), so a resumed run drops what the first one did.
  if (has_dropout_)
    net::set_dropout_step(model_, o_.seed, uint64_t(global_step_), comm_ ? uint64_t(comm_->rank()) : 0);
  if (o_.mix.enabled()) {
    // Mixup / cutmix: drawn from (seed, global step), so a resumed run mixes as the first one did.
    const net::MixedBatch m = net::mix_batch(b, o_.mix, o_.seed, global_step_, o_.input_norm, o_.precision, o_.device);
    logits = model_(m.images);
    loss = net::mixed_cross_entropy(logits, m, o_.label_smoothing);
    if (m.lam < 0.5) {  // the reversed batch's labels dominate
      Tensor dominant_labels = Tensor::empty({b.size}, DType::i64);
      for (int64_t i = 0; i < b.size; ++i)
        dominant_labels.data<int64_t>()[i] = b.labels.data<int64_t>()[b.size - 1 - i];
      count_labels = dominant_labels.to(o_.device);
    } else {
      count_labels = b.labels.to(o_.device);
    }
  } else {
    count_labels = batches_->uploads() ? on_device.labels : b.labels.to(o_.device);
    logits = model_(batches_->uploads() ? on_device.images : b.images.to(o_.device));
    loss = ops::cross_entropy(logits, count_labels, o_.label_smoothing);  // f32 in both precisions
  }
  opt_.zero_grad();
  lr_ = schedule_->lr_at(global_step_);
  momentum_ = schedule_->momentum_at(global_step_);
  if (schedule_options_.cycle_momentum) opt_.set_momentum(momentum_);
  if (reducer_) reducer_->prepare();
  if (mixed_) {
    // The scale seeds backward from the device (bf16: a scale of 1).
    loss.backward(scaler_.seed(loss));
    if (reducer_) reducer_->finish();  // averaged gradients: every rank takes the same decision below
    // An inf/NaN gradient (the scale was too high, or f16 overflowed
    // forward) skips the step and the scaler halves the scale (bf16: the
    // scale stays 1, the skip is counted), all decided on the device.
    opt_.step_scaled(lr_, scaler_);
  } else {
    loss.backward();
    if (reducer_) reducer_->finish();
    opt_.step(lr_);
  }
  ++global_step_;

  e.stats.add(loss, logits, count_labels, b.size);
  ++e.interval.batches;
  e.timed_samples += b.size;
  ++e.batch_index;
}

// The device work of a graph step on `images` and `labels`: forward, loss,
// the gradients zeroed in place and computed, the optimizer (lr and
// momentum from the device), the statistics. What a replay repeats.
void FitRun::graph_step_body(EpochState& e, const Tensor& images, const Tensor& labels, int64_t batch) {
  const Tensor logits = model_(images);
  const Tensor loss = ops::cross_entropy(logits, labels, o_.label_smoothing);
  graph_->zero_grads();
  if (mixed_) {
    loss.backward(scaler_.seed(loss));
    opt_.step_scaled(lr_, scaler_);
  } else {
    loss.backward(graph_->unit_seed());
    opt_.step(lr_);
  }
  e.stats.add(loss, logits, labels, batch);
}

// A step under --cuda-graph 1: lr and momentum written to the device, the
// batch copied into the graph's input buffers, then the graph (the first
// step eager, the second captured). A batch of another size (the last of an
// epoch) runs the same work eagerly on its own tensors.
void FitRun::train_step_graph(EpochState& e, const data::Batch& b, const DeviceBatch& on_device) {
  lr_ = schedule_->lr_at(global_step_);
  momentum_ = schedule_->momentum_at(global_step_);
  if (schedule_options_.cycle_momentum) opt_.set_momentum(momentum_);
  opt_.write_hyperparameters(lr_, opt_.options().momentum);
  const Tensor images = batches_->uploads() ? on_device.images : b.images.to(o_.device);
  const Tensor labels = batches_->uploads() ? on_device.labels : b.labels.to(o_.device);
  if (b.size == train_.batch_size()) {
    if (!graph_images_.defined()) {
      graph_images_ = Tensor::empty_like(images);
      graph_labels_ = Tensor::empty_like(labels);
    }
    graph_images_.copy_from(images);
    graph_labels_.copy_from(labels);
    graph_->run([&] { graph_step_body(e, graph_images_, graph_labels_, b.size); },
                [&] { e.stats.count(b.size); });
  } else {
    graph_step_body(e, images, labels, b.size);
  }
  ++global_step_;
  ++e.interval.batches;
  e.timed_samples += b.size;
  ++e.batch_index;
}

// Folds the sums since the last read into the interval and the epoch; stops
// the run if the loss went non-finite (not in fp16/bf16, where the scaler
// skips such steps).
void FitRun::read_stats(EpochState& e) {
  const StepStats::Sums r = e.stats.read();
  if (r.steps == 0) return;
  if (mixed_) {  // the scaler's counts for the log, and the end of a run of skipped steps
    scaler_seen_ = scaler_.read();
    scaler_.check_divergence(scaler_seen_);
  }
  if (!mixed_ && !std::isfinite(r.loss_sum)) {
    if (show_bar_) bar_.clear();
    const std::string where =
        r.steps == 1 ? cat("at Epoch[", e.epoch, "] Batch [", e.batch_index - 1, "] (step ", global_step_,
                           "): loss is ", r.loss_sum / double(r.samples))
                     : cat("in Epoch[", e.epoch, "] Batch [", e.batch_index - r.steps, "-", e.batch_index - 1,
                           "] (steps ", global_step_ - r.steps + 1, "-", global_step_,
                           "): the loss summed over them is ", r.loss_sum);
    fail(cat("training diverged ", where, " (lr ", lr_, "); ",
             last_checkpoint_.empty() ? std::string("no checkpoint was saved before it")
                                      : cat("the last good checkpoint is \"", last_checkpoint_, "\""),
             "; try a lower --lr or more --warmup-epochs"));
  }
  e.interval.samples += r.samples;
  e.interval.correct += r.correct;
  if (std::isfinite(r.loss_sum)) e.interval.loss_sum += r.loss_sum, e.loss_sum += r.loss_sum;
  e.samples += r.samples;
  e.correct += r.correct;
}

}  // namespace ember::apps::detail
