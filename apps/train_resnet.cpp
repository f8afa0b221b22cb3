// apps/train_resnet.cpp — train a ResNet from scratch (MXNet's train_*.py).
//
//   build/train_resnet --network resnet --num-layers 20 --dataset fashion-mnist
//   build/train_resnet --num-layers 50 --data-train train.erec --data-val val.erec --gpus 0
//   build/train_resnet --data-train train.erec --test-io 1          # the loader alone
//   build/train_resnet --benchmark 1 --num-layers 50 --image-shape 3,224,224
//   build/train_resnet --nproc 2 ...        data-parallel: two workers here
//   RANK=0 WORLD_SIZE=2 MASTER_ADDR=host0 build/train_resnet ...  (one per host)
//
// Builds the model, the data source (Fashion-MNIST in memory, or record
// files through the threaded loader) and the optimizer from the flags,
// prints a start line with every setting, and hands over to fit()
// (apps/common/fit.h), which prints the MXNet-style progress lines and
// saves a checkpoint per epoch. In a data-parallel run each rank does the
// same on its shard of the data (apps/common/distributed.h); only rank 0
// prints and saves.
#include <cstdio>
#include <sstream>
#include <string>
#include <thread>

#if defined(EMBER_CUDA)
#include "cuda/cuda_device.h"
#endif

#include "apps/common/distributed.h"
#include "apps/common/fit.h"
#include "apps/common/flags.h"
#include "apps/common/nccl_factory.h"
#include "data/fashion_mnist.h"
#include "data/image_loader.h"
#include "data/record_file.h"
#include "engine/parallel.h"
#include "net/checkpoint.h"
#include "net/dist/data_parallel.h"
#include "net/resnet.h"
#include "ops/kernel_profile.h"

namespace {

using namespace ember;

struct Settings {
  // model
  std::string network = "resnet";
  int num_layers = 20;
  int64_t num_classes = 0;
  bool zero_init_residual = false;
  // data
  std::string dataset = "fashion-mnist";
  std::string data_train, data_val;  // record files: then --dataset is ignored
  int data_nthreads = 0;
  bool test_io = false;
  std::string size_schedule;
  bool random_resized_crop = true;  // record data only
  double min_random_area = 0.08, max_random_area = 1.0;
  double min_random_aspect_ratio = 0.75, max_random_aspect_ratio = 4.0 / 3.0;
  int val_resize = 0;
  bool skip_bad = false;
  std::string rgb_mean, rgb_std;
  std::string data_dir = data::kFashionMnistDir;
  int64_t num_examples = 0;
  int64_t num_val_examples = 0;
  bool random_crop = true;
  bool random_mirror = true;
  int pad_size = 2;
  // optimisation
  int64_t batch_size = 128;
  int num_epochs = 10;
  double lr = 0.2;
  double mom = 0.9;
  double wd = 5e-4;
  bool nesterov = true;
  std::string lr_schedule = "onecycle";
  std::vector<int> lr_step_epochs;
  double lr_factor = 0.1;
  double warmup_epochs = 0;
  double label_smoothing = 0.1;
  std::string precision = "fp32";
  double loss_scale = 0;
  int64_t scale_window = 2000;
  // run
  int disp_batches = 50;
  std::string model_prefix;
  int load_epoch = 0;
  int64_t seed = 0;
  int threads = 0;
  bool benchmark = false;
  std::string image_shape;
  int num_batches = 30;
  bool profile = false;
  // devices
  std::vector<int> gpus;  // one worker per listed GPU
  std::string conv = "cudnn";
  bool cudnn_benchmark = false;
  apps::DistSettings dist;
};

void declare(apps::Flags& f, Settings& s) {
  f.group("model");
  f.add("network", &s.network, "network family (resnet)");
  f.add("num-layers", &s.num_layers, "depth: 18, 34, 50, 101, 152 (ImageNet-style) or 20, 32, 44, 56, 110 (CIFAR-style)");
  f.add("num-classes", &s.num_classes, "classes of the classifier (0: from the data set)");
  f.add("zero-init-residual", &s.zero_init_residual, "start the last BN of every block at gamma = 0 (Goyal et al.)");
  f.group("data");
  f.add("dataset", &s.dataset, "data set (fashion-mnist)");
  f.add("data-dir", &s.data_dir, "directory with the data set's files");
  f.add("num-examples", &s.num_examples, "train on the first N training images only (0: all)");
  f.add("num-val-examples", &s.num_val_examples, "validate on the first N test images only (0: all)");
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
  f.add("rgb-mean", &s.rgb_mean, "per-channel mean in 0-255 (default: the data set's; ImageNet's for 3 channels)");
  f.add("rgb-std", &s.rgb_std, "per-channel standard deviation in 0-255");
  f.add("random-crop", &s.random_crop, "random crop after zero padding by --pad-size");
  f.add("random-mirror", &s.random_mirror, "random horizontal flip");
  f.add("pad-size", &s.pad_size, "padding for --random-crop, in pixels");
  f.group("optimisation");
  f.add("batch-size", &s.batch_size, "images per step");
  f.add("num-epochs", &s.num_epochs, "epochs to train");
  f.add("lr", &s.lr, "(peak) learning rate");
  f.add("mom", &s.mom, "momentum");
  f.add("wd", &s.wd, "weight decay (not applied to batch-norm parameters and biases)");
  f.add("nesterov", &s.nesterov, "Nesterov momentum");
  f.add("lr-schedule", &s.lr_schedule, "step, cosine or onecycle");
  f.add("lr-step-epochs", &s.lr_step_epochs, "step schedule: epochs at which lr *= --lr-factor, e.g. 30,60");
  f.add("lr-factor", &s.lr_factor, "step schedule: multiplier at each step epoch");
  f.add("warmup-epochs", &s.warmup_epochs, "linear warm-up epochs (step and cosine schedules)");
  f.add("label-smoothing", &s.label_smoothing, "label smoothing of the cross-entropy loss");
  f.add("precision", &s.precision, "fp32, or fp16: f16 weights and activations, f32 master weights and loss scaling");
  f.add("loss-scale", &s.loss_scale, "fp16: a fixed loss scale (0: dynamic, from 2^16)");
  f.add("scale-window", &s.scale_window, "fp16: clean steps before the dynamic loss scale doubles");
  f.group("run");
  f.add("disp-batches", &s.disp_batches, "print speed and accuracy every N batches");
  f.add("model-prefix", &s.model_prefix, "save PREFIX-EEEE.safetensors after every epoch (empty: do not save)");
  f.add("load-epoch", &s.load_epoch, "resume from PREFIX-EEEE.safetensors of this epoch (0: start fresh)");
  f.add("seed", &s.seed, "seed of initialisation, shuffling and augmentation");
  f.add("threads", &s.threads, "CPU threads (0: all cores, shared out among the ranks on this host)");
  f.add("benchmark", &s.benchmark, "1: time training steps on synthetic data and print img/s only");
  f.add("image-shape", &s.image_shape, "input C,H,W: record data's output (default 3,224,224), or the benchmark's");
  f.add("num-batches", &s.num_batches, "benchmark: timed batches (after 3 warm-up batches)");
  f.add("profile", &s.profile, "1: time every CPU kernel call and print a table by kernel and dtype at the end");
  f.group("devices");
  f.add("gpus", &s.gpus, "GPUs to train on, e.g. 0, or 0,1,2,3 for one worker per GPU (empty: the CPU)");
  f.add("conv", &s.conv, "GPU convolution, batch norm, pooling and GEMM: cudnn (cuDNN/cuBLAS) or native (ember's kernels)");
  f.add("cudnn-benchmark", &s.cudnn_benchmark, "time cuDNN's convolution algorithms per shape instead of its heuristics");
  apps::declare_dist_flags(f, s.dist);
}

// The device to train on: the CPU, or this worker's GPU of --gpus (CUDA set up).
Device select_device(const Settings& s, int local_rank, std::FILE* out) {
  if (s.gpus.empty()) return Device::cpu();
  const std::vector<int>& gpus = s.gpus;
  EMBER_CHECK(local_rank < int(gpus.size()), "--gpus lists ", gpus.size(),
              " devices but this is local rank ", local_rank, ": list one GPU per worker on this host");
  const int index = gpus[size_t(local_rank)];
#if defined(EMBER_CUDA)
  cuda::init(index, cuda::parse_conv_backend(s.conv), /*pinned_host=*/true);
  cuda::set_cudnn_benchmark(s.cudnn_benchmark);
  std::fprintf(out, "device: cuda:%d %s, --conv %s\n", index, cuda::device_name(index).c_str(), s.conv.c_str());
  return Device::cuda(index);
#else
  (void)out, (void)index;
  fail("--gpus: this build of ember has no CUDA (nvcc was not found when it was built)");
#endif
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

void validate(const Settings& s) {
  EMBER_CHECK(s.network == "resnet", "--network ", s.network, " is not supported (resnet)");
  EMBER_CHECK(s.batch_size > 0, "--batch-size must be positive");
  EMBER_CHECK(s.num_epochs > 0, "--num-epochs must be positive");
  EMBER_CHECK(s.disp_batches > 0, "--disp-batches must be positive");
  EMBER_CHECK(s.pad_size >= 0, "--pad-size must be >= 0");
  EMBER_CHECK(s.num_examples >= 0, "--num-examples must be >= 0");
  EMBER_CHECK(s.num_val_examples >= 0, "--num-val-examples must be >= 0");
  EMBER_CHECK(s.load_epoch >= 0, "--load-epoch must be >= 0");
  EMBER_CHECK(s.load_epoch == 0 || !s.model_prefix.empty(), "--load-epoch needs --model-prefix");
  EMBER_CHECK(s.threads >= 0, "--threads must be >= 0");
  EMBER_CHECK(s.num_batches > 0, "--num-batches must be positive");
  EMBER_CHECK(s.conv == "cudnn" || s.conv == "native", "unknown --conv '", s.conv, "' (native or cudnn)");
  EMBER_CHECK(s.data_nthreads >= 0, "--data-nthreads must be >= 0");
  EMBER_CHECK(s.precision == "fp32" || s.precision == "fp16", "--precision '", s.precision, "': fp32 or fp16");
  EMBER_CHECK(s.loss_scale >= 0, "--loss-scale must be >= 0 (0: dynamic)");
  EMBER_CHECK(s.scale_window > 0, "--scale-window must be positive");
  EMBER_CHECK(s.data_val.empty() || !s.data_train.empty(), "--data-val needs --data-train");
  EMBER_CHECK(s.min_random_area > 0 && s.min_random_area <= s.max_random_area && s.max_random_area <= 1,
              "--min-random-area/--max-random-area must satisfy 0 < min <= max <= 1");
  EMBER_CHECK(s.min_random_aspect_ratio > 0 && s.min_random_aspect_ratio <= s.max_random_aspect_ratio,
              "--min-random-aspect-ratio/--max-random-aspect-ratio must satisfy 0 < min <= max");
  for (int g : s.gpus) EMBER_CHECK(g >= 0, "--gpus: device indices are >= 0, got ", g);
  apps::validate_dist_settings(s.dist);
}

// The model's input normalisation: --rgb-mean/--rgb-std (0-255) or defaults.
ChannelNorm make_norm(const Settings& s, int channels, std::vector<double> mean, std::vector<double> std) {
  if (!s.rgb_mean.empty()) mean = apps::parse_number_list(s.rgb_mean, "rgb-mean");
  if (!s.rgb_std.empty()) std = apps::parse_number_list(s.rgb_std, "rgb-std");
  EMBER_CHECK(int(mean.size()) == channels && int(std.size()) == channels, "--rgb-mean/--rgb-std need ", channels,
              " values (one per channel), got ", mean.size(), " and ", std.size());
  ChannelNorm n;
  n.channels = channels;
  for (int c = 0; c < channels; ++c) {
    EMBER_CHECK(std[size_t(c)] > 0, "--rgb-std values must be positive");
    n.mean[c] = float(mean[size_t(c)] / 255.0);
    n.inv_std[c] = float(255.0 / std[size_t(c)]);
  }
  return n;
}

// Where batches come from, and what the model must accept.
struct TrainingData {
  data::ImageSet train_set, val_set;  // Fashion-MNIST in memory
  std::unique_ptr<data::BatchIterator> train_it, val_it;
  std::unique_ptr<data::RecordDataset> train_records, val_records;  // record files
  std::unique_ptr<data::ImageLoader> train_loader, val_loader;
  std::unique_ptr<apps::BatchSource> train, val;
  int64_t channels = 0, image_size = 0, num_classes = 0;
  ChannelNorm norm;
  std::string description;
};

std::unique_ptr<TrainingData> fashion_mnist_data(const Settings& s, int rank, int world) {
  EMBER_CHECK(s.dataset == "fashion-mnist", "--dataset ", s.dataset,
              " is not built in (fashion-mnist); use --data-train with record files");
  auto d = std::make_unique<TrainingData>();
  d->train_set = data::load_fashion_mnist(s.data_dir, true);
  d->val_set = data::load_fashion_mnist(s.data_dir, false);
  if (s.num_examples > 0 && s.num_examples < d->train_set.count)
    d->train_set = data::subset(d->train_set, 0, s.num_examples);
  if (s.num_val_examples > 0 && s.num_val_examples < d->val_set.count)
    d->val_set = data::subset(d->val_set, 0, s.num_val_examples);
  data::BatchIterator::Options io;
  io.batch_size = s.batch_size;
  io.pad = s.random_crop ? s.pad_size : 0;
  io.flip = s.random_mirror;
  io.seed = uint64_t(s.seed);
  io.rank = rank, io.world = world;
  d->train_it = std::make_unique<data::BatchIterator>(d->train_set, io);
  data::BatchIterator::Options vo;
  vo.batch_size = 500;
  vo.shuffle = false;
  vo.rank = rank, vo.world = world, vo.even_shards = false;  // each test image once over all ranks
  d->val_it = std::make_unique<data::BatchIterator>(d->val_set, vo);
  d->train = std::make_unique<apps::IteratorSource>(*d->train_it);
  d->val = std::make_unique<apps::IteratorSource>(*d->val_it);
  d->channels = d->train_set.channels;
  d->image_size = std::min(d->train_set.height, d->train_set.width);
  d->num_classes = d->train_set.num_classes;
  // Fashion-MNIST's pixel statistics (training set): mean 0.2860, std 0.3530.
  d->norm = make_norm(s, 1, {0.2860 * 255}, {0.3530 * 255});
  d->description = cat(d->train_set.name, " (", d->train_set.count, " images), validation ", d->val_set.name, " (",
                       d->val_set.count, " images)");
  return d;
}

std::unique_ptr<TrainingData> record_data(const Settings& s, int rank, int world) {
  auto d = std::make_unique<TrainingData>();
  const auto shape = parse_image_shape(s.image_shape.empty() ? "3,224,224" : s.image_shape);
  EMBER_CHECK(shape[0] == 1 || shape[0] == 3, "--image-shape: record data has 1 or 3 channels, got ", shape[0]);
  EMBER_CHECK(shape[1] == shape[2], "--image-shape: record data is cropped square, got ", shape[1], "x", shape[2]);
  d->channels = shape[0];
  d->image_size = shape[1];
  data::LoaderOptions lo;
  lo.batch_size = s.batch_size;
  lo.threads = s.data_nthreads > 0 ? s.data_nthreads : int(std::thread::hardware_concurrency());
  lo.seed = uint64_t(s.seed);
  lo.rank = rank, lo.world = world;
  lo.channels = int(shape[0]);
  lo.output_size = int(shape[1]);
  if (!s.size_schedule.empty()) lo.size_schedule = data::parse_size_schedule(s.size_schedule);
  lo.augment = s.random_resized_crop ? data::Augment::random_resized_crop
                                     : (s.random_crop ? data::Augment::pad_crop : data::Augment::none);
  lo.min_area = s.min_random_area, lo.max_area = s.max_random_area;
  lo.min_ratio = s.min_random_aspect_ratio, lo.max_ratio = s.max_random_aspect_ratio;
  lo.pad = s.pad_size;
  lo.flip = s.random_mirror;
  lo.val_resize = s.val_resize;
  lo.skip_bad = s.skip_bad;
  d->train_records = std::make_unique<data::RecordDataset>(s.data_train);
  d->num_classes = d->train_records->num_classes();
  EMBER_CHECK(d->num_classes > 0 || s.num_classes > 0, s.data_train,
              ": the records carry no class count; give --num-classes");
  if (s.num_classes > 0) {
    EMBER_CHECK(d->num_classes == 0 || d->num_classes == s.num_classes, "--num-classes ", s.num_classes,
                " does not match ", s.data_train, "'s ", d->num_classes, " classes");
    d->num_classes = s.num_classes;
  }
  d->train_loader = std::make_unique<data::ImageLoader>(*d->train_records, lo);
  d->train = std::make_unique<apps::LoaderSource>(*d->train_loader);
  d->description = cat(s.data_train, ": ", d->train_records->describe());
  if (!s.data_val.empty()) {
    d->val_records = std::make_unique<data::RecordDataset>(s.data_val);
    data::LoaderOptions vo = lo;
    vo.validation = true;
    vo.shuffle = false;
    vo.even_shards = false;  // each validation image once over all ranks
    d->val_loader = std::make_unique<data::ImageLoader>(*d->val_records, vo);
    d->val = std::make_unique<apps::LoaderSource>(*d->val_loader);
    d->description += cat(", validation ", s.data_val, ": ", d->val_records->describe());
  }
  // ImageNet's statistics for colour images; the middle grey otherwise.
  d->norm = d->channels == 3 ? make_norm(s, 3, {123.675, 116.28, 103.53}, {58.395, 57.12, 57.375})
                             : make_norm(s, 1, {127.5}, {63.75});
  return d;
}

int run_benchmark(const Settings& s, Device device, const apps::DistRun& dist) {
  apps::BenchmarkOptions b;
  const auto shape = s.image_shape.empty() ? std::vector<int64_t>{1, 28, 28} : parse_image_shape(s.image_shape);
  b.channels = shape[0], b.height = shape[1], b.width = shape[2];
  b.num_classes = s.num_classes > 0 ? s.num_classes : (s.image_shape.empty() ? 10 : 1000);
  b.batch_size = s.batch_size;
  b.batches = s.num_batches;
  b.disp_batches = std::min(s.disp_batches, s.num_batches);
  b.lr = s.lr;
  b.sgd = {s.mom, s.wd, s.nesterov};
  b.seed = uint64_t(s.seed);
  b.device = device;
  b.precision = s.precision == "fp16" ? DType::f16 : DType::f32;
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
  std::FILE* out = dist.log;
  if (dist.env.world > 1 && s.dist.sync_bn)
    net::set_sync_batch_norm(model, net::dist::make_batch_norm_sync(*dist.comm));
  std::fprintf(out, "benchmark: %s, batch %lld%s, input %lldx%lldx%lld, %s, synthetic data\n", model.describe().c_str(),
               (long long)b.batch_size,
               dist.env.world > 1 ? cat(" per rank x ", dist.env.world, " ranks").c_str() : "", (long long)b.channels,
               (long long)b.height, (long long)b.width, s.precision.c_str());
  const apps::BenchmarkResult r = apps::benchmark(model, b);  // resets the kernel profile after its warm-up
  std::fprintf(out, "Median speed: %.2f samples/sec\n", r.median_speed);
  if (dist.env.world > 1 && r.comm.steps > 0)
    std::fprintf(out, "All-reduce: %.1f ms per step, %.1f ms of it exposed (%.0f%% hidden behind backward)\n",
                 1e3 * r.comm.comm_seconds / double(r.comm.steps), 1e3 * r.comm.exposed_seconds / double(r.comm.steps),
                 100.0 * r.comm.hidden_share());
  if (s.profile) print_kernel_profile(out);
  return 0;
}

int run(int argc, char** argv) {
  Settings s;
  apps::Flags flags("train_resnet", "Train a ResNet from scratch on the CPU or a GPU (MXNet-style flags).");
  declare(flags, s);
  if (!flags.parse(argc, argv)) return 0;
  validate(s);
  const int gpu_count = int(s.gpus.size());
  if (apps::should_launch_workers(s.dist, gpu_count))
    return apps::run_local_workers(apps::workers_to_launch(s.dist, gpu_count), s.dist, argv);

  const net::dist::LaunchEnv env = apps::launch_env(s.dist);
  // Ranks on one host share its cores (torchrun would set OMP_NUM_THREADS).
  set_num_threads(s.threads > 0 ? s.threads : std::max(1, int(std::thread::hardware_concurrency()) / env.local_world));
  std::FILE* out = apps::rank_log(env.rank);
  const Device device = s.test_io ? Device::cpu() : select_device(s, env.local_rank, out);
  apps::NcclFactory nccl;
#if defined(EMBER_CUDA) && defined(EMBER_NCCL)
  nccl = apps::nccl_comm_factory();
#endif
  // --test-io runs this rank's shard of the loader alone: no communicator.
  const apps::DistRun dist = s.test_io ? apps::DistRun{env, nullptr, {}, out}
                                       : apps::start_distributed(s.dist, env, !device.is_cpu(), device.index, nccl);
  out = dist.log;
  std::fprintf(out, "Start training with: %s\n", flags.settings().c_str());
  std::fprintf(out, "threads=%d\n", num_threads());
  if (env.world > 1)
    std::fprintf(out, "data-parallel: %d ranks (%s), rendezvous %s:%d, kv-store %s; global batch %lld = --batch-size %lld x %d\n",
                 env.world, env.source.c_str(), env.master_addr.c_str(), env.master_port,
                 dist.comm ? dist.comm->backend() : "none", (long long)(s.batch_size * env.world), (long long)s.batch_size,
                 env.world);
  EMBER_CHECK(!s.profile || device.is_cpu(), "--profile times CPU kernels only (on a GPU use Nsight Systems)");
  set_kernel_profiling(s.profile);
  if (s.benchmark) {
    run_benchmark(s, device, dist);
    apps::finish_distributed();
    return 0;
  }

  const auto d = s.data_train.empty() ? fashion_mnist_data(s, env.rank, env.world) : record_data(s, env.rank, env.world);
  std::fprintf(out, "data: %s\n", d->description.c_str());
  if (s.test_io) {
    const apps::TestIoResult r = apps::test_io(*d->train, s.num_epochs, s.disp_batches, out);
    std::fprintf(out, "Median speed: %.2f samples/sec\n", r.median_interval_speed);
    std::fprintf(out, "Epoch speed: %.2f samples/sec (whole epochs%s)\n", r.epoch_speed,
                 s.num_epochs > 1 ? " after the first" : "");
    if (d->train_loader && d->train_loader->bad_records() > 0)
      std::fprintf(out, "skipped %lld bad records\n", (long long)d->train_loader->bad_records());
    return 0;
  }

  net::ResNetConfig cfg;
  cfg.num_layers = s.num_layers;
  cfg.zero_init_residual = s.zero_init_residual;
  cfg.num_classes = d->num_classes;
  cfg.in_channels = d->channels;
  cfg.image_size = d->image_size;
  cfg.input_norm = d->norm;
  Generator gen(uint64_t(s.seed));
  net::ResNet model(cfg, gen);
  std::fprintf(out, "model: %s\n", model.describe().c_str());
  if (s.load_epoch > 0) {
    // Every rank reads the checkpoint (a shared file system, or a copy on each host); rank 0's is then broadcast.
    const std::string path = net::checkpoint_path(s.model_prefix, s.load_epoch);
    net::load_model(path, model);
    std::fprintf(out, "Loaded model from \"%s\"; resuming at Epoch[%d]\n", path.c_str(), s.load_epoch);
  }
  model.to(device);
  const bool sync_bn = env.world > 1 && s.dist.sync_bn;
  if (sync_bn) net::set_sync_batch_norm(model, net::dist::make_batch_norm_sync(*dist.comm));

  apps::FitOptions fo;
  fo.num_epochs = s.num_epochs;
  fo.begin_epoch = s.load_epoch;
  fo.lr = s.lr;
  fo.sgd = {s.mom, s.wd, s.nesterov};
  fo.schedule.kind = net::parse_lr_schedule(s.lr_schedule);
  fo.schedule.step_epochs = s.lr_step_epochs;
  fo.schedule.factor = s.lr_factor;
  fo.schedule.warmup_epochs = s.warmup_epochs;
  fo.label_smoothing = s.label_smoothing;
  fo.disp_batches = s.disp_batches;
  fo.model_prefix = s.model_prefix;
  fo.device = device;
  fo.log = out;
  fo.precision = s.precision == "fp16" ? DType::f16 : DType::f32;
  fo.loss_scaler.fixed_scale = s.loss_scale;
  fo.loss_scaler.window = s.scale_window;
  fo.comm = dist.comm;
  fo.buckets = dist.buckets;
  fo.sync_bn = sync_bn;
  fo.checkpoint_metadata = {{"network", "resnet"},
                            {"num_layers", std::to_string(s.num_layers)},
                            {"dataset", s.data_train.empty() ? s.dataset : s.data_train},
                            {"producer", "ember train_resnet"}};
  if (env.world > 1) fo.checkpoint_metadata.push_back({"world_size", std::to_string(env.world)});
  const apps::FitResult r = apps::fit(model, *d->train, d->val.get(), fo);
  std::fprintf(out, "Finished %d epochs in %.1f s: Train-accuracy=%.6f Validation-accuracy=%.6f\n",
               s.num_epochs - s.load_epoch, r.seconds, r.train_accuracy, r.validation_accuracy);
  if (env.world > 1 && r.comm.steps > 0)
    std::fprintf(out, "All-reduce: %.1f ms per step, %.1f ms of it exposed (%.0f%% hidden behind backward)\n",
                 1e3 * r.comm.comm_seconds / double(r.comm.steps), 1e3 * r.comm.exposed_seconds / double(r.comm.steps),
                 100.0 * r.comm.hidden_share());
  if (s.profile) print_kernel_profile(out);
  if (fo.precision == DType::f16)
    std::fprintf(out, "fp16: final loss scale %g, %lld of %lld steps skipped\n", r.loss_scale, (long long)r.skipped_steps,
                 (long long)r.steps);
  if (d->train_loader && d->train_loader->bad_records() > 0)
    std::fprintf(out, "skipped %lld bad records\n", (long long)d->train_loader->bad_records());
  std::fflush(out);
  apps::finish_distributed();
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const std::exception& e) {  // ember::Error and anything the standard library throws
    return apps::report_fatal("train_resnet", e);
  }
}
