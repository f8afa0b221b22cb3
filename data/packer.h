// data/packer.h — the library behind apps/im2rec.cpp: packs a list of image
// files (data/image_folder.h) into ember record files (data/FORMAT.md), and
// checks packed files.
//
// Every image is decoded once at pack time, also when its original bytes are
// kept ("pass-through"), so a record file never holds an image the loader
// cannot decode: unreadable or corrupt files are reported ("skipping PATH:
// reason" on stderr unless a skip callback is given) and skipped.
//
// Order and outputs: the list is optionally shuffled (Fisher-Yates with a
// Philox stream of the seed), then split: the first floor(n * train_ratio)
// items are the training set, the rest validation. Within each split, item j
// goes to shard j % shards (round robin, so every shard holds a mix of
// classes even without shuffling). Records are written in that order, so the
// files are byte-identical for any number of threads (except the header's
// creation time). Names:
//   shards 1, no split:   PREFIX.erec
//   shards 1, split:      PREFIX_train.erec, PREFIX_val.erec
//   shards K > 1:         PREFIX-00000-of-0000K.erec ... (5 digits each),
//                         PREFIX_train-00000-of-0000K.erec / PREFIX_val-... when split
// Each file is written atomically by RecordWriter (published at the end).
#pragma once
#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "data/image_folder.h"
#include "data/record_format.h"

namespace ember::data {

enum class PackEncoding { jpeg, png, raw };

struct PackOptions {
  int resize = 0;                              // short side in pixels (0: keep the size)
  int quality = 95;                            // JPEG quality of re-encoded images, 1..100
  bool pass_through = false;                   // keep the original file bytes (no resize, no re-encode)
  PackEncoding encoding = PackEncoding::jpeg;  // re-encoding: JPEG, PNG or raw u8 HWC pixels
  int channels = 3;                            // re-encoding: decode to 3 (RGB) or 1 (grey), 0 = as stored;
                                               // pass-through records the stored count (1 or 3)
  int threads = 1;                             // decode/encode threads
  bool shuffle = false;
  uint64_t seed = 0;
  double train_ratio = 1.0;  // (0, 1]; < 1 splits into _train and _val
  int shards = 1;            // files per split
  // Called (on the calling thread, in list order) for every skipped image;
  // unset: prints "skipping PATH: reason" to stderr.
  std::function<void(const std::string& path, const std::string& reason)> on_skip;
};

struct PackProgress {
  int64_t done = 0, total = 0;  // images handled (packed or skipped) of all
  int64_t packed = 0, skipped = 0;
  double seconds = 0;  // since the start
};

struct SkippedImage {
  std::string path, reason;
};

struct PackOutput {
  std::string path;
  int64_t records = 0;
  uint64_t bytes = 0;
};

struct PackReport {
  int64_t packed = 0;
  std::vector<SkippedImage> skipped;
  uint64_t source_bytes = 0;  // bytes of every source file read (packed or skipped)
  uint64_t output_bytes = 0;  // total size of the record files
  double seconds = 0;
  std::vector<PackOutput> outputs;
};

// The output file names for a prefix and options (see the file comment):
// split 0 = training (or the only set), split 1 = validation.
std::vector<std::vector<std::string>> pack_output_names(const std::string& out_prefix, const PackOptions& options);

// Throws ember::Error for inconsistent options (resize with pass_through,
// quality outside 1..100, channels not 0/1/3, train_ratio outside (0, 1],
// shards < 1, threads < 1).
void check_pack_options(const PackOptions& options);

// Packs the images. class_names: stored in the metadata; when non-empty every
// item has one label, a class index < class_names.size(). When empty (list
// files): one integer label >= 0 per item gives class-index records with
// num_classes = max + 1; anything else (several labels, fractions, negative
// values) gives f32-vector labels, the same number for every item.
// progress (may be empty) is called on the calling thread after each image.
PackReport pack(const std::vector<SourceItem>& items, const std::vector<std::string>& class_names,
                const std::string& out_prefix, const PackOptions& options,
                const std::function<void(const PackProgress&)>& progress = {});

// Checks a record file completely: header, metadata, index, every record's
// CRCs, and that every image decodes to the height, width and channels its
// record states (raw payloads: the size). Bad records are counted, the first
// `max_messages` problems kept; an unreadable file is one problem.
struct VerifyReport {
  std::string path;
  int64_t records = 0, bad = 0;
  uint64_t bytes = 0;
  int num_classes = 0;
  bool float_labels = false;  // f32 label vectors of label_width values
  int label_width = 1;
  double seconds = 0;
  std::vector<std::string> problems;
  bool ok() const { return bad == 0 && problems.empty(); }
};
VerifyReport verify_record_file(const std::string& path, int threads = 1, size_t max_messages = 10);

// Whether a label can be a class index: a whole number in [0, 2^31). A list
// of such single labels packs as class indices (pack(), convert_mxnet()).
bool is_class_index(float label);

// Runs work(i, slot) for i in [0, n) on `threads` worker threads and
// consume(i, slot) on the calling thread in increasing i, with at most
// `window` items in flight; slot = i % window, so the caller keeps `window`
// result slots. An exception in work or consume stops everything and is
// rethrown here. The pipeline of pack() and convert_mxnet().
void run_ordered(int64_t n, int threads, int64_t window, const std::function<void(int64_t i, size_t slot)>& work,
                 const std::function<void(int64_t i, size_t slot)>& consume);

}  // namespace ember::data
