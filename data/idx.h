// data/idx.h — reader for IDX files, the format of MNIST and Fashion-MNIST.
//
// An IDX file is a 4-byte magic (two zero bytes, a dtype byte, a dimension
// count), one big-endian u32 per dimension, then the raw row-major data.
// Only dtype 0x08 (unsigned byte) is supported: that is what image and label
// files use. Files may be plain or gzip'd (zlib reads both transparently).
// Every file is untrusted: any inconsistency is an ember::Error whose message
// names the path and what was wrong. data/fashion_mnist.cpp builds on this.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace ember::data {

// Largest data payload read_idx accepts by default (2 GiB): far above any
// IDX data set, far below what a crafted header could make us allocate.
inline constexpr uint64_t kIdxMaxBytes = uint64_t(1) << 31;

struct IdxArray {
  std::vector<int64_t> dims;   // 1 to 4 dimensions, each >= 1
  std::vector<uint8_t> bytes;  // product(dims) bytes, row-major
};

// Reads a whole IDX file (plain or .gz). Throws ember::Error on bad magic,
// an unsupported dtype, 0 or more than 4 dimensions, a zero dimension, a
// payload larger than max_bytes, truncated data, trailing data or a gzip error.
IdxArray read_idx(const std::string& path, uint64_t max_bytes = kIdxMaxBytes);

}  // namespace ember::data
