// apps/training/train_data.h — the data of a training run from its flags:
// Fashion-MNIST in memory (optionally some of its classes), or record files
// through the threaded loader; what the model must accept (channels, size,
// classes) and the input normalisation.
#pragma once
#include <cstdint>
#include <memory>
#include <string>

#include "apps/training/batch_source.h"
#include "apps/training/train_settings.h"
#include "data/image_loader.h"
#include "data/image_set.h"
#include "data/record_file.h"
#include "ops/ops.h"

namespace ember::apps {

// Where batches come from, and what the model must accept. --classes and
// --num-examples / --num-val-examples select from either kind of data:
// the classes first (relabelled 0..k-1 in the order given), then the first N.
struct TrainingData {
  std::vector<std::string> class_names;  // when the data names its classes
  data::ImageSet train_set, val_set;  // Fashion-MNIST in memory
  std::unique_ptr<data::BatchIterator> train_it, val_it;
  std::unique_ptr<data::RecordDataset> train_records, val_records;  // record files
  std::unique_ptr<data::ImageLoader> train_loader, val_loader;
  std::unique_ptr<apps::BatchSource> train, val;
  int64_t channels = 0, image_size = 0, num_classes = 0;
  int val_resize = 0;  // validation: the short side before the centre crop (image_size: no crop)
  ChannelNorm norm;
  std::string description;
  // For the first line of the run: "Fashion-MNIST (60000 train / 10000
  // validation images, 1x28x28, 10 classes)", "records data/train.erec (...)".
  std::string summary;
  // One line each (without "warning: "), for rank 0 to print once: what the
  // data does that the flags may not have meant (RGB records read as grey).
  std::vector<std::string> warnings;
  // One line each, for rank 0 to print once: a choice made for the user
  // (the input size taken from the records).
  std::vector<std::string> notes;
};

// The input record data trains at when --image-shape is not given: the
// records' channels (grey records stay grey, the rest are RGB) and their
// median short side, at most 224 (ImageNet's crop: records packed with
// im2rec --resize 256 train at 224, 64-pixel photos at 64). median_short_side
// is 0 when the index holds no sizes; the side is then 224.
struct RecordShape {
  int64_t channels = 3, side = 224, median_short_side = 0;
};
RecordShape default_record_shape(const data::RecordDataset& records);

// This rank's shards of the training and validation data.
std::unique_ptr<TrainingData> make_training_data(const TrainSettings& s, int rank, int world);

// The model's input normalisation: --rgb-mean/--rgb-std (0-255) or the defaults given.
ChannelNorm make_norm(const TrainSettings& s, int channels, std::vector<double> mean, std::vector<double> std);

}  // namespace ember::apps
