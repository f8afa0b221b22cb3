// data/record_file.cpp — writing, opening and reading ember record files
// (.erec, data/FORMAT.md): RecordWriter streams records through a 1 MiB
// buffer into PATH.tmp.<pid> and publishes it atomically; RecordFile checks
// the header, metadata and index up front with overflow-safe arithmetic
// (before allocating anything a hostile header asks for) and reads a record
// with one pread, checking both of its CRCs; RecordDataset numbers the
// records of several shards as one sequence.
#include "data/record_file.h"

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cmath>
#include <cstddef>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <fcntl.h>
#include <filesystem>
#include <sys/stat.h>
#include <system_error>
#include <unistd.h>

#include "data/crc32c.h"
#include "engine/error.h"

namespace ember::data {

static_assert(std::endian::native == std::endian::little,
              "record files are little-endian and are read by copying the packed structs");

namespace {

constexpr uint64_t kHeaderSize = sizeof(FileHeader);
constexpr uint64_t kRecordHeaderSize = sizeof(RecordHeader);
constexpr uint64_t kIndexEntrySize = sizeof(IndexEntry);
constexpr uint32_t kMaxLabelWidth = 1u << 16;       // values per f32 label
constexpr uint64_t kMaxMetaLength = 64ull << 20;    // class names of any real data set fit easily
constexpr uint32_t kMaxNumClasses = 0x7FFFFFFFu;    // num_classes() is an int
constexpr size_t kWriteBufferSize = size_t(1) << 20;
constexpr char kPackerName[] = "ember im2rec 1";

std::string errno_text(int err) { return std::generic_category().message(err); }

std::string hex32(uint32_t v) {
  char text[16];
  std::snprintf(text, sizeof text, "0x%08x", v);
  return text;
}

uint32_t file_header_crc(const FileHeader& h) { return crc32c(&h, offsetof(FileHeader, header_crc)); }

uint32_t record_header_crc(const RecordHeader& r) {
  constexpr size_t from = offsetof(RecordHeader, id);
  return crc32c(reinterpret_cast<const unsigned char*>(&r) + from, sizeof(RecordHeader) - from);
}

// Bytes of label values stored in front of each payload.
uint64_t label_bytes(LabelType type, uint32_t width) {
  return type == LabelType::f32_vector ? uint64_t(4) * width : 0;
}

const char* label_type_name(uint32_t type) {
  switch (type) {
    case uint32_t(LabelType::class_index): return "class index";
    case uint32_t(LabelType::f32_vector): return "f32 vector";
    default: return "unknown";
  }
}

bool valid_encoding(uint32_t e) { return e >= uint32_t(Encoding::jpeg) && e <= uint32_t(Encoding::other); }

// The directory holding `path`, whose fsync makes a rename durable.
std::string directory_of(const std::string& path) {
  const size_t slash = path.find_last_of('/');
  if (slash == std::string::npos) return ".";
  if (slash == 0) return "/";
  return path.substr(0, slash);
}

// pwrite of all n bytes at offset, retrying partial writes and EINTR.
void pwrite_all(int fd, const void* data, size_t n, uint64_t offset, const std::string& path) {
  const char* p = static_cast<const char*>(data);
  while (n > 0) {
    const ssize_t k = ::pwrite(fd, p, n, off_t(offset));
    if (k < 0) {
      if (errno == EINTR) continue;
      fail(cat(path, ": write of ", n, " bytes at offset ", offset, " failed: ", errno_text(errno)));
    }
    if (k == 0) fail(cat(path, ": write at offset ", offset, " made no progress"));
    p += k;
    n -= size_t(k);
    offset += uint64_t(k);
  }
}

}  // namespace

// ------------------------------------------------------------------ writer

struct RecordWriter::State {
  std::string path;      // the final name
  std::string tmp_path;  // where the bytes go until finish()
  RecordFileSettings settings;
  uint64_t created_unix = 0;
  UniqueFd fd;
  std::vector<uint8_t> buffer;  // bytes produced but not yet written to fd
  uint64_t flushed = 0;         // bytes written to fd (always at the end of the file)
  std::vector<IndexEntry> index;
  bool broken = false;    // an I/O error happened: only destruction is left
  bool finished = false;  // renamed into place

  uint64_t offset() const { return flushed + buffer.size(); }

  void flush() {
    if (buffer.empty()) return;
    pwrite_all(fd.get(), buffer.data(), buffer.size(), flushed, tmp_path);
    flushed += buffer.size();
    buffer.clear();
  }

  void append(const void* data, size_t n) {
    if (n == 0) return;
    if (buffer.size() + n > kWriteBufferSize) {
      flush();
      if (n >= kWriteBufferSize) {  // large payload: straight to the file
        pwrite_all(fd.get(), data, n, flushed, tmp_path);
        flushed += n;
        return;
      }
    }
    const uint8_t* p = static_cast<const uint8_t*>(data);
    buffer.insert(buffer.end(), p, p + n);
  }

  void pad_to_alignment() {
    static const uint8_t zeros[kRecordAlign] = {};
    const uint64_t pad = align_up(offset()) - offset();
    append(zeros, size_t(pad));
  }

  FileHeader make_header() const {
    FileHeader h{};
    std::memcpy(h.magic, kRecordFileMagic, sizeof h.magic);
    h.version = kRecordFormatVersion;
    h.flags = 0;
    h.label_width = settings.label_width;
    h.label_type = uint32_t(settings.label_type);
    h.num_classes = settings.num_classes;
    h.packer_resize = settings.resize;
    h.packer_quality = settings.quality;
    h.packer_channels = settings.channels;
    h.created_unix = created_unix;
    std::memcpy(h.packer, kPackerName, sizeof kPackerName);
    return h;
  }
};

RecordWriter::RecordWriter(const std::string& path, RecordFileSettings settings) : s_(std::make_unique<State>()) {
  EMBER_CHECK(!path.empty(), "RecordWriter: empty path");
  const RecordFileSettings& st = settings;
  if (st.label_type == LabelType::class_index) {
    EMBER_CHECK(st.label_width == 1, path, ": class-index labels have label width 1, got ", st.label_width);
  } else {
    EMBER_CHECK(st.label_type == LabelType::f32_vector, path, ": unknown label type ", uint32_t(st.label_type));
    EMBER_CHECK(st.label_width >= 1 && st.label_width <= kMaxLabelWidth, path, ": f32 label width ",
                st.label_width, " is outside [1, ", kMaxLabelWidth, "]");
  }
  EMBER_CHECK(st.num_classes <= kMaxNumClasses, path, ": ", st.num_classes, " classes is too many");
  EMBER_CHECK(st.class_names.empty() || st.class_names.size() == st.num_classes, path, ": ",
              st.class_names.size(), " class names for ", st.num_classes, " classes");
  EMBER_CHECK(st.channels == 0 || st.channels == 1 || st.channels == 3, path, ": packer channels must be 0, 1 or 3, got ",
              st.channels);
  uint64_t meta_length = 4;
  for (const std::string& name : st.class_names) {
    EMBER_CHECK(name.size() <= UINT32_MAX, path, ": class name of ", name.size(), " bytes is too long");
    meta_length += 4 + name.size();
  }
  EMBER_CHECK(meta_length <= kMaxMetaLength, path, ": class names take ", meta_length, " bytes, more than the limit ",
              kMaxMetaLength);

  State& s = *s_;
  s.path = path;
  s.tmp_path = atomic_temp_path(path);
  s.settings = std::move(settings);
  s.created_unix = uint64_t(std::time(nullptr));
  s.buffer.reserve(kWriteBufferSize);
  s.fd = UniqueFd(::open(s.tmp_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0666));
  if (!s.fd.valid()) fail(cat(path, ": cannot create temporary file ", s.tmp_path, ": ", errno_text(errno)));
  // Placeholder header (flags 0: a reader rejects the file as incomplete).
  // Nothing below can throw: the buffer is reserved.
  FileHeader h = s.make_header();
  h.header_crc = file_header_crc(h);
  s.append(&h, sizeof h);
}

RecordWriter::~RecordWriter() {
  if (s_ && !s_->finished) {
    s_->fd.reset();
    ::unlink(s_->tmp_path.c_str());
  }
}

void RecordWriter::add(const RecordInput& r) {
  State& s = *s_;
  EMBER_CHECK(!s.finished, s.path, ": add() after finish()");
  EMBER_CHECK(!s.broken, s.path, ": add() after a failed write");
  const RecordFileSettings& st = s.settings;
  const auto where = [&] { return cat(s.path, ": record ", s.index.size(), " (id ", r.id, ")"); };

  if (r.payload == nullptr && r.payload_length != 0)
    fail(cat(where(), ": payload is null but its length is ", r.payload_length));
  int64_t label = r.label;
  if (st.label_type == LabelType::f32_vector) {
    if (r.label_values.size() != st.label_width)
      fail(cat(where(), ": ", r.label_values.size(), " label values, the file's label width is ", st.label_width));
    // The record's label field: the first value truncated toward zero,
    // saturated to the i64 range (NaN: 0).
    const double first = std::trunc(double(r.label_values[0]));
    label = std::isnan(first) ? 0 : first >= 9.2e18 ? INT64_MAX : first <= -9.2e18 ? INT64_MIN : int64_t(first);
  } else {
    if (!r.label_values.empty())
      fail(cat(where(), ": ", r.label_values.size(), " label values given, but the file's labels are class indices"));
    if (st.num_classes > 0 && (label < 0 || label >= int64_t(st.num_classes)))
      fail(cat(where(), ": label ", label, " is outside [0, ", st.num_classes, ")"));
  }
  if (!valid_encoding(uint32_t(r.encoding))) fail(cat(where(), ": unknown encoding ", uint32_t(r.encoding)));
  if (r.height == 0 || r.width == 0) fail(cat(where(), ": image size ", r.height, "x", r.width, " has a zero side"));
  if (r.channels > 4) fail(cat(where(), ": ", r.channels, " channels (at most 4)"));
  if (r.encoding == Encoding::raw) {
    if (r.channels == 0) fail(cat(where(), ": raw pixels need a channel count"));
    const uint64_t pixels = uint64_t(r.height) * r.width;  // < 2^64, and * 4 checked below
    if (pixels > UINT64_MAX / r.channels || pixels * r.channels != r.payload_length)
      fail(cat(where(), ": raw payload of ", r.payload_length, " bytes is not ", r.height, "x", r.width, "x",
               r.channels));
  }

  const uint64_t extra = label_bytes(st.label_type, st.label_width);
  try {
    s.pad_to_alignment();
    RecordHeader h{};
    h.magic = kRecordMagic;
    h.id = r.id;
    h.label = label;
    h.payload_length = r.payload_length;
    h.height = r.height;
    h.width = r.width;
    h.channels = r.channels;
    h.encoding = uint32_t(r.encoding);
    h.extra_label_bytes = uint32_t(extra);
    h.payload_crc = crc32c(r.payload, r.payload_length, crc32c(r.label_values.data(), size_t(extra)));
    h.header_crc = record_header_crc(h);
    const IndexEntry entry{s.offset(), r.payload_length, label, r.height, r.width};
    s.append(&h, sizeof h);
    s.append(r.label_values.data(), size_t(extra));
    s.append(r.payload, r.payload_length);
    s.index.push_back(entry);
  } catch (...) {
    s.broken = true;
    throw;
  }
}

void RecordWriter::finish() {
  State& s = *s_;
  EMBER_CHECK(!s.finished, s.path, ": finish() called twice");
  EMBER_CHECK(!s.broken, s.path, ": finish() after a failed write");
  try {
    FileHeader h = s.make_header();
    h.record_count = s.index.size();

    // Metadata: class count, then (length, name) per class.
    s.pad_to_alignment();
    h.meta_offset = s.offset();
    std::vector<uint8_t> meta;
    const auto put_u32 = [&](uint32_t v) {
      const uint8_t* p = reinterpret_cast<const uint8_t*>(&v);
      meta.insert(meta.end(), p, p + 4);
    };
    put_u32(uint32_t(s.settings.class_names.size()));
    for (const std::string& name : s.settings.class_names) {
      put_u32(uint32_t(name.size()));
      meta.insert(meta.end(), name.begin(), name.end());
    }
    h.meta_length = meta.size();
    h.meta_crc = crc32c(meta.data(), meta.size());
    s.append(meta.data(), meta.size());

    s.pad_to_alignment();
    h.index_offset = s.offset();
    h.index_length = s.index.size() * kIndexEntrySize;
    h.index_crc = crc32c(s.index.data(), size_t(h.index_length));
    s.append(s.index.data(), size_t(h.index_length));
    s.flush();
    if (::fsync(s.fd.get()) != 0) fail(cat(s.path, ": fsync of ", s.tmp_path, " failed: ", errno_text(errno)));

    // The complete header goes last: until it is on disk the file reads as incomplete.
    h.flags = kFlagComplete;
    h.header_crc = file_header_crc(h);
    pwrite_all(s.fd.get(), &h, sizeof h, 0, s.tmp_path);
    if (::fsync(s.fd.get()) != 0) fail(cat(s.path, ": fsync of ", s.tmp_path, " failed: ", errno_text(errno)));
    if (::close(s.fd.release()) != 0) fail(cat(s.path, ": close of ", s.tmp_path, " failed: ", errno_text(errno)));
    if (::rename(s.tmp_path.c_str(), s.path.c_str()) != 0)
      fail(cat(s.path, ": cannot rename ", s.tmp_path, " to it: ", errno_text(errno)));
  } catch (...) {
    s.broken = true;
    throw;
  }
  s.finished = true;
  // The file is in place; make the rename durable.
  const std::string dir = directory_of(s.path);
  UniqueFd dfd(::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (!dfd.valid()) fail(cat(s.path, ": cannot open directory ", dir, " to fsync it: ", errno_text(errno)));
  if (::fsync(dfd.get()) != 0 && errno != EINVAL)  // EINVAL: no fsync on directories here
    fail(cat(s.path, ": fsync of directory ", dir, " failed: ", errno_text(errno)));
}

uint64_t RecordWriter::records() const { return s_->index.size(); }

uint64_t RecordWriter::bytes_written() const { return s_->offset(); }

// ------------------------------------------------------------------ reader

RecordFile::RecordFile(const std::string& path) : path_(path), reader_(path) {
  const uint64_t file_size = reader_.size();
  EMBER_CHECK(file_size >= kHeaderSize, path_, ": too small for a record file (", file_size,
              " bytes; the header alone is ", kHeaderSize, ")");
  reader_.read_at(0, &header_, kHeaderSize);
  const FileHeader& h = header_;
  EMBER_CHECK(std::memcmp(h.magic, kRecordFileMagic, sizeof h.magic) == 0,
              path_, ": not an ember record file (bad magic)");
  EMBER_CHECK(h.version == kRecordFormatVersion, path_, ": record format version ", h.version,
              " is not supported (this build reads version ", kRecordFormatVersion, ")");
  EMBER_CHECK((h.flags & kFlagComplete) != 0, path_, ": incomplete (the packer did not finish)");
  const uint32_t hcrc = file_header_crc(h);
  EMBER_CHECK(hcrc == h.header_crc, path_, ": file header crc32c mismatch (stored ", hex32(h.header_crc),
              ", computed ", hex32(hcrc), ")");

  // Labels.
  if (h.label_type == uint32_t(LabelType::class_index)) {
    EMBER_CHECK(h.label_width == 1, path_, ": class-index labels with label width ", h.label_width, " (must be 1)");
  } else {
    EMBER_CHECK(h.label_type == uint32_t(LabelType::f32_vector), path_, ": unknown label type ", h.label_type);
    EMBER_CHECK(h.label_width >= 1 && h.label_width <= kMaxLabelWidth, path_, ": f32 label width ", h.label_width,
                " is outside [1, ", kMaxLabelWidth, "]");
  }
  EMBER_CHECK(h.num_classes <= kMaxNumClasses, path_, ": ", h.num_classes, " classes is too many");

  // Layout: header | records | metadata | index, all inside the file. Every
  // comparison is arranged so that nothing can overflow.
  const auto check_range = [&](const char* what, uint64_t offset, uint64_t length) {
    EMBER_CHECK(offset >= kHeaderSize && offset % kRecordAlign == 0, path_, ": ", what, " offset ", offset,
                " is not a multiple of 64 after the header");
    EMBER_CHECK(length <= file_size && offset <= file_size - length, path_, ": ", what, " (", length,
                " bytes at offset ", offset, ") lies outside the file (", file_size, " bytes)");
  };
  check_range("metadata", h.meta_offset, h.meta_length);
  check_range("index", h.index_offset, h.index_length);
  EMBER_CHECK(h.index_offset >= h.meta_offset + h.meta_length, path_, ": index (offset ", h.index_offset,
              ") overlaps or precedes the metadata (", h.meta_length, " bytes at offset ", h.meta_offset, ")");
  EMBER_CHECK(h.record_count <= UINT64_MAX / kIndexEntrySize && h.index_length == h.record_count * kIndexEntrySize,
              path_, ": index length ", h.index_length, " does not match ", h.record_count, " records of ",
              kIndexEntrySize, " bytes");
  EMBER_CHECK(h.record_count <= (h.meta_offset - kHeaderSize) / kRecordHeaderSize, path_, ": ", h.record_count,
              " records cannot fit in the ", h.meta_offset - kHeaderSize, " bytes before the metadata");
  EMBER_CHECK(h.meta_length >= 4 && h.meta_length <= kMaxMetaLength, path_, ": metadata length ", h.meta_length,
              " is outside [4, ", kMaxMetaLength, "]");

  // Metadata: the class names.
  {
    std::vector<uint8_t> meta(size_t(h.meta_length));
    reader_.read_at(h.meta_offset, meta.data(), meta.size());
    const uint32_t mcrc = crc32c(meta.data(), meta.size());
    EMBER_CHECK(mcrc == h.meta_crc, path_, ": metadata crc32c mismatch (stored ", hex32(h.meta_crc), ", computed ",
                hex32(mcrc), ")");
    size_t pos = 0;
    const auto take_u32 = [&] {
      uint32_t v;
      std::memcpy(&v, meta.data() + pos, 4);
      pos += 4;
      return v;
    };
    const uint32_t count = take_u32();
    EMBER_CHECK(count <= (meta.size() - 4) / 4, path_, ": metadata claims ", count, " class names in ", meta.size(),
                " bytes");
    EMBER_CHECK(count == 0 || count == h.num_classes, path_, ": metadata has ", count, " class names for ",
                h.num_classes, " classes");
    class_names_.reserve(count);
    for (uint32_t c = 0; c < count; ++c) {
      EMBER_CHECK(meta.size() - pos >= 4, path_, ": metadata ends inside class name ", c);
      const uint32_t length = take_u32();
      EMBER_CHECK(length <= meta.size() - pos, path_, ": class name ", c, " of ", length,
                  " bytes runs past the end of the metadata (", meta.size() - pos, " bytes left)");
      class_names_.emplace_back(reinterpret_cast<const char*>(meta.data() + pos), length);
      pos += length;
    }
    EMBER_CHECK(pos == meta.size(), path_, ": ", meta.size() - pos, " unexpected bytes after the class names");
  }

  // Index: its CRC, then every entry against the layout.
  index_.resize(size_t(h.record_count));
  reader_.read_at(h.index_offset, index_.data(), size_t(h.index_length));
  const uint32_t icrc = crc32c(index_.data(), size_t(h.index_length));
  EMBER_CHECK(icrc == h.index_crc, path_, ": index crc32c mismatch (stored ", hex32(h.index_crc), ", computed ",
              hex32(icrc), ")");
  const uint64_t fixed = kRecordHeaderSize + label_bytes(LabelType(h.label_type), h.label_width);
  const bool check_labels = h.label_type == uint32_t(LabelType::class_index) && h.num_classes > 0;
  uint64_t next_free = kHeaderSize;  // first byte after the previous record
  for (size_t i = 0; i < index_.size(); ++i) {
    const IndexEntry& e = index_[i];
    const auto where = [&] { return cat(path_, ": index entry ", i, " (record at offset ", e.offset, ")"); };
    if (e.offset % kRecordAlign != 0) fail(cat(where(), ": offset is not a multiple of 64"));
    if (e.offset < next_free) {
      if (i == 0) fail(cat(where(), ": starts inside the file header"));
      fail(cat(where(), ": overlaps the previous record (which ends at ", next_free, ")"));
    }
    if (e.offset > h.meta_offset || h.meta_offset - e.offset < fixed ||
        e.payload_length > h.meta_offset - e.offset - fixed)
      fail(cat(where(), ": ", fixed, " + ", e.payload_length, " bytes run past ",
               i + 1 < index_.size() ? "the next record's start or " : "", "the metadata at offset ", h.meta_offset));
    if (check_labels && (e.label < 0 || e.label >= int64_t(h.num_classes)))
      fail(cat(where(), ": label ", e.label, " is outside [0, ", h.num_classes, ")"));
    next_free = e.offset + fixed + e.payload_length;
  }
}

void RecordFile::read(int64_t i, Record& out) const {
  EMBER_CHECK(i >= 0 && i < size(), path_, ": record ", i, " is out of range (the file has ", size(), " records)");
  const IndexEntry& e = index_[size_t(i)];
  const uint64_t extra = label_bytes(LabelType(header_.label_type), header_.label_width);
  const uint64_t body = extra + e.payload_length;  // label values + payload, CRC'd together
  std::vector<uint8_t>& buffer = out.payload;      // reads header + body in one pread, reusing capacity
  buffer.resize(size_t(kRecordHeaderSize + body));
  try {
    reader_.read_at(e.offset, buffer.data(), buffer.size());
  } catch (const Error& err) {
    fail(cat(path_, ": record ", i, " at offset ", e.offset, ": ", err.what()));
  }
  RecordHeader h;
  std::memcpy(&h, buffer.data(), sizeof h);
  const auto bad = [&](const std::string& what) {
    fail(cat(path_, ": record ", i, " (id ", h.id, ") at offset ", e.offset, ": ", what));
  };
  if (h.magic != kRecordMagic) bad(cat("bad record magic ", hex32(h.magic), " (expected ", hex32(kRecordMagic), ")"));
  const uint32_t hcrc = record_header_crc(h);
  if (hcrc != h.header_crc)
    bad(cat("record header crc32c mismatch (stored ", hex32(h.header_crc), ", computed ", hex32(hcrc), ")"));
  if (h.payload_length != e.payload_length)
    bad(cat("payload length ", h.payload_length, " disagrees with the index (", e.payload_length, ")"));
  if (h.label != e.label) bad(cat("label ", h.label, " disagrees with the index (", e.label, ")"));
  if (h.height != e.height || h.width != e.width)
    bad(cat("size ", h.height, "x", h.width, " disagrees with the index (", e.height, "x", e.width, ")"));
  if (h.extra_label_bytes != extra)
    bad(cat(h.extra_label_bytes, " label bytes, the file's labels take ", extra));
  if (!valid_encoding(h.encoding)) bad(cat("unknown encoding ", h.encoding));
  const uint32_t pcrc = crc32c(buffer.data() + kRecordHeaderSize, size_t(body));
  if (pcrc != h.payload_crc)
    bad(cat("payload crc32c mismatch (stored ", hex32(h.payload_crc), ", computed ", hex32(pcrc), ")"));

  out.id = h.id;
  out.label = h.label;
  out.height = h.height;
  out.width = h.width;
  out.channels = h.channels;
  out.encoding = Encoding(h.encoding);
  out.label_values.resize(size_t(extra / 4));
  if (extra > 0) std::memcpy(out.label_values.data(), buffer.data() + kRecordHeaderSize, size_t(extra));
  const size_t skip = size_t(kRecordHeaderSize + extra);
  if (e.payload_length > 0) std::memmove(buffer.data(), buffer.data() + skip, size_t(e.payload_length));
  buffer.resize(size_t(e.payload_length));
}

// ----------------------------------------------------------------- dataset

RecordDataset::RecordDataset(const std::string& spec) {
  namespace fs = std::filesystem;
  EMBER_CHECK(!spec.empty(), "record data: empty path");
  std::vector<std::string> paths;
  std::error_code ec;
  if (spec.find(',') != std::string::npos) {
    size_t begin = 0;
    while (true) {
      const size_t comma = spec.find(',', begin);
      const std::string item = spec.substr(begin, comma == std::string::npos ? std::string::npos : comma - begin);
      EMBER_CHECK(!item.empty(), spec, ": empty entry in the comma-separated list of record files");
      paths.push_back(item);
      if (comma == std::string::npos) break;
      begin = comma + 1;
    }
  } else if (fs::is_directory(spec, ec)) {
    fs::directory_iterator it(spec, ec);
    EMBER_CHECK(!ec, spec, ": cannot list the directory: ", ec.message());
    for (; it != fs::directory_iterator(); it.increment(ec)) {
      const fs::path& p = it->path();
      std::error_code type_ec;
      if (p.extension() == ".erec" && it->is_regular_file(type_ec)) paths.push_back(p.string());
    }
    EMBER_CHECK(!ec, spec, ": cannot list the directory: ", ec.message());
    EMBER_CHECK(!paths.empty(), spec, ": no .erec files in this directory");
    std::sort(paths.begin(), paths.end());
  } else {
    paths.push_back(spec);
  }

  for (const std::string& p : paths) {
    files_.push_back(std::make_unique<RecordFile>(p));
    const RecordFile& f = *files_.back();
    const RecordFile& first = *files_.front();
    const FileHeader& a = first.header();
    const FileHeader& b = f.header();
    EMBER_CHECK(a.label_type == b.label_type && a.label_width == b.label_width, f.path(), ": labels (",
                label_type_name(b.label_type), ", width ", b.label_width, ") disagree with ", first.path(), " (",
                label_type_name(a.label_type), ", width ", a.label_width, ")");
    EMBER_CHECK(a.num_classes == b.num_classes, f.path(), ": ", b.num_classes, " classes disagree with ",
                first.path(), " (", a.num_classes, ")");
    if (f.class_names() != first.class_names()) {
      const auto& x = first.class_names();
      const auto& y = f.class_names();
      if (x.size() != y.size())
        fail(cat(f.path(), ": ", y.size(), " class names disagree with ", first.path(), " (", x.size(), ")"));
      size_t c = 0;
      while (x[c] == y[c]) ++c;
      fail(cat(f.path(), ": class ", c, " is named '", y[c], "', in ", first.path(), " '", x[c], "'"));
    }
    starts_.push_back(total_);
    total_ += f.size();
  }
}

std::string RecordDataset::name() const {
  return cat(files_.front()->path(), files_.size() > 1 ? cat(" (and ", files_.size() - 1, " more shards)") : std::string());
}

std::pair<size_t, int64_t> RecordDataset::locate(int64_t i) const {
  EMBER_CHECK(i >= 0 && i < size(), name(), ": record ", i, " is out of range (", size(), " records)");
  if (selecting_) i = selected_[size_t(i)];
  // The last shard starting at or before i (empty shards share a start with the next one).
  const auto it = std::upper_bound(starts_.begin(), starts_.end(), i);
  const size_t s = size_t(it - starts_.begin()) - 1;
  return {s, i - starts_[s]};
}

const IndexEntry& RecordDataset::entry(int64_t i) const {
  const auto [s, local] = locate(i);
  return files_[s]->entry(local);
}

void RecordDataset::read(int64_t i, Record& out) const {
  const auto [s, local] = locate(i);
  files_[s]->read(local, out);
  if (!new_label_.empty()) out.label = new_label_[size_t(out.label)];  // read() checked it against the index
}

int RecordDataset::num_classes() const {
  return new_label_.empty() ? int(files_.front()->header().num_classes) : selected_classes_;
}

const std::vector<std::string>& RecordDataset::class_names() const {
  return new_label_.empty() ? files_.front()->class_names() : selected_names_;
}

std::string RecordDataset::describe() const {
  const FileHeader& h = files_.front()->header();
  std::string text = cat(files_.size(), files_.size() == 1 ? " shard, " : " shards, ", total_,
                         total_ == 1 ? " record" : " records");
  if (h.num_classes > 0) text += cat(", ", h.num_classes, h.num_classes == 1 ? " class" : " classes");
  if (h.label_type == uint32_t(LabelType::f32_vector)) text += cat(", f32 labels of width ", h.label_width);
  if (selecting_) text += cat("; taking ", selection_, ": ", size(), size() == 1 ? " record" : " records");
  return text;
}

void RecordDataset::select_classes(const std::vector<int>& classes) {
  const FileHeader& h = files_.front()->header();
  EMBER_CHECK(h.label_type == uint32_t(LabelType::class_index), name(),
              ": --classes selects class-index labels, and these records hold f32 label vectors");
  EMBER_CHECK(classes.size() >= 2, name(), ": select at least 2 classes (a classifier of ", classes.size(),
              " class learns nothing)");
  EMBER_CHECK(new_label_.empty(), name(), ": classes are already selected");
  const int known = int(h.num_classes);
  int largest = 0;
  for (int c : classes) {
    EMBER_CHECK(c >= 0 && (known == 0 || c < known), name(), ": class ", c, " is not in [0, ", known, ")");
    largest = std::max(largest, c);
  }
  // Labels are checked against a known class count when the file opens;
  // without one, a label above the largest class asked for is not selected.
  std::vector<int64_t> new_label(size_t(known > 0 ? known : largest + 1), -1);
  std::string list;
  for (size_t k = 0; k < classes.size(); ++k) {
    EMBER_CHECK(new_label[size_t(classes[k])] < 0, name(), ": class ", classes[k], " is selected twice");
    new_label[size_t(classes[k])] = int64_t(k);
    list += cat(k ? "," : "", classes[k]);
  }
  std::vector<int64_t> kept;
  for (int64_t i = 0; i < size(); ++i) {
    const auto [s, local] = locate(i);
    const int64_t label = files_[s]->entry(local).label;
    if (label >= 0 && label < int64_t(new_label.size()) && new_label[size_t(label)] >= 0)
      kept.push_back(selecting_ ? selected_[size_t(i)] : i);
  }
  EMBER_CHECK(!kept.empty(), name(), ": no record has any of the classes ", list);
  std::vector<std::string> names;
  const std::vector<std::string>& all = files_.front()->class_names();
  if (!all.empty())
    for (int c : classes) names.push_back(all[size_t(c)]);
  selected_ = std::move(kept);
  selecting_ = true;
  new_label_ = std::move(new_label);
  selected_classes_ = int(classes.size());
  selected_names_ = std::move(names);
  selection_ += cat(selection_.empty() ? "" : ", ", "classes ", list);
}

void RecordDataset::keep_first(int64_t n) {
  if (n <= 0 || n >= size()) return;
  if (!selecting_) {
    selected_.resize(size_t(n));
    for (int64_t i = 0; i < n; ++i) selected_[size_t(i)] = i;
    selecting_ = true;
  } else {
    selected_.resize(size_t(n));
  }
  selection_ += cat(selection_.empty() ? "" : ", ", "the first ", n);
}

}  // namespace ember::data
