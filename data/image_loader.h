// data/image_loader.h — the threaded loader of record files: decode,
// augment and batch images on a pool of threads, ahead of the training loop.
//
// Order (DESIGN.md "Data", the same rules as data/batch_iterator.h, with its
// epoch_order/shard_order): every epoch draws one global permutation from
// (seed, epoch); rank r of world N takes every N-th sample of it, padded so
// all ranks run the same number of steps; sample i's augmentation draws from
// a Philox stream seeded by (seed, epoch, i). A batch is therefore the same
// for any number of threads.
//
// Training samples: random-resized-crop (area fraction in [min_area,
// max_area] of the image, aspect ratio log-uniform in [min_ratio, max_ratio],
// torchvision's 10 tries then centre crop fallback), or zero-pad + random
// crop (small images such as Fashion-MNIST), then a horizontal flip with
// p = 0.5, resized bilinearly to the epoch's output size. Validation: resize
// the short side to `val_resize` and take the centre output_size square.
// Output: uint8 NCHW batches (normalisation is the model's first op).
//
// Decode threads fill a bounded queue of ready batches (prefetch); within a
// prefetch window the records are read in file-offset order. Batches live in
// a ring of 2 * prefetch_batches: one window being consumed while the next
// one is decoded.
#pragma once
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "data/batch_iterator.h"
#include "data/record_file.h"

namespace ember::data {

enum class Augment { none, random_resized_crop, pad_crop };

struct LoaderOptions {
  int64_t batch_size = 128;
  int threads = 2;             // decode threads (--data-nthreads)
  int prefetch_batches = 4;    // batches per read window (up to twice this many decoded ahead)
  bool shuffle = true;
  bool drop_last = false;
  uint64_t seed = 0;
  int rank = 0, world = 1;
  bool even_shards = true;     // false: every sample once over all ranks (evaluation), not padded
  int channels = 3;            // decode to 1 or 3 channels
  // Output size per epoch: size_schedule entries (first_epoch, size), sorted;
  // epochs before the first entry use output_size.
  int output_size = 224;
  std::vector<std::pair<int, int>> size_schedule;
  Augment augment = Augment::random_resized_crop;  // training; validation uses none
  double min_area = 0.08, max_area = 1.0;          // random-resized-crop scale
  double min_ratio = 3.0 / 4.0, max_ratio = 4.0 / 3.0;
  int pad = 0;                                     // pad_crop
  bool flip = true;
  int val_resize = 0;          // validation short side (0: output_size * 8 / 7, torchvision's 256 for 224)
  bool validation = false;     // centre crop, no augmentation, no shuffle
  bool skip_bad = false;       // count and skip corrupt records instead of failing
};

// "0:128,6:224,16:288" -> {(0,128), (6,224), (16,288)}; errors on bad text.
std::vector<std::pair<int, int>> parse_size_schedule(const std::string& text);

// The order the decode threads read an epoch in: the positions 0..n-1 of
// `order` (dataset indices), taken in windows of `window` positions, each
// window sorted by (shard, file offset, position).
std::vector<int64_t> window_read_order(const RecordDataset& data, const std::vector<int64_t>& order, int64_t window);

class ImageLoader {
 public:
  // The dataset must outlive the loader.
  ImageLoader(const RecordDataset& data, LoaderOptions options);
  ~ImageLoader();  // stops and joins the threads
  ImageLoader(const ImageLoader&) = delete;
  ImageLoader& operator=(const ImageLoader&) = delete;

  // Starts decoding epoch `epoch` at its batch `first_batch` (0: the
  // start; a resumed run continues mid-epoch). The previous one is abandoned.
  void start_epoch(int epoch, int64_t first_batch = 0);
  // Batches of the epoch taken so far, counting batches that skip_bad
  // dropped whole (where a resumed run continues).
  int64_t position() const;
  // The next batch of the epoch, waiting for the decode threads; false at its end.
  // Errors from decoding (corrupt records without skip_bad) are rethrown here.
  bool next(Batch& batch);
  int64_t batches_per_epoch() const;
  int64_t samples_per_epoch() const;
  int output_size(int epoch) const;
  int64_t bad_records() const;  // skipped so far (skip_bad)
  const LoaderOptions& options() const { return opt_; }

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
  LoaderOptions opt_;
};

}  // namespace ember::data
