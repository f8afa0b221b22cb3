// data/idx.cpp — the IDX reader: header checks, then the payload through zlib.
#include "data/idx.h"

#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "engine/error.h"

namespace ember::data {
namespace {

constexpr int kMaxDims = 4;
constexpr size_t kChunk = size_t(16) << 20;  // bytes per gzread call

// Owns a gzFile; closes it on every path out.
class GzFile {
 public:
  explicit GzFile(const std::string& path) : f_(gzopen(path.c_str(), "rb")) {}
  ~GzFile() {
    if (f_) gzclose(f_);
  }
  GzFile(const GzFile&) = delete;
  GzFile& operator=(const GzFile&) = delete;
  gzFile get() const { return f_; }

 private:
  gzFile f_;
};

// The zlib error state after a read as "read error: ..." or "gzip error:
// ...", or "" when there is none.
std::string gz_error(gzFile f, const std::string& path) {
  int code = Z_OK;
  const char* msg = gzerror(f, &code);
  if (code == Z_OK) return "";
  if (code == Z_ERRNO) return cat("read error: ", std::strerror(errno));
  std::string m = msg && *msg ? msg : "unknown zlib error";
  if (m.rfind(path + ": ", 0) == 0) m.erase(0, path.size() + 2);  // zlib prefixes the path
  return "gzip error: " + m;
}

// Reads up to n bytes; returns how many were read (fewer only at end of
// file). Throws on a read or gzip error.
size_t read_some(gzFile f, const std::string& path, uint8_t* dst, size_t n) {
  size_t got = 0;
  while (got < n) {
    const unsigned want = unsigned(std::min(n - got, kChunk));
    const int r = gzread(f, dst + got, want);
    if (r < 0) {
      const std::string err = gz_error(f, path);
      fail(cat(path, ": ", err.empty() ? "read error" : err));
    }
    if (r == 0) break;
    got += size_t(r);
  }
  // A short read is either a clean end of file or a damaged gzip stream.
  if (got < n) {
    const std::string err = gz_error(f, path);
    EMBER_CHECK(err.empty(), path, ": ", err);
  }
  return got;
}

}  // namespace

IdxArray read_idx(const std::string& path, uint64_t max_bytes) {
  GzFile file(path);
  EMBER_CHECK(file.get() != nullptr, path, ": cannot open: ", std::strerror(errno));
  gzFile f = file.get();
  gzbuffer(f, 1u << 17);

  uint8_t magic[4];
  const size_t got_magic = read_some(f, path, magic, 4);
  EMBER_CHECK(got_magic == 4, path, ": truncated: file has ", got_magic, " bytes, an IDX header needs at least 4");
  EMBER_CHECK(magic[0] == 0 && magic[1] == 0, path, ": bad magic: first two bytes are 0x", std::hex,
              int(magic[0]), " 0x", int(magic[1]), ", an IDX file starts with two zero bytes");
  EMBER_CHECK(magic[2] == 0x08, path, ": unsupported IDX dtype 0x", std::hex, int(magic[2]),
              " (only 0x08, unsigned byte, is supported)");
  const int ndims = magic[3];
  EMBER_CHECK(ndims >= 1 && ndims <= kMaxDims, path, ": bad IDX header: ", ndims,
              " dimensions (1 to ", kMaxDims, " supported)");

  uint8_t raw_dims[4 * kMaxDims];
  const size_t dim_bytes = size_t(4 * ndims);
  const size_t got_dims = read_some(f, path, raw_dims, dim_bytes);
  EMBER_CHECK(got_dims == dim_bytes, path, ": truncated: header says ", ndims, " dimensions (", dim_bytes,
              " bytes), file has ", got_dims, " of them");

  IdxArray out;
  uint64_t total = 1;
  for (int i = 0; i < ndims; ++i) {
    const uint8_t* p = raw_dims + 4 * i;
    const uint64_t d = uint64_t(p[0]) << 24 | uint64_t(p[1]) << 16 | uint64_t(p[2]) << 8 | uint64_t(p[3]);
    EMBER_CHECK(d > 0, path, ": bad IDX header: dimension ", i, " is 0");
    // total <= max_bytes < 2^63 and d < 2^32: test before multiplying.
    EMBER_CHECK(total <= max_bytes / d, path, ": bad IDX header: dimensions ask for more than ", max_bytes,
                " bytes of data (dimension ", i, " is ", d, ")");
    total *= d;
    out.dims.push_back(int64_t(d));
  }

  // Grow the buffer as data arrives, so a lying header costs no memory.
  out.bytes.reserve(size_t(std::min<uint64_t>(total, uint64_t(256) << 20)));
  size_t have = 0;
  while (have < total) {
    const size_t want = size_t(std::min<uint64_t>(total - have, kChunk));
    out.bytes.resize(have + want);
    const size_t r = read_some(f, path, out.bytes.data() + have, want);
    have += r;
    if (r < want) break;
  }
  EMBER_CHECK(have == total, path, ": truncated: header says ", total, " bytes of data, file has ", have);

  // Count what follows (up to 1 MiB, enough to say how wrong the file is).
  uint8_t extra[4096];
  size_t trailing = 0, r = 0;
  while (trailing < (size_t(1) << 20) && (r = read_some(f, path, extra, sizeof extra)) > 0) trailing += r;
  EMBER_CHECK(trailing == 0, path, ": trailing data: ", trailing < (size_t(1) << 20) ? "" : "at least ", trailing,
              " bytes after the ", total, " bytes of data the header describes");
  return out;
}

}  // namespace ember::data
