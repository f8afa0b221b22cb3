// tests/fuzz/fuzz_record_file.cpp — libFuzzer target of ember's record files
// (.erec, data/FORMAT.md, data/record_file.cpp): RecordFile's checks of the
// file header, metadata (class names) and index, then RecordFile::read of
// every record (header CRC, payload CRC, agreement with the index), then the
// same file as a RecordDataset.
//
// Input: one mode byte, then the file. Random bytes almost never get past the
// CRC32C checks, so when bit 0 of the mode is set the target first rewrites
// every CRC the file's own offsets point at (each record's header and body,
// the metadata, the index, the header) and mutations reach the checks behind
// them; with bit 0 clear the CRCs stay as they are and are fuzzed too.
// Seeds: tests/fuzz/corpus/fuzz_record_file (tests/fuzz/make_seeds.cpp).
// Expected: ember::Error. A failure (crash, sanitizer report, leak, another
// exception, > 1 s) is a bug in data/record_file.cpp.
#include <cstddef>
#include <cstring>
#include <vector>

#include "data/crc32c.h"
#include "data/record_file.h"
#include "tests/fuzz/fuzz_util.h"

using namespace ember;
using namespace ember::data;

namespace {

// Rewrites the CRCs of f (a whole file) the way RecordWriter computes them.
void fix_crcs(std::vector<uint8_t>& f) {
  if (f.size() < sizeof(FileHeader)) return;
  const uint64_t size = f.size();
  const auto inside = [&](uint64_t off, uint64_t len) { return off <= size && len <= size - off; };
  FileHeader h;
  std::memcpy(&h, f.data(), sizeof h);
  const uint64_t extra = h.label_type == uint32_t(LabelType::f32_vector) ? uint64_t(4) * h.label_width : 0;
  if (inside(h.index_offset, h.index_length)) {
    const uint64_t n = std::min<uint64_t>(h.index_length / sizeof(IndexEntry), 4096);
    for (uint64_t i = 0; i < n; ++i) {
      IndexEntry e;
      std::memcpy(&e, f.data() + h.index_offset + i * sizeof(IndexEntry), sizeof e);
      if (e.offset < sizeof(FileHeader) || !inside(e.offset, sizeof(RecordHeader))) continue;
      RecordHeader r;
      std::memcpy(&r, f.data() + e.offset, sizeof r);
      const uint64_t body_off = e.offset + sizeof(RecordHeader);
      if (e.payload_length <= size && inside(body_off, extra + e.payload_length))
        r.payload_crc = crc32c(f.data() + body_off, size_t(extra + e.payload_length));
      constexpr size_t from = offsetof(RecordHeader, id);
      r.header_crc = crc32c(reinterpret_cast<const uint8_t*>(&r) + from, sizeof r - from);
      std::memcpy(f.data() + e.offset, &r, sizeof r);
    }
  }
  if (inside(h.meta_offset, h.meta_length)) h.meta_crc = crc32c(f.data() + h.meta_offset, size_t(h.meta_length));
  if (inside(h.index_offset, h.index_length))
    h.index_crc = crc32c(f.data() + h.index_offset, size_t(h.index_length));
  h.header_crc = crc32c(&h, offsetof(FileHeader, header_crc));
  std::memcpy(f.data(), &h, sizeof h);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  std::vector<uint8_t> file(data + 1, data + size);
  if (data[0] & 1) fix_crcs(file);
  fuzz::ScratchFiles scratch;
  const std::string path = fuzz::write_scratch("input.erec", file.data(), file.size());
  scratch.paths.push_back(path);
  try {
    RecordFile rf(path);
    Record rec;
    for (int64_t i = 0; i < rf.size() && i < 1024; ++i) {
      try {
        rf.read(i, rec);
      } catch (const Error& e) {
        fuzz::check_one_line(e);  // one bad record does not end the file: read the others
      }
    }
    RecordDataset ds(path);
    (void)ds.describe();
    if (ds.size() > 0) (void)ds.entry(ds.size() - 1);
  } catch (const Error& e) {
    fuzz::check_one_line(e);
  }
  return 0;
}
