// apps/training/train_settings.h — the flags of the training programs
// (train_resnet, finetune_resnet): model, data, optimisation, run, devices
// and data-parallel settings, MXNet style, with their checks.
#pragma once
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "apps/training/distributed.h"
#include "apps/training/flags.h"
#include "data/fashion_mnist.h"
#include "engine/device.h"
#include "engine/dtype.h"
#include "engine/tensor.h"

namespace ember::apps {

// How a GPU runs: which table holds convolution, batch norm, pooling and
// GEMM, and what cuDNN and cuBLAS may choose (cuda/cuda_device.h).
struct GpuOptions {
  std::string conv = "cudnn";       // cudnn | native
  bool cudnn_benchmark = false;     // time cuDNN's algorithms per shape
  bool cudnn_deterministic = false;  // prefer deterministic cuDNN algorithms (bit-for-bit runs)
  std::string cudnn_algo_cache;      // a file keeping cuDNN's algorithm choices across runs (empty: none)
  bool tf32 = true;                 // f32 convolutions and GEMMs on TF32 tensor cores, as PyTorch's convolutions
  std::string layout = "nchw";      // nchw | nhwc: the activations' memory format on the GPU
};

struct TrainSettings {
  // model
  std::string network = "resnet";
  int num_layers = 20;
  int64_t num_classes = 0;
  bool zero_init_residual = false;
  double dropout = 0;  // dropout before the classifier (timm's drop_rate), training only
  std::string variant = "torchvision";  // the ResNet's structure: torchvision, gluon-v1, mxnet-preact (net/resnet.h)
  std::string pool = "avg";  // the head: avg, or concat ([avg, max], fast.ai's concat pooling); finetune: the file's
  // data
  std::string dataset = "fashion-mnist";
  std::vector<int> classes;  // only these classes (Fashion-MNIST or records), relabelled 0..k-1 in this order
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
  int num_epochs = 0;  // 0: the default recipe's (resolve_default_recipe)
  double lr = 0;       // 0: the default recipe's (resolve_default_recipe)
  double mom = 0.9;
  double wd = 5e-4;
  bool nesterov = true;
  std::string lr_schedule = "onecycle";
  std::vector<int> lr_step_epochs;
  double lr_factor = 0.1;
  double warmup_epochs = 0;
  double label_smoothing = 0.1;
  std::string lr_scaling = "none";  // linear: --lr is per 256 images, times the global batch / 256
  std::string moms;                 // onecycle momentum cycling "MAX,MIN" (fast.ai's 0.95,0.85); empty: --mom
  double mixup_alpha = 0, cutmix_alpha = 0;  // > 0: mixup / cutmix with lam ~ Beta(alpha, alpha) (net/mixup.h)
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
  // long runs
  int64_t checkpoint_steps = 0;
  int keep_checkpoints = 3;  // the newest 3 (0: all)
  std::string resume;       // PREFIX, or "auto": the latest checkpoint of --model-prefix
  double target_accuracy = 0;
  std::string metrics;      // JSON-lines metrics file
  bool quiet = false;
  // devices
  std::vector<int> gpus;  // one worker per listed GPU
  GpuOptions gpu;
  bool cuda_graph = false;  // replay each training step as one CUDA graph (apps/training/step_graph.h)
  apps::DistSettings dist;
};

// Declares --conv, --cudnn-benchmark, --cudnn-deterministic, --cudnn-algo-cache, --tf32 and --layout
// (train_resnet, finetune_resnet, predict).
void declare_gpu_flags(Flags& f, GpuOptions& g);
// One-line errors for --conv and --layout (nhwc needs a GPU: on_gpu).
void validate_gpu_options(const GpuOptions& g, bool on_gpu);
// --layout as the model's memory format (Module::to_memory_format).
MemoryFormat layout_format(const GpuOptions& g);
// Declares every flag bound to s, grouped for --help.
void declare_train_flags(Flags& f, TrainSettings& s);
// One-line errors naming the flag.
void validate_train_settings(const TrainSettings& s);
// The flags given (Flags::was_set) that the chosen data does not use:
// --image-shape on Fashion-MNIST (1x28x28) is an error; the others, such as
// the record loader's flags on Fashion-MNIST or --dataset on records, are
// returned as one-line warnings naming them. --benchmark uses no data: none.
std::vector<std::string> check_data_flags(const TrainSettings& s, const Flags& flags);
// Sets up CUDA on GPU `index` as `o` says and says so on `out` (or in
// *line, without the newline); a one-line error in a build without CUDA.
Device open_gpu(int index, const GpuOptions& o, std::FILE* out);
Device open_gpu(int index, const GpuOptions& o, std::string* line);
// The device to train on: the CPU, or this worker's GPU of --gpus (CUDA set
// up; *line says which, "" for the CPU).
Device select_device(const TrainSettings& s, int local_rank, std::string* line);
// "3,224,224" -> {3, 224, 224}
std::vector<int64_t> parse_image_shape(const std::string& text);
// The learning rate the run uses: --lr, or --lr * global batch / 256 with --lr-scaling linear.
double effective_lr(const TrainSettings& s, int world);
// The default recipe, for a folder of photos as for Fashion-MNIST: --lr 0
// means kDefaultLrPer256 x global batch / 256 (Goyal et al.'s linear
// scaling rule: 0.05 at --batch-size 128), --num-epochs 0 means
// kDefaultMinEpochs epochs, or more when an epoch is short, so that training
// takes at least kDefaultMinSteps steps (a few hundred images at batch 128
// are two steps an epoch: ten epochs would be too few steps to learn).
inline constexpr double kDefaultLrPer256 = 0.1;
inline constexpr int kDefaultMinEpochs = 10;
inline constexpr int64_t kDefaultMinSteps = 100;
// Fills in --lr 0 and --num-epochs 0 for a run of `world` ranks whose epoch
// has `steps_per_epoch` steps (0: no data, as --benchmark: kDefaultMinEpochs),
// so that the start line shows the values the run uses; returns a line saying
// what it chose and why, or "" when both were given.
std::string resolve_default_recipe(TrainSettings& s, int world, int64_t steps_per_epoch);
// --moms "MAX,MIN" -> {MAX, MIN}; an empty text gives {}.
std::vector<double> parse_moms(const std::string& text);
// --precision as the training dtype: fp32 -> f32, fp16 -> f16, bf16 -> bf16.
DType precision_dtype(const std::string& precision);

}  // namespace ember::apps
