// tests/data/test_records.cpp — data/crc32c and data/record_file: CRC-32C test
// vectors, record file round trips (class-index and f32 labels, empty files,
// odd payload sizes, multi-shard data sets), rejection of every corrupted,
// truncated, oversized or incomplete file with a clean ember::Error, the
// writer's temporary-file handling, offsets above 4 GiB (a sparse file),
// concurrent reads, and a deterministic byte-flip fuzz.
#include <doctest/doctest.h>

#include "tests/support/test_helpers.h"
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <functional>
#include <iterator>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "data/crc32c.h"
#include "data/record_file.h"
#include "data/record_format.h"
#include "engine/error.h"
#include "engine/file_io.h"
#include "tests/support/skip.h"

using namespace ember;
using namespace ember::data;
namespace fs = std::filesystem;

namespace {

using Bytes = std::vector<uint8_t>;
using ember::testing::error_of;
using ember::testing::TempDir;
using ember::testing::contains;
using ember::testing::write_bytes;

// The message of the ember::Error f throws, or nothing when it succeeds;
// any other exception propagates (and fails the test).
std::optional<std::string> error_from(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return std::string(e.what());
  }
  return std::nullopt;
}

template <typename T>
T get(const Bytes& b, size_t offset) {
  T v;
  std::memcpy(&v, b.data() + offset, sizeof v);
  return v;
}

template <typename T>
void put(Bytes& b, size_t offset, T v) {
  std::memcpy(b.data() + offset, &v, sizeof v);
}

// Recomputing CRCs after an edit, so that the edit reaches the checks behind them.
void fix_header_crc(Bytes& b) { put<uint32_t>(b, 252, crc32c(b.data(), 252)); }
void fix_record_crc(Bytes& b, uint64_t offset) {
  put<uint32_t>(b, size_t(offset + 4), crc32c(b.data() + offset + 8, 56));
}
void fix_meta_crc(Bytes& b) {
  const uint64_t off = get<uint64_t>(b, offsetof(FileHeader, meta_offset));
  const uint64_t len = get<uint64_t>(b, offsetof(FileHeader, meta_length));
  put<uint32_t>(b, offsetof(FileHeader, meta_crc), crc32c(b.data() + off, size_t(len)));
  fix_header_crc(b);
}
void fix_index_crc(Bytes& b) {
  const uint64_t off = get<uint64_t>(b, offsetof(FileHeader, index_offset));
  const uint64_t len = get<uint64_t>(b, offsetof(FileHeader, index_length));
  put<uint32_t>(b, offsetof(FileHeader, index_crc), crc32c(b.data() + off, size_t(len)));
  fix_header_crc(b);
}

Bytes pseudo_random_bytes(size_t n, uint32_t seed) {
  Bytes b(n);
  uint32_t x = seed * 2654435761u + 12345u;
  for (auto& v : b) {
    x ^= x << 13;
    x ^= x >> 17;
    x ^= x << 5;
    v = uint8_t(x >> 7);
  }
  return b;
}

// One record as written, to compare what is read back.
using Expected = Record;

RecordInput input_of(const Expected& e) {
  RecordInput r;
  r.id = e.id;
  r.label = e.label;
  r.label_values = e.label_values;
  r.height = e.height;
  r.width = e.width;
  r.channels = e.channels;
  r.encoding = e.encoding;
  r.payload = e.payload.empty() ? nullptr : e.payload.data();
  r.payload_length = e.payload.size();
  return r;
}

const std::vector<size_t> kOddSizes = {0, 1, 63, 64, 65, 1000};

RecordFileSettings class_settings() {
  RecordFileSettings s;
  s.class_names = {"cat", "dog", "bird"};
  s.num_classes = 3;
  s.resize = 256;
  s.quality = 90;
  s.channels = 3;
  return s;
}

RecordFileSettings f32_settings() {
  RecordFileSettings s;
  s.label_type = LabelType::f32_vector;
  s.label_width = 3;
  return s;
}

// Records with the given payload sizes: ids first_id.., labels cycling over
// 3 classes (or f32 vectors of width 3), mixed encodings.
std::vector<Expected> make_records(const std::vector<size_t>& sizes, uint64_t first_id, bool f32) {
  std::vector<Expected> out;
  for (size_t k = 0; k < sizes.size(); ++k) {
    Expected e;
    e.id = first_id + k;
    if (f32) {
      e.label_values = {float(k % 3) + 0.75f, -1.5f * float(k), 1e-3f};
      e.label = int64_t(e.label_values[0]);
    } else {
      e.label = int64_t((first_id + k) % 3);
    }
    e.height = uint32_t(10 + k);
    e.width = uint32_t(20 + 2 * k);
    e.channels = (k % 2) ? 1 : 3;
    e.encoding = (k % 3 == 0) ? Encoding::jpeg : (k % 3 == 1) ? Encoding::png : Encoding::other;
    e.payload = pseudo_random_bytes(sizes[k], uint32_t(first_id + k + 1));
    out.push_back(std::move(e));
  }
  return out;
}

void write_records(const std::string& path, const RecordFileSettings& settings, const std::vector<Expected>& recs) {
  RecordWriter w(path, settings);
  for (const Expected& e : recs) w.add(input_of(e));
  w.finish();
  CHECK(w.records() == recs.size());
  CHECK(w.bytes_written() == fs::file_size(path));
}

void check_record(const Record& r, const Expected& e) {
  CHECK(r.id == e.id);
  CHECK(r.label == e.label);
  CHECK(r.label_values == e.label_values);
  CHECK(r.height == e.height);
  CHECK(r.width == e.width);
  CHECK(r.channels == e.channels);
  CHECK(r.encoding == e.encoding);
  CHECK(r.payload == e.payload);
}

void check_file_matches(const RecordFile& f, const std::vector<Expected>& recs) {
  REQUIRE(f.size() == int64_t(recs.size()));
  Record r;
  for (size_t k = 0; k < recs.size(); ++k) {
    f.read(int64_t(k), r);
    check_record(r, recs[k]);
  }
}

// Opens the file and reads every record; the first error's message, if any.
std::optional<std::string> open_and_read_all(const std::string& path) {
  return error_from([&] {
    RecordFile f(path);
    Record r;
    for (int64_t i = 0; i < f.size(); ++i) f.read(i, r);
  });
}

// A file whose bytes a test flips in place, one at a time.
class FlippableFile {
 public:
  FlippableFile(const std::string& path, const Bytes& content) : bytes_(content) {
    write_bytes(path, content);
    fd_ = UniqueFd(::open(path.c_str(), O_RDWR | O_CLOEXEC));
    REQUIRE(fd_.valid());
  }
  // XORs byte `offset` with `mask` until the returned guard goes out of scope.
  auto flip(uint64_t offset, uint8_t mask) {
    set(offset, uint8_t(bytes_[offset] ^ mask));
    struct Restore {
      FlippableFile* file;
      uint64_t offset;
      ~Restore() { file->set(offset, file->bytes_[offset]); }
    };
    return Restore{this, offset};
  }

 private:
  void set(uint64_t offset, uint8_t value) {
    REQUIRE(::pwrite(fd_.get(), &value, 1, off_t(offset)) == 1);
  }
  Bytes bytes_;
  UniqueFd fd_;
};

// Collects failures of a sweep so that one broken check does not print thousands of lines.
struct Failures {
  std::vector<std::string> list;
  void add(const std::string& s) { list.push_back(s); }
  void check() const {
    std::string first;
    for (size_t k = 0; k < list.size() && k < 5; ++k) first += "\n  " + list[k];
    CHECK_MESSAGE(list.empty(), list.size() << " failures, first:" << first);
  }
};

}  // namespace

// ------------------------------------------------------------------- crc32c

TEST_CASE("crc32c: known vectors, continuation, empty input") {
  CHECK(crc32c("123456789", 9) == 0xE3069283u);
  // RFC 3720 (iSCSI) B.4 vectors: 32 bytes of 0x00, of 0xFF, ascending, descending.
  Bytes zeros(32, 0), ones(32, 0xFF), up(32), down(32);
  for (int i = 0; i < 32; ++i) {
    up[size_t(i)] = uint8_t(i);
    down[size_t(i)] = uint8_t(31 - i);
  }
  CHECK(crc32c(zeros.data(), 32) == 0x8A9136AAu);
  CHECK(crc32c(ones.data(), 32) == 0x62A8AB43u);
  CHECK(crc32c(up.data(), 32) == 0x46DD794Eu);
  CHECK(crc32c(down.data(), 32) == 0x113FDB5Cu);
  // Empty input: 0 from the start, and a continued CRC unchanged.
  CHECK(crc32c(nullptr, 0) == 0u);
  CHECK(crc32c("", 0, 0xDEADBEEFu) == 0xDEADBEEFu);
  // Continuation at every split point, including unaligned tails.
  const Bytes data = pseudo_random_bytes(101, 7);
  const uint32_t whole = crc32c(data.data(), data.size());
  for (size_t split = 0; split <= data.size(); ++split) {
    const uint32_t first = crc32c(data.data(), split);
    CHECK(crc32c(data.data() + split, data.size() - split, first) == whole);
  }
  // The hardware path (three interleaved streams, joined by zero-shift
  // tables) against the table-only one: every length up to past the
  // 3 x 8 KiB blocks, at odd offsets, and continued from a non-zero CRC.
  const Bytes big = pseudo_random_bytes(3 * 8192 * 2 + 3 * 256 + 77, 11);
  for (size_t len : {size_t(0), size_t(7), size_t(767), size_t(768), size_t(769), size_t(24575), size_t(24576),
                     size_t(24577), size_t(3 * 8192 + 3 * 256 + 9), big.size() - 3})
    for (size_t off : {size_t(0), size_t(1), size_t(3)}) {
      CAPTURE(len);
      CAPTURE(off);
      CHECK(crc32c(big.data() + off, len) == crc32c_portable(big.data() + off, len));
      CHECK(crc32c(big.data() + off, len, 0x12345678u) == crc32c_portable(big.data() + off, len, 0x12345678u));
    }
  CHECK(crc32c_portable("123456789", 9) == 0xE3069283u);
  // One flipped bit anywhere changes it.
  Bytes changed = data;
  changed[50] ^= 0x10;
  CHECK(crc32c(changed.data(), changed.size()) != whole);
}

// --------------------------------------------------------------- round trips

TEST_CASE("records: round trip with class-index labels and class names") {
  TempDir dir;
  const std::string path = dir.file("classes.erec");
  const auto recs = make_records(kOddSizes, 100, false);
  const std::time_t before = std::time(nullptr);
  write_records(path, class_settings(), recs);
  CHECK_FALSE(fs::exists(atomic_temp_path(path)));

  RecordFile f(path);
  CHECK(f.path() == path);
  const FileHeader& h = f.header();
  CHECK(std::memcmp(h.magic, "EMBERREC", 8) == 0);
  CHECK(h.version == 1u);
  CHECK(h.flags == kFlagComplete);
  CHECK(h.record_count == recs.size());
  CHECK(h.label_type == uint32_t(LabelType::class_index));
  CHECK(h.label_width == 1u);
  CHECK(h.num_classes == 3u);
  CHECK(h.packer_resize == 256u);
  CHECK(h.packer_quality == 90u);
  CHECK(h.packer_channels == 3u);
  CHECK(h.created_unix >= uint64_t(before));
  CHECK(h.created_unix <= uint64_t(std::time(nullptr)));
  CHECK(std::string(h.packer) == "ember im2rec 1");
  CHECK(std::all_of(std::begin(h.reserved), std::end(h.reserved), [](uint8_t b) { return b == 0; }));
  CHECK(f.class_names() == std::vector<std::string>{"cat", "dog", "bird"});
  // Layout: records 64-aligned from 256, then metadata, then the index up to the end.
  CHECK(h.meta_offset % 64 == 0);
  CHECK(h.index_offset % 64 == 0);
  CHECK(h.index_offset >= h.meta_offset + h.meta_length);
  CHECK(h.index_length == 32 * recs.size());
  CHECK(h.index_offset + h.index_length == f.file_size());
  CHECK(f.entry(0).offset == 256u);
  for (size_t k = 0; k < recs.size(); ++k) {
    const IndexEntry& e = f.entry(int64_t(k));
    CHECK(e.offset % 64 == 0);
    CHECK(e.payload_length == recs[k].payload.size());
    CHECK(e.label == recs[k].label);
    CHECK(e.height == recs[k].height);
    CHECK(e.width == recs[k].width);
    if (k > 0) CHECK(e.offset == align_up(f.entry(int64_t(k - 1)).offset + 64 + recs[k - 1].payload.size()));
  }
  check_file_matches(f, recs);

  // A Record is reused: its payload buffer keeps its capacity, values are replaced.
  Record r;
  f.read(5, r);  // 1000 bytes
  const size_t capacity = r.payload.capacity();
  f.read(1, r);  // 1 byte
  CHECK(r.payload.capacity() == capacity);
  check_record(r, recs[1]);
  CHECK_ERROR_HAS(f.read(6, r), "out of range");
  CHECK_ERROR_HAS(f.read(-1, r), "classes.erec");
}

TEST_CASE("records: round trip with f32 vector labels") {
  TempDir dir;
  const std::string path = dir.file("vectors.erec");
  const auto recs = make_records(kOddSizes, 0, true);
  write_records(path, f32_settings(), recs);
  RecordFile f(path);
  CHECK(f.header().label_type == uint32_t(LabelType::f32_vector));
  CHECK(f.header().label_width == 3u);
  CHECK(f.header().num_classes == 0u);
  CHECK(f.class_names().empty());
  check_file_matches(f, recs);
  // The label field is the first value truncated: 0.75 -> 0, 1.75 -> 1, 2.75 -> 2.
  CHECK(f.entry(0).label == 0);
  CHECK(f.entry(2).label == 2);
  // Record k+1 starts after k's 64 + 12 + payload bytes.
  CHECK(f.entry(1).offset == align_up(256 + 64 + 12 + 0));
  CHECK(f.entry(4).offset == align_up(f.entry(3).offset + 64 + 12 + 64));

  // The label field of values without an ordinary integer part.
  const std::string odd = dir.file("odd.erec");
  const std::vector<float> firsts = {-2.9f, 1e30f, -1e30f, std::nanf(""), 7.999f};
  const std::vector<int64_t> labels = {-2, INT64_MAX, INT64_MIN, 0, 7};
  {
    RecordWriter w(odd, f32_settings());
    const Bytes payload = {1, 2, 3};
    for (float v : firsts) {
      RecordInput r;
      r.label_values = {v, 0.0f, 0.0f};
      r.height = r.width = 1;
      r.payload = payload.data();
      r.payload_length = payload.size();
      w.add(r);
    }
    w.finish();
  }
  const RecordFile g(odd);
  Record r;
  for (size_t k = 0; k < firsts.size(); ++k) {
    CHECK(g.entry(int64_t(k)).label == labels[k]);
    g.read(int64_t(k), r);
    CHECK(r.label == labels[k]);
  }
  g.read(3, r);
  REQUIRE(r.label_values.size() == 3);
  CHECK(std::isnan(r.label_values[0]));
}

TEST_CASE("records: zero-record files, raw payloads and large payloads") {
  TempDir dir;
  SUBCASE("no records") {
    const std::string path = dir.file("empty.erec");
    write_records(path, class_settings(), {});
    RecordFile f(path);
    CHECK(f.size() == 0);
    CHECK(f.header().meta_offset == 256u);
    CHECK(f.class_names().size() == 3);
    Record r;
    CHECK_ERROR_HAS(f.read(0, r), "out of range");
    RecordDataset d(path);
    CHECK(d.size() == 0);
    CHECK(d.describe() == "1 shard, 0 records, 3 classes");
    CHECK_ERROR_HAS(d.locate(0), "out of range");
  }
  SUBCASE("raw pixels, and payloads around and above the 1 MiB write buffer") {
    const std::string path = dir.file("big.erec");
    std::vector<Expected> recs = make_records({12, 700000, 5, (3u << 20) + 17, 400000, 1}, 0, false);
    recs[0].encoding = Encoding::raw;
    recs[0].height = 2;
    recs[0].width = 2;
    recs[0].channels = 3;
    write_records(path, class_settings(), recs);
    check_file_matches(RecordFile(path), recs);
  }
}

TEST_CASE("records: the writer checks its inputs") {
  TempDir dir;
  const std::string path = dir.file("checked.erec");
  RecordWriter w(path, class_settings());
  const Bytes payload = pseudo_random_bytes(48, 3);
  auto good = [&] {
    RecordInput r;
    r.id = 9;
    r.label = 2;
    r.height = 4;
    r.width = 4;
    r.channels = 3;
    r.payload = payload.data();
    r.payload_length = payload.size();
    return r;
  };
  RecordInput r = good();
  r.payload = nullptr;
  CHECK_ERROR_HAS(w.add(r), "null");
  r = good();
  r.label = 3;
  CHECK_ERROR_HAS(w.add(r), "label 3");
  r.label = -1;
  CHECK_ERROR_HAS(w.add(r), "label -1");
  r = good();
  r.label_values = {1.0f};
  CHECK_ERROR_HAS(w.add(r), "label values");
  r = good();
  r.height = 0;
  CHECK_ERROR_HAS(w.add(r), "zero side");
  r = good();
  r.channels = 5;
  CHECK_ERROR_HAS(w.add(r), "channels");
  r = good();
  r.encoding = Encoding(9);
  CHECK_ERROR_HAS(w.add(r), "encoding");
  r = good();
  r.encoding = Encoding::raw;  // 4x4x3 = 48 bytes: fine; 4x4x1 is not
  r.channels = 1;
  CHECK_ERROR_HAS(w.add(r), "raw payload");
  CHECK(w.records() == 0);
  // Rejected inputs wrote nothing: the file is still good.
  w.add(good());
  w.finish();
  CHECK_ERROR_HAS(w.add(good()), "after finish");
  CHECK_ERROR_HAS(w.finish(), "twice");
  RecordFile f(path);
  CHECK(f.size() == 1);
  CHECK(f.entry(0).offset == 256u);

  RecordWriter v(dir.file("v.erec"), f32_settings());
  r = good();
  r.label = 0;
  r.label_values = {1.0f, 2.0f};
  CHECK_ERROR_HAS(v.add(r), "label width is 3");
  r.label_values.clear();
  CHECK_ERROR_HAS(v.add(r), "0 label values");

  RecordFileSettings s = class_settings();
  s.num_classes = 4;  // 3 names
  CHECK_ERROR_HAS(RecordWriter(dir.file("x.erec"), s), "class names");
  s = f32_settings();
  s.label_width = 0;
  CHECK_ERROR_HAS(RecordWriter(dir.file("x.erec"), s), "label width");
  s = class_settings();
  s.label_width = 2;
  CHECK_ERROR_HAS(RecordWriter(dir.file("x.erec"), s), "label width");
  CHECK_ERROR_HAS(RecordWriter(dir.file("no/such/dir/x.erec"), class_settings()), "no/such/dir/x.erec");
}

// ------------------------------------------------------------------ datasets

TEST_CASE("records: data sets of several shards") {
  TempDir dir;
  const auto a = make_records({5, 70, 0}, 0, false);
  const auto b = make_records({1, 2, 3, 200}, 3, false);
  const auto c = make_records({64, 65, 66, 67, 68}, 7, false);
  write_records(dir.file("part-00.erec"), class_settings(), a);
  write_records(dir.file("part-01.erec"), class_settings(), b);
  write_records(dir.file("part-02.erec"), class_settings(), c);
  write_bytes(dir.file("notes.txt"), Bytes{1, 2, 3});
  write_bytes(dir.file("part-03.erec.tmp.999"), Bytes{4, 5});  // a killed packer's leftovers
  std::vector<Expected> all = a;
  all.insert(all.end(), b.begin(), b.end());
  all.insert(all.end(), c.begin(), c.end());

  const auto check_all = [&](const RecordDataset& d) {
    REQUIRE(d.shards() == 3);
    CHECK(d.size() == 12);
    CHECK(d.num_classes() == 3);
    CHECK(d.class_names() == std::vector<std::string>{"cat", "dog", "bird"});
    CHECK(d.describe() == "3 shards, 12 records, 3 classes");
    CHECK(d.locate(0) == std::pair<size_t, int64_t>(0, 0));
    CHECK(d.locate(2) == std::pair<size_t, int64_t>(0, 2));
    CHECK(d.locate(3) == std::pair<size_t, int64_t>(1, 0));
    CHECK(d.locate(6) == std::pair<size_t, int64_t>(1, 3));
    CHECK(d.locate(7) == std::pair<size_t, int64_t>(2, 0));
    CHECK(d.locate(11) == std::pair<size_t, int64_t>(2, 4));
    CHECK_ERROR_HAS(d.locate(12), "out of range");
    CHECK_ERROR_HAS(d.locate(-1), "out of range");
    Record r;
    for (int64_t i = 0; i < 12; ++i) {
      const auto [s, local] = d.locate(i);
      CHECK(&d.entry(i) == &d.shard(s).entry(local));
      CHECK(d.entry(i).payload_length == all[size_t(i)].payload.size());
      d.read(i, r);
      check_record(r, all[size_t(i)]);
    }
    CHECK_ERROR_HAS(d.read(12, r), "out of range");
  };
  SUBCASE("directory (sorted by name, other files ignored)") {
    const RecordDataset d(dir.path.string());
    check_all(d);
    CHECK(d.shard(0).path() == dir.file("part-00.erec"));
    CHECK(d.shard(2).path() == dir.file("part-02.erec"));
  }
  SUBCASE("comma-separated list") {
    check_all(RecordDataset(dir.file("part-00.erec") + "," + dir.file("part-01.erec") + "," +
                            dir.file("part-02.erec")));
    // The list's order is kept, and an empty shard in the middle is skipped over.
    write_records(dir.file("empty.erec"), class_settings(), {});
    const RecordDataset d(dir.file("part-02.erec") + "," + dir.file("empty.erec") + "," + dir.file("part-00.erec"));
    CHECK(d.size() == 8);
    CHECK(d.locate(4) == std::pair<size_t, int64_t>(0, 4));
    CHECK(d.locate(5) == std::pair<size_t, int64_t>(2, 0));
    Record r;
    d.read(5, r);
    check_record(r, a[0]);
  }
  SUBCASE("a single file") {
    const RecordDataset d(dir.file("part-01.erec"));
    CHECK(d.describe() == "1 shard, 4 records, 3 classes");
    Record r;
    d.read(0, r);
    check_record(r, b[0]);
  }
  SUBCASE("bad specs") {
    CHECK_ERROR_HAS(RecordDataset(dir.file("part-00.erec") + ",," + dir.file("part-01.erec")), "empty entry");
    CHECK_ERROR_HAS(RecordDataset(dir.file("part-00.erec") + "," + dir.file("missing.erec")), "missing.erec");
    CHECK_ERROR_HAS(RecordDataset(dir.file("nothing.erec")), "nothing.erec");
    CHECK_ERROR_HAS(RecordDataset(""), "empty");
    fs::create_directories(dir.path / "void");
    CHECK_ERROR_HAS(RecordDataset(dir.file("void")), "no .erec files");
  }
  SUBCASE("shards that disagree are rejected, naming the file") {
    RecordFileSettings renamed = class_settings();
    renamed.class_names[1] = "wolf";
    write_records(dir.file("renamed.erec"), renamed, b);
    const std::string msg = error_of([&] { RecordDataset(dir.file("part-00.erec") + "," + dir.file("renamed.erec")); });
    CHECK(contains(msg, "renamed.erec"));
    CHECK(contains(msg, "wolf"));
    write_records(dir.file("vectors.erec"), f32_settings(), make_records({4}, 0, true));
    CHECK_ERROR_HAS(RecordDataset(dir.file("part-00.erec") + "," + dir.file("vectors.erec")), "vectors.erec");
    RecordFileSettings unnamed = class_settings();
    unnamed.class_names.clear();
    write_records(dir.file("unnamed.erec"), unnamed, b);
    CHECK_ERROR_HAS(RecordDataset(dir.file("part-00.erec") + "," + dir.file("unnamed.erec")), "unnamed.erec");
    RecordFileSettings more = class_settings();
    more.class_names.push_back("fish");
    more.num_classes = 4;
    write_records(dir.file("more.erec"), more, b);
    CHECK_ERROR_HAS(RecordDataset(dir.file("part-00.erec") + "," + dir.file("more.erec")), "more.erec");
    // In a directory, too.
    CHECK_ERROR_HAS(RecordDataset(dir.path.string()), ".erec: ");
  }
}

TEST_CASE("records: select_classes and keep_first take classes and the first N records without repacking") {
  TempDir dir;
  // Labels by global record: 0 1 2 | 0 1 2 0 | 1 2 0 1 2 (id % 3).
  const auto a = make_records({5, 70, 0}, 0, false);
  const auto b = make_records({1, 2, 3, 200}, 3, false);
  const auto c = make_records({64, 65, 66, 67, 68}, 7, false);
  write_records(dir.file("part-00.erec"), class_settings(), a);
  write_records(dir.file("part-01.erec"), class_settings(), b);
  write_records(dir.file("part-02.erec"), class_settings(), c);
  std::vector<Expected> all = a;
  all.insert(all.end(), b.begin(), b.end());
  all.insert(all.end(), c.begin(), c.end());

  RecordDataset d(dir.path.string());
  d.select_classes({2, 0});  // bird -> 0, cat -> 1
  const std::vector<int64_t> kept = {0, 2, 3, 5, 6, 8, 9, 11};
  REQUIRE(d.size() == int64_t(kept.size()));
  CHECK(d.num_classes() == 2);
  CHECK(d.class_names() == std::vector<std::string>{"bird", "cat"});
  CHECK(d.describe() == "3 shards, 12 records, 3 classes; taking classes 2,0: 8 records");
  Record r;
  for (size_t i = 0; i < kept.size(); ++i) {
    d.read(int64_t(i), r);
    Expected e = all[size_t(kept[i])];
    e.label = e.label == 2 ? 0 : 1;
    check_record(r, e);
    CHECK(d.entry(int64_t(i)).offset == d.shard(d.locate(int64_t(i)).first).entry(d.locate(int64_t(i)).second).offset);
  }
  CHECK(d.locate(2) == std::pair<size_t, int64_t>(1, 0));  // global record 3
  CHECK(d.locate(7) == std::pair<size_t, int64_t>(2, 4));  // global record 11
  CHECK_ERROR_HAS(d.read(8, r), "record 8 is out of range (8 records)");

  d.keep_first(5);
  CHECK(d.size() == 5);
  CHECK(d.describe() == "3 shards, 12 records, 3 classes; taking classes 2,0, the first 5: 5 records");
  d.read(4, r);
  CHECK(r.id == 6);
  d.keep_first(0);  // 0: all of them
  d.keep_first(50);
  CHECK(d.size() == 5);

  RecordDataset first(dir.path.string());
  first.keep_first(4);
  CHECK(first.size() == 4);
  CHECK(first.num_classes() == 3);
  CHECK(first.class_names() == std::vector<std::string>{"cat", "dog", "bird"});
  first.read(3, r);
  check_record(r, all[3]);

  SUBCASE("errors name the files") {
    RecordDataset e(dir.file("part-00.erec"));
    CHECK_ERROR_HAS(e.select_classes({1}), "part-00.erec: select at least 2 classes");
    CHECK_ERROR_HAS(e.select_classes({0, 3}), "part-00.erec: class 3 is not in [0, 3)");
    CHECK_ERROR_HAS(e.select_classes({1, 1}), "part-00.erec: class 1 is selected twice");
    write_records(dir.file("vectors.erec"), f32_settings(), make_records({4}, 0, true));
    CHECK_ERROR_HAS(RecordDataset(dir.file("vectors.erec")).select_classes({0, 1}), "f32 label vectors");
    write_records(dir.file("cats.erec"), class_settings(), make_records({4}, 0, false));  // label 0 only
    CHECK_ERROR_HAS(RecordDataset(dir.file("cats.erec")).select_classes({2, 1}),
                    "cats.erec: no record has any of the classes 2,1");
  }
}

// ---------------------------------------------------------------- corruption

TEST_CASE("records: a flipped bit anywhere that matters is an error naming the file") {
  TempDir dir;
  for (const bool f32 : {false, true}) {
    CAPTURE(f32);
    const std::string good_path = dir.file("good.erec");
    const std::string path = dir.file("shard7.erec");
    const auto recs = make_records(kOddSizes, 40, f32);
    write_records(good_path, f32 ? f32_settings() : class_settings(), recs);
    FlippableFile file(path, read_file(good_path));
    const RecordFile reference(good_path);
    const FileHeader h = reference.header();
    const uint64_t extra = f32 ? 12 : 0;
    Failures failures;

    // Every bit of the file header (the reserved bytes are covered by its CRC).
    for (size_t byte = 0; byte < 256; ++byte) {
      for (int bit = 0; bit < 8; ++bit) {
        const auto flipped = file.flip(byte, uint8_t(1u << bit));
        const auto err = error_from([&] { RecordFile f(path); });
        if (!err) failures.add(cat("header byte ", byte, " bit ", bit, ": opened"));
        else if (!contains(*err, path)) failures.add(cat("header byte ", byte, ": ", *err));
        else if (byte == 12 && bit == 0 && !contains(*err, "incomplete")) failures.add(cat("flags: ", *err));
        else if (byte >= 252 && !contains(*err, "header crc32c mismatch")) failures.add(cat("crc: ", *err));
      }
    }
    // Every byte of every record: records are checked when read, so the
    // file opened once sees each flip; that record fails naming the file,
    // its number, id and offset, and the other records still read.
    const RecordFile f(path);
    for (size_t k = 0; k < recs.size(); ++k) {
      const uint64_t off = reference.entry(int64_t(k)).offset;
      const uint64_t length = 64 + extra + recs[k].payload.size();
      for (uint64_t byte = off; byte < off + length; ++byte) {
        const auto flipped = file.flip(byte, uint8_t(1u << (byte % 8)));
        if (const auto open_err = error_from([&] { RecordFile again(path); }))  // opening skips the records
          failures.add(cat("record ", k, " byte ", byte - off, ": open failed: ", *open_err));
        Record r;
        const auto err = error_from([&] { f.read(int64_t(k), r); });
        const bool in_id = byte >= off + 8 && byte < off + 16;
        if (!err) failures.add(cat("record ", k, " byte ", byte - off, ": read fine"));
        else if (!contains(*err, path) || !contains(*err, cat(": record ", k, " (id ")) ||
                 !contains(*err, cat(") at offset ", off, ": ")) ||
                 (!in_id && !contains(*err, cat("(id ", recs[k].id, ")"))))
          failures.add(cat("record ", k, " byte ", byte - off, ": ", *err));
        const size_t other = (k + 1) % recs.size();
        if (error_from([&] { f.read(int64_t(other), r); }))
          failures.add(cat("record ", k, " byte ", byte - off, ": record ", other, " failed too"));
      }
    }
    // Every byte of the metadata and of the index.
    for (const auto& [name, from, length] :
         {std::tuple<std::string, uint64_t, uint64_t>{"metadata", h.meta_offset, h.meta_length},
          std::tuple<std::string, uint64_t, uint64_t>{"index", h.index_offset, h.index_length}}) {
      for (uint64_t byte = from; byte < from + length; ++byte) {
        const auto flipped = file.flip(byte, uint8_t(0x80u >> (byte % 8)));
        const auto err = error_from([&] { RecordFile bad(path); });
        if (!err) failures.add(cat(name, " byte ", byte - from, ": opened"));
        else if (!contains(*err, path) || !contains(*err, name + " crc32c mismatch"))
          failures.add(cat(name, " byte ", byte - from, ": ", *err));
      }
    }
    failures.check();
  }
}

TEST_CASE("records: truncated files fail to open cleanly") {
  TempDir dir;
  const std::string good_path = dir.file("whole.erec");
  const std::string path = dir.file("cut.erec");
  const auto recs = make_records(kOddSizes, 0, false);
  write_records(good_path, class_settings(), recs);
  const Bytes good = read_file(good_path);
  const RecordFile reference(good_path);
  const FileHeader& h = reference.header();
  std::vector<size_t> lengths = {0, 1, 100, 255, 256, size_t(h.meta_offset), size_t(h.meta_offset + 3),
                                 size_t(h.index_offset), size_t(h.index_offset + 16), good.size() - 1};
  for (size_t k = 0; k < recs.size(); ++k) {
    const uint64_t off = reference.entry(int64_t(k)).offset;
    for (uint64_t delta : {0, 1, 32, 64, 65}) lengths.push_back(size_t(off + delta));
    lengths.push_back(size_t(off + 64 + recs[k].payload.size() / 2));
    lengths.push_back(size_t(off + 64 + recs[k].payload.size()));
  }
  Failures failures;
  for (size_t n : lengths) {
    if (n >= good.size()) continue;
    write_bytes(path, good, n);
    const auto err = open_and_read_all(path);
    if (!err) failures.add(cat(n, " bytes: opened and read"));
    else if (!contains(*err, path)) failures.add(cat(n, " bytes: ", *err));
    else if (n < 256 && !contains(*err, "too small")) failures.add(cat(n, " bytes: ", *err));
    else if (n >= 256 && !contains(*err, "outside the file")) failures.add(cat(n, " bytes: ", *err));
  }
  failures.check();
  // A file that shrinks after opening: the read fails cleanly too.
  write_bytes(path, good);
  const RecordFile f(path);
  fs::resize_file(path, reference.entry(3).offset + 10);  // the same file, shorter
  Record r;
  const std::string msg = error_of([&] { f.read(4, r); });
  CHECK(contains(msg, "cut.erec"));
  CHECK(contains(msg, "record 4"));
  f.read(1, r);  // still there
  check_record(r, recs[1]);
}

TEST_CASE("records: oversized and inconsistent lengths are clean errors") {
  TempDir dir;
  const std::string good_path = dir.file("sane.erec");
  const std::string path = dir.file("hostile.erec");
  const auto recs = make_records(kOddSizes, 0, false);
  write_records(good_path, class_settings(), recs);
  const Bytes good = read_file(good_path);
  const RecordFile reference(good_path);
  const FileHeader h = reference.header();
  const uint64_t huge_values[] = {UINT64_MAX, UINT64_MAX - 63, uint64_t(1) << 63, uint64_t(1) << 40,
                                  uint64_t(1) << 59, good.size(), good.size() + 64};

  // Opening fails, naming the file and `part`.
  const auto expect_open_error = [&](const Bytes& bad, const std::string& part) {
    write_bytes(path, bad);
    const std::string msg = error_of([&] { RecordFile f(path); });
    INFO("message: ", msg);
    CHECK(contains(msg, path));
    CHECK(contains(msg, part));
  };
  SUBCASE("header lengths and offsets, with the header crc recomputed") {
    for (uint64_t v : huge_values) {
      CAPTURE(v);
      for (size_t field : {offsetof(FileHeader, index_length), offsetof(FileHeader, meta_length),
                           offsetof(FileHeader, index_offset), offsetof(FileHeader, meta_offset)}) {
        CAPTURE(field);
        Bytes bad = good;
        put<uint64_t>(bad, field, v);
        fix_header_crc(bad);
        expect_open_error(bad, "");
      }
      Bytes bad = good;
      put<uint64_t>(bad, offsetof(FileHeader, record_count), v);
      fix_header_crc(bad);
      expect_open_error(bad, "index length");
      // A record count consistent with the index length, but the index outside the file.
      if (v <= UINT64_MAX / 32) {
        put<uint64_t>(bad, offsetof(FileHeader, index_length), v * 32);
        fix_header_crc(bad);
        expect_open_error(bad, "index");
      }
    }
    Bytes bad = good;  // index before the metadata
    put<uint64_t>(bad, offsetof(FileHeader, index_offset), h.meta_offset);
    fix_header_crc(bad);
    expect_open_error(bad, "overlaps");
    bad = good;  // unaligned metadata
    put<uint64_t>(bad, offsetof(FileHeader, meta_offset), h.meta_offset + 4);
    fix_header_crc(bad);
    expect_open_error(bad, "multiple of 64");
    bad = good;
    put<uint32_t>(bad, offsetof(FileHeader, label_type), 7);
    fix_header_crc(bad);
    expect_open_error(bad, "label type");
    bad = good;
    put<uint32_t>(bad, offsetof(FileHeader, label_width), 0xFFFFFFFFu);
    fix_header_crc(bad);
    expect_open_error(bad, "label width");
    bad = good;
    put<uint32_t>(bad, offsetof(FileHeader, num_classes), 4);  // 3 names in the metadata
    fix_header_crc(bad);
    expect_open_error(bad, "class names");
    bad = good;
    put<uint32_t>(bad, offsetof(FileHeader, version), 2);
    fix_header_crc(bad);
    expect_open_error(bad, "version 2");
  }
  SUBCASE("metadata: class count and name lengths, with the metadata crc recomputed") {
    const size_t meta = size_t(h.meta_offset);
    for (uint32_t v : {0xFFFFFFFFu, 0x80000000u, 1000u, 5u}) {
      CAPTURE(v);
      Bytes bad = good;
      put<uint32_t>(bad, meta, v);  // class count
      fix_meta_crc(bad);
      expect_open_error(bad, "class");
      bad = good;
      put<uint32_t>(bad, meta + 4, v);  // first name's length
      fix_meta_crc(bad);
      expect_open_error(bad, "class name");
      bad = good;
      put<uint32_t>(bad, meta + 4 + 4 + 3 + 4 + 3, v);  // third name's length
      fix_meta_crc(bad);
      expect_open_error(bad, "class name 2");
    }
    for (uint32_t v : {0x7FFFFFFFu, 0x01000000u}) {  // a huge class count that agrees with the header
      CAPTURE(v);
      Bytes bad = good;
      put<uint32_t>(bad, meta, v);
      put<uint32_t>(bad, offsetof(FileHeader, num_classes), v);
      fix_meta_crc(bad);
      expect_open_error(bad, cat("claims ", v, " class names"));
    }
    Bytes bad = good;  // one class name byte fewer: a trailing byte
    put<uint32_t>(bad, meta + 4, 2);
    fix_meta_crc(bad);
    expect_open_error(bad, "");
  }
  SUBCASE("index entries, with the index crc recomputed") {
    const size_t index = size_t(h.index_offset);
    const auto entry_field = [&](size_t k, size_t field) { return index + 32 * k + field; };
    for (uint64_t v : huge_values) {
      CAPTURE(v);
      for (size_t k : {size_t(0), size_t(3), recs.size() - 1}) {
        Bytes bad = good;
        put<uint64_t>(bad, entry_field(k, offsetof(IndexEntry, payload_length)), v);
        fix_index_crc(bad);
        expect_open_error(bad, cat("index entry ", k));
        bad = good;
        put<uint64_t>(bad, entry_field(k, offsetof(IndexEntry, offset)), v & ~uint64_t(63));
        fix_index_crc(bad);
        expect_open_error(bad, "index entry");
      }
    }
    Bytes bad = good;  // unaligned
    put<uint64_t>(bad, entry_field(2, 0), reference.entry(2).offset + 8);
    fix_index_crc(bad);
    expect_open_error(bad, "multiple of 64");
    bad = good;  // inside the header
    put<uint64_t>(bad, entry_field(0, 0), 192);
    fix_index_crc(bad);
    expect_open_error(bad, "header");
    bad = good;  // not increasing
    put<uint64_t>(bad, entry_field(3, 0), reference.entry(2).offset);
    fix_index_crc(bad);
    expect_open_error(bad, "overlaps");
    bad = good;  // record 5 (1000 bytes) would overrun into the metadata
    put<uint64_t>(bad, entry_field(5, 8), recs[5].payload.size() + 64);
    fix_index_crc(bad);
    expect_open_error(bad, "index entry 5");
    for (int64_t label : {int64_t(3), int64_t(-1), INT64_MIN}) {
      bad = good;
      put<int64_t>(bad, entry_field(1, offsetof(IndexEntry, label)), label);
      fix_index_crc(bad);
      expect_open_error(bad, cat("label ", label));
    }
  }
  SUBCASE("record headers, with the record header crc recomputed") {
    const uint64_t off = reference.entry(4).offset;
    const auto expect_read_error = [&](const Bytes& bad, const std::string& part) {
      write_bytes(path, bad);
      const RecordFile f(path);
      Record r;
      const std::string msg = error_of([&] { f.read(4, r); });
      INFO("message: ", msg);
      CHECK(contains(msg, path));
      CHECK(contains(msg, cat("record 4 (id 4) at offset ", off)));
      CHECK(contains(msg, part));
    };
    // Record 4's header field at `field` set to `value` (its type is the
    // field's), the record header crc recomputed.
    const auto expect_field_error = [&](size_t field, auto value, const std::string& part) {
      Bytes bad = good;
      put(bad, size_t(off + field), value);
      fix_record_crc(bad, off);
      expect_read_error(bad, part);
    };
    for (uint64_t v : huge_values) {
      CAPTURE(v);
      expect_field_error(offsetof(RecordHeader, payload_length), v, "payload length");
    }
    expect_field_error(offsetof(RecordHeader, label), int64_t(0), "label 0");  // index says 1
    expect_field_error(offsetof(RecordHeader, width), uint32_t(1), "disagrees with the index");
    expect_field_error(offsetof(RecordHeader, extra_label_bytes), 0xFFFFFFFFu, "label bytes");
    expect_field_error(offsetof(RecordHeader, encoding), uint32_t(77), "encoding");
    expect_field_error(offsetof(RecordHeader, payload_crc), 0x1234abcdu,
                       "payload crc32c mismatch (stored 0x1234abcd, computed 0x");
    Bytes bad = good;  // the magic, which the crc does not cover
    put<uint32_t>(bad, size_t(off), 0x31524346u);
    expect_read_error(bad, "magic");
  }
}

// ----------------------------------------------------- incomplete and temporary files

TEST_CASE("records: incomplete files and the writer's temporary file") {
  TempDir dir;
  const std::string path = dir.file("data.erec");
  const auto first = make_records({10, 20, 30}, 0, false);
  write_records(path, class_settings(), first);
  const Bytes original = read_file(path);

  // The complete flag cleared (a consistent header otherwise).
  Bytes bad = original;
  put<uint32_t>(bad, offsetof(FileHeader, flags), 0);
  fix_header_crc(bad);
  write_bytes(dir.file("cleared.erec"), bad);
  const std::string msg = error_of([&] { RecordFile f(dir.file("cleared.erec")); });
  CHECK(contains(msg, "cleared.erec"));
  CHECK(contains(msg, "incomplete (the packer did not finish)"));

  {
    // A second writer to the same path, destroyed without finish().
    RecordWriter w(path, class_settings());
    const std::string tmp = atomic_temp_path(path);
    CHECK(fs::exists(tmp));
    const auto second = make_records({400000, 400000, 400000}, 50, false);  // > 1 MiB: reaches the file
    for (const Expected& e : second) w.add(input_of(e));
    CHECK(w.records() == 3);
    CHECK(w.bytes_written() > (1u << 20));
    // What a killed packer leaves behind is rejected.
    fs::copy_file(tmp, dir.file("killed.erec"));
    CHECK(fs::file_size(dir.file("killed.erec")) > 256);
    CHECK_ERROR_HAS(RecordFile(dir.file("killed.erec")), "incomplete");
    // The published file is untouched meanwhile.
    CHECK(read_file(path) == original);
  }
  CHECK_FALSE(fs::exists(atomic_temp_path(path)));
  CHECK(read_file(path) == original);
  check_file_matches(RecordFile(path), first);
  {
    RecordWriter w(dir.file("never.erec"), class_settings());  // nothing added, never finished
  }
  CHECK_FALSE(fs::exists(dir.file("never.erec")));
  CHECK_FALSE(fs::exists(atomic_temp_path(dir.file("never.erec"))));
  // A writer that finishes replaces the file.
  const auto third = make_records({7}, 90, false);
  write_records(path, class_settings(), third);
  check_file_matches(RecordFile(path), third);
}

// ---------------------------------------------------------------- > 4 GiB

// Whether the file system of the temporary folders makes sparse files: a
// 6 GiB file with nothing written must take (almost) no blocks.
bool sparse_files_here() {
  TempDir dir;
  const std::string path = dir.file("probe");
  UniqueFd fd(::open(path.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644));
  struct stat st {};
  return fd.valid() && ::ftruncate(fd.get(), off_t(uint64_t(6) << 30)) == 0 && ::fstat(fd.get(), &st) == 0 &&
         uint64_t(st.st_blocks) * 512 <= (uint64_t(64) << 20);
}
const ember::testing::needs kSparseFiles{"the temporary folder's file system makes no sparse files (a 5 GiB record file)",
                                         sparse_files_here};

TEST_CASE("records: offsets above 4 GiB (sparse file built by hand)" * kSparseFiles) {
  TempDir dir;
  const std::string path = dir.file("huge.erec");
  // Record 0 at 256, record 1 at 5 GiB + 192: both read back through RecordFile.
  const Bytes payload0 = pseudo_random_bytes(10, 1), payload1 = pseudo_random_bytes(100, 2);
  const uint64_t far = (uint64_t(5) << 30) + 192;
  const std::vector<std::pair<uint64_t, const Bytes*>> placed = {{256, &payload0}, {far, &payload1}};
  Bytes meta;
  const auto meta_u32 = [&](uint32_t v) {
    meta.resize(meta.size() + 4);
    std::memcpy(meta.data() + meta.size() - 4, &v, 4);
  };
  meta_u32(2);
  for (const char* name : {"left", "right"}) {
    meta_u32(uint32_t(std::strlen(name)));
    meta.insert(meta.end(), name, name + std::strlen(name));
  }
  FileHeader h{};
  std::memcpy(h.magic, "EMBERREC", 8);
  h.version = 1;
  h.flags = 1;
  h.record_count = 2;
  h.meta_offset = align_up(far + 64 + payload1.size());
  h.meta_length = meta.size();
  h.meta_crc = crc32c(meta.data(), meta.size());
  h.index_offset = align_up(h.meta_offset + h.meta_length);
  h.index_length = 64;
  h.label_width = 1;
  h.num_classes = 2;
  std::vector<IndexEntry> index;
  std::vector<RecordHeader> headers;
  for (size_t k = 0; k < placed.size(); ++k) {
    const auto& [offset, payload] = placed[k];
    RecordHeader r{};
    r.magic = 0x31524345;
    r.id = 1000 + k;
    r.label = int64_t(k);
    r.payload_length = payload->size();
    r.height = 3 + uint32_t(k);
    r.width = 5;
    r.channels = 3;
    r.encoding = 1;
    r.payload_crc = crc32c(payload->data(), payload->size());
    r.header_crc = crc32c(reinterpret_cast<const uint8_t*>(&r) + 8, 56);
    headers.push_back(r);
    index.push_back(IndexEntry{offset, r.payload_length, r.label, r.height, r.width});
  }
  h.index_crc = crc32c(index.data(), 64);
  h.header_crc = crc32c(&h, 252);
  const uint64_t file_size = h.index_offset + h.index_length;
  REQUIRE(file_size > (uint64_t(5) << 30));

  {
    UniqueFd fd(::open(path.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644));
    REQUIRE(fd.valid());
    REQUIRE(::ftruncate(fd.get(), off_t(file_size)) == 0);
    struct stat st {};
    REQUIRE(::fstat(fd.get(), &st) == 0);
    REQUIRE_MESSAGE(uint64_t(st.st_blocks) * 512 <= (uint64_t(64) << 20), "not sparse under " << dir.path);
    const auto pwrite_at = [&](uint64_t offset, const void* data, size_t n) {
      REQUIRE(::pwrite(fd.get(), data, n, off_t(offset)) == ssize_t(n));
    };
    pwrite_at(0, &h, sizeof h);
    for (size_t k = 0; k < placed.size(); ++k) {
      pwrite_at(placed[k].first, &headers[k], 64);
      pwrite_at(placed[k].first + 64, placed[k].second->data(), placed[k].second->size());
    }
    pwrite_at(h.meta_offset, meta.data(), meta.size());
    pwrite_at(h.index_offset, index.data(), 64);
  }
  const RecordFile f(path);
  CHECK(f.file_size() == file_size);
  CHECK(f.size() == 2);
  CHECK(f.entry(1).offset == far);
  CHECK(f.class_names() == std::vector<std::string>{"left", "right"});
  Record r;
  f.read(1, r);
  CHECK(r.id == 1001);
  CHECK(r.label == 1);
  CHECK(r.height == 4);
  CHECK(r.payload == payload1);
  f.read(0, r);
  CHECK(r.payload == payload0);
  const RecordDataset d(path);
  CHECK(d.describe() == "1 shard, 2 records, 2 classes");
  d.read(1, r);
  CHECK(r.payload == payload1);
  // A corrupt payload beyond 4 GiB names its 64-bit offset.
  {
    UniqueFd fd(::open(path.c_str(), O_RDWR | O_CLOEXEC));
    REQUIRE(fd.valid());
    const uint8_t flipped = uint8_t(payload1[7] ^ 1);
    REQUIRE(::pwrite(fd.get(), &flipped, 1, off_t(far + 64 + 7)) == 1);
  }
  const std::string msg = error_of([&] { f.read(1, r); });
  CHECK(contains(msg, cat("huge.erec: record 1 (id 1001) at offset ", far, ": payload crc32c mismatch")));
  fs::remove(path);
}

// ----------------------------------------------------------- concurrency, fuzz

TEST_CASE("records: concurrent reads of one file agree") {
  TempDir dir;
  const std::string path = dir.file("shared.erec");
  std::vector<size_t> sizes;
  for (size_t k = 0; k < 300; ++k) sizes.push_back((k * 7919) % 3000);
  const auto recs = make_records(sizes, 0, false);
  write_records(path, class_settings(), recs);
  const RecordFile f(path);

  // Per record: a digest of everything read.
  const auto digest = [](const Record& r) {
    uint32_t c = crc32c(r.payload.data(), r.payload.size());
    const uint64_t fields[] = {r.id, uint64_t(r.label), r.height, r.width, r.channels, uint64_t(r.encoding)};
    return crc32c(fields, sizeof fields, c);
  };
  std::vector<uint32_t> expected(recs.size());
  {
    Record r;
    for (size_t k = 0; k < recs.size(); ++k) {
      f.read(int64_t(k), r);
      expected[k] = digest(r);
    }
  }
  constexpr int kThreads = 4;
  std::vector<std::vector<uint32_t>> got(kThreads, std::vector<uint32_t>(recs.size()));
  std::vector<std::string> errors(kThreads);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      try {
        Record r;
        for (int pass = 0; pass < 3; ++pass)
          for (size_t j = 0; j < recs.size(); ++j) {
            // A different order in each thread: rotated, every other one reversed.
            const size_t rotated = (j + size_t(t) * 75) % recs.size();
            const size_t k = t % 2 ? recs.size() - 1 - rotated : rotated;
            f.read(int64_t(k), r);
            got[size_t(t)][k] = digest(r);
          }
      } catch (const std::exception& e) {
        errors[size_t(t)] = e.what();
      }
    });
  }
  for (auto& th : threads) th.join();
  for (int t = 0; t < kThreads; ++t) {
    CHECK(errors[size_t(t)] == "");
    CHECK(got[size_t(t)] == expected);
  }
}

TEST_CASE("records: random corruption fuzz gives only success or ember::Error") {
  TempDir dir;
  const std::string good_path = dir.file("seed.erec");
  const std::string path = dir.file("fuzzed.erec");
  const auto recs = make_records({0, 1, 63, 64, 65, 300, 1000, 7}, 0, false);
  write_records(good_path, class_settings(), recs);
  const Bytes good = read_file(good_path);
  const RecordFile reference(good_path);
  const FileHeader h = reference.header();

  std::mt19937_64 rng(20240607);
  const auto uniform = [&](uint64_t n) { return std::uniform_int_distribution<uint64_t>(0, n - 1)(rng); };
  const uint64_t interesting[] = {0, 1, 63, 64, 255, 256, UINT32_MAX, uint64_t(1) << 32, uint64_t(1) << 62,
                                  UINT64_MAX, good.size(), h.meta_offset, h.index_offset};
  int errors = 0, successes = 0;
  Failures failures;
  for (int iteration = 0; iteration < 400; ++iteration) {
    Bytes bad = good;
    const int kind = int(uniform(5));
    bool crcs_fixed = true;
    if (kind == 0) {  // random bytes
      crcs_fixed = false;
      for (uint64_t n = 1 + uniform(4); n > 0; --n) bad[uniform(bad.size())] ^= uint8_t(1 + uniform(255));
    } else if (kind == 1) {  // truncation or garbage appended
      crcs_fixed = false;
      if (uniform(2)) bad.resize(uniform(bad.size()));
      else bad.resize(bad.size() + 1 + uniform(200), uint8_t(uniform(256)));
    } else {
      // An interesting value written at a random spot of the header, a
      // record header or the index, with that part's CRC recomputed.
      const uint64_t value = uniform(3) ? interesting[uniform(std::size(interesting))] : rng();
      const size_t width = uniform(2) ? 8 : 4;
      size_t at = 0;
      if (kind == 2) at = size_t(uniform(252 - width + 1));
      else if (kind == 3) at = size_t(reference.entry(int64_t(uniform(recs.size()))).offset + 8 + uniform(56 - width + 1));
      else at = size_t(h.index_offset + uniform(h.index_length - width + 1));
      std::memcpy(bad.data() + at, &value, width);
      if (kind == 3) {
        fix_record_crc(bad, (at / 64) * 64);
      } else if (kind == 4) {
        fix_index_crc(bad);
      } else {
        fix_header_crc(bad);
      }
    }
    write_bytes(path, bad);
    std::vector<Record> read_back;
    const auto err = error_from([&] {
      RecordFile f(path);
      Record r;
      for (int64_t i = 0; i < f.size(); ++i) {
        f.read(i, r);
        read_back.push_back(r);
      }
    });
    if (err) {
      ++errors;
      if (!contains(*err, "fuzzed.erec")) failures.add(cat("iteration ", iteration, ": ", *err));
      continue;
    }
    ++successes;
    // Without recomputed CRCs, success means the change hit padding or
    // trailing bytes: every record reads back exactly.
    if (!crcs_fixed) {
      if (read_back.size() != recs.size()) {
        failures.add(cat("iteration ", iteration, ": ", read_back.size(), " records"));
        continue;
      }
      for (size_t k = 0; k < recs.size(); ++k)
        if (read_back[k].payload != recs[k].payload || read_back[k].id != recs[k].id)
          failures.add(cat("iteration ", iteration, ": record ", k, " differs"));
    }
  }
  failures.check();
  MESSAGE("fuzz: " << errors << " rejected, " << successes << " accepted");
  CHECK(errors > 250);
}
