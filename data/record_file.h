// data/record_file.h — reading and writing ember record files (.erec).
//
// RecordWriter streams records into a temporary file and publishes it
// atomically at finish(); RecordFile opens a finished file, checks its
// header, metadata and index up front, and reads any record by number with
// pread, checking the record's header and payload CRCs. RecordDataset joins
// the shards of a data set into one numbered sequence. Every problem is an
// ember::Error naming the file (and the record id and offset when one record
// is bad). The layout is data/FORMAT.md.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "data/record_format.h"
#include "engine/file_io.h"

namespace ember::data {

// What the writer puts in the file header and metadata.
struct RecordFileSettings {
  std::vector<std::string> class_names;  // label i is class_names[i] (may be empty)
  uint32_t num_classes = 0;
  LabelType label_type = LabelType::class_index;
  uint32_t label_width = 1;
  uint32_t resize = 0;     // packer settings, for the record
  uint32_t quality = 0;
  uint32_t channels = 0;
};

// One record to write.
struct RecordInput {
  uint64_t id = 0;
  int64_t label = 0;                // class index (f32_vector files: the writer sets it from label_values[0])
  std::vector<float> label_values;  // exactly label_width values when label_type is f32_vector
  uint32_t height = 0, width = 0, channels = 0;
  Encoding encoding = Encoding::jpeg;
  const uint8_t* payload = nullptr;
  size_t payload_length = 0;
};

class RecordWriter {
 public:
  RecordWriter(const std::string& path, RecordFileSettings settings);
  ~RecordWriter();  // without finish(): removes the temporary file
  RecordWriter(const RecordWriter&) = delete;
  RecordWriter& operator=(const RecordWriter&) = delete;

  void add(const RecordInput& record);
  // Writes metadata, index and the final header, then renames into place.
  void finish();
  uint64_t records() const;
  uint64_t bytes_written() const;

 private:
  struct State;
  std::unique_ptr<State> s_;
};

// One record read back.
struct Record {
  uint64_t id = 0;
  int64_t label = 0;
  std::vector<float> label_values;
  uint32_t height = 0, width = 0, channels = 0;
  Encoding encoding = Encoding::jpeg;
  std::vector<uint8_t> payload;
};

class RecordFile {
 public:
  // Opens and validates header, metadata and index (not the records).
  explicit RecordFile(const std::string& path);

  const std::string& path() const { return path_; }
  const FileHeader& header() const { return header_; }
  int64_t size() const { return int64_t(index_.size()); }
  const IndexEntry& entry(int64_t i) const { return index_[size_t(i)]; }
  const std::vector<std::string>& class_names() const { return class_names_; }
  uint64_t file_size() const { return reader_.size(); }

  // Reads record i (0 <= i < size()), checking both CRCs and that the
  // record agrees with its index entry. Reuses out's buffers.
  void read(int64_t i, Record& out) const;

 private:
  std::string path_;
  FileReader reader_;
  FileHeader header_{};
  std::vector<IndexEntry> index_;
  std::vector<std::string> class_names_;
};

// The shards of one data set, numbered 0..size()-1 in shard order; or a
// selection of their records (select_classes, keep_first), numbered
// 0..size()-1 in the same order, without repacking anything.
class RecordDataset {
 public:
  // `spec`: a .erec file, a comma-separated list of files, or a directory
  // (every *.erec in it, sorted by name). All shards must agree on label
  // type, width and class names.
  explicit RecordDataset(const std::string& spec);

  int64_t size() const { return selecting_ ? int64_t(selected_.size()) : total_; }
  size_t shards() const { return files_.size(); }
  const RecordFile& shard(size_t s) const { return *files_[s]; }
  // Shard and local record number of record i.
  std::pair<size_t, int64_t> locate(int64_t i) const;
  // Record i's index entry, as its file stores it (the label before
  // select_classes relabels it: read() gives the new one).
  const IndexEntry& entry(int64_t i) const;
  void read(int64_t i, Record& out) const;
  int num_classes() const;
  const std::vector<std::string>& class_names() const;
  std::string describe() const;  // "3 shards, 1281167 records, 1000 classes"

  // Keeps only the records of `classes` (class-index labels), relabelled
  // 0..k-1 in the order given, as train_resnet's --classes does for
  // Fashion-MNIST; num_classes() and class_names() follow. At least 2
  // classes, each in [0, num_classes()), none twice: errors name the files.
  void select_classes(const std::vector<int>& classes);
  // Keeps only the first n records (of the selection so far; --num-examples);
  // n <= 0 or n >= size() keeps them all.
  void keep_first(int64_t n);

 private:
  std::string name() const;  // the first file, and how many more shards
  std::vector<std::unique_ptr<RecordFile>> files_;
  std::vector<int64_t> starts_;  // global number of each shard's first record
  int64_t total_ = 0;
  // A selection: the global numbers of the records kept, in order; the new
  // label of each old class (-1: not selected), and the selected names.
  bool selecting_ = false;
  std::vector<int64_t> selected_;
  std::vector<int64_t> new_label_;
  int selected_classes_ = 0;
  std::vector<std::string> selected_names_;
  std::string selection_;  // for describe(): "classes 3,1", "the first 100"
};

}  // namespace ember::data
