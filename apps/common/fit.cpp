// apps/common/fit.cpp — the training loop (checkpoints, resuming, stopping on a signal,
// progress and metrics) and evaluation.
#include "apps/common/fit.h"

#include <algorithm>
#include <chrono>
#include <csignal>
#include <cmath>
#include <filesystem>
#include <sys/stat.h>

#include "apps/common/batch_prefetch.h"
#include "apps/common/fit_helpers.h"
#include "apps/common/progress.h"
#include "apps/common/step_stats.h"
#include "apps/common/top_k.h"
#include "engine/autograd.h"
#include "net/checkpoint.h"
#include "net/layers.h"
#include "net/dist/data_parallel.h"
#include "net/finetune.h"
#include "ops/kernel_profile.h"
#include "ops/ops.h"

namespace ember::apps {

using detail::backward_scaled;
using detail::Clock;
using detail::Interval;
using detail::seconds_since;
using detail::unit_loss_scale;

namespace {

// Rows whose label is the best logit / among the 5 best (apps::in_top_k's
// rule), from one host copy of the logits.
struct TopHits {
  int64_t top1 = 0, top5 = 0;
};
TopHits count_top_hits(const Tensor& logits, const Tensor& labels_host) {
  const Tensor l = (logits.dtype() == DType::f32 ? logits : ops::cast(logits, DType::f32)).to(Device::cpu());
  const int64_t n = l.shape()[0], classes = l.shape()[1];
  const int64_t* y = labels_host.data<int64_t>();
  TopHits hits;
  for (int64_t i = 0; i < n; ++i) {
    const float* row = l.data<float>() + i * classes;
    hits.top1 += in_top_k(row, classes, 1, y[i]);
    hits.top5 += in_top_k(row, classes, 5, y[i]);
  }
  return hits;
}

bool file_exists(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0;
}

// What a progress line adds in mixed precision: the loss scale (fp16) and
// the skipped steps (fp16, bf16).
std::string progress_precision(DType precision, const net::LossScaler& scaler) {
  if (precision == DType::f16) return cat("\tloss-scale=", scaler.scale(), "\tskipped=", scaler.skipped_steps());
  if (precision == DType::bf16) return cat("\tskipped=", scaler.skipped_steps());
  return "";
}

}  // namespace

Accuracy evaluate_accuracy(net::Module& model, BatchSource& source, Device device, net::dist::Comm* comm) {
  const bool was_training = model.is_training();
  model.eval();
  NoGradGuard no_grad;
  BatchPrefetcher batches(source, device, true);  // the next batch uploads while this one runs
  batches.start_epoch(0);
  data::Batch b;
  DeviceBatch on_device;
  double correct = 0, top5 = 0, total = 0;
  int64_t classes = 0;
  while (batches.next(b, on_device)) {
    const Tensor logits = model(batches.uploads() ? on_device.images : b.images.to(device));
    const TopHits hits = count_top_hits(logits, b.labels);
    correct += double(hits.top1);
    top5 += double(hits.top5);
    total += double(b.size);
    classes = logits.shape()[1];
  }
  model.train(was_training);
  if (comm) {
    const auto sums = net::dist::sum_over_ranks(*comm, {correct, top5, total});
    correct = sums[0], top5 = sums[1], total = sums[2];
  }
  Accuracy a;
  a.samples = int64_t(total);
  a.classes = classes;
  if (total > 0) a.top1 = correct / total, a.top5 = top5 / total;
  return a;
}

double evaluate(net::Module& model, BatchSource& source, Device device, net::dist::Comm* comm) {
  return evaluate_accuracy(model, source, device, comm).top1;
}

double evaluate(net::Module& model, const data::ImageSet& set, int64_t batch_size, Device device) {
  data::BatchIterator::Options o;
  o.batch_size = batch_size;
  o.shuffle = false;
  data::BatchIterator it(set, o);
  IteratorSource source(it);
  return evaluate(model, source, device);
}

FitResult fit(net::Module& model, data::BatchIterator& train, const data::ImageSet* val, const FitOptions& o) {
  IteratorSource train_source(train);
  if (!val) return fit(model, train_source, nullptr, o);
  data::BatchIterator::Options vo;
  vo.batch_size = o.eval_batch_size;
  vo.shuffle = false;
  if (o.comm) vo.rank = o.comm->rank(), vo.world = o.comm->world_size(), vo.even_shards = false;
  data::BatchIterator val_it(*val, vo);
  IteratorSource val_source(val_it);
  return fit(model, train_source, &val_source, o);
}

FitResult fit(net::Module& model, BatchSource& train, BatchSource* val, const FitOptions& o) {
  EMBER_CHECK(o.num_epochs > o.begin_epoch, "nothing to train: --num-epochs ", o.num_epochs,
              " is not after the resumed epoch ", o.begin_epoch);
  EMBER_CHECK(o.disp_batches > 0, "--disp-batches must be positive");
  const int64_t steps_per_epoch = train.batches_per_epoch();
  EMBER_CHECK(steps_per_epoch > 0, "the training set gives no batch (", train.samples_per_epoch(),
              " samples per epoch, batch size ", train.batch_size(), ")");

  EMBER_CHECK(o.precision == DType::f32 || is_16bit_float(o.precision), "--precision: fp32, fp16 or bf16, got ",
              dtype_name(o.precision));
  const bool mixed = is_16bit_float(o.precision);
  const bool scaled = o.precision == DType::f16;  // bf16 needs no loss scale (f32's exponent range)
  net::dist::Comm* comm = o.comm && o.comm->world_size() > 1 ? o.comm : nullptr;
  const bool rank0 = !comm || comm->rank() == 0;
  if (comm) net::dist::broadcast_module(*comm, model);  // every rank starts from rank 0's weights
  // fp16/bf16: the model's weights become 16-bit, and their f32 copies the optimizer's masters.
  net::Masters masters = mixed ? net::convert_to_half(model, o.precision) : net::Masters{};
  net::SGD opt(model.named_parameters(), o.sgd, std::move(masters));
  net::LossScaler scaler(scaled ? o.loss_scaler : unit_loss_scale(o.loss_scaler));
  bool has_dropout = false;  // then every step keys its masks (net::set_dropout_step)
  model.apply([&](net::Module& m) { has_dropout = has_dropout || dynamic_cast<net::Dropout*>(&m) != nullptr; });
  // However fit ends, the caller gets its model back in f32 (the masters).
  struct RestoreF32 {
    net::Module& model;
    net::SGD& opt;
    bool on;
    ~RestoreF32() {
      if (!on) return;
      try {
        net::restore_f32(model, opt.masters());
      } catch (const std::exception& e) {  // cannot happen (same names and shapes); never throw from here
        std::fprintf(stderr, "fit: could not restore the f32 weights: %s\n", e.what());
      }
    }
  } restore{model, opt, mixed};
  if (scaled)
    std::fprintf(o.log, "Mixed precision: f16 weights and activations, f32 masters; loss scale %g (%s)\n",
                 scaler.scale(), scaler.dynamic() ? "dynamic" : "fixed");
  else if (mixed)
    std::fprintf(o.log,
                 "Mixed precision: bf16 weights and activations, f32 masters; no loss scaling (bf16 has f32's "
                 "exponent range), steps with inf/NaN gradients are skipped\n");
  // Fine-tuning: the backbone's learning-rate multiplier, and its freezing
  // (after the f16 conversion, which makes every parameter trainable).
  const FineTuneOptions& ft = o.finetune;
  const bool split = !ft.head_prefix.empty();
  EMBER_CHECK(ft.backbone_lr_mult >= 0, "--backbone-lr-mult must be >= 0, got ", ft.backbone_lr_mult);
  if (split && ft.backbone_lr_mult != 1.0)
    opt.set_lr_multipliers(
        [&](const std::string& name) { return net::in_head(name, ft.head_prefix) ? 1.0 : ft.backbone_lr_mult; });
  // Data-parallel: buckets over the parameters that get gradients, hooked on
  // the tensors backward will reach (after the f16 conversion).
  std::unique_ptr<net::dist::Reducer> reducer;
  auto start_reducer = [&] {
    if (!comm) return;
    std::vector<net::NamedParameter> trainable;
    for (auto& p : model.named_parameters())
      if (p.tensor->requires_grad()) trainable.push_back(p);
    reducer = std::make_unique<net::dist::Reducer>(*comm, trainable, o.buckets);
    std::fprintf(o.log, "Data-parallel: %d ranks over %s, %s%s\n", comm->world_size(), comm->backend(),
                 reducer->describe().c_str(), o.sync_bn ? ", synchronised batch norm" : "");
  };
  int backbone_state = -1;  // 1 frozen, 0 trainable, -1 not set yet
  auto set_backbone = [&](int epoch) {
    const bool frozen = ft.frozen_at(epoch);
    if (int(frozen) == backbone_state) return;
    reducer.reset();  // its hooks come off before the set of trainable tensors changes
    const net::BackboneSplit bs = net::set_backbone_frozen(model, ft.head_prefix, frozen);
    if (frozen) {
      std::fprintf(o.log,
                   "Epoch[%d] Backbone frozen: %lld tensors (%.2fM parameters) get no gradients and no optimizer "
                   "state; its %lld batch norms keep their running statistics. Training the head %s* (%lld tensors, "
                   "%lld parameters)%s\n",
                   epoch, (long long)bs.backbone_parameters, double(bs.backbone_elements) / 1e6,
                   (long long)bs.backbone_batch_norms, ft.head_prefix.c_str(), (long long)bs.head_parameters,
                   (long long)bs.head_elements,
                   ft.unfreeze_epoch > 0 ? cat(" until Epoch[", ft.unfreeze_epoch, "]").c_str() : "");
    } else {
      std::fprintf(o.log, "Epoch[%d] Backbone %s: all %lld tensors train%s\n", epoch,
                   backbone_state == 1 ? "unfrozen" : "trainable",
                   (long long)(bs.backbone_parameters + bs.head_parameters),
                   ft.backbone_lr_mult != 1.0 ? cat(", backbone at lr x ", ft.backbone_lr_mult).c_str() : "");
    }
    backbone_state = frozen;
    start_reducer();
  };
  if (split) {
    set_backbone(o.begin_epoch);
  } else {
    start_reducer();
  }
  // Sums of (samples, correct, loss) over ranks.
  auto global = [&](std::vector<double> v) { return comm ? net::dist::sum_over_ranks(*comm, v) : v; };
  net::LrScheduleOptions so = o.schedule;
  so.base_lr = o.lr;
  so.steps_per_epoch = steps_per_epoch;
  so.num_epochs = o.num_epochs;
  so.momentum = o.sgd.momentum;
  const net::LrSchedule schedule(so);

  // Where training starts: a resumed position (--resume), the start of
  // --load-epoch, or the beginning.
  TrainingPosition start;
  start.epoch = o.begin_epoch;
  start.global_step = int64_t(o.begin_epoch) * steps_per_epoch;
  if (o.resume) {
    start = *o.resume;
    if (!start.complete) start.global_step = int64_t(start.epoch) * steps_per_epoch + start.batch;
    EMBER_CHECK(start.epoch < o.num_epochs, "nothing to resume: the checkpoint is at Epoch[", start.epoch,
                "] and --num-epochs is ", o.num_epochs, " (train longer with a larger --num-epochs)");
    EMBER_CHECK(start.batch <= steps_per_epoch, "the checkpoint is at batch ", start.batch, " of Epoch[", start.epoch,
                "], but an epoch now has ", steps_per_epoch, " batches (was --batch-size or the data changed?)");
    if (!o.resume_states.empty()) {
      net::load_optimizer(o.resume_states, opt);
      if (start.complete) scaler.restore(start.loss_scale, start.scaler_clean, start.scaler_skipped, start.scaler_consecutive);
    }
    std::fprintf(o.log, "Resuming at Epoch[%d] Batch [%lld] (step %lld, %.1f s trained so far)\n", start.epoch,
                 (long long)start.batch, (long long)start.global_step, start.elapsed_seconds);
  } else if (o.begin_epoch > 0 && !o.model_prefix.empty()) {
    const std::string states = net::optimizer_state_path(o.model_prefix, o.begin_epoch);
    if (file_exists(states)) {
      net::load_optimizer(states, opt);
      std::fprintf(o.log, "Resumed optimizer state from \"%s\" (%lld steps)\n", states.c_str(),
                   (long long)opt.steps());
    } else {
      std::fprintf(o.log, "No optimizer state at \"%s\": momentum restarts from zero\n", states.c_str());
    }
  }

  if (!o.model_prefix.empty() && rank0) {  // fail now, not after the first epoch
    const std::filesystem::path dir = std::filesystem::path(o.model_prefix).parent_path();
    std::error_code ec;
    if (!dir.empty()) std::filesystem::create_directories(dir, ec);
    EMBER_CHECK(!ec, "--model-prefix ", o.model_prefix, ": cannot create directory ", dir.string(), ": ",
                ec.message());
  }
  EMBER_CHECK(o.checkpoint_steps >= 0, "--checkpoint-steps must be >= 0");
  EMBER_CHECK(o.checkpoint_steps == 0 || !o.model_prefix.empty(), "--checkpoint-steps needs --model-prefix");
  EMBER_CHECK(o.target_accuracy >= 0 && o.target_accuracy <= 1, "--target-accuracy must be in [0, 1], got ",
              o.target_accuracy);
  EMBER_CHECK(o.target_accuracy == 0 || val, "--target-accuracy needs a validation set");

  MetricsLog metrics(rank0 ? o.metrics_path : std::string());
  if (metrics.enabled())
    metrics.write({{"kind", "start"},
                   {"wall_time", metric(start.elapsed_seconds)},
                   {"step", start.global_step},
                   {"epoch", start.epoch},
                   {"resumed", o.resume != nullptr},
                   {"args", o.command_line}});
  ProgressBar bar(o.log);
  const bool show_lines = o.progress == ProgressMode::lines, show_bar = o.progress == ProgressMode::bar && rank0;

  FitResult result;
  const auto run_start = Clock::now();
  auto elapsed = [&] { return start.elapsed_seconds + seconds_since(run_start); };
  std::string last_checkpoint = o.resume ? o.resume_model : std::string();
  // Saves the model and the training state at `p` (rank 0), keeps the newest --keep-checkpoints.
  auto save_checkpoint = [&](const std::string& path, TrainingPosition p) {
    if (o.model_prefix.empty() || !rank0) return;
    std::map<std::string, std::string> meta(o.checkpoint_metadata.begin(), o.checkpoint_metadata.end());
    meta["epoch"] = std::to_string(p.epoch);
    if (p.batch > 0) meta["batch"] = std::to_string(p.batch);
    if (val && p.batch == 0 && result.validation_accuracy >= 0) meta["validation_accuracy"] = std::to_string(result.validation_accuracy);
    if (mixed) meta["precision"] = cat(scaled ? "fp16" : "bf16", " (f32 master weights saved)");
    p.loss_scale = scaler.scale();
    p.scaler_clean = scaler.clean_steps_in_window();
    p.scaler_skipped = scaler.skipped_steps();
    p.scaler_consecutive = scaler.consecutive_skips();
    p.seed = int64_t(o.seed);
    p.batch_size = train.batch_size();
    if (o.device.is_cpu()) p.cpu = current_cpu_choices(mixed && !scaled);
    save_training_checkpoint(path, model, opt, meta, p);
    last_checkpoint = path;
    if (show_bar) bar.clear();
    std::fprintf(o.log, "Saved checkpoint to \"%s\"\n", path.c_str());
    for (const std::string& gone : prune_checkpoints(o.model_prefix, o.keep_checkpoints))
      std::fprintf(o.log, "Removed old checkpoint \"%s\" (--keep-checkpoints %d)\n", gone.c_str(), o.keep_checkpoints);
  };
  // A stop request (Ctrl-C, SIGTERM) on any rank stops every rank after the same step.
  auto local_signal = [&]() -> int { return o.stop ? o.stop->requested() : 0; };
  // The agreed signal from a sum over ranks of each rank's own (0 when none asked).
  auto agreed_signal = [&](double sum_of_signals) { return agreed_stop_signal(sum_of_signals, local_signal()); };
  auto stop_signal = [&]() -> int {  // one extra collective: for the epoch end only
    return comm ? agreed_signal(net::dist::sum_over_ranks(*comm, {double(local_signal())})[0]) : local_signal();
  };
  // Data-parallel ranks agree on stopping at the progress lines' sum every
  // --disp-batches steps (no extra collective per step); alone, every step.
  int agreed_stop = 0;

  int64_t global_step = start.global_step;
  double lr = schedule.lr_at(global_step), momentum = schedule.momentum_at(global_step);
  // On a GPU each batch is uploaded during the step before it (mixup and
  // cutmix mix on the host, then upload: not ahead).
  BatchPrefetcher batches(train, o.device, o.upload_ahead && !o.mix.enabled());
  model.train();
  for (int epoch = start.epoch; epoch < o.num_epochs && !result.interrupted_by; ++epoch) {
    const auto epoch_start = Clock::now();
    const int64_t first_batch = epoch == start.epoch ? start.batch : 0;
    if (split) set_backbone(epoch);
    batches.start_epoch(epoch, first_batch);
    if (const int size = train.image_size(epoch); size > 0 && (epoch == start.epoch || size != train.image_size(epoch - 1)))
      std::fprintf(o.log, "Epoch[%d] Image size=%d\n", epoch, size);
    Interval interval;
    int64_t epoch_samples = 0, epoch_correct = 0, batch_index = first_batch, timed_samples = 0;
    double epoch_loss_sum = 0, data_wait = 0;
    if (first_batch > 0)
      epoch_samples = start.epoch_samples, epoch_correct = start.epoch_correct, epoch_loss_sum = start.epoch_loss_sum;
    // Loss and accuracy summed on the device (apps/common/step_stats.h): read
    // after every step on the CPU (free) and in fp16/bf16 (whose step waits
    // for the scaler's finite check anyway), else only where the numbers are
    // needed, so a GPU step never waits for the device.
    StepStats stats(o.device);
    const bool read_every_step = o.device.is_cpu() || mixed;
    // Folds the sums since the last read into the interval and the epoch;
    // stops the run if the loss went non-finite (not in fp16/bf16, where the
    // scaler skips such steps).
    auto read_stats = [&] {
      const StepStats::Sums r = stats.read();
      if (r.steps == 0) return;
      if (!mixed && !std::isfinite(r.loss_sum)) {
        if (show_bar) bar.clear();
        const std::string where =
            r.steps == 1 ? cat("at Epoch[", epoch, "] Batch [", batch_index - 1, "] (step ", global_step, "): loss is ",
                               r.loss_sum / double(r.samples))
                         : cat("in Epoch[", epoch, "] Batch [", batch_index - r.steps, "-", batch_index - 1, "] (steps ",
                               global_step - r.steps + 1, "-", global_step, "): the loss summed over them is ",
                               r.loss_sum);
        fail(cat("training diverged ", where, " (lr ", lr, "); ",
                 last_checkpoint.empty() ? std::string("no checkpoint was saved before it")
                                         : cat("the last good checkpoint is \"", last_checkpoint, "\""),
                 "; try a lower --lr or more --warmup-epochs"));
      }
      interval.samples += r.samples;
      interval.correct += r.correct;
      if (std::isfinite(r.loss_sum)) interval.loss_sum += r.loss_sum, epoch_loss_sum += r.loss_sum;
      epoch_samples += r.samples;
      epoch_correct += r.correct;
    };
    data::Batch b;
    DeviceBatch on_device;  // b on the device, uploaded during the step before (a GPU without mixup)
    for (;;) {
      const auto wait_start = Clock::now();
      if (!batches.next(b, on_device)) break;
      data_wait += seconds_since(wait_start);
      Tensor logits, loss;
      Tensor count_labels;  // what training accuracy is counted against, on the device
      // Dropout masks: drawn from (seed, global step, rank), so a resumed run drops what the first one did.
      if (has_dropout)
        net::set_dropout_step(model, o.seed, uint64_t(global_step), comm ? uint64_t(comm->rank()) : 0);
      if (o.mix.enabled()) {
        // Mixup / cutmix: drawn from (seed, global step), so a resumed run mixes as the first one did.
        const net::MixedBatch m = net::mix_batch(b, o.mix, o.seed, global_step, o.input_norm, o.precision, o.device);
        logits = model(m.images);
        loss = net::mixed_cross_entropy(logits, m, o.label_smoothing);
        if (m.lam < 0.5) {  // the reversed batch's labels dominate
          Tensor dominant_labels = Tensor::empty({b.size}, DType::i64);
          for (int64_t i = 0; i < b.size; ++i)
            dominant_labels.data<int64_t>()[i] = b.labels.data<int64_t>()[b.size - 1 - i];
          count_labels = dominant_labels.to(o.device);
        } else {
          count_labels = b.labels.to(o.device);
        }
      } else {
        count_labels = batches.uploads() ? on_device.labels : b.labels.to(o.device);
        logits = model(batches.uploads() ? on_device.images : b.images.to(o.device));
        loss = ops::cross_entropy(logits, count_labels, o.label_smoothing);  // f32 in both precisions
      }
      opt.zero_grad();
      lr = schedule.lr_at(global_step);
      momentum = schedule.momentum_at(global_step);
      if (so.cycle_momentum) opt.set_momentum(momentum);
      if (reducer) reducer->prepare();
      if (mixed) {
        const double s = scaler.scale();
        backward_scaled(loss, s);
        if (reducer) reducer->finish();  // averaged gradients: every rank takes the same decision below
        // An inf/NaN gradient (the scale was too high, or f16 overflowed
        // forward) skips the step; the scaler halves the scale (bf16: the
        // scale stays 1, the skip is counted).
        scaler.update(opt.step_if_finite(lr, 1.0 / s));
      } else {
        loss.backward();
        if (reducer) reducer->finish();
        opt.step(lr);
      }
      ++global_step;

      stats.add(loss, logits, count_labels, b.size);
      ++interval.batches;
      timed_samples += b.size;
      ++batch_index;
      const bool log_point = batch_index % o.disp_batches == 0;
      if (read_every_step || log_point) read_stats();
      if (log_point) {
        const auto g =
            global({double(interval.samples), double(interval.correct), interval.loss_sum, double(local_signal())});
        agreed_stop = agreed_signal(g[3]);
        const double dt = seconds_since(interval.start);
        if (show_lines) {
          std::fprintf(o.log,
                       "Epoch[%d] Batch [%lld-%lld]\tSpeed: %.2f samples/sec\taccuracy=%.6f\tcross-entropy=%.6f\t"
                       "lr=%.6g%s\n",
                       epoch, (long long)(batch_index - interval.batches), (long long)batch_index, g[0] / dt,
                       g[1] / g[0], g[2] / g[0], lr, progress_precision(o.precision, scaler).c_str());
          std::fflush(o.log);
        }
        if (metrics.enabled()) {
          json::Object rec = {{"kind", "step"},        {"step", global_step},
                              {"epoch", epoch},        {"batch", batch_index},
                              {"loss", metric(g[2] / g[0])}, {"train_accuracy", metric(g[1] / g[0])},
                              {"lr", metric(lr)},      {"momentum", metric(momentum)},
                              {"img_per_sec", metric(g[0] / dt)}, {"wall_time", metric(elapsed())}};
          if (mixed) rec.emplace_back("loss_scale", metric(scaler.scale()));
          metrics.write(std::move(rec));
        }
        interval.reset();
      }
      if (show_bar) {
        ProgressView v;
        v.epoch = epoch, v.num_epochs = o.num_epochs, v.batch = batch_index, v.batches = steps_per_epoch;
        const double t = seconds_since(epoch_start);
        const double rate = t > 0 ? double(timed_samples) / t : 0;  // this rank's images per second
        v.img_per_sec = rate * (comm ? comm->world_size() : 1);
        v.loss = epoch_samples > 0 ? epoch_loss_sum / double(epoch_samples) : 0;
        v.accuracy = epoch_samples > 0 ? double(epoch_correct) / double(epoch_samples) : 0;
        const double per_step = batch_index > first_batch ? t / double(batch_index - first_batch) : -1;
        if (per_step > 0) {
          v.epoch_eta = per_step * double(steps_per_epoch - batch_index);
          v.run_eta = per_step * double(int64_t(o.num_epochs) * steps_per_epoch - global_step);
        }
        bar.update(v, batch_index == steps_per_epoch);  // the last batch always shows: the bar ends full
      }
      // Position after this step: what a checkpoint taken now resumes from.
      auto here = [&] {
        read_stats();
        TrainingPosition p;
        p.epoch = epoch, p.batch = batches.position(), p.global_step = global_step, p.elapsed_seconds = elapsed();
        p.epoch_samples = epoch_samples, p.epoch_correct = epoch_correct, p.epoch_loss_sum = epoch_loss_sum;
        return p;
      };
      if (const int sig = comm ? agreed_stop : local_signal()) {
        result.interrupted_by = sig;
        if (show_bar) bar.clear();
        std::fprintf(o.log, "Stopping at Epoch[%d] Batch [%lld] (step %lld): %s received\n", epoch,
                     (long long)batch_index, (long long)global_step, sig == SIGINT ? "SIGINT (Ctrl-C)" : "SIGTERM");
        if (!o.model_prefix.empty()) {
          save_checkpoint(step_checkpoint_path(o.model_prefix, epoch, batches.position()), here());
          if (rank0) std::fprintf(o.log, "Resume with: %s\n", o.resume_command.c_str());
        } else {
          std::fprintf(o.log, "No --model-prefix: nothing was saved\n");
        }
        break;
      }
      if (o.checkpoint_steps > 0 && global_step % o.checkpoint_steps == 0 && batches.position() < steps_per_epoch)
        save_checkpoint(step_checkpoint_path(o.model_prefix, epoch, batches.position()), here());
    }
    if (result.interrupted_by) break;
    read_stats();
    if (show_bar) bar.clear();
    const double epoch_seconds = seconds_since(epoch_start);
    const auto epoch_totals = global({double(epoch_samples), double(epoch_correct), epoch_loss_sum, double(timed_samples)});
    result.train_accuracy = epoch_totals[1] / std::max(1.0, epoch_totals[0]);
    const double epoch_speed = epoch_totals[3] / std::max(1e-9, epoch_seconds);
    const double wait_share = epoch_seconds > 0 ? data_wait / epoch_seconds : 0;
    const double peak_mib = peak_rss_mib();
    std::fprintf(o.log, "Epoch[%d] Train-accuracy=%.6f\n", epoch, result.train_accuracy);
    std::fprintf(o.log, "Epoch[%d] Time cost=%.3f\tSpeed=%.2f samples/sec\tData-wait=%.1f%%\tPeak-RSS=%.0f MiB\n", epoch,
                 epoch_seconds, epoch_speed, 100.0 * wait_share, peak_mib);
    if (scaled)
      std::fprintf(o.log, "Epoch[%d] Loss-scale=%g Skipped-steps=%lld\n", epoch, scaler.scale(),
                   (long long)scaler.skipped_steps());
    else if (mixed)
      std::fprintf(o.log, "Epoch[%d] Skipped-steps=%lld\n", epoch, (long long)scaler.skipped_steps());
    if (comm && !o.sync_bn) net::dist::average_buffers(*comm, model);  // one model to validate and save
    Accuracy a;
    if (val) {
      a = evaluate_accuracy(model, *val, o.device, comm);
      result.validation_accuracy = a.top1;
      std::fprintf(o.log, "Epoch[%d] Validation-accuracy=%.6f\n", epoch, a.top1);
      if (a.classes > 5) {
        result.validation_top5 = a.top5;
        std::fprintf(o.log, "Epoch[%d] Validation-top_k_accuracy_5=%.6f\n", epoch, a.top5);
      }
    }
    if (metrics.enabled()) {
      json::Object rec = {{"kind", "epoch"},
                          {"step", global_step},
                          {"epoch", epoch},
                          {"loss", metric(epoch_totals[2] / std::max(1.0, epoch_totals[0]))},
                          {"train_accuracy", metric(result.train_accuracy)},
                          {"lr", metric(lr)},
                          {"momentum", metric(momentum)},
                          {"img_per_sec", metric(epoch_speed)},
                          {"epoch_time", metric(epoch_seconds)},
                          {"wall_time", metric(elapsed())},
                          {"peak_rss_mb", metric(peak_mib)},
                          {"data_wait_share", metric(wait_share)}};
      if (val) rec.emplace_back("val_accuracy", metric(a.top1));
      if (val && a.classes > 5) rec.emplace_back("val_top5", metric(a.top5));
      if (mixed) rec.emplace_back("loss_scale", metric(scaler.scale()));
      metrics.write(std::move(rec));
    }
    const bool reached = o.target_accuracy > 0 && val && a.top1 >= o.target_accuracy;
    if (reached) {
      result.time_to_target = elapsed();
      result.epochs_to_target = epoch + 1;
      std::fprintf(o.log, "Time to %.3f: %.1f s (%d epochs)\n", o.target_accuracy, result.time_to_target, epoch + 1);
      if (metrics.enabled())
        metrics.write({{"kind", "time_to_accuracy"},
                       {"target", o.target_accuracy},
                       {"seconds", metric(result.time_to_target)},
                       {"epochs", epoch + 1},
                       {"step", global_step},
                       {"wall_time", metric(result.time_to_target)}});
    }
    ++result.epochs;
    TrainingPosition next;
    next.epoch = epoch + 1, next.global_step = global_step, next.elapsed_seconds = elapsed();
    save_checkpoint(net::checkpoint_path(o.model_prefix, epoch + 1), next);
    std::fflush(o.log);
    if (reached) break;
    if (const int sig = stop_signal()) {  // arrived during validation: the epoch's checkpoint is the resume point
      result.interrupted_by = sig;
      if (!o.model_prefix.empty() && rank0) std::fprintf(o.log, "Stopping: resume with: %s\n", o.resume_command.c_str());
      break;
    }
  }
  if (o.target_accuracy > 0 && result.time_to_target < 0 && !result.interrupted_by)
    std::fprintf(o.log, "Target accuracy %.3f not reached in %d epochs (last %.6f)\n", o.target_accuracy,
                 o.num_epochs, result.validation_accuracy);
  result.seconds = elapsed();
  result.steps = global_step;
  result.skipped_steps = mixed ? scaler.skipped_steps() : 0;
  result.loss_scale = mixed ? scaler.scale() : 1.0;
  result.last_checkpoint = last_checkpoint;
  if (reducer) result.comm = reducer->stats();
  return result;
}

}  // namespace ember::apps
