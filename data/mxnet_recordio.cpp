// data/mxnet_recordio.cpp — MXNet RecordIO scanning, payload headers, .idx
// files, and the conversion of one or several .rec files to one ember
// record file (the pipeline of data/packer.h's run_ordered).
#include "data/mxnet_recordio.h"

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <memory>
#include <unordered_set>

#include "data/image.h"
#include "data/record_file.h"
#include "engine/error.h"

namespace ember::data {
namespace {

constexpr uint32_t kLengthMask = (1u << 29) - 1;

uint64_t align4(uint64_t x) { return (x + 3) & ~uint64_t(3); }

uint32_t load_u32(const uint8_t* p) {
  uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
}

const char* cflag_name(uint32_t c) {
  switch (c) {
    case 0:
      return "whole record";
    case 1:
      return "first part";
    case 2:
      return "middle part";
    default:
      return "last part";
  }
}

}  // namespace

MxnetRecordFile::MxnetRecordFile(const std::string& path) : reader_(path) {
  const uint64_t size = reader_.size();
  uint64_t pos = 0;
  bool in_split = false;  // inside a record of several parts
  Entry cur{};
  uint8_t head[8];
  while (pos < size) {
    EMBER_CHECK(size - pos >= 8, path, ": truncated RecordIO part header at offset ", pos, " (", size - pos,
                " bytes left of 8)");
    reader_.read_at(pos, head, 8);
    const uint32_t magic = load_u32(head), lrec = load_u32(head + 4);
    if (magic != kMxnetRecordMagic) {
      char buf[16];
      std::snprintf(buf, sizeof(buf), "0x%08x", magic);
      fail(cat(path, ": bad RecordIO magic ", buf, " at offset ", pos, " (expected 0xced7230a; not a .rec file, or ",
               "corrupt)"));
    }
    const uint32_t cflag = lrec >> 29, length = lrec & kLengthMask;
    EMBER_CHECK(cflag <= 3, path, ": bad RecordIO part flag ", cflag, " at offset ", pos);
    EMBER_CHECK(length <= size - pos - 8, path, ": RecordIO part at offset ", pos, " claims ", length,
                " bytes, past the end of the file (", size, " bytes)");
    if (cflag == 0 || cflag == 1) {
      EMBER_CHECK(!in_split, path, ": ", cflag_name(cflag), " at offset ", pos, " inside the split record at offset ",
                  cur.offset, " (expected a middle or last part)");
      cur = Entry{pos, 0, parts_.size(), 0};
    } else {
      EMBER_CHECK(in_split, path, ": ", cflag_name(cflag), " at offset ", pos, " without a first part");
      cur.length += 4;  // the magic between parts
    }
    parts_.push_back(Part{pos + 8, length});
    cur.length += length;
    cur.parts += 1;
    in_split = cflag == 1 || cflag == 2;
    if (!in_split) records_.push_back(cur);
    // Every part is padded to 4 bytes; a missing pad at the very end is tolerated.
    pos = std::min<uint64_t>(size, pos + 8 + align4(length));
  }
  EMBER_CHECK(!in_split, path, ": the file ends inside the split record at offset ", cur.offset);
}

int64_t MxnetRecordFile::find(uint64_t offset) const {
  const auto it = std::lower_bound(records_.begin(), records_.end(), offset,
                                   [](const Entry& e, uint64_t o) { return e.offset < o; });
  return it != records_.end() && it->offset == offset ? int64_t(it - records_.begin()) : -1;
}

void MxnetRecordFile::read(size_t i, std::vector<uint8_t>& out, uint64_t begin, uint64_t count) const {
  EMBER_CHECK(i < records_.size(), path(), ": record ", i, " of ", records_.size(), " does not exist");
  const Entry& e = records_[i];
  begin = std::min(begin, e.length);
  const uint64_t end = begin + std::min(count, e.length - begin);
  out.resize(size_t(end - begin));
  // The joined payload: part 0, magic, part 1, magic, ..., last part.
  const uint32_t magic = kMxnetRecordMagic;
  uint64_t pos = 0;  // payload offset of the current segment
  for (size_t k = 0; k < e.parts && pos < end; ++k) {
    const Part& part = parts_[e.first_part + k];
    const uint64_t s0 = pos, s1 = pos + part.length;
    if (s1 > begin && s0 < end) {
      const uint64_t a = std::max(s0, begin), b = std::min(s1, end);
      reader_.read_at(part.data_offset + (a - s0), out.data() + (a - begin), size_t(b - a));
    }
    pos = s1;
    if (k + 1 < e.parts) {
      for (uint64_t j = 0; j < 4; ++j)
        if (pos + j >= begin && pos + j < end)
          out[size_t(pos + j - begin)] = reinterpret_cast<const uint8_t*>(&magic)[j];
      pos += 4;
    }
  }
}

MxnetHeader parse_mxnet_header(const uint8_t* p, size_t n, const std::string& what) {
  EMBER_CHECK(n >= kMxnetHeaderSize, what, ": record of ", n, " bytes is shorter than the 24-byte IRHeader");
  MxnetHeader h;
  std::memcpy(&h.flag, p, 4);
  std::memcpy(&h.label, p + 4, 4);
  std::memcpy(&h.id, p + 8, 8);
  std::memcpy(&h.id2, p + 16, 8);
  if (h.flag == 0) {
    h.labels = {h.label};
    h.image_offset = kMxnetHeaderSize;
  } else {
    const uint64_t label_bytes = uint64_t(h.flag) * 4;
    EMBER_CHECK(label_bytes <= n - kMxnetHeaderSize, what, ": IRHeader flag ", h.flag, " announces ", h.flag,
                " labels (", label_bytes, " bytes), but only ", n - kMxnetHeaderSize, " bytes follow the header");
    h.labels.resize(h.flag);
    std::memcpy(h.labels.data(), p + kMxnetHeaderSize, size_t(label_bytes));
    h.image_offset = size_t(kMxnetHeaderSize + label_bytes);
  }
  for (size_t k = 0; k < h.labels.size(); ++k)
    EMBER_CHECK(std::isfinite(h.labels[k]), what, ": label ", k, " is not a finite number");
  return h;
}

std::vector<std::pair<std::string, uint64_t>> read_mxnet_index(const std::string& idx_path) {
  std::ifstream in(idx_path, std::ios::binary);
  EMBER_CHECK(in.is_open(), idx_path, ": cannot open index file (", std::strerror(errno), ")");
  std::vector<std::pair<std::string, uint64_t>> out;
  std::string line;
  int64_t line_no = 0;
  while (std::getline(in, line)) {
    ++line_no;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.find_first_not_of(" \t") == std::string::npos) continue;
    const size_t tab = line.find('\t');
    EMBER_CHECK(tab != std::string::npos, idx_path, ":", line_no, ": expected 'key<TAB>offset'");
    const std::string key = line.substr(0, tab), off = line.substr(tab + 1);
    errno = 0;
    char* end = nullptr;
    const unsigned long long v = std::strtoull(off.c_str(), &end, 10);
    // (A hostile line may be megabytes long: the message shows its first 40 bytes.)
    EMBER_CHECK(!off.empty() && off[0] >= '0' && off[0] <= '9' && *end == '\0' && errno == 0, idx_path, ":", line_no,
                ": offset '", off.size() > 40 ? off.substr(0, 40) + "..." : off, "' is not a non-negative integer");
    out.emplace_back(key, uint64_t(v));
  }
  EMBER_CHECK(!in.bad(), idx_path, ": read error");
  return out;
}

MxnetConvertReport convert_mxnet(const std::vector<MxnetSource>& sources, const std::string& out_path,
                                 const MxnetConvertOptions& options,
                                 const std::function<void(const PackProgress&)>& progress) {
  using Clock = std::chrono::steady_clock;
  const auto start = Clock::now();
  EMBER_CHECK(options.threads >= 1, "threads ", options.threads, " must be >= 1");
  EMBER_CHECK(!sources.empty(), "no MXNet .rec files to convert");
  std::vector<std::unique_ptr<MxnetRecordFile>> files;
  MxnetConvertReport report;
  for (const MxnetSource& s : sources) {
    files.push_back(std::make_unique<MxnetRecordFile>(s.rec));
    EMBER_CHECK(files.back()->size() > 0, s.rec, ": no records");
    report.rec_records += int64_t(files.back()->size());
  }

  // The order: each part in turn, by its .idx lines or else its file order.
  struct Slot {
    size_t file, record;
  };
  std::vector<Slot> order;
  for (size_t f = 0; f < sources.size(); ++f) {
    const MxnetRecordFile& rec = *files[f];
    if (sources[f].idx.empty()) {
      for (size_t i = 0; i < rec.size(); ++i) order.push_back({f, i});
      continue;
    }
    const std::string& idx_path = sources[f].idx;
    report.used_index = true;
    const auto index = read_mxnet_index(idx_path);
    EMBER_CHECK(!index.empty(), idx_path, ": index file has no entries");
    std::vector<char> used(rec.size(), 0);
    for (size_t k = 0; k < index.size(); ++k) {
      const int64_t r = rec.find(index[k].second);
      EMBER_CHECK(r >= 0, idx_path, ": key ", index[k].first, ": offset ", index[k].second,
                  " is not the start of a record in ", rec.path());
      EMBER_CHECK(!used[size_t(r)], idx_path, ": key ", index[k].first, ": offset ", index[k].second,
                  " is listed twice");
      used[size_t(r)] = 1;
      order.push_back({f, size_t(r)});
    }
    report.unlisted += int64_t(rec.size() - index.size());
  }

  // Pass 1: headers and labels, for the label type.
  std::vector<uint8_t> head;
  std::vector<MxnetHeader> headers(order.size());
  for (size_t k = 0; k < order.size(); ++k) {
    const MxnetRecordFile& rec = *files[order[k].file];
    const size_t r = order[k].record;
    const std::string what = cat(rec.path(), ": record at offset ", rec.offset(r));
    rec.read(r, head, 0, kMxnetHeaderSize);
    EMBER_CHECK(head.size() == kMxnetHeaderSize, what, ": record of ", head.size(),
                " bytes is shorter than the 24-byte IRHeader");
    const uint32_t flag = load_u32(head.data());
    if (flag > 0) rec.read(r, head, 0, kMxnetHeaderSize + uint64_t(flag) * 4);
    headers[k] = parse_mxnet_header(head.data(), head.size(), what);
  }
  RecordFileSettings settings;
  bool class_labels = true;
  float max_label = 0;
  const size_t width = headers.front().labels.size();
  for (size_t k = 0; k < headers.size(); ++k) {
    const auto& labels = headers[k].labels;
    const MxnetRecordFile& rec = *files[order[k].file];
    EMBER_CHECK(labels.size() == width, rec.path(), ": record at offset ", rec.offset(order[k].record), " has ",
                labels.size(), " labels, the first record ", width, " (every record needs the same number)");
    if (labels.size() != 1 || !is_class_index(labels[0]))
      class_labels = false;
    else
      max_label = std::max(max_label, labels[0]);
  }
  if (class_labels) {
    settings.label_type = LabelType::class_index;
    settings.label_width = 1;
    settings.num_classes = uint32_t(max_label) + 1;
  } else {
    settings.label_type = LabelType::f32_vector;
    settings.label_width = uint32_t(width);
  }
  settings.resize = 0, settings.quality = 0, settings.channels = 0;  // original bytes kept

  // Pass 2: read, decode-check, write in order.
  struct Prepared {
    bool ok = false;
    std::string reason;
    Image image;
    std::vector<uint8_t> payload;  // the whole record payload; the image starts at image_offset
  };
  const int64_t n = int64_t(order.size());
  const int64_t window = int64_t(options.threads) * 4 + 4;
  std::vector<Prepared> slots(static_cast<size_t>(window));
  RecordWriter writer(out_path, settings);
  PackProgress prog;
  prog.total = n;

  auto work = [&](int64_t k, size_t slot) {
    Prepared& p = slots[slot];
    p.ok = false;
    p.reason.clear();
    const MxnetRecordFile& rec = *files[order[size_t(k)].file];
    const size_t r = order[size_t(k)].record;
    rec.read(r, p.payload);  // I/O errors stop the conversion
    const MxnetHeader& h = headers[size_t(k)];
    EMBER_CHECK(p.payload.size() >= h.image_offset, rec.path(), ": record at offset ", rec.offset(r), " changed size");
    try {
      decode_image(p.payload.data() + h.image_offset, p.payload.size() - h.image_offset, 0, p.image, "image");
      p.ok = true;
    } catch (const Error& e) {
      const std::string m = e.what();
      p.reason = m.rfind("image: ", 0) == 0 ? m.substr(7) : m;
    }
  };
  auto consume = [&](int64_t k, size_t slot) {
    Prepared& p = slots[slot];
    const MxnetRecordFile& rec = *files[order[size_t(k)].file];
    const size_t r = order[size_t(k)].record;
    const MxnetHeader& h = headers[size_t(k)];
    if (p.ok) {
      RecordInput in;
      in.id = h.id;
      if (class_labels)
        in.label = int64_t(h.labels[0]);
      else
        in.label_values = h.labels;  // the writer derives the label field from the first value
      in.height = uint32_t(p.image.height), in.width = uint32_t(p.image.width);
      in.channels = uint32_t(p.image.channels);
      in.payload = p.payload.data() + h.image_offset;
      in.payload_length = p.payload.size() - h.image_offset;
      in.encoding = sniff_encoding(in.payload, in.payload_length);
      writer.add(in);
      ++report.packed;
      ++prog.packed;
    } else {
      const std::string what = cat(rec.path(), "@", rec.offset(r), " (id ", h.id, ")");
      report.skipped.push_back({what, p.reason});
      ++prog.skipped;
      if (options.on_skip)
        options.on_skip(what, p.reason);
      else
        std::fprintf(stderr, "skipping %s: %s\n", what.c_str(), p.reason.c_str());
    }
    prog.done = k + 1;
    if (progress) {
      prog.seconds = std::chrono::duration<double>(Clock::now() - start).count();
      progress(prog);
    }
  };
  run_ordered(n, options.threads, window, work, consume);
  writer.finish();

  for (const auto& f : files) report.source_bytes += f->file_size();
  PackOutput out;
  out.path = out_path;
  out.records = int64_t(writer.records());
  out.bytes = FileReader(out_path).size();
  report.output_bytes = out.bytes;
  report.outputs.push_back(out);
  report.seconds = std::chrono::duration<double>(Clock::now() - start).count();
  return report;
}

}  // namespace ember::data
