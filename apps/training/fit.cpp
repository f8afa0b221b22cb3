// apps/training/fit.cpp — fit(): a training run from start to end. Setting
// up (the 16-bit weights and f32 masters, the optimizer, the fine-tuning
// split, the data-parallel buckets, where a resumed run starts) and the loop
// over epochs. One epoch is fit_epoch.cpp, one step fit_step.cpp,
// evaluation evaluate.cpp, checkpoints fit_checkpoint.cpp (fit_run.h).
#include "apps/training/fit.h"

#include <filesystem>
#include <sys/stat.h>

#include "apps/training/fit_run.h"
#include "net/checkpoint.h"
#include "net/layers.h"
#include "net/dist/data_parallel.h"
#include "net/finetune.h"

namespace ember::apps {

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
  detail::FitRun run(model, train, val, o);
  return run.run();
}

namespace detail {
namespace {

// The options' own checks, before anything is built; the steps in an epoch.
int64_t checked_steps_per_epoch(BatchSource& train, const FitOptions& o) {
  EMBER_CHECK(o.num_epochs > o.begin_epoch, "nothing to train: --num-epochs ", o.num_epochs,
              " is not after the resumed epoch ", o.begin_epoch);
  EMBER_CHECK(o.disp_batches > 0, "--disp-batches must be positive");
  const int64_t steps_per_epoch = train.batches_per_epoch();
  EMBER_CHECK(steps_per_epoch > 0, "the training set gives no batch (", train.samples_per_epoch(),
              " samples per epoch, batch size ", train.batch_size(), ")");
  EMBER_CHECK(o.precision == DType::f32 || is_16bit_float(o.precision), "--precision: fp32, fp16 or bf16, got ",
              dtype_name(o.precision));
  return steps_per_epoch;
}

net::dist::Comm* active_comm(const FitOptions& o) { return o.comm && o.comm->world_size() > 1 ? o.comm : nullptr; }

// Every rank starts from rank 0's weights; in fp16/bf16 the model's weights
// become 16-bit and their f32 copies the optimizer's masters.
net::SGD make_optimizer(net::Module& model, const FitOptions& o) {
  if (net::dist::Comm* comm = active_comm(o)) net::dist::broadcast_module(*comm, model);
  const bool mixed = is_16bit_float(o.precision);
  net::Masters masters = mixed ? net::convert_to_half(model, o.precision) : net::Masters{};
  return net::SGD(model.named_parameters(), o.sgd, std::move(masters));
}

bool file_exists(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0;
}

}  // namespace

FitRun::RestoreF32::~RestoreF32() {
  if (!on) return;
  try {
    net::restore_f32(model, opt.masters());
  } catch (const std::exception& e) {  // cannot happen (same names and shapes); never throw from here
    std::fprintf(stderr, "fit: could not restore the f32 weights: %s\n", e.what());
  }
}

FitRun::FitRun(net::Module& model, BatchSource& train, BatchSource* val, const FitOptions& o)
    : model_(model),
      train_(train),
      val_(val),
      o_(o),
      steps_per_epoch_(checked_steps_per_epoch(train, o)),
      mixed_(is_16bit_float(o.precision)),
      scaled_(o.precision == DType::f16),
      comm_(active_comm(o)),
      rank0_(!comm_ || comm_->rank() == 0),
      opt_(make_optimizer(model, o)),
      scaler_(scaled_ ? o.loss_scaler : unit_loss_scale(o.loss_scaler), o.device),
      restore_{model, opt_, mixed_},
      split_(!o.finetune.head_prefix.empty()),
      bar_(o.log),
      show_lines_(o.progress == ProgressMode::lines),
      show_bar_(o.progress == ProgressMode::bar && rank0_) {
  model_.apply([&](net::Module& m) { has_dropout_ = has_dropout_ || dynamic_cast<net::Dropout*>(&m) != nullptr; });
  announce_precision();
  // Fine-tuning: the backbone's learning-rate multiplier, and its freezing
  // (after the f16 conversion, which makes every parameter trainable).
  const FineTuneOptions& ft = o_.finetune;
  EMBER_CHECK(ft.backbone_lr_mult >= 0, "--backbone-lr-mult must be >= 0, got ", ft.backbone_lr_mult);
  if (split_ && ft.backbone_lr_mult != 1.0)
    opt_.set_lr_multipliers(
        [&](const std::string& name) { return net::in_head(name, ft.head_prefix) ? 1.0 : ft.backbone_lr_mult; });
  if (split_)
    set_backbone(o_.begin_epoch);
  else
    start_reducer();
  if (o_.cuda_graph) {
    EMBER_CHECK(!o_.device.is_cpu(), "--cuda-graph 1 is for GPUs (add --gpus)");
    EMBER_CHECK(!comm_, "--cuda-graph 1 runs one process; data-parallel runs are not captured");
    EMBER_CHECK(!o_.mix.enabled(), "--cuda-graph 1 does not capture --mixup-alpha/--cutmix-alpha (each batch's mix is a host value)");
    EMBER_CHECK(!has_dropout_, "--cuda-graph 1 does not capture --dropout (each step's mask key is a host value)");
    graph_ = std::make_unique<StepGraph>(model_, opt_, o_.device);
    graph_totals_ = Tensor::zeros({2}, DType::f64, o_.device);
    std::fprintf(o_.log, "CUDA graph: every full step after the first replays the second, captured\n");
  }
  schedule_options_ = o_.schedule;
  schedule_options_.base_lr = o_.lr;
  schedule_options_.steps_per_epoch = steps_per_epoch_;
  schedule_options_.num_epochs = o_.num_epochs;
  schedule_options_.momentum = o_.sgd.momentum;
  schedule_.emplace(schedule_options_);
  find_start();
  check_outputs();
  metrics_.emplace(rank0_ ? o_.metrics_path : std::string());
  if (metrics_->enabled())
    metrics_->write({{"kind", "start"},
                     {"wall_time", metric(start_.elapsed_seconds)},
                     {"step", start_.global_step},
                     {"epoch", start_.epoch},
                     {"resumed", o_.resume != nullptr},
                     {"args", o_.command_line}});
  run_start_ = Clock::now();
  last_checkpoint_ = o_.resume ? o_.resume_model : std::string();
}

void FitRun::announce_precision() const {
  if (scaled_)
    std::fprintf(o_.log, "Mixed precision: f16 weights and activations, f32 masters; loss scale %g (%s)\n",
                 scaler_.scale(), scaler_.dynamic() ? "dynamic" : "fixed");
  else if (mixed_)
    std::fprintf(o_.log,
                 "Mixed precision: bf16 weights and activations, f32 masters; no loss scaling (bf16 has f32's "
                 "exponent range), steps with inf/NaN gradients are skipped\n");
}

// Data-parallel: buckets over the parameters that get gradients, hooked on
// the tensors backward will reach (after the f16 conversion).
void FitRun::start_reducer() {
  if (!comm_) return;
  std::vector<net::NamedParameter> trainable;
  for (auto& p : model_.named_parameters())
    if (p.tensor->requires_grad()) trainable.push_back(p);
  reducer_ = std::make_unique<net::dist::Reducer>(*comm_, trainable, o_.buckets);
  std::fprintf(o_.log, "Data-parallel: %d ranks over %s, %s%s\n", comm_->world_size(), comm_->backend(),
               reducer_->describe().c_str(), o_.sync_bn ? ", synchronised batch norm" : "");
}

// Fine-tuning: freezes or unfreezes the backbone as `epoch` asks, and
// rebuilds the buckets over what now trains.
void FitRun::set_backbone(int epoch) {
  const FineTuneOptions& ft = o_.finetune;
  const bool frozen = ft.frozen_at(epoch);
  if (int(frozen) == backbone_state_) return;
  reducer_.reset();  // its hooks come off before the set of trainable tensors changes
  const net::BackboneSplit bs = net::set_backbone_frozen(model_, ft.head_prefix, frozen);
  if (frozen) {
    std::fprintf(o_.log,
                 "Epoch[%d] Backbone frozen: %lld tensors (%.2fM parameters) get no gradients and no optimizer "
                 "state; its %lld batch norms keep their running statistics. Training the head %s* (%lld tensors, "
                 "%lld parameters)%s\n",
                 epoch, (long long)bs.backbone_parameters, double(bs.backbone_elements) / 1e6,
                 (long long)bs.backbone_batch_norms, ft.head_prefix.c_str(), (long long)bs.head_parameters,
                 (long long)bs.head_elements,
                 ft.unfreeze_epoch > 0 ? cat(" until Epoch[", ft.unfreeze_epoch, "]").c_str() : "");
  } else {
    std::fprintf(o_.log, "Epoch[%d] Backbone %s: all %lld tensors train%s\n", epoch,
                 backbone_state_ == 1 ? "unfrozen" : "trainable",
                 (long long)(bs.backbone_parameters + bs.head_parameters),
                 ft.backbone_lr_mult != 1.0 ? cat(", backbone at lr x ", ft.backbone_lr_mult).c_str() : "");
  }
  backbone_state_ = frozen;
  start_reducer();
  if (graph_) graph_->reset();  // other parameters train now: a new arena, a new capture
}

// Where training starts: a resumed position (--resume), the start of
// --load-epoch, or the beginning.
void FitRun::find_start() {
  start_.epoch = o_.begin_epoch;
  start_.global_step = int64_t(o_.begin_epoch) * steps_per_epoch_;
  if (o_.resume) {
    start_ = *o_.resume;
    if (!start_.complete) start_.global_step = int64_t(start_.epoch) * steps_per_epoch_ + start_.batch;
    EMBER_CHECK(start_.epoch < o_.num_epochs, "nothing to resume: the checkpoint is at Epoch[", start_.epoch,
                "] and --num-epochs is ", o_.num_epochs, " (train longer with a larger --num-epochs)");
    EMBER_CHECK(start_.batch <= steps_per_epoch_, "the checkpoint is at batch ", start_.batch, " of Epoch[",
                start_.epoch, "], but an epoch now has ", steps_per_epoch_,
                " batches (was --batch-size or the data changed?)");
    if (!o_.resume_states.empty()) {
      net::load_optimizer(o_.resume_states, opt_);
      if (start_.complete)
        scaler_.restore(start_.loss_scale, start_.scaler_clean, start_.scaler_skipped, start_.scaler_consecutive);
    }
    std::fprintf(o_.log, "Resuming at Epoch[%d] Batch [%lld] (step %lld, %.1f s trained so far)\n", start_.epoch,
                 (long long)start_.batch, (long long)start_.global_step, start_.elapsed_seconds);
  } else if (o_.begin_epoch > 0 && !o_.model_prefix.empty()) {
    const std::string states = net::optimizer_state_path(o_.model_prefix, o_.begin_epoch);
    if (file_exists(states)) {
      net::load_optimizer(states, opt_);
      std::fprintf(o_.log, "Resumed optimizer state from \"%s\" (%lld steps)\n", states.c_str(),
                   (long long)opt_.steps());
    } else {
      std::fprintf(o_.log, "No optimizer state at \"%s\": momentum restarts from zero\n", states.c_str());
    }
  }
}

// Checks of what the run will write, before the first step rather than
// after the first epoch.
void FitRun::check_outputs() const {
  if (!o_.model_prefix.empty() && rank0_) {
    const std::filesystem::path dir = std::filesystem::path(o_.model_prefix).parent_path();
    std::error_code ec;
    if (!dir.empty()) std::filesystem::create_directories(dir, ec);
    EMBER_CHECK(!ec, "--model-prefix ", o_.model_prefix, ": cannot create directory ", dir.string(), ": ",
                ec.message());
  }
  EMBER_CHECK(o_.checkpoint_steps >= 0, "--checkpoint-steps must be >= 0");
  EMBER_CHECK(o_.checkpoint_steps == 0 || !o_.model_prefix.empty(), "--checkpoint-steps needs --model-prefix");
  EMBER_CHECK(o_.target_accuracy >= 0 && o_.target_accuracy <= 1, "--target-accuracy must be in [0, 1], got ",
              o_.target_accuracy);
  EMBER_CHECK(o_.target_accuracy == 0 || val_, "--target-accuracy needs a validation set");
}

std::vector<double> FitRun::global(std::vector<double> v) const {
  return comm_ ? net::dist::sum_over_ranks(*comm_, v) : v;
}

// The loop over epochs: each trains (fit_epoch.cpp), then validates and
// saves; a signal or a reached target accuracy ends it early.
FitResult FitRun::run() {
  global_step_ = start_.global_step;
  lr_ = schedule_->lr_at(global_step_);
  momentum_ = schedule_->momentum_at(global_step_);
  // On a GPU each batch is uploaded during the step before it (mixup and
  // cutmix mix on the host, then upload: not ahead).
  batches_.emplace(train_, o_.device, o_.upload_ahead && !o_.mix.enabled());
  model_.train();
  for (int epoch = start_.epoch; epoch < o_.num_epochs && !result_.interrupted_by; ++epoch) {
    EpochState e(o_.device);
    if (graph_) e.stats.share_totals(graph_totals_);
    e.epoch = epoch;
    if (!train_epoch(e)) break;
    if (finish_epoch(e)) break;
  }
  if (o_.target_accuracy > 0 && result_.time_to_target < 0 && !result_.interrupted_by)
    std::fprintf(o_.log, "Target accuracy %.3f not reached in %d epochs (last %.6f)\n", o_.target_accuracy,
                 o_.num_epochs, result_.validation_accuracy);
  result_.seconds = elapsed();
  result_.steps = global_step_;
  const net::LossScaler::Snapshot scaler = scaler_.read();
  result_.skipped_steps = mixed_ ? scaler.skipped : 0;
  result_.loss_scale = mixed_ ? scaler.scale : 1.0;
  result_.last_checkpoint = last_checkpoint_;
  if (reducer_) result_.comm = reducer_->stats();
  return result_;
}

}  // namespace detail
}  // namespace ember::apps
