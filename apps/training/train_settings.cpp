// apps/training/train_settings.cpp — declaring and checking the training flags.
#include "apps/training/train_settings.h"

#include <sstream>

#include "net/lr_schedule.h"
#include "net/resnet.h"

#if defined(EMBER_CUDA) || defined(EMBER_CUDASIM)  // a GPU, or the emulator's (build/train_resnet_sim)
#include "cuda/cuda_device.h"
#endif

namespace ember::apps {

void declare_train_flags(Flags& f, TrainSettings& s) {
  f.group("model");
  f.add("network", &s.network, "network family (resnet)");
  f.add("num-layers", &s.num_layers,
        "depth: 18, 34, 50, 101, 152 (ImageNet-style) or 6n+2: 8, 14, 20, 32, 44, 56, 110 (CIFAR-style); "
        "finetune_resnet: 0 takes the pretrained file's");
  f.add("num-classes", &s.num_classes, "classes of the classifier (0: from the data set)");
  f.add("zero-init-residual", &s.zero_init_residual, "start the last BN of every block at gamma = 0 (Goyal et al.)");
  f.add("variant", &s.variant,
        "the ResNet's structure: torchvision (stride on the 3x3), gluon-v1 (MXNet Gluon's resnet*_v1: stride on the "
        "first 1x1), mxnet-preact (MXNet's resnet.py: pre-activation units); recorded in checkpoints "
        "(finetune_resnet takes the pretrained file's)");
  f.add("pool", &s.pool,
        "the head's pooling: avg, or concat (fc over [global average, global max], fast.ai's concat pooling); "
        "recorded in checkpoints (finetune_resnet keeps the pretrained file's)");
  f.add("dropout", &s.dropout,
        "dropout of the features before the classifier in training (timm's drop_rate; 0: none); its masks follow "
        "(--seed, step), so --resume draws them again");
  f.group("data");
  f.add("dataset", &s.dataset, "data set (fashion-mnist)");
  f.add("classes", &s.classes,
        "train and validate on these classes only, relabelled 0..k-1 in the order given (e.g. 5,6,7,8,9): "
        "Fashion-MNIST's, or the records' (their class names follow; nothing is repacked)");
  f.add("data-dir", &s.data_dir, "directory with the data set's files");
  f.add("num-examples", &s.num_examples, "train on the first N training images (or records) only (0: all)");
  f.add("num-val-examples", &s.num_val_examples, "validate on the first N test images (or records) only (0: all)");
  f.add("data-train", &s.data_train, "training record file(s): a .erec, a comma list, or a directory of shards");
  f.add("data-val", &s.data_val, "validation record file(s), as --data-train");
  f.add("data-nthreads", &s.data_nthreads, "decode threads of the record loader (0: all cores)");
  f.add("test-io", &s.test_io, "1: run the loader alone for --num-epochs and print its speed");
  f.add("size-schedule", &s.size_schedule, "record data: output size by epoch, e.g. 0:128,6:224,16:288");
  f.add("random-resized-crop", &s.random_resized_crop, "record data: random-resized-crop (else --random-crop/--pad-size)");
  f.add("min-random-area", &s.min_random_area, "random-resized-crop: smallest area fraction");
  f.add("max-random-area", &s.max_random_area, "random-resized-crop: largest area fraction");
  f.add("min-random-aspect-ratio", &s.min_random_aspect_ratio, "random-resized-crop: smallest aspect ratio");
  f.add("max-random-aspect-ratio", &s.max_random_aspect_ratio, "random-resized-crop: largest aspect ratio");
  f.add("val-resize", &s.val_resize, "record data: validation short side before the centre crop (0: size * 8/7)");
  f.add("skip-bad", &s.skip_bad, "1: count and skip corrupt records instead of stopping");
  f.add("rgb-mean", &s.rgb_mean,
        "per-channel mean in 0-255 (default: a pretrained file's; else the data set's: Fashion-MNIST 72.93, "
        "record data ImageNet's for 3 channels, 127.5 for 1)");
  f.add("rgb-std", &s.rgb_std,
        "per-channel standard deviation in 0-255 (default as --rgb-mean: 90.015; ImageNet's; 63.75)");
  f.add("random-crop", &s.random_crop, "random crop after zero padding by --pad-size");
  f.add("random-mirror", &s.random_mirror, "random horizontal flip");
  f.add("pad-size", &s.pad_size, "padding for --random-crop, in pixels");
  f.group("optimisation");
  f.add("batch-size", &s.batch_size, "images per step");
  f.add("num-epochs", &s.num_epochs,
        "epochs to train; 0 (train_resnet's default): 10, or more on a small data set so that training takes at "
        "least 100 steps (50 epochs of 200 images at batch 128); the start line shows the value used");
  f.add("lr", &s.lr,
        "(peak) learning rate; 0 (train_resnet's default): 0.1 x global batch / 256, Goyal et al.'s linear "
        "scaling rule (0.05 at batch 128); the start line shows the value used");
  f.add("mom", &s.mom, "momentum");
  f.add("wd", &s.wd, "weight decay (not applied to batch-norm parameters and biases)");
  f.add("nesterov", &s.nesterov, "Nesterov momentum");
  f.add("lr-schedule", &s.lr_schedule, "step, cosine or onecycle");
  f.add("lr-step-epochs", &s.lr_step_epochs, "step schedule: epochs at which lr *= --lr-factor, e.g. 30,60");
  f.add("lr-factor", &s.lr_factor, "step schedule: multiplier at each step epoch");
  f.add("warmup-epochs", &s.warmup_epochs, "linear warm-up epochs (step and cosine schedules)");
  f.add("label-smoothing", &s.label_smoothing, "label smoothing of the cross-entropy loss");
  f.add("lr-scaling", &s.lr_scaling,
        "none, or linear: --lr is per 256 images and is multiplied by the global batch / 256 (Goyal et al.; "
        "the default --lr scales so already)");
  f.add("mixup-alpha", &s.mixup_alpha, "mixup: mix each batch with itself reversed, lam ~ Beta(A, A) (0: off)");
  f.add("cutmix-alpha", &s.cutmix_alpha,
        "cutmix: paste a box of the reversed batch, lam ~ Beta(A, A) (0: off; with --mixup-alpha each step picks one)");
  f.add("moms", &s.moms,
        "onecycle: momentum cycling MAX,MIN, e.g. 0.95,0.85: from MAX down to MIN while the lr rises and back "
        "(fast.ai; PyTorch OneCycleLR's cycle_momentum); empty: constant --mom");
  f.add("precision", &s.precision,
        "fp32; fp16: f16 weights and activations, f32 master weights and loss scaling; bf16: the same in bfloat16, "
        "without loss scaling");
  f.add("loss-scale", &s.loss_scale, "fp16: a fixed loss scale (0: dynamic, from 2^16)");
  f.add("scale-window", &s.scale_window, "fp16: clean steps before the dynamic loss scale doubles");
  f.group("run");
  f.add("disp-batches", &s.disp_batches, "print speed and accuracy every N batches");
  f.add("model-prefix", &s.model_prefix, "save PREFIX-EEEE.safetensors after every epoch (empty: do not save)");
  f.add("load-epoch", &s.load_epoch, "resume from PREFIX-EEEE.safetensors of this epoch (0: start fresh)");
  f.add("checkpoint-steps", &s.checkpoint_steps,
        "also save PREFIX-EEEE-BBBBBB.safetensors every N steps (0: at epoch ends only)");
  f.add("keep-checkpoints", &s.keep_checkpoints,
        "keep only the newest K checkpoints of --model-prefix, deleting older ones (0: keep all)");
  f.add("resume", &s.resume,
        "continue exactly from the latest complete checkpoint of PREFIX (weights, optimizer, loss scale, data "
        "position); auto: of --model-prefix, or start fresh when it has none");
  f.add("target-accuracy", &s.target_accuracy,
        "stop when validation accuracy reaches A (e.g. 0.93) and print the time to reach it (0: off)");
  f.add("metrics", &s.metrics, "append one JSON line per logged step and per epoch to this file (build/plot_metrics draws it)");
  f.add("quiet", &s.quiet, "1: only the per-epoch lines (no progress bar or per-batch lines)");
  f.add("seed", &s.seed, "seed of initialisation, shuffling and augmentation");
  f.add("threads", &s.threads, "CPU threads (0: all cores, shared out among the ranks on this host)");
  f.add("benchmark", &s.benchmark, "1: time training steps on synthetic data and print img/s only");
  f.add("image-shape", &s.image_shape,
        "input C,H,W: record data's output (default: the records' channels and median short side, at most "
        "224; finetune_resnet: the checkpoint's, else 3,224,224; 1,H,W reads colour records as grey), or the "
        "benchmark's; Fashion-MNIST is 1,28,28");
  f.add("num-batches", &s.num_batches, "benchmark: timed batches (after 3 warm-up batches)");
  f.add("profile", &s.profile,
        "1: time every CPU kernel call and print a table by kernel and dtype at the end; on a GPU with --benchmark 1: "
        "kernel launches, cuDNN/cuBLAS calls, copies and host waits per step");
  f.group("devices");
  f.add("gpus", &s.gpus, "GPUs to train on, e.g. 0, or 0,1,2,3 for one worker per GPU (empty: the CPU)");
  f.add("cuda-graph", &s.cuda_graph,
        "1: capture the second training step as one CUDA graph and replay it for every later full step (one GPU, "
        "one process; not with --mixup-alpha, --cutmix-alpha or --dropout). Default 0: which is faster is measured by "
        "scripts/gpu_check.sh");
  declare_gpu_flags(f, s.gpu);
  declare_dist_flags(f, s.dist);
}

// The device to train on: the CPU, or this worker's GPU of --gpus (CUDA set up).
void declare_gpu_flags(Flags& f, GpuOptions& g) {
  f.add("conv", &g.conv, "GPU convolution, batch norm, pooling and GEMM: cudnn (cuDNN/cuBLAS) or native (ember's kernels)");
  f.add("cudnn-benchmark", &g.cudnn_benchmark, "time cuDNN's convolution algorithms per shape instead of its heuristics");
  f.add("cudnn-deterministic", &g.cudnn_deterministic,
        "1: deterministic cuDNN algorithms where there is one (runs repeat bit for bit); 0: the fastest, as PyTorch");
  f.add("cudnn-algo-cache", &g.cudnn_algo_cache,
        "a file keeping cuDNN's algorithm choices per GPU and cuDNN version: read at the start, rewritten when a "
        "shape is timed, so --cudnn-benchmark 1 times each shape once per machine (empty: none)");
  f.add("tf32", &g.tf32,
        "1: f32 convolutions and GEMMs may round inputs to TF32 on tensor cores (sm 80+): cuDNN and cuBLAS, and "
        "the native channels-last convolutions and aligned GEMMs; 0: full f32");
  f.add("layout", &g.layout,
        "GPU activations and convolution weights: nchw, or nhwc (channels-last, what tensor cores read; checkpoints "
        "stay NCHW either way). Default nchw: which is faster per precision is measured by scripts/gpu_check.sh");
}

void validate_gpu_options(const GpuOptions& g, bool on_gpu) {
  EMBER_CHECK(g.conv == "cudnn" || g.conv == "native", "unknown --conv '", g.conv, "' (native or cudnn)");
  EMBER_CHECK(g.layout == "nchw" || g.layout == "nhwc", "unknown --layout '", g.layout, "' (nchw or nhwc)");
  EMBER_CHECK(g.layout == "nchw" || on_gpu,
              "--layout nhwc is for GPUs (add --gpus); the CPU backend computes in NCHW and would only add conversions");
}

MemoryFormat layout_format(const GpuOptions& g) {
  return g.layout == "nhwc" ? MemoryFormat::channels_last : MemoryFormat::contiguous;
}

Device open_gpu(int index, const GpuOptions& o, std::string* line) {
#if defined(EMBER_CUDA) || defined(EMBER_CUDASIM)
  cuda::init(index, cuda::parse_conv_backend(o.conv), /*pinned_host=*/true);
  cuda::set_cudnn_benchmark(o.cudnn_benchmark);
  cuda::set_cudnn_deterministic(o.cudnn_deterministic);
  cuda::set_cudnn_algorithm_cache(o.cudnn_algo_cache);
  cuda::set_tf32(o.tf32);
  *line = cat("device: cuda:", index, " ", cuda::device_name(index), ", --conv ", o.conv, ", --tf32 ", int(o.tf32),
              ", --layout ", o.layout);
  return Device::cuda(index);
#else
  (void)index, (void)o, (void)line;
  fail("--gpus: this build of ember has no CUDA (it was built with CUDA=0, or without nvcc on the PATH)");
#endif
}

Device open_gpu(int index, const GpuOptions& o, std::FILE* out) {
  std::string line;
  const Device device = open_gpu(index, o, &line);
  std::fprintf(out, "%s\n", line.c_str());
  return device;
}

Device select_device(const TrainSettings& s, int local_rank, std::string* line) {
  line->clear();
  if (s.gpus.empty()) return Device::cpu();
  EMBER_CHECK(local_rank < int(s.gpus.size()), "--gpus lists ", s.gpus.size(),
              " devices but this is local rank ", local_rank, ": list one GPU per worker on this host");
  return open_gpu(s.gpus[size_t(local_rank)], s.gpu, line);
}

// "3,224,224" -> {3, 224, 224}
std::vector<int64_t> parse_image_shape(const std::string& text) {
  std::vector<int64_t> dims;
  std::stringstream ss(text);
  std::string item;
  while (std::getline(ss, item, ',')) {
    char* end = nullptr;
    const long v = std::strtol(item.c_str(), &end, 10);
    EMBER_CHECK(!item.empty() && *end == '\0' && v > 0, "--image-shape: '", text, "' is not C,H,W");
    dims.push_back(v);
  }
  EMBER_CHECK(dims.size() == 3, "--image-shape: '", text, "' is not C,H,W");
  return dims;
}

double effective_lr(const TrainSettings& s, int world) {
  const int64_t global_batch = s.batch_size * int64_t(world);
  if (s.lr == 0) return net::linear_scaled_lr(kDefaultLrPer256, global_batch);
  return s.lr_scaling == "linear" ? net::linear_scaled_lr(s.lr, global_batch) : s.lr;
}

std::string resolve_default_recipe(TrainSettings& s, int world, int64_t steps_per_epoch) {
  std::string chosen;
  if (s.lr == 0) {
    const int64_t global_batch = s.batch_size * int64_t(world);
    const double lr = effective_lr(s, world);
    s.lr = s.lr_scaling == "linear" ? kDefaultLrPer256 : lr;  // linear reads --lr per 256 images
    chosen = cat("lr ", lr, " = ", kDefaultLrPer256, " x global batch ", global_batch, " / 256");
  }
  if (s.num_epochs == 0) {
    s.num_epochs = steps_per_epoch > 0 ? net::epochs_for_min_steps(kDefaultMinEpochs, kDefaultMinSteps, steps_per_epoch)
                                       : kDefaultMinEpochs;
    chosen += cat(chosen.empty() ? "" : "; ", s.num_epochs, " epochs");
    if (s.num_epochs > kDefaultMinEpochs)
      chosen += cat(", for at least ", kDefaultMinSteps, " steps at ", steps_per_epoch,
                    steps_per_epoch == 1 ? " step" : " steps", " an epoch");
  }
  return chosen.empty() ? chosen : cat("default recipe: ", chosen, " (--lr, --num-epochs set them)");
}

std::vector<double> parse_moms(const std::string& text) {
  if (text.empty()) return {};
  const std::vector<double> m = parse_number_list(text, "moms");
  EMBER_CHECK(m.size() == 2 && m[1] > 0 && m[1] <= m[0] && m[0] < 1, "--moms '", text,
              "': MAX,MIN with 0 < MIN <= MAX < 1, e.g. 0.95,0.85");
  return m;
}

DType precision_dtype(const std::string& precision) { return parse_float_dtype(precision, "--precision"); }

void validate_train_settings(const TrainSettings& s) {
  EMBER_CHECK(s.network == "resnet", "--network ", s.network, " is not supported (resnet)");
  (void)net::parse_resnet_variant(s.variant, "--variant");
  EMBER_CHECK(s.batch_size > 0, "--batch-size must be positive");
  EMBER_CHECK(s.num_epochs >= 0, "--num-epochs must be positive (0: the default, 10 or more on small data)");
  EMBER_CHECK(s.lr >= 0, "--lr must be positive (0: the default, 0.1 x global batch / 256)");
  EMBER_CHECK(s.disp_batches > 0, "--disp-batches must be positive");
  EMBER_CHECK(s.pad_size >= 0, "--pad-size must be >= 0");
  EMBER_CHECK(s.num_examples >= 0, "--num-examples must be >= 0");
  EMBER_CHECK(s.num_val_examples >= 0, "--num-val-examples must be >= 0");
  EMBER_CHECK(s.load_epoch >= 0, "--load-epoch must be >= 0");
  EMBER_CHECK(s.load_epoch == 0 || !s.model_prefix.empty(), "--load-epoch needs --model-prefix");
  EMBER_CHECK(s.threads >= 0, "--threads must be >= 0");
  EMBER_CHECK(s.num_batches > 0, "--num-batches must be positive");
  validate_gpu_options(s.gpu, !s.gpus.empty());
  if (s.cuda_graph) {
    EMBER_CHECK(s.gpus.size() == 1, "--cuda-graph 1 replays a step on one GPU in one process: give one --gpus, got ",
                s.gpus.size());
    EMBER_CHECK(s.mixup_alpha == 0 && s.cutmix_alpha == 0,
                "--cuda-graph 1 does not capture --mixup-alpha/--cutmix-alpha (each batch's mix is a host value)");
    EMBER_CHECK(s.dropout == 0, "--cuda-graph 1 does not capture --dropout (each step's mask key is a host value)");
  }
  EMBER_CHECK(s.data_nthreads >= 0, "--data-nthreads must be >= 0");
  EMBER_CHECK(s.precision == "fp32" || s.precision == "fp16" || s.precision == "bf16", "--precision '", s.precision,
              "': fp32, fp16 or bf16");
  EMBER_CHECK(s.loss_scale >= 0, "--loss-scale must be >= 0 (0: dynamic)");
  EMBER_CHECK(s.loss_scale == 0 || s.precision == "fp16", "--loss-scale is for --precision fp16 (",
              s.precision == "bf16" ? "bf16 has f32's exponent range and trains without loss scaling" : "fp32 has none",
              ")");
  EMBER_CHECK(s.scale_window > 0, "--scale-window must be positive");
  EMBER_CHECK(s.data_val.empty() || !s.data_train.empty(), "--data-val needs --data-train");
  EMBER_CHECK(s.min_random_area > 0 && s.min_random_area <= s.max_random_area && s.max_random_area <= 1,
              "--min-random-area/--max-random-area must satisfy 0 < min <= max <= 1");
  EMBER_CHECK(s.min_random_aspect_ratio > 0 && s.min_random_aspect_ratio <= s.max_random_aspect_ratio,
              "--min-random-aspect-ratio/--max-random-aspect-ratio must satisfy 0 < min <= max");
  for (int g : s.gpus) EMBER_CHECK(g >= 0, "--gpus: device indices are >= 0, got ", g);
  EMBER_CHECK(s.lr_scaling == "none" || s.lr_scaling == "linear", "--lr-scaling '", s.lr_scaling,
              "': none or linear");
  if (!s.moms.empty()) {
    parse_moms(s.moms);
    EMBER_CHECK(s.lr_schedule == "onecycle", "--moms cycles momentum with --lr-schedule onecycle, not ", s.lr_schedule);
  }
  EMBER_CHECK(s.pool == "avg" || s.pool == "concat", "--pool '", s.pool, "': avg or concat");
  EMBER_CHECK(s.dropout >= 0 && s.dropout < 1, "--dropout must be in [0, 1), got ", s.dropout);
  EMBER_CHECK(s.mixup_alpha >= 0 && s.cutmix_alpha >= 0, "--mixup-alpha and --cutmix-alpha must be >= 0 (0: off)");
  EMBER_CHECK(s.checkpoint_steps >= 0, "--checkpoint-steps must be >= 0");
  EMBER_CHECK(s.checkpoint_steps == 0 || !s.model_prefix.empty() || !s.resume.empty(),
              "--checkpoint-steps needs --model-prefix");
  EMBER_CHECK(s.keep_checkpoints >= 0, "--keep-checkpoints must be >= 0");
  EMBER_CHECK(s.resume != "auto" || !s.model_prefix.empty(), "--resume auto needs --model-prefix");
  EMBER_CHECK(s.resume.empty() || s.load_epoch == 0, "--resume and --load-epoch both say where to start: give one");
  EMBER_CHECK(s.target_accuracy >= 0 && s.target_accuracy <= 1, "--target-accuracy must be in [0, 1] (e.g. 0.93), got ",
              s.target_accuracy);
  validate_dist_settings(s.dist);
}

namespace {

// The flags of `names` that were given, as "--a, --b" ("" when none).
std::string given(const Flags& flags, std::initializer_list<const char*> names) {
  std::string out;
  for (const char* n : names)
    if (flags.was_set(n)) out += cat(out.empty() ? "--" : ", --", n);
  return out;
}

// "--a applies to SCOPE only, and WHY: ignored" (several flags: "apply").
std::string ignored(const std::string& flags, const std::string& scope, const std::string& why) {
  return cat(flags, flags.find(',') != std::string::npos ? " apply to " : " applies to ", scope, " only, and ", why,
             ": ignored");
}

}  // namespace

std::vector<std::string> check_data_flags(const TrainSettings& s, const Flags& flags) {
  std::vector<std::string> warnings;
  if (s.benchmark) return warnings;
  if (s.data_train.empty()) {
    if (!s.image_shape.empty() && parse_image_shape(s.image_shape) != std::vector<int64_t>{1, 28, 28})
      fail(cat("--image-shape ", s.image_shape, ": this run trains on Fashion-MNIST (no --data-train), whose images "
               "are 1x28x28; --image-shape sizes record data (--data-train) and --benchmark 1"));
    const std::string record_only =
        given(flags, {"data-nthreads", "size-schedule", "random-resized-crop", "min-random-area", "max-random-area",
                      "min-random-aspect-ratio", "max-random-aspect-ratio", "val-resize", "skip-bad"});
    if (!record_only.empty())
      warnings.push_back(ignored(record_only, "record data (--data-train)", "this run trains on Fashion-MNIST"));
    return warnings;
  }
  const std::string on_records = cat("this run trains on records ", s.data_train);
  if (const std::string fm = given(flags, {"dataset", "data-dir"}); !fm.empty())
    warnings.push_back(ignored(fm, "Fashion-MNIST", on_records));
  if (s.random_resized_crop) {
    if (const std::string pad = given(flags, {"random-crop", "pad-size"}); !pad.empty())
      warnings.push_back(ignored(pad, "--random-resized-crop 0", "this run takes random-resized crops"));
  } else if (const std::string rrc = given(flags, {"min-random-area", "max-random-area", "min-random-aspect-ratio",
                                                   "max-random-aspect-ratio"});
             !rrc.empty()) {
    warnings.push_back(ignored(rrc, "random-resized crops", "--random-resized-crop 0 turns them off"));
  }
  return warnings;
}

}  // namespace ember::apps
