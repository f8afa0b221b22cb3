// apps/train_resnet.cpp — train a ResNet from scratch (MXNet's train_*.py).
//
//   build/train_resnet --network resnet --num-layers 20 --dataset fashion-mnist
//   build/train_resnet --benchmark 1 --num-layers 50 --image-shape 3,224,224
//
// Builds the model, the data iterators and the optimizer from the flags,
// prints a start line with every setting, and hands over to fit()
// (apps/common/fit.h), which prints the MXNet-style progress lines and
// saves a checkpoint per epoch.
#include <cstdio>
#include <sstream>
#include <string>
#include <thread>

#if defined(EMBER_CUDA)
#include "cuda/cuda_device.h"
#endif

#include "apps/common/fit.h"
#include "apps/common/flags.h"
#include "data/fashion_mnist.h"
#include "engine/parallel.h"
#include "net/checkpoint.h"
#include "net/resnet.h"

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
  // run
  int disp_batches = 50;
  std::string model_prefix;
  int load_epoch = 0;
  int64_t seed = 0;
  int threads = 0;
  bool benchmark = false;
  std::string image_shape;
  int num_batches = 30;
  // devices
  std::string gpus;
  std::string conv = "cudnn";
  bool cudnn_benchmark = false;
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
  f.group("run");
  f.add("disp-batches", &s.disp_batches, "print speed and accuracy every N batches");
  f.add("model-prefix", &s.model_prefix, "save PREFIX-EEEE.safetensors after every epoch (empty: do not save)");
  f.add("load-epoch", &s.load_epoch, "resume from PREFIX-EEEE.safetensors of this epoch (0: start fresh)");
  f.add("seed", &s.seed, "seed of initialisation, shuffling and augmentation");
  f.add("threads", &s.threads, "CPU threads (0: all cores)");
  f.add("benchmark", &s.benchmark, "1: time training steps on synthetic data and print img/s only");
  f.add("image-shape", &s.image_shape, "benchmark input C,H,W (default: the data set's, 1,28,28)");
  f.add("num-batches", &s.num_batches, "benchmark: timed batches (after 3 warm-up batches)");
  f.group("devices");
  f.add("gpus", &s.gpus, "GPU to train on, e.g. 0 (empty: the CPU)");
  f.add("conv", &s.conv, "GPU convolution, batch norm, pooling and GEMM: cudnn (cuDNN/cuBLAS) or native (ember's kernels)");
  f.add("cudnn-benchmark", &s.cudnn_benchmark, "time cuDNN's convolution algorithms per shape instead of its heuristics");
}

// The device to train on: the CPU, or the GPU of --gpus (CUDA set up).
Device select_device(const Settings& s) {
  if (s.gpus.empty()) return Device::cpu();
  char* end = nullptr;
  const long index = std::strtol(s.gpus.c_str(), &end, 10);
  EMBER_CHECK(!s.gpus.empty() && *end == '\0' && index >= 0, "--gpus '", s.gpus,
              "': give one device index, e.g. --gpus 0 (training on several GPUs is not supported yet)");
#if defined(EMBER_CUDA)
  cuda::init(int(index), cuda::parse_conv_backend(s.conv), /*pinned_host=*/true);
  cuda::set_cudnn_benchmark(s.cudnn_benchmark);
  std::printf("device: cuda:%ld %s, --conv %s\n", index, cuda::device_name(int(index)).c_str(), s.conv.c_str());
  return Device::cuda(int(index));
#else
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
  EMBER_CHECK(s.dataset == "fashion-mnist", "--dataset ", s.dataset, " is not supported (fashion-mnist)");
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
}

int run(int argc, char** argv) {
  Settings s;
  apps::Flags flags("train_resnet", "Train a ResNet from scratch on the CPU or a GPU (MXNet-style flags).");
  declare(flags, s);
  if (!flags.parse(argc, argv)) return 0;
  validate(s);
  set_num_threads(s.threads > 0 ? s.threads : int(std::thread::hardware_concurrency()));
  std::printf("Start training with: %s\n", flags.settings().c_str());
  std::printf("threads=%d\n", num_threads());
  const Device device = select_device(s);

  Generator gen(uint64_t(s.seed));
  net::ResNetConfig cfg;
  cfg.num_layers = s.num_layers;
  cfg.zero_init_residual = s.zero_init_residual;
  // Fashion-MNIST's pixel statistics (training set): mean 0.2860, std 0.3530.
  cfg.input_norm.channels = 1;
  cfg.input_norm.mean[0] = 0.2860f;
  cfg.input_norm.inv_std[0] = 1.0f / 0.3530f;

  if (s.benchmark) {
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
    cfg.num_classes = b.num_classes;
    cfg.in_channels = b.channels;
    cfg.image_size = std::min(b.height, b.width);
    cfg.input_norm.channels = int(b.channels);
    for (int c = 0; c < int(b.channels) && c < 8; ++c) cfg.input_norm.mean[c] = 0.5f, cfg.input_norm.inv_std[c] = 4.0f;
    net::ResNet model(cfg, gen);
    model.to(device);
    std::printf("benchmark: %s, batch %lld, input %lldx%lldx%lld, synthetic data\n", model.describe().c_str(),
                (long long)b.batch_size, (long long)b.channels, (long long)b.height, (long long)b.width);
    const double median = apps::benchmark(model, b);
    std::printf("Median speed: %.2f samples/sec\n", median);
    return 0;
  }

  data::ImageSet train_set = data::load_fashion_mnist(s.data_dir, true);
  data::ImageSet val_set = data::load_fashion_mnist(s.data_dir, false);
  if (s.num_examples > 0 && s.num_examples < train_set.count) train_set = data::subset(train_set, 0, s.num_examples);
  if (s.num_val_examples > 0 && s.num_val_examples < val_set.count)
    val_set = data::subset(val_set, 0, s.num_val_examples);
  EMBER_CHECK(s.num_classes == 0 || s.num_classes == train_set.num_classes, "--num-classes ", s.num_classes,
              " does not match ", train_set.name, "'s ", train_set.num_classes, " classes");
  cfg.num_classes = train_set.num_classes;
  cfg.in_channels = train_set.channels;
  cfg.image_size = std::min(train_set.height, train_set.width);
  net::ResNet model(cfg, gen);
  std::printf("model: %s\n", model.describe().c_str());
  std::printf("data: %s (%lld images), validation %s (%lld images)\n", train_set.name.c_str(),
              (long long)train_set.count, val_set.name.c_str(), (long long)val_set.count);

  if (s.load_epoch > 0) {
    const std::string path = net::checkpoint_path(s.model_prefix, s.load_epoch);
    net::load_model(path, model);  // before the move: the file is read into host tensors
    std::printf("Loaded model from \"%s\"; resuming at Epoch[%d]\n", path.c_str(), s.load_epoch);
  }

  model.to(device);

  data::BatchIterator::Options io;
  io.batch_size = s.batch_size;
  io.shuffle = true;
  io.pad = s.random_crop ? s.pad_size : 0;
  io.flip = s.random_mirror;
  io.seed = uint64_t(s.seed);
  data::BatchIterator train(train_set, io);

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
  fo.checkpoint_metadata = {{"network", "resnet"},
                            {"num_layers", std::to_string(s.num_layers)},
                            {"dataset", s.dataset},
                            {"producer", "ember train_resnet"}};
  const apps::FitResult r = apps::fit(model, train, &val_set, fo);
  std::printf("Finished %d epochs in %.1f s: Train-accuracy=%.6f Validation-accuracy=%.6f\n",
              s.num_epochs - s.load_epoch, r.seconds, r.train_accuracy, r.validation_accuracy);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const std::exception& e) {  // ember::Error and anything the standard library throws
    std::fflush(stdout);                // the log so far comes before the error
    std::fprintf(stderr, "train_resnet: error: %s\n", e.what());
    return 1;
  }
}
