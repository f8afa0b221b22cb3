// data/mxnet_recordio.h — reading MXNet's RecordIO (.rec, with an optional
// .idx), to convert data sets packed by MXNet's im2rec into ember record
// files (im2rec --from-mxnet).
//
// The layout (dmlc-core's recordio.h): a file is a sequence of parts
//     u32 magic 0xced7230a | u32 lrecord | data | zero padding to 4 bytes
// with cflag = lrecord >> 29 and length = lrecord & (2^29 - 1). cflag 0 is a
// whole record; a payload that contains the magic at a 4-byte-aligned
// offset is written split at each such place as parts with cflag 1 (first),
// 2 (middle), 3 (last), the magic itself left out: the reader joins the
// parts putting the 4 magic bytes back between them. A record's payload
// (MXNet's recordio.pack) is the IRHeader struct 'IfQQ' — u32 flag, f32
// label, u64 id, u64 id2, 24 bytes — then, when flag > 0, `flag` f32 labels
// (the label field is then unused), then the encoded image. The .idx file
// has one "key\toffset" line per record (the byte offset of its first part).
// All values are little-endian.
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "data/packer.h"
#include "engine/file_io.h"

namespace ember::data {

inline constexpr uint32_t kMxnetRecordMagic = 0xced7230a;
inline constexpr size_t kMxnetHeaderSize = 24;  // IRHeader 'IfQQ'

// A .rec file: the part structure is scanned and checked on opening (reading
// 8 bytes per part); payloads are read on demand (thread-safe, pread).
class MxnetRecordFile {
 public:
  explicit MxnetRecordFile(const std::string& path);

  const std::string& path() const { return reader_.path(); }
  uint64_t file_size() const { return reader_.size(); }
  size_t size() const { return records_.size(); }
  uint64_t offset(size_t i) const { return records_[i].offset; }  // of the record's first part
  uint64_t length(size_t i) const { return records_[i].length; }  // joined payload bytes
  // The record starting at `offset`, or -1.
  int64_t find(uint64_t offset) const;
  // Bytes [begin, begin + count) of record i's joined payload; count is cut
  // at the payload's end. Reuses out.
  void read(size_t i, std::vector<uint8_t>& out, uint64_t begin = 0, uint64_t count = UINT64_MAX) const;

 private:
  struct Part {
    uint64_t data_offset;  // file offset of the part's data
    uint32_t length;
  };
  struct Entry {
    uint64_t offset, length;
    size_t first_part, parts;
  };
  FileReader reader_;
  std::vector<Part> parts_;
  std::vector<Entry> records_;
};

// The IRHeader and labels at the start of a payload.
struct MxnetHeader {
  uint32_t flag = 0;
  float label = 0;
  uint64_t id = 0, id2 = 0;
  std::vector<float> labels;  // flag > 0: the flag labels; else {label}
  size_t image_offset = 0;    // where the image bytes start in the payload
};

// Parses the header of a payload of n bytes (n may be just the first bytes:
// enough for 24 + 4 * flag). Errors start with `what`.
MxnetHeader parse_mxnet_header(const uint8_t* payload, size_t n, const std::string& what);

// The (key, offset) lines of a .idx file, in file order; errors name FILE:LINE.
std::vector<std::pair<std::string, uint64_t>> read_mxnet_index(const std::string& idx_path);

struct MxnetConvertOptions {
  int threads = 1;
  // As PackOptions::on_skip: unset prints "skipping REC@OFFSET: reason" to stderr.
  std::function<void(const std::string& what, const std::string& reason)> on_skip;
};

struct MxnetConvertReport : PackReport {
  int64_t rec_records = 0;  // logical records in the .rec files
  int64_t unlisted = 0;     // records of .rec files that their .idx does not name (not converted)
  bool used_index = false;  // some order came from a .idx
};

// One .rec file and its optional .idx.
struct MxnetSource {
  std::string rec, idx;
};

// Converts .rec files — one, or the parts im2rec writes with --chunks
// (prefix_0.rec, prefix_1.rec, ...) — to one ember record file at out_path,
// the parts one after another. Within a part the records follow its .idx
// lines when it has one (every offset must be the start of a record, none
// twice), else its file order. The image bytes are kept as they are
// (pass-through) after a decode check; undecodable images are skipped.
// Labels: one integer >= 0 per record (flag 0, or flag 1) gives class-index
// records with num_classes = max + 1, else f32 vectors of `flag` values (the
// same for every record). Ids are the IRHeader ids. The .rec files are read
// twice: headers and labels first (to choose the label type), then the
// records.
MxnetConvertReport convert_mxnet(const std::vector<MxnetSource>& sources, const std::string& out_path,
                                 const MxnetConvertOptions& options,
                                 const std::function<void(const PackProgress&)>& progress = {});
inline MxnetConvertReport convert_mxnet(const std::string& rec_path, const std::string& idx_path,
                                        const std::string& out_path, const MxnetConvertOptions& options,
                                        const std::function<void(const PackProgress&)>& progress = {}) {
  return convert_mxnet({MxnetSource{rec_path, idx_path}}, out_path, options, progress);
}

}  // namespace ember::data
