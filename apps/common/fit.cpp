// apps/common/fit.cpp — training loop, evaluation and synthetic benchmark.
#include "apps/common/fit.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <sys/stat.h>

#include "apps/common/top_k.h"
#include "engine/autograd.h"
#include "net/checkpoint.h"
#include "net/dist/data_parallel.h"
#include "net/finetune.h"
#include "ops/kernel_profile.h"
#include "ops/ops.h"

namespace ember::apps {
namespace {

using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

int64_t count_correct(const Tensor& logits, const Tensor& labels_host) {
  const Tensor pred = ops::argmax(logits).to(Device::cpu());
  const int64_t* p = pred.data<int64_t>();
  const int64_t* y = labels_host.data<int64_t>();
  int64_t correct = 0;
  for (int64_t i = 0; i < pred.numel(); ++i) correct += p[i] == y[i];
  return correct;
}

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

// Running totals between two log lines.
struct Interval {
  int64_t samples = 0, correct = 0, batches = 0;
  double loss_sum = 0;
  Clock::time_point start = Clock::now();
  void reset() { *this = Interval(); }
};

// bf16 training's scaler: a fixed scale of 1 (no loss scaling), which still
// skips and counts steps with inf/NaN gradients and ends a run of them.
net::LossScalerOptions unit_loss_scale(net::LossScalerOptions o) {
  o.fixed_scale = 1.0;
  return o;
}

// The backward of the (scaled) loss; a scale of 1 adds no op.
void backward_scaled(const Tensor& loss, double scale) {
  (scale == 1.0 ? loss : ops::scale(loss, scale)).backward();
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
  source.start_epoch(0);
  data::Batch b;
  double correct = 0, top5 = 0, total = 0;
  int64_t classes = 0;
  while (source.next(b)) {
    const Tensor logits = model(b.images.to(device));
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
  net::SGD opt(model.named_parameters(), o.sgd, mixed ? net::convert_to_half(model, o.precision) : net::Masters{});
  net::LossScaler scaler(scaled ? o.loss_scaler : unit_loss_scale(o.loss_scaler));
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
  const net::LrSchedule schedule(so);

  if (o.begin_epoch > 0 && !o.model_prefix.empty()) {
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

  FitResult result;
  const auto fit_start = Clock::now();
  int64_t global_step = int64_t(o.begin_epoch) * steps_per_epoch;
  model.train();
  for (int epoch = o.begin_epoch; epoch < o.num_epochs; ++epoch) {
    const auto epoch_start = Clock::now();
    if (split) set_backbone(epoch);
    train.start_epoch(epoch);
    if (const int size = train.image_size(epoch); size > 0 && (epoch == o.begin_epoch || size != train.image_size(epoch - 1)))
      std::fprintf(o.log, "Epoch[%d] Image size=%d\n", epoch, size);
    Interval interval;
    int64_t epoch_samples = 0, epoch_correct = 0, batch_index = 0;
    data::Batch b;
    while (train.next(b)) {
      const Tensor x = b.images.to(o.device), y = b.labels.to(o.device);
      const Tensor logits = model(x);
      const Tensor loss = ops::cross_entropy(logits, y, o.label_smoothing);  // f32 in both precisions
      opt.zero_grad();
      const double lr = schedule.lr_at(global_step);
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

      const double loss_value = loss.item();
      EMBER_CHECK(mixed || std::isfinite(loss_value), "training diverged at Epoch[", epoch, "] Batch [", batch_index,
                  "]: loss is ", loss_value, " (lr ", lr, "); try a lower --lr or more --warmup-epochs");
      const int64_t correct = count_correct(logits, b.labels);
      interval.samples += b.size;
      interval.correct += correct;
      if (std::isfinite(loss_value)) interval.loss_sum += loss_value * double(b.size);
      ++interval.batches;
      epoch_samples += b.size;
      epoch_correct += correct;
      ++batch_index;
      if (batch_index % o.disp_batches == 0) {
        const auto g = global({double(interval.samples), double(interval.correct), interval.loss_sum});
        const double dt = seconds_since(interval.start);
        std::fprintf(o.log,
                     "Epoch[%d] Batch [%lld-%lld]\tSpeed: %.2f samples/sec\taccuracy=%.6f\tcross-entropy=%.6f\t"
                     "lr=%.6g%s\n",
                     epoch, (long long)(batch_index - interval.batches), (long long)batch_index, g[0] / dt,
                     g[1] / g[0], g[2] / g[0], lr,
                     progress_precision(o.precision, scaler).c_str());
        std::fflush(o.log);
        interval.reset();
      }
    }
    const auto epoch_totals = global({double(epoch_samples), double(epoch_correct)});
    result.train_accuracy = epoch_totals[1] / std::max(1.0, epoch_totals[0]);
    std::fprintf(o.log, "Epoch[%d] Train-accuracy=%.6f\n", epoch, result.train_accuracy);
    std::fprintf(o.log, "Epoch[%d] Time cost=%.3f\n", epoch, seconds_since(epoch_start));
    if (scaled)
      std::fprintf(o.log, "Epoch[%d] Loss-scale=%g Skipped-steps=%lld\n", epoch, scaler.scale(),
                   (long long)scaler.skipped_steps());
    else if (mixed)
      std::fprintf(o.log, "Epoch[%d] Skipped-steps=%lld\n", epoch, (long long)scaler.skipped_steps());
    if (comm && !o.sync_bn) net::dist::average_buffers(*comm, model);  // one model to validate and save
    if (val) {
      const Accuracy a = evaluate_accuracy(model, *val, o.device, comm);
      result.validation_accuracy = a.top1;
      std::fprintf(o.log, "Epoch[%d] Validation-accuracy=%.6f\n", epoch, a.top1);
      if (a.classes > 5) {
        result.validation_top5 = a.top5;
        std::fprintf(o.log, "Epoch[%d] Validation-top_k_accuracy_5=%.6f\n", epoch, a.top5);
      }
    }
    if (!o.model_prefix.empty() && rank0) {
      std::map<std::string, std::string> meta(o.checkpoint_metadata.begin(), o.checkpoint_metadata.end());
      meta["epoch"] = std::to_string(epoch + 1);
      if (val) meta["validation_accuracy"] = std::to_string(result.validation_accuracy);
      const std::string path = net::checkpoint_path(o.model_prefix, epoch + 1);
      if (mixed) meta["precision"] = cat(scaled ? "fp16" : "bf16", " (f32 master weights saved)");
      net::save_model(path, model, meta, opt.masters());
      net::save_optimizer(net::optimizer_state_path(o.model_prefix, epoch + 1), opt);
      std::fprintf(o.log, "Saved checkpoint to \"%s\"\n", path.c_str());
    }
    std::fflush(o.log);
  }
  result.seconds = seconds_since(fit_start);
  result.steps = global_step;
  result.skipped_steps = mixed ? scaler.skipped_steps() : 0;
  result.loss_scale = mixed ? scaler.scale() : 1.0;
  if (reducer) result.comm = reducer->stats();
  return result;
}

BenchmarkResult benchmark(net::Module& model, const BenchmarkOptions& o) {
  EMBER_CHECK(o.batches > 0 && o.disp_batches > 0, "benchmark: need positive batch counts");
  // Fixed synthetic batch: random pixels and labels, as MXNet's --benchmark.
  Tensor images = Tensor::empty({o.batch_size, o.channels, o.height, o.width}, DType::u8);
  Tensor labels = Tensor::empty({o.batch_size}, DType::i64);
  PhiloxStream rng(o.seed, 0x5eed);
  for (int64_t i = 0; i < images.numel(); ++i) images.data<uint8_t>()[i] = uint8_t(rng.next_u32());
  for (int64_t i = 0; i < o.batch_size; ++i) labels.data<int64_t>()[i] = int64_t(rng.below(uint64_t(o.num_classes)));
  const Tensor x = images.to(o.device), y = labels.to(o.device);

  EMBER_CHECK(o.precision == DType::f32 || is_16bit_float(o.precision), "--precision: fp32, fp16 or bf16, got ",
              dtype_name(o.precision));
  const bool mixed = is_16bit_float(o.precision);
  net::dist::Comm* comm = o.comm && o.comm->world_size() > 1 ? o.comm : nullptr;
  const int world = comm ? comm->world_size() : 1;
  if (comm) net::dist::broadcast_module(*comm, model);
  net::SGD opt(model.named_parameters(), o.sgd, mixed ? net::convert_to_half(model, o.precision) : net::Masters{});
  std::unique_ptr<net::dist::Reducer> reducer;
  if (comm) {
    reducer = std::make_unique<net::dist::Reducer>(*comm, model.named_parameters(), o.buckets);
    std::fprintf(o.log, "Data-parallel: %d ranks over %s, %s\n", world, comm->backend(), reducer->describe().c_str());
  }
  net::LossScaler scaler(o.precision == DType::f16 ? net::LossScalerOptions{} : unit_loss_scale({}));
  model.train();
  auto step = [&] {
    const Tensor loss = ops::cross_entropy(model(x), y);
    opt.zero_grad();
    if (reducer) reducer->prepare();
    if (mixed) {
      backward_scaled(loss, scaler.scale());
      if (reducer) reducer->finish();
      scaler.update(opt.step_if_finite(o.lr, 1.0 / scaler.scale()));
    } else {
      loss.backward();
      if (reducer) reducer->finish();
      opt.step(o.lr);
    }
    (void)loss.item();  // wait for the step to finish (a device sync on GPUs)
  };
  for (int i = 0; i < o.warmup_batches; ++i) step();
  reset_kernel_profile();  // a --profile table covers the timed steps only
  if (reducer) reducer->reset_stats();
  std::vector<double> speeds;
  for (int done = 0; done < o.batches;) {
    const int n = std::min(o.disp_batches, o.batches - done);
    const auto t0 = Clock::now();
    for (int i = 0; i < n; ++i) step();
    const double speed = double(n) * double(o.batch_size) * double(world) / seconds_since(t0);
    speeds.push_back(speed);
    std::fprintf(o.log, "Batch [%d-%d]\tSpeed: %.2f samples/sec\n", done, done + n, speed);
    std::fflush(o.log);
    done += n;
  }
  std::sort(speeds.begin(), speeds.end());
  BenchmarkResult r;
  r.median_speed = speeds[speeds.size() / 2];
  if (reducer) r.comm = reducer->stats();
  return r;
}

TestIoResult test_io(BatchSource& source, int epochs, int disp_batches, std::FILE* log) {
  EMBER_CHECK(epochs > 0 && disp_batches > 0, "test-io: need positive epochs and --disp-batches");
  std::vector<double> speeds;
  TestIoResult result;
  int64_t steady_samples = 0;
  double steady_seconds = 0;
  data::Batch b;
  for (int epoch = 0; epoch < epochs; ++epoch) {
    const auto epoch_start = Clock::now();
    source.start_epoch(epoch);
    if (const int size = source.image_size(epoch); size > 0 && (epoch == 0 || size != source.image_size(epoch - 1)))
      std::fprintf(log, "Epoch[%d] Image size=%d\n", epoch, size);
    Interval interval;
    int64_t batch_index = 0, samples = 0;
    while (source.next(b)) {
      interval.samples += b.size;
      samples += b.size;
      ++interval.batches;
      if (++batch_index % disp_batches == 0) {
        const double speed = double(interval.samples) / seconds_since(interval.start);
        speeds.push_back(speed);
        std::fprintf(log, "Epoch[%d] Batch [%lld-%lld]\tSpeed: %.2f samples/sec\n", epoch,
                     (long long)(batch_index - interval.batches), (long long)batch_index, speed);
        std::fflush(log);
        interval.reset();
      }
    }
    const double seconds = seconds_since(epoch_start);
    std::fprintf(log, "Epoch[%d] Time cost=%.3f\t%lld samples, %.2f samples/sec\n", epoch, seconds, (long long)samples,
                 double(samples) / seconds);
    if (epoch > 0 || epochs == 1) steady_samples += samples, steady_seconds += seconds;
  }
  result.epoch_speed = steady_seconds > 0 ? double(steady_samples) / steady_seconds : 0;
  std::sort(speeds.begin(), speeds.end());
  // Epochs shorter than --disp-batches print no interval: use the epoch rate.
  result.median_interval_speed = speeds.empty() ? result.epoch_speed : speeds[speeds.size() / 2];
  return result;
}

}  // namespace ember::apps
