// apps/training/train_data.cpp — building the training and validation sources.
#include "apps/training/train_data.h"

#include <algorithm>
#include <thread>

#include "apps/training/input_norm.h"
#include "data/augment_rrc.h"
#include "data/fashion_mnist.h"

namespace ember::apps {
namespace {

// "(60000 train / 10000 validation images, 1x28x28, 10 classes)"
std::string data_counts(int64_t train, int64_t val, bool has_val, int64_t channels, int64_t size, int64_t classes) {
  const std::string images =
      has_val ? cat(train, " train / ", val, " validation images") : cat(train, " images, no validation");
  return cat("(", images, ", ", channels, "x", size, "x", size, ", ", classes, classes == 1 ? " class)" : " classes)");
}

// " classes 5,6,7" when --classes selects some.
std::string classes_text(const std::vector<int>& classes) {
  std::string text;
  for (size_t i = 0; i < classes.size(); ++i) text += cat(i ? "," : " classes ", classes[i]);
  return text;
}

// The channels the records hold: the packer's setting, else the first
// record's (0: unknown; a bad record is the loader's to report, or skip).
int stored_channels(const data::RecordDataset& records) {
  if (const uint32_t c = records.shard(0).header().packer_channels; c > 0) return int(c);
  if (records.size() == 0) return 0;
  try {
    data::Record first;
    records.read(0, first);
    return int(first.channels);
  } catch (const Error&) {
    return 0;
  }
}

std::unique_ptr<TrainingData> fashion_mnist_data(const TrainSettings& s, int rank, int world) {
  EMBER_CHECK(s.dataset == "fashion-mnist", "--dataset ", s.dataset,
              " is not built in (fashion-mnist); use --data-train with record files");
  auto d = std::make_unique<TrainingData>();
  d->train_set = data::load_fashion_mnist(s.data_dir, true);
  d->val_set = data::load_fashion_mnist(s.data_dir, false);
  if (!s.classes.empty()) {
    d->train_set = data::select_classes(d->train_set, s.classes);
    d->val_set = data::select_classes(d->val_set, s.classes);
  }
  for (size_t i = 0; i < size_t(d->train_set.num_classes); ++i)
    d->class_names.push_back(data::kFashionMnistClassNames[s.classes.empty() ? i : size_t(s.classes[i])]);
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
  d->train = std::make_unique<IteratorSource>(*d->train_it);
  d->val = std::make_unique<IteratorSource>(*d->val_it);
  d->channels = d->train_set.channels;
  d->image_size = std::min(d->train_set.height, d->train_set.width);
  d->val_resize = int(d->image_size);  // whole 28x28 images, no crop
  d->num_classes = d->train_set.num_classes;
  EMBER_CHECK(s.num_classes == 0 || s.num_classes == d->num_classes, "--num-classes ", s.num_classes,
              " does not match the data's ", d->num_classes, " classes");
  // Fashion-MNIST's pixel statistics (training set): mean 0.2860, std 0.3530.
  d->norm = make_norm(s, 1, {0.2860 * 255}, {0.3530 * 255});
  d->description = cat(d->train_set.name, " (", d->train_set.count, " images), validation ", d->val_set.name, " (",
                       d->val_set.count, " images)");
  d->summary = cat("Fashion-MNIST", classes_text(s.classes), " ",
                   data_counts(d->train_set.count, d->val_set.count, true, d->channels, d->image_size, d->num_classes));
  return d;
}

std::unique_ptr<TrainingData> record_data(const TrainSettings& s, int rank, int world) {
  auto d = std::make_unique<TrainingData>();
  d->train_records = std::make_unique<data::RecordDataset>(s.data_train);
  if (!s.classes.empty()) d->train_records->select_classes(s.classes);
  d->train_records->keep_first(s.num_examples);
  std::vector<int64_t> shape;
  if (s.image_shape.empty()) {
    const RecordShape r = default_record_shape(*d->train_records);
    shape = {r.channels, r.side, r.side};
    const std::string input = cat("input ", r.channels, "x", r.side, "x", r.side);
    const char* change = "--image-shape C,H,W sets another";
    if (r.median_short_side == 0)
      d->notes.push_back(cat(input, ": the records' index holds no image sizes (", change, ")"));
    else if (r.side == r.median_short_side)
      d->notes.push_back(cat(input, ", the records' median short side (", change, ")"));
    else
      d->notes.push_back(cat(input, ", ImageNet's crop (the records' median short side is ", r.median_short_side,
                             " px; ", change, ")"));
  } else {
    shape = parse_image_shape(s.image_shape);
  }
  EMBER_CHECK(shape[0] == 1 || shape[0] == 3, "--image-shape: record data has 1 or 3 channels, got ", shape[0]);
  EMBER_CHECK(shape[1] == shape[2], "--image-shape: record data is cropped square, got ", shape[1], "x", shape[2]);
  d->channels = shape[0];
  d->image_size = shape[1];
  d->val_resize = data::validation_resize(int(shape[1]), s.val_resize);
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
  if (shape[0] == 1 && stored_channels(*d->train_records) == 3)
    d->warnings.push_back(cat("the image shape ", s.image_shape, " has 1 channel and ", s.data_train,
                              " holds RGB images: they are converted to grey as they load (--image-shape 3,",
                              shape[1], ",", shape[2], " keeps the colour)"));
  d->num_classes = d->train_records->num_classes();
  EMBER_CHECK(d->num_classes > 0 || s.num_classes > 0, s.data_train,
              ": the records carry no class count; give --num-classes");
  if (s.num_classes > 0) {
    EMBER_CHECK(d->num_classes == 0 || d->num_classes == s.num_classes, "--num-classes ", s.num_classes,
                " does not match ", s.data_train, "'s ", d->num_classes, " classes");
    d->num_classes = s.num_classes;
  }
  d->class_names = d->train_records->class_names();
  d->train_loader = std::make_unique<data::ImageLoader>(*d->train_records, lo);
  d->train = std::make_unique<LoaderSource>(*d->train_loader);
  d->description = cat(s.data_train, ": ", d->train_records->describe());
  if (!s.data_val.empty()) {
    d->val_records = std::make_unique<data::RecordDataset>(s.data_val);
    if (!s.classes.empty()) d->val_records->select_classes(s.classes);
    d->val_records->keep_first(s.num_val_examples);
    data::LoaderOptions vo = lo;
    vo.validation = true;
    vo.shuffle = false;
    vo.even_shards = false;  // each validation image once over all ranks
    d->val_loader = std::make_unique<data::ImageLoader>(*d->val_records, vo);
    d->val = std::make_unique<LoaderSource>(*d->val_loader);
    d->description += cat(", validation ", s.data_val, ": ", d->val_records->describe());
  }
  d->summary = cat("records ", s.data_train, classes_text(s.classes), " ",
                   data_counts(d->train_records->size(), d->val_records ? d->val_records->size() : 0,
                               d->val_records != nullptr, d->channels, d->image_size, d->num_classes));
  // ImageNet's statistics for colour images; the middle grey otherwise.
  d->norm = d->channels == 3 ? make_norm(s, 3, {123.675, 116.28, 103.53}, {58.395, 57.12, 57.375})
                             : make_norm(s, 1, {127.5}, {63.75});
  return d;
}

}  // namespace

RecordShape default_record_shape(const data::RecordDataset& records) {
  RecordShape r;
  r.channels = stored_channels(records) == 1 ? 1 : 3;
  // Up to ~4000 index entries spread over the set: the index holds every
  // record's size, so nothing is decoded.
  const int64_t n = records.size(), step = std::max<int64_t>(1, n / 4000);
  std::vector<int64_t> sides;
  for (int64_t i = 0; i < n; i += step) {
    const data::IndexEntry& e = records.entry(i);
    if (e.height > 0 && e.width > 0) sides.push_back(std::min(e.height, e.width));
  }
  if (sides.empty()) return r;
  std::nth_element(sides.begin(), sides.begin() + ptrdiff_t(sides.size() / 2), sides.end());
  r.median_short_side = sides[sides.size() / 2];
  r.side = std::min<int64_t>(r.median_short_side, 224);
  return r;
}

// The model's input normalisation: --rgb-mean/--rgb-std (0-255) or defaults.
ChannelNorm make_norm(const TrainSettings& s, int channels, std::vector<double> mean, std::vector<double> std) {
  if (!s.rgb_mean.empty()) mean = parse_number_list(s.rgb_mean, "rgb-mean");
  if (!s.rgb_std.empty()) std = parse_number_list(s.rgb_std, "rgb-std");
  EMBER_CHECK(int(mean.size()) == channels && int(std.size()) == channels, "--rgb-mean/--rgb-std need ", channels,
              " values (one per channel), got ", mean.size(), " and ", std.size());
  for (double v : std) EMBER_CHECK(v > 0, "--rgb-std values must be positive");
  InputStats stats;
  stats.mean = std::move(mean);
  stats.std = std::move(std);
  return channel_norm(stats);
}

std::unique_ptr<TrainingData> make_training_data(const TrainSettings& s, int rank, int world) {
  return s.data_train.empty() ? fashion_mnist_data(s, rank, world) : record_data(s, rank, world);
}

}  // namespace ember::apps
