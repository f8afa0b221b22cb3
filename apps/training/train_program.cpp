// apps/training/train_program.cpp — the flow of a training program: workers,
// device, data, model, fit (or --benchmark / --test-io).
#include "apps/training/train_program.h"

#include <cstdlib>
#include <optional>

#include "apps/training/bench_timing.h"
#include "apps/training/checkpoint_mismatch.h"
#include "apps/training/distributed.h"
#include "engine/parallel.h"
#include "net/checkpoint.h"
#include "net/dist/data_parallel.h"
#include "net/json.h"
#include "net/safetensors.h"
#include "ops/cpu/conv/conv_bf16_kernels.h"
#include "ops/cpu/conv/conv_winograd.h"
#include "ops/cpu/gemm/gemm_isa.h"
#include "ops/kernel_profile.h"

namespace ember::apps {
namespace {

// The command that resumes this run: the same arguments without --resume /
// --load-epoch, plus --resume auto (shell-quoted where needed).
std::string resume_command(int argc, char** argv, const std::string& model_prefix, bool prefix_given) {
  auto quote = [](const std::string& a) {
    if (!a.empty() && a.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_./=,:+") ==
                          std::string::npos)
      return a;
    std::string q = "'";
    for (char c : a) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
    return q + "'";
  };
  std::string cmd = quote(argv[0]);
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    const bool with_value = a == "--resume" || a == "--load-epoch";
    if (with_value || a.rfind("--resume=", 0) == 0 || a.rfind("--load-epoch=", 0) == 0) {
      if (with_value) ++i;
      continue;
    }
    cmd += ' ';
    cmd += quote(a);
  }
  if (!prefix_given) {
    cmd += " --model-prefix ";
    cmd += quote(model_prefix);
  }
  cmd += " --resume auto";
  return cmd;
}

std::string fixed6(double v) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.6f", v);
  return buf;
}

// "123.675,116.28,103.53": the normalisation's mean (or std) in 0-255, for checkpoint metadata.
std::string norm_text(const ChannelNorm& n, bool mean) {
  std::string s;
  for (int c = 0; c < n.channels; ++c) {
    char buf[32];
    std::snprintf(buf, sizeof(buf), "%.7g", mean ? double(n.mean[c]) * 255.0 : 255.0 / double(n.inv_std[c]));
    if (c > 0) s += ',';
    s += buf;
  }
  return s;
}

// --profile 1's tables (kernel_profile.h); the convolutions' share of this
// CPU's FMA peak when the CPU ran them (a ~0.1 s measurement).
void print_profile(std::FILE* out) {
  print_kernel_profile(out, conv_layer_profile().empty() ? 0.0 : cpu_fma_peak_gflops());
}

// --benchmark's input shape and classes: --image-shape (else Fashion-MNIST's) and --num-classes.
std::vector<int64_t> benchmark_shape(const TrainSettings& s) {
  return s.image_shape.empty() ? std::vector<int64_t>{1, 28, 28} : parse_image_shape(s.image_shape);
}
int64_t benchmark_classes(const TrainSettings& s) {
  return s.num_classes > 0 ? s.num_classes : (s.image_shape.empty() ? 10 : 1000);
}

// The run's first line: what it trains on ("training resnet-20 on Fashion-MNIST (...)").
std::string headline(const TrainProgram& program, const TrainSettings& s, const TrainingData* d) {
  if (s.benchmark) {
    const auto shape = benchmark_shape(s);
    return cat("benchmarking resnet-", s.num_layers, " on synthetic data (", shape[0], "x", shape[1], "x", shape[2],
               ", ", benchmark_classes(s), " classes)");
  }
  if (s.test_io) return cat("testing the loader alone (--test-io 1) on ", d->summary);
  return cat(program.verb, " resnet-", s.num_layers, " on ", d->summary);
}

int run_benchmark(const TrainSettings& s, Device device, const DistRun& dist) {
  BenchmarkOptions b;
  const auto shape = benchmark_shape(s);
  b.channels = shape[0], b.height = shape[1], b.width = shape[2];
  b.num_classes = benchmark_classes(s);
  b.batch_size = s.batch_size;
  b.batches = s.num_batches;
  b.disp_batches = std::min(s.disp_batches, s.num_batches);
  b.lr = s.lr;
  b.sgd = {s.mom, s.wd, s.nesterov};
  b.seed = uint64_t(s.seed);
  b.device = device;
  b.precision = precision_dtype(s.precision);
  b.cuda_graph = s.cuda_graph;
  b.comm = dist.comm;
  b.buckets = dist.buckets;
  b.log = dist.log;
  net::ResNetConfig cfg;
  cfg.num_layers = s.num_layers;
  cfg.num_classes = b.num_classes;
  cfg.in_channels = b.channels;
  cfg.image_size = std::min(b.height, b.width);
  cfg.input_norm.channels = int(b.channels);
  for (int c = 0; c < int(b.channels) && c < 8; ++c) cfg.input_norm.mean[c] = 0.5f, cfg.input_norm.inv_std[c] = 4.0f;
  Generator gen(uint64_t(s.seed));
  net::ResNet model(cfg, gen);
  model.to(device);
  model.to_memory_format(layout_format(s.gpu));
  std::FILE* out = dist.log;
  if (dist.env.world > 1 && s.dist.sync_bn)
    net::set_sync_batch_norm(model, net::dist::make_batch_norm_sync(*dist.comm));
  std::fprintf(out, "benchmark: %s, batch %lld%s, input %lldx%lldx%lld, %s, synthetic data\n", model.describe().c_str(),
               (long long)b.batch_size,
               dist.env.world > 1 ? cat(" per rank x ", dist.env.world, " ranks").c_str() : "", (long long)b.channels,
               (long long)b.height, (long long)b.width, s.precision.c_str());
  const BenchmarkResult r = benchmark(model, b);  // resets the kernel profile after its warm-up
  std::fprintf(out, "Median speed: %.2f samples/sec\n", r.median_speed);
  if (!device.is_cpu())
    std::fprintf(out, "Peak device memory: %.0f MiB (tensors and workspaces in use, as torch.cuda.max_memory_allocated)\n",
                 double(device_peak_bytes(device)) / 1048576.0);
  if (dist.env.world > 1 && r.comm.steps > 0)
    std::fprintf(out, "All-reduce: %.1f ms per step, %.1f ms of it exposed (%.0f%% hidden behind backward)\n",
                 1e3 * r.comm.comm_seconds / double(r.comm.steps), 1e3 * r.comm.exposed_seconds / double(r.comm.steps),
                 100.0 * r.comm.hidden_share());
  if (s.profile && device.is_cpu()) print_profile(out);
  if (s.profile && !device.is_cpu() && r.timed_steps > 0) {
    const DeviceWorkCounts& w = r.step_work;
    const double n = double(r.timed_steps);
    std::fprintf(out,
                 "Device work per step: %.1f launches (%.1f kernels, %.1f cuDNN/cuBLAS calls, %.1f copies, "
                 "%.1f CUDA graphs), %.2f host waits (over %lld timed steps)\n",
                 double(w.launches()) / n, double(w.kernels) / n, double(w.library_calls) / n, double(w.copies) / n,
                 double(w.graphs) / n, double(w.host_waits) / n, (long long)r.timed_steps);
  }
  return 0;
}

}  // namespace

int run_train_program(const TrainProgram& program, int argc, char** argv) {
  TrainSettings s;
  if (program.defaults) program.defaults(s);
  Flags flags(program.name, program.summary);
  declare_train_flags(flags, s);
  if (program.declare_flags) program.declare_flags(flags);
  if (!flags.parse(argc, argv)) return 0;
  validate_train_settings(s);
  const std::vector<std::string> flag_warnings = check_data_flags(s, flags);
  if (program.validate) program.validate(s);
  const int gpu_count = int(s.gpus.size());
  if (should_launch_workers(s.dist, gpu_count))
    return run_local_workers(workers_to_launch(s.dist, gpu_count), s.dist, argv);

  const net::dist::LaunchEnv env = launch_env(s.dist);
  // Ranks on one host share its cores, as --nproc's do (torchrun would set OMP_NUM_THREADS).
  const ThreadShare threads = rank_threads(s.threads, env, available_cores(), std::getenv("OMP_NUM_THREADS"));
  set_num_threads(threads.threads);
  std::string device_line;
  const Device device = s.test_io ? Device::cpu() : select_device(s, env.local_rank, &device_line);
  const NcclFactory& nccl = program.nccl;
  // --test-io runs this rank's shard of the loader alone: no communicator.
  const DistRun dist = s.test_io ? DistRun{env, nullptr, {}, rank_log(env.rank)}
                                       : start_distributed(s.dist, env, !device.is_cpu(), device.index, nccl);
  std::FILE* out = dist.log;
  // After the communicator: an error here reaches the other ranks (report_fatal).
  const std::string adopted = program.adopt ? program.adopt(s, flags) : std::string();
  // The data comes first: the first line says what the run trains on.
  const std::unique_ptr<TrainingData> d = s.benchmark ? nullptr : make_training_data(s, env.rank, env.world);
  std::fprintf(out, "%s\n", headline(program, s, d.get()).c_str());
  if (!adopted.empty()) std::fprintf(out, "%s\n", adopted.c_str());
  for (const std::string& w : flag_warnings) std::fprintf(out, "warning: %s\n", w.c_str());
  if (d) {
    for (const std::string& n : d->notes) std::fprintf(out, "%s\n", n.c_str());
    for (const std::string& w : d->warnings) std::fprintf(out, "warning: %s\n", w.c_str());
  }
  // The default recipe's lr and epochs (--lr 0, --num-epochs 0), fixed first so that the start line shows them.
  const std::string recipe = resolve_default_recipe(s, env.world, d ? d->train->batches_per_epoch() : 0);
  // On record data the built-in data set's name would mislead in the settings line.
  if (!s.data_train.empty() && !flags.was_set("dataset")) s.dataset.clear();
  std::fprintf(out, "Start training with: %s\n", flags.settings().c_str());
  if (!recipe.empty()) std::fprintf(out, "%s\n", recipe.c_str());
  if (device.is_cpu())  // what ran: EMBER_CPU_ISA and EMBER_CPU_CONV change these (docs/cpu_backend.md)
    std::fprintf(out, "threads=%d (%s), CPU GEMM kernels %s, convolution policy %s%s%s\n", num_threads(),
                 threads.why.c_str(), cpu::gemm_isa_name(cpu::active_gemm_isa()),
                 cpu::conv_policy_description().c_str(), s.precision == "bf16" ? ", bf16 convolutions in " : "",
                 s.precision == "bf16" ? cpu::bf16_conv_kernels_description().c_str() : "");
  else
    std::fprintf(out, "threads=%d (%s)\n%s\n", num_threads(), threads.why.c_str(), device_line.c_str());
  if (env.world > 1)
    std::fprintf(out, "data-parallel: %d ranks (%s), rendezvous %s:%d, kv-store %s; global batch %lld = --batch-size %lld x %d\n",
                 env.world, env.source.c_str(), env.master_addr.c_str(), env.master_port,
                 dist.comm ? dist.comm->backend() : "none", (long long)(s.batch_size * env.world), (long long)s.batch_size,
                 env.world);
  EMBER_CHECK(!s.profile || device.is_cpu() || s.benchmark,
              "--profile on a GPU counts the device work of --benchmark 1 steps (for kernel times use Nsight Systems)");
  set_kernel_profiling(s.profile);
  if (s.benchmark) {
    run_benchmark(s, device, dist);
    finish_distributed();
    return 0;
  }

  std::fprintf(out, "data: %s\n", d->description.c_str());
  if (s.test_io) {
    const TestIoResult r = test_io(*d->train, s.num_epochs, s.disp_batches, out);
    std::fprintf(out, "Median speed: %.2f samples/sec\n", r.median_interval_speed);
    std::fprintf(out, "Epoch speed: %.2f samples/sec (whole epochs%s)\n", r.epoch_speed,
                 s.num_epochs > 1 ? " after the first" : "");
    if (d->train_loader && d->train_loader->bad_records() > 0)
      std::fprintf(out, "skipped %lld bad records\n", (long long)d->train_loader->bad_records());
    return 0;
  }

  FitOptions fo;
  // --resume: the latest complete checkpoint of the prefix.
  std::optional<FoundCheckpoint> resume;
  const bool prefix_given = !s.model_prefix.empty();
  if (!s.resume.empty()) {
    const std::string prefix = s.resume == "auto" ? s.model_prefix : s.resume;
    resume = find_latest_checkpoint(prefix, out);
    if (!resume) {
      EMBER_CHECK(s.resume == "auto", "--resume ", prefix, ": no complete checkpoint (", prefix,
                  "-EEEE[-BBBBBB].safetensors with its .states.safetensors)");
      std::fprintf(out, "--resume auto: no checkpoint of %s yet; starting fresh\n", prefix.c_str());
    } else {
      if (s.model_prefix.empty()) s.model_prefix = prefix;  // new checkpoints continue the series
      const TrainingPosition& p = resume->position;
      if (p.complete && p.seed != s.seed)
        std::fprintf(out, "warning: --seed %lld differs from the checkpoint's %lld: the data order will not continue "
                     "as it was\n", (long long)s.seed, (long long)p.seed);
      if (p.complete && p.batch_size != s.batch_size)
        std::fprintf(out, "warning: --batch-size %lld differs from the checkpoint's %lld: the run will not continue "
                     "exactly\n", (long long)s.batch_size, (long long)p.batch_size);
      if (device.is_cpu()) adopt_cpu_choices(p.cpu, resume->states_path, out);
    }
  }
  // A resumed model is rebuilt as it was trained: its head's pooling is in
  // the checkpoint's metadata (a different depth or class count is an error
  // naming the tensor when it loads).
  const std::string load_path = resume ? resume->model_path
                                : s.load_epoch > 0 ? net::checkpoint_path(s.model_prefix, s.load_epoch)
                                                   : std::string();
  if (!load_path.empty()) {
    const auto meta = load_safetensors(load_path).metadata;
    if (const auto it = meta.find("pool"); it != meta.end() && it->second != s.pool) {
      std::fprintf(out, "%s was trained with --pool %s: building the head so\n", load_path.c_str(), it->second.c_str());
      s.pool = it->second;
    }
    if (const auto it = meta.find("variant"); it != meta.end() && it->second != s.variant) {
      std::fprintf(out, "%s is a %s ResNet: building it so\n", load_path.c_str(), it->second.c_str());
      s.variant = it->second;
    }
  }
  net::ResNetConfig cfg;
  cfg.num_layers = s.num_layers;
  cfg.zero_init_residual = s.zero_init_residual;
  cfg.num_classes = d->num_classes;
  cfg.in_channels = d->channels;
  cfg.image_size = d->image_size;
  cfg.input_norm = d->norm;
  cfg.pool = net::parse_head_pool(s.pool, "--pool");
  cfg.variant = net::parse_resnet_variant(s.variant, "--variant");
  cfg.dropout = s.dropout;
  if (program.configure) program.configure(cfg, s, *d, out);
  Generator gen(uint64_t(s.seed));
  net::ResNet model(cfg, gen);
  std::fprintf(out, "model: %s\n", model.describe().c_str());
  if (program.prepare) program.prepare(model, s.load_epoch > 0 || resume.has_value(), fo, out);
  if (resume) {
    load_resume_checkpoint(resume->model_path, model);
    std::fprintf(out, "Loaded model from \"%s\"\n", resume->model_path.c_str());
    fo.resume = &resume->position;
    fo.resume_model = resume->model_path;
    fo.resume_states = resume->states_path;
  } else if (s.load_epoch > 0) {
    // Every rank reads the checkpoint (a shared file system, or a copy on each host); rank 0's is then broadcast.
    const std::string path = net::checkpoint_path(s.model_prefix, s.load_epoch);
    load_resume_checkpoint(path, model);
    std::fprintf(out, "Loaded model from \"%s\"; resuming at Epoch[%d]\n", path.c_str(), s.load_epoch);
  }
  model.to(device);
  model.to_memory_format(layout_format(s.gpu));
  const bool sync_bn = env.world > 1 && s.dist.sync_bn;
  if (sync_bn) net::set_sync_batch_norm(model, net::dist::make_batch_norm_sync(*dist.comm));

  fo.num_epochs = s.num_epochs;
  fo.begin_epoch = s.load_epoch;
  fo.lr = effective_lr(s, env.world);
  if (s.lr_scaling == "linear")
    std::fprintf(out, "lr %g per 256 images x global batch %lld / 256 = %g (--lr-scaling linear)\n", s.lr,
                 (long long)(s.batch_size * env.world), fo.lr);
  fo.sgd = {s.mom, s.wd, s.nesterov};
  fo.schedule.kind = net::parse_lr_schedule(s.lr_schedule);
  fo.schedule.step_epochs = s.lr_step_epochs;
  fo.schedule.factor = s.lr_factor;
  fo.schedule.warmup_epochs = s.warmup_epochs;
  if (const std::vector<double> moms = parse_moms(s.moms); !moms.empty()) {
    fo.schedule.cycle_momentum = true;
    fo.schedule.max_momentum = moms[0];
    fo.schedule.base_momentum = moms[1];
    fo.sgd.momentum = moms[0];  // the first step's
  }
  fo.label_smoothing = s.label_smoothing;
  fo.mix = {s.mixup_alpha, s.cutmix_alpha};
  fo.input_norm = cfg.input_norm;
  fo.disp_batches = s.disp_batches;
  fo.model_prefix = s.model_prefix;
  fo.device = device;
  fo.log = out;
  fo.precision = precision_dtype(s.precision);
  fo.cuda_graph = s.cuda_graph;
  fo.loss_scaler.fixed_scale = s.loss_scale;
  fo.loss_scaler.window = s.scale_window;
  fo.comm = dist.comm;
  fo.buckets = dist.buckets;
  fo.sync_bn = sync_bn;
  fo.seed = uint64_t(s.seed);
  fo.checkpoint_steps = s.checkpoint_steps;
  fo.keep_checkpoints = s.keep_checkpoints;
  fo.target_accuracy = s.target_accuracy;
  fo.metrics_path = s.metrics;
  fo.progress = choose_progress_mode(s.quiet, out);
  fo.command_line = flags.settings();
  fo.resume_command = resume_command(argc, argv, s.model_prefix, prefix_given);
  StopSignals stop_signals;  // Ctrl-C and SIGTERM: save after the current step (from here to the end of fit)
  fo.stop = &stop_signals;
  // What rebuilds the model and its input (predict, finetune_resnet, PyTorch).
  const std::vector<std::pair<std::string, std::string>> produced = {
      {"network", "resnet"},
      {"num_layers", std::to_string(cfg.num_layers)},
      {"num_classes", std::to_string(cfg.num_classes)},
      {"in_channels", std::to_string(cfg.in_channels)},
      {"width", std::to_string(model.conv1->weight.shape()[0])},
      {"stem_kernel", std::to_string(model.conv1->weight.shape()[2])},
      {"pool", net::head_pool_name(cfg.pool)},
      {"variant", net::resnet_variant_name(cfg.variant)},
      {"dropout", cat(cfg.dropout)},
      {"image_size", std::to_string(d->image_size)},
      {"val_resize", std::to_string(d->val_resize)},
      {"input_mean", norm_text(cfg.input_norm, true)},
      {"input_std", norm_text(cfg.input_norm, false)},
      {"dataset", s.data_train.empty() ? s.dataset : s.data_train},
      {"lr_schedule", s.lr_schedule},
      {"lr", cat(fo.lr)},
      {"lr_scaling", s.lr_scaling},
      {"moms", s.moms.empty() ? cat(s.mom) : s.moms},
      {"batch_size", std::to_string(s.batch_size)},
      {"num_epochs", std::to_string(s.num_epochs)},
      {"label_smoothing", cat(s.label_smoothing)},
      {"mixup_alpha", cat(s.mixup_alpha)},
      {"cutmix_alpha", cat(s.cutmix_alpha)},
      {"seed", std::to_string(s.seed)},
      {"producer", cat("ember ", program.name)}};
  fo.checkpoint_metadata.insert(fo.checkpoint_metadata.begin(), produced.begin(), produced.end());
  if (!d->class_names.empty() && int64_t(d->class_names.size()) == cfg.num_classes) {
    std::vector<json::Value> names;
    for (const std::string& n : d->class_names) names.emplace_back(n);
    fo.checkpoint_metadata.push_back({"class_names", json::write(json::Value(std::move(names)))});
  }
  if (env.world > 1) fo.checkpoint_metadata.push_back({"world_size", std::to_string(env.world)});
  const FitResult r = fit(model, *d->train, d->val.get(), fo);
  std::string validation;
  if (r.validation_accuracy >= 0) validation += cat(" Validation-accuracy=", fixed6(r.validation_accuracy));
  if (r.validation_top5 >= 0) validation += cat(" Validation-top_k_accuracy_5=", fixed6(r.validation_top5));
  // "epochs" even for one: scripts and tests read this line as it always was.
  if (r.interrupted_by) {
    std::fflush(out);
    finish_distributed();
    return StopSignals::exit_code(r.interrupted_by);
  }
  std::fprintf(out, "Finished %d epochs in %.1f s: Train-accuracy=%.6f%s\n", r.epochs, r.seconds,
               r.train_accuracy, validation.c_str());
  if (env.world > 1 && r.comm.steps > 0)
    std::fprintf(out, "All-reduce: %.1f ms per step, %.1f ms of it exposed (%.0f%% hidden behind backward)\n",
                 1e3 * r.comm.comm_seconds / double(r.comm.steps), 1e3 * r.comm.exposed_seconds / double(r.comm.steps),
                 100.0 * r.comm.hidden_share());
  if (s.profile) print_profile(out);
  if (fo.precision == DType::f16)
    std::fprintf(out, "fp16: final loss scale %g, %lld of %lld steps skipped\n", r.loss_scale, (long long)r.skipped_steps,
                 (long long)r.steps);
  if (fo.precision == DType::bf16)
    std::fprintf(out, "bf16: %lld of %lld steps skipped\n", (long long)r.skipped_steps, (long long)r.steps);
  if (d->train_loader && d->train_loader->bad_records() > 0)
    std::fprintf(out, "skipped %lld bad records\n", (long long)d->train_loader->bad_records());
  if (program.finish && env.rank == 0) program.finish(r, out);
  std::fflush(out);
  finish_distributed();
  return r.interrupted_by ? StopSignals::exit_code(r.interrupted_by) : 0;
}

}  // namespace ember::apps
