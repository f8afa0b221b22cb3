// apps/predict/predict.cpp — classify images with a trained ResNet (issue 11).
//
//   build/predict --model ck/r50-0090.safetensors photos/cat.jpg photos/dog.png
//   build/predict --model M.safetensors --labels classes.txt --top-k 3 --json 1 *.jpg
//   build/predict --model M.safetensors --data-val val.erec       # top-1/top-5 accuracy
//   build/predict --model resnet-50-0000.params photo.jpg           # MXNet's own files
//
// The model's structure (depth, width, stem, input channels, classes) comes
// from the file's tensor names and shapes, the head's pooling and ResNet
// variant from its metadata (net::infer_resnet_config); MXNet .params are
// read through net/mxnet_resnet.h, which also gives the input statistics
// of MXNet's recipes. It is loaded with
// net::load_pretrained, head included. Every image gets the
// validation preprocessing of the record loader (apps/predict/predict_input.h):
// decode, resize the short side to --resize (0: --image-size * 8/7, 256 for
// 224), centre crop --image-size; the model's first op normalises with the
// per-channel mean/std of --rgb-mean/--rgb-std, else the checkpoint's
// metadata (input_mean/input_std), else ImageNet's. Class names come from
// --labels, else the --data-val record file, else the checkpoint's
// class_names metadata (a warning when those two disagree); without any,
// only indices are printed.
//
// Output (stdout), per image: its path, then one line per class of the top
// k: rank, index, name, softmax probability; or with --json 1 one JSON
// object per line and image: {"path":...,"top":[{"index":i,"name":...,"prob":p},...]}
// ({"path":...,"error":...} for an image that could not be read). A final
// line gives images/sec of the whole run (decode + forward; on stderr with
// --json). An unreadable image is one line on stderr naming the file and the
// reason; the other images are still classified, and the exit status is 1
// unless --skip-bad 1. --data-val evaluates a whole record file through the
// record loader (validation mode) and prints its top-1 and top-5 accuracy.
// Model and input settings are printed on stderr.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "apps/predict/class_names.h"
#include "apps/training/distributed.h"
#include "apps/training/flags.h"
#include "apps/training/input_norm.h"
#include "apps/predict/predict_input.h"
#include "apps/training/top_k.h"
#include "apps/training/train_settings.h"
#include "data/augment_rrc.h"
#include "data/image_loader.h"
#include "data/record_file.h"
#include "engine/autograd.h"
#include "engine/parallel.h"
#include "net/json.h"
#include "net/mxnet_resnet.h"
#include "net/pretrained.h"
#include "net/resnet.h"
#include "net/safetensors.h"

namespace {

using namespace ember;
using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

struct Settings {
  std::string model;
  int num_layers = 0;  // 0: from the file
  std::string labels;
  std::string data_val;
  int top_k = 5;
  int image_size = 0;  // 0: the checkpoint's image_size, else 224
  int resize = 0;
  std::string rgb_mean, rgb_std;
  bool json = false;
  bool skip_bad = false;
  int64_t batch_size = 32;
  int disp_batches = 20;
  int threads = 0;
  std::vector<int> gpus;
  apps::GpuOptions gpu;
};

void declare(apps::Flags& f, Settings& s) {
  f.group("model");
  f.add("model", &s.model,
        "the model: a safetensors file of a torchvision-named ResNet (train_resnet's checkpoints), or MXNet "
        ".params (resnet.py prefix-EEEE.params beside its -symbol.json, or Gluon resnet*_v1)");
  f.add("num-layers", &s.num_layers, "expected depth; an error when the file holds another (0: whatever the file holds)");
  f.add("labels", &s.labels, "class names, one per line (default: --data-val's, else the checkpoint's metadata)");
  f.group("input");
  f.add("image-size", &s.image_size, "side of the centre crop the model sees (0: the checkpoint's image_size, else 224)");
  f.add("resize", &s.resize,
        "short side the image is resized to before the crop (0: the checkpoint's val_resize for its image size, else "
        "image-size * 8/7: 256 for 224)");
  f.add("rgb-mean", &s.rgb_mean, "per-channel mean in 0-255 (default: the checkpoint's input_mean, else ImageNet's)");
  f.add("rgb-std", &s.rgb_std, "per-channel standard deviation in 0-255 (default: the checkpoint's input_std, else ImageNet's)");
  f.add("data-val", &s.data_val, "record file(s) to evaluate: prints top-1/top-5 accuracy (also names the classes)");
  f.add("skip-bad", &s.skip_bad, "1: warn about unreadable images (or corrupt records) and go on; exit status 0");
  f.group("output");
  f.add("top-k", &s.top_k, "classes printed per image (at most the model's classes)");
  f.add("json", &s.json, "1: one JSON object per line and image on stdout");
  f.add("disp-batches", &s.disp_batches, "--data-val: a progress line on stderr every N batches");
  f.group("run");
  f.add("batch-size", &s.batch_size, "images per forward pass");
  f.add("threads", &s.threads, "CPU threads for decoding and the forward pass (0: all cores)");
  f.add("gpus", &s.gpus, "the GPU to run on, e.g. 0 (empty: the CPU)");
  apps::declare_gpu_flags(f, s.gpu);
}

void validate(const Settings& s, const std::vector<std::string>& images) {
  EMBER_CHECK(!s.model.empty(), "--model is required: the safetensors file to classify with (see --help)");
  EMBER_CHECK(!images.empty() || !s.data_val.empty(), "nothing to do: give image files or --data-val (see --help)");
  EMBER_CHECK(s.num_layers >= 0, "--num-layers must be >= 0 (0: from the file)");
  EMBER_CHECK(s.top_k > 0, "--top-k must be positive");
  EMBER_CHECK(s.image_size >= 0, "--image-size must be >= 0 (0: the checkpoint's, else 224)");
  EMBER_CHECK(s.resize >= 0, "--resize must be >= 0 (0: image-size * 8/7)");
  EMBER_CHECK(s.batch_size > 0, "--batch-size must be positive");
  EMBER_CHECK(s.disp_batches > 0, "--disp-batches must be positive");
  EMBER_CHECK(s.threads >= 0, "--threads must be >= 0");
  apps::validate_gpu_options(s.gpu, !s.gpus.empty());
  EMBER_CHECK(s.gpus.size() <= 1, "--gpus: predict runs on one GPU, got ", s.gpus.size());
  for (int g : s.gpus) EMBER_CHECK(g >= 0, "--gpus: device indices are >= 0, got ", g);
}

Device select_device(const Settings& s) {
  if (s.gpus.empty()) return Device::cpu();
  return apps::open_gpu(s.gpus.front(), s.gpu, stderr);
}

std::string join_numbers(const std::vector<double>& v) {
  std::string out;
  for (size_t i = 0; i < v.size(); ++i) out += cat(i ? "," : "", v[i]);
  return out;
}

// Everything the two modes share.
struct Context {
  const Settings& s;
  net::ResNet& model;
  Device device;
  int channels = 0, size = 0, resize = 0;
  int64_t classes = 0;
  std::vector<std::string> names;  // empty: no names
};

// Logits [n, classes] on the host for a u8 batch [n, C, H, W] on the host.
Tensor forward(Context& ctx, const Tensor& images) {
  NoGradGuard no_grad;
  Tensor logits = ctx.model(images.to(ctx.device)).to(Device::cpu());
  EMBER_CHECK(logits.dtype() == DType::f32 && logits.ndim() == 2 && logits.size(1) == ctx.classes,
              "predict: the model gave ", logits.str(), ", expected f32 [N, ", ctx.classes, "]");
  return logits;
}

void print_result(const Context& ctx, const std::string& path, const float* logits) {
  const std::vector<apps::ClassScore> top = apps::softmax_top_k(logits, ctx.classes, ctx.s.top_k);
  if (ctx.s.json) {
    json::Array entries;
    for (const apps::ClassScore& t : top)
      entries.push_back(json::Object{{"index", t.index},
                                     {"name", ctx.names.empty() ? json::Value() : json::Value(ctx.names[size_t(t.index)])},
                                     {"prob", t.prob}});
    std::printf("%s\n", json::write(json::Object{{"path", path}, {"top", std::move(entries)}}).c_str());
    return;
  }
  std::printf("%s\n", path.c_str());
  for (size_t r = 0; r < top.size(); ++r) {
    const std::string name = ctx.names.empty() || ctx.names[size_t(top[r].index)].empty()
                                 ? std::string()
                                 : " " + ctx.names[size_t(top[r].index)];
    std::printf("  %zu. %lld%s  %.4f\n", r + 1, (long long)top[r].index, name.c_str(), top[r].prob);
  }
}

void print_bad(const Context& ctx, const std::string& path, const std::string& reason) {
  if (ctx.s.json) std::printf("%s\n", json::write(json::Object{{"path", path}, {"error", reason}}).c_str());
  std::fflush(stdout);
  std::fprintf(stderr, "predict: %s: %s%s\n", ctx.s.skip_bad ? "warning" : "error", reason.c_str(),
               ctx.s.skip_bad ? " (skipped)" : "");
}

// Classifies the images, --batch-size at a time; returns the exit status.
int predict_images(Context& ctx, const std::vector<std::string>& paths) {
  const auto start = Clock::now();
  const size_t per_image = size_t(ctx.channels) * size_t(ctx.size) * size_t(ctx.size);
  const size_t batch = size_t(ctx.s.batch_size);
  std::vector<uint8_t> slots;
  int64_t good = 0, bad = 0;
  for (size_t first = 0; first < paths.size(); first += batch) {
    const size_t n = std::min(batch, paths.size() - first);
    slots.resize(n * per_image);
    std::vector<std::string> errors(n);  // empty: decoded
    parallel_for(0, int64_t(n), 1, [&](int64_t b, int64_t e) {
      data::Image scratch;
      for (int64_t i = b; i < e; ++i) {
        const std::string& path = paths[first + size_t(i)];
        try {
          apps::preprocess_image_file(path, ctx.channels, ctx.size, ctx.resize, slots.data() + size_t(i) * per_image,
                                      scratch);
        } catch (const std::exception& ex) {  // reported below, in order; never out of the parallel region
          errors[size_t(i)] = ex.what();
          if (errors[size_t(i)].rfind(path, 0) != 0) errors[size_t(i)] = path + ": " + errors[size_t(i)];
        }
      }
    });
    std::vector<size_t> decoded;
    for (size_t i = 0; i < n; ++i)
      if (errors[i].empty()) decoded.push_back(i);
    Tensor logits;
    if (!decoded.empty()) {
      Tensor images = Tensor::empty({int64_t(decoded.size()), ctx.channels, ctx.size, ctx.size}, DType::u8);
      for (size_t j = 0; j < decoded.size(); ++j)
        std::memcpy(images.data<uint8_t>() + j * per_image, slots.data() + decoded[j] * per_image, per_image);
      logits = forward(ctx, images);
    }
    for (size_t i = 0, j = 0; i < n; ++i) {
      if (!errors[i].empty()) {
        print_bad(ctx, paths[first + i], errors[i]);
        ++bad;
      } else {
        print_result(ctx, paths[first + i], logits.data<float>() + int64_t(j++) * ctx.classes);
        ++good;
      }
    }
    std::fflush(stdout);
  }
  const double seconds = seconds_since(start);
  std::fprintf(ctx.s.json ? stderr : stdout, "Predicted %lld image%s in %.2f s: %.2f img/s (decode + forward)%s\n",
               (long long)good, good == 1 ? "" : "s", seconds, double(good) / std::max(seconds, 1e-9),
               bad ? cat(", ", bad, " unreadable").c_str() : "");
  std::fflush(stdout);
  if (bad > 0 && !ctx.s.skip_bad) {
    std::fprintf(stderr, "predict: error: %lld of %zu images could not be classified (--skip-bad 1 to go on regardless)\n",
                 (long long)bad, paths.size());
    return 1;
  }
  return 0;
}

// Top-1 and top-5 accuracy of a record file, through the loader's validation path.
void evaluate_records(Context& ctx, const data::RecordDataset& records) {
  const Settings& s = ctx.s;
  data::LoaderOptions lo;
  lo.batch_size = s.batch_size;
  lo.threads = s.threads > 0 ? s.threads : std::max(1, int(std::thread::hardware_concurrency()));
  lo.shuffle = false;
  lo.even_shards = false;
  lo.validation = true;
  lo.augment = data::Augment::none;
  lo.flip = false;
  lo.channels = ctx.channels;
  lo.output_size = ctx.size;
  lo.val_resize = s.resize;
  lo.skip_bad = s.skip_bad;
  data::ImageLoader loader(records, lo);
  const int64_t total = loader.samples_per_epoch();
  const int64_t k5 = std::min<int64_t>(5, ctx.classes);
  const auto start = Clock::now();
  loader.start_epoch(0);
  data::Batch b;
  int64_t seen = 0, top1 = 0, top5 = 0, batches = 0;
  while (loader.next(b)) {
    const Tensor logits = forward(ctx, b.images);
    const int64_t* labels = b.labels.data<int64_t>();
    for (int64_t i = 0; i < b.size; ++i) {
      const float* row = logits.data<float>() + i * ctx.classes;
      top1 += apps::in_top_k(row, ctx.classes, 1, labels[i]);
      top5 += apps::in_top_k(row, ctx.classes, k5, labels[i]);
    }
    seen += b.size;
    if (++batches % s.disp_batches == 0)
      std::fprintf(stderr, "Validation [%lld/%lld]\ttop-1=%.4f\ttop-5=%.4f\tSpeed: %.2f img/s\n", (long long)seen,
                   (long long)total, double(top1) / double(seen), double(top5) / double(seen),
                   double(seen) / seconds_since(start));
  }
  const double seconds = seconds_since(start);
  const double acc1 = seen ? double(top1) / double(seen) : 0, acc5 = seen ? double(top5) / double(seen) : 0;
  const double speed = double(seen) / std::max(seconds, 1e-9);
  if (s.json)
    std::printf("%s\n", json::write(json::Object{{"data_val", s.data_val},
                                                 {"top1", acc1},
                                                 {"top5", acc5},
                                                 {"images", seen},
                                                 {"images_per_sec", speed},
                                                 {"bad_records", loader.bad_records()}})
                            .c_str());
  else
    std::printf("Validation: top-1 %.4f, top-5 %.4f over %lld images (%.2f img/s)\n", acc1, acc5, (long long)seen, speed);
  std::fflush(stdout);
  if (loader.bad_records() > 0) std::fprintf(stderr, "skipped %lld bad records\n", (long long)loader.bad_records());
}

// The record file of --data-val, checked against the model.
std::unique_ptr<data::RecordDataset> open_records(const Settings& s, int64_t classes) {
  auto records = std::make_unique<data::RecordDataset>(s.data_val);
  EMBER_CHECK(records->shard(0).header().label_type == uint32_t(data::LabelType::class_index), s.data_val,
              ": labels are vectors of numbers, not class indices: no accuracy to measure");
  EMBER_CHECK(records->num_classes() == 0 || records->num_classes() == classes, s.data_val, " has ",
              records->num_classes(), " classes, the model ", s.model, " has ", classes);
  return records;
}

// The class names: --labels, else the record file's, else the checkpoint's
// metadata (none: empty). A record file whose names differ from the
// checkpoint's may label its images in another order than the model's
// outputs: a warning shows the first difference.
std::vector<std::string> class_names(const Settings& s, const SafetensorsFile& file, const data::RecordDataset* records,
                                     int64_t classes, std::string& from) {
  if (!s.labels.empty()) {
    from = s.labels;
    return apps::read_labels_file(s.labels, classes);
  }
  std::vector<std::string> model_names;
  if (const auto it = file.metadata.find("class_names"); it != file.metadata.end())
    model_names = apps::class_names_from_json(it->second, s.model, classes);
  if (records && !records->class_names().empty()) {
    const std::vector<std::string>& names = records->class_names();
    EMBER_CHECK(int64_t(names.size()) == classes, s.data_val, ": ", names.size(), " class names for the model's ",
                classes, " classes");
    if (!model_names.empty() && names != model_names) {
      size_t i = 0;
      while (names[i] == model_names[i]) ++i;
      std::fprintf(stderr,
                   "predict: warning: %s names its classes otherwise than %s (class %zu: %s in the records, %s in the "
                   "model): check that its labels are the model's classes\n",
                   s.data_val.c_str(), s.model.c_str(), i, json::quote(names[i], json::kMessageNameBytes).c_str(),
                   json::quote(model_names[i], json::kMessageNameBytes).c_str());
    }
    from = s.data_val;
    return names;
  }
  from = model_names.empty() ? "none: indices only" : "checkpoint metadata";
  return model_names;
}

// --image-size and --resize left at 0 take what the checkpoint was trained
// with (train_resnet writes image_size and val_resize), else 224 and 8/7 of it.
void resolve_input_size(Settings& s, const std::map<std::string, std::string>& metadata) {
  auto number = [&](const char* key) {
    const auto it = metadata.find(key);
    if (it == metadata.end()) return 0;
    char* end = nullptr;
    const long v = std::strtol(it->second.c_str(), &end, 10);
    EMBER_CHECK(!it->second.empty() && *end == '\0' && v > 0 && v <= 65536, s.model, ": metadata ", key, " is not a size: ",
                json::shown(it->second));
    return int(v);
  };
  const int trained_size = number("image_size"), trained_resize = number("val_resize");
  if (s.image_size == 0) s.image_size = trained_size > 0 ? trained_size : 224;
  if (s.resize == 0 && trained_resize > 0 && s.image_size == trained_size) s.resize = trained_resize;
}

int run(int argc, char** argv) {
  Settings s;
  std::vector<std::string> images;
  apps::Flags flags("predict",
                    "Classify images with a trained ResNet: the top classes and their probabilities per image\n"
                    "(or, with --data-val RECORDS, the top-1/top-5 accuracy of a record file).");
  declare(flags, s);
  flags.positional(&images, "IMAGE...");
  if (!flags.parse(argc, argv)) return 0;
  validate(s, images);
  set_num_threads(s.threads > 0 ? s.threads : std::max(1, int(std::thread::hardware_concurrency())));
  const Device device = select_device(s);

  const auto load_start = Clock::now();
  const SafetensorsFile file = net::load_model_file(s.model);
  const net::InferredResNet shape = net::infer_resnet_config(file, s.model);
  EMBER_CHECK(shape.num_classes > 0, s.model, ": no classifier head (fc.weight, fc.bias): nothing to predict with");
  EMBER_CHECK(s.num_layers == 0 || s.num_layers == shape.num_layers, "--num-layers ", s.num_layers, ": ", s.model,
              " holds a resnet-", shape.num_layers, " (leave --num-layers out to take the file's)");
  resolve_input_size(s, file.metadata);
  const apps::InputStats stats =
      apps::resolve_input_stats(s.rgb_mean, s.rgb_std, file.metadata, s.model, int(shape.in_channels));
  net::ResNetConfig cfg = shape.config();
  cfg.image_size = s.image_size;
  cfg.input_norm = apps::channel_norm(stats);
  Generator gen(0);
  net::ResNet model(cfg, gen);  // initialised, then every tensor overwritten from the file
  net::PretrainedOptions po;
  po.replace_head = false;
  net::load_pretrained(file, s.model, model, po);
  const double load_seconds = seconds_since(load_start);
  model.eval();
  model.to(device);
  model.to_memory_format(apps::layout_format(s.gpu));

  const std::unique_ptr<data::RecordDataset> records = s.data_val.empty() ? nullptr : open_records(s, shape.num_classes);
  Context ctx{s, model, device, int(shape.in_channels), s.image_size, data::validation_resize(s.image_size, s.resize),
              shape.num_classes, {}};
  std::string names_from;
  ctx.names = class_names(s, file, records.get(), shape.num_classes, names_from);
  std::fprintf(stderr, "model: %s from %s (read, checked and loaded in %.3f s), %lld classes (names: %s)\n",
               model.describe().c_str(), s.model.c_str(), load_seconds, (long long)shape.num_classes, names_from.c_str());
  std::fprintf(stderr, "input: %dx%dx%d, short side resized to %d, mean %s (%s), std %s (%s); batch %lld, %d threads\n",
               ctx.channels, ctx.size, ctx.size, ctx.resize, join_numbers(stats.mean).c_str(), stats.mean_source.c_str(),
               join_numbers(stats.std).c_str(), stats.std_source.c_str(), (long long)s.batch_size, num_threads());

  int status = 0;
  if (!images.empty()) status = predict_images(ctx, images);
  if (records) evaluate_records(ctx, *records);
  return status;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const std::exception& e) {  // ember::Error and anything the standard library throws
    return apps::report_fatal("predict", e);
  }
}
