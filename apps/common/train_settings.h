// apps/common/train_settings.h — the flags of the training programs
// (train_resnet, finetune_resnet): model, data, optimisation, run, devices
// and data-parallel settings, MXNet style, with their checks.
#pragma once
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "apps/common/distributed.h"
#include "apps/common/flags.h"
#include "data/fashion_mnist.h"
#include "engine/device.h"
#include "engine/dtype.h"

namespace ember::apps {

// How a GPU runs: which table holds convolution, batch norm, pooling and
// GEMM, and what cuDNN and cuBLAS may choose (cuda/cuda_device.h).
struct GpuOptions {
  std::string conv = "cudnn";       // cudnn | native
  bool cudnn_benchmark = false;     // time cuDNN's algorithms per shape
  bool cudnn_deterministic = true;  // prefer deterministic cuDNN algorithms (bit-for-bit runs)
  bool tf32 = true;                 // f32 convolutions and GEMMs on TF32 tensor cores, as PyTorch's convolutions
};

struct TrainSettings {
  // model
  std::string network = "resnet";
  int num_layers = 20;
  int64_t num_classes = 0;
  bool zero_init_residual = false;
  double dropout = 0;  // dropout before the classifier (timm's drop_rate), training only
  std::string pool = "avg";  // the head: avg, or concat ([avg, max], fast.ai's concat pooling); finetune: the file's
  // data
  std::string dataset = "fashion-mnist";
  std::vector<int> classes;  // Fashion-MNIST: only these classes, relabelled 0..k-1 in this order
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
  int keep_checkpoints = 0;
  std::string resume;       // PREFIX, or "auto": the latest checkpoint of --model-prefix
  double target_accuracy = 0;
  std::string metrics;      // JSON-lines metrics file
  bool quiet = false;
  // devices
  std::vector<int> gpus;  // one worker per listed GPU
  GpuOptions gpu;
  apps::DistSettings dist;
};

// Declares --conv, --cudnn-benchmark, --cudnn-deterministic and --tf32 (train_resnet, finetune_resnet, predict).
void declare_gpu_flags(Flags& f, GpuOptions& g);
// Declares every flag bound to s, grouped for --help.
void declare_train_flags(Flags& f, TrainSettings& s);
// One-line errors naming the flag.
void validate_train_settings(const TrainSettings& s);
// Sets up CUDA on GPU `index` as `o` says and says so on `out`; a one-line
// error in a build without CUDA.
Device open_gpu(int index, const GpuOptions& o, std::FILE* out);
// The device to train on: the CPU, or this worker's GPU of --gpus (CUDA set up).
Device select_device(const TrainSettings& s, int local_rank, std::FILE* out);
// "3,224,224" -> {3, 224, 224}
std::vector<int64_t> parse_image_shape(const std::string& text);
// The learning rate the run uses: --lr, or --lr * global batch / 256 with --lr-scaling linear.
double effective_lr(const TrainSettings& s, int world);
// --moms "MAX,MIN" -> {MAX, MIN}; an empty text gives {}.
std::vector<double> parse_moms(const std::string& text);
// --precision as the training dtype: fp32 -> f32, fp16 -> f16, bf16 -> bf16.
DType precision_dtype(const std::string& precision);

}  // namespace ember::apps
