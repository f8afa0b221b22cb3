// cuda/cudnn/algorithm_cache_file.h — the text file behind
// --cudnn-algo-cache: cuDNN's convolution algorithm choices, one line per
// (direction, dtype, math, mode, geometry, memory format), written by one run and read by
// the next, so that a timed choice (--cudnn-benchmark 1) is paid for once
// per machine, not once per run (what MXNet's autotune and TensorRT's timing
// cache keep). The second line names the GPU and the cuDNN version the
// choices were made with; cuda/cudnn/cudnn_conv.cu ignores (and then
// replaces) a file made on another GPU or cuDNN. No cuDNN types here, so
// the format is tested on machines without cuDNN.
//
//   ember cudnn algorithm cache 2
//   device: NVIDIA H200 | cuDNN 91000
//   0 2 1 1 0 64 3 224 224 64 7 7 2 2 3 3 1 -> 1 1605632 1
//   ^ the 17 numbers of the key           ^ algorithm, workspace bytes, math type
// A file of the first format (16 numbers, no memory format) reads as one
// from another device: ignored, then replaced.
#pragma once
#include <array>
#include <cstdint>
#include <cstdlib>
#include <sstream>
#include <string>
#include <vector>

#include "engine/error.h"

namespace ember::cuda {

// direction, dtype, math, benchmark, deterministic, N, C, H, W, K, R, S,
// stride h, stride w, pad h, pad w, channels_last (cudnn_conv.cu's Key, in
// that order)
inline constexpr int kAlgorithmKeyFields = 17;

struct AlgorithmRecord {
  std::array<int64_t, kAlgorithmKeyFields> key{};
  int64_t algo = 0, workspace = 0, math = 0;
};

struct AlgorithmCacheFile {
  std::string device;  // "<GPU name> | cuDNN <version>"
  std::vector<AlgorithmRecord> records;
};

inline constexpr const char* kAlgorithmCacheMagic = "ember cudnn algorithm cache 2";
inline constexpr const char* kAlgorithmCacheMagicV1 = "ember cudnn algorithm cache 1";

inline std::string format_algorithm_cache(const AlgorithmCacheFile& f) {
  std::ostringstream out;
  out << kAlgorithmCacheMagic << "\ndevice: " << f.device << "\n";
  for (const AlgorithmRecord& r : f.records) {
    for (int64_t v : r.key) out << v << ' ';
    out << "-> " << r.algo << ' ' << r.workspace << ' ' << r.math << '\n';
  }
  return out.str();
}

namespace detail {
// The whole of `word` as a decimal integer (a sign allowed), or false.
inline bool parse_int64(const std::string& word, int64_t& v) {
  if (word.empty() || word.size() > 20) return false;
  char* end = nullptr;
  v = std::strtoll(word.c_str(), &end, 10);
  return end == word.c_str() + word.size();
}
}  // namespace detail

// The file's content; a malformed file is an Error naming `path`, the line
// and what was wrong.
inline AlgorithmCacheFile parse_algorithm_cache(const std::string& text, const std::string& path) {
  std::istringstream in(text);
  std::string line;
  const bool first_line = bool(std::getline(in, line));
  if (first_line && line == kAlgorithmCacheMagicV1) return AlgorithmCacheFile{"(an earlier format)", {}};
  EMBER_CHECK(first_line && line == kAlgorithmCacheMagic, path, ":1: not an ember cuDNN algorithm cache (",
              "the first line must be '", kAlgorithmCacheMagic, "')");
  EMBER_CHECK(std::getline(in, line) && line.rfind("device: ", 0) == 0, path,
              ":2: expected 'device: <GPU> | cuDNN <version>'");
  AlgorithmCacheFile f;
  f.device = line.substr(8);
  for (int number = 3; std::getline(in, line); ++number) {
    if (line.empty()) continue;
    std::istringstream words(line);
    std::vector<std::string> w;
    for (std::string s; words >> s;) w.push_back(s);
    const std::string shown = line.size() > 120 ? line.substr(0, 120) + "..." : line;
    EMBER_CHECK(w.size() == size_t(kAlgorithmKeyFields + 4) && w[kAlgorithmKeyFields] == "->", path, ":", number,
                ": expected ", kAlgorithmKeyFields, " numbers, '->' and 3 numbers, got '", shown, "'");
    AlgorithmRecord r;
    for (int i = 0; i < kAlgorithmKeyFields; ++i)
      EMBER_CHECK(detail::parse_int64(w[size_t(i)], r.key[size_t(i)]), path, ":", number, ": '", w[size_t(i)],
                  "' is not an integer");
    int64_t* out[3] = {&r.algo, &r.workspace, &r.math};
    for (int i = 0; i < 3; ++i)
      EMBER_CHECK(detail::parse_int64(w[size_t(kAlgorithmKeyFields + 1 + i)], *out[i]) && *out[i] >= 0, path, ":",
                  number, ": '", w[size_t(kAlgorithmKeyFields + 1 + i)], "' is not a non-negative integer");
    EMBER_CHECK(r.key[0] >= 0 && r.key[0] <= 2, path, ":", number, ": direction ", r.key[0], " is not 0, 1 or 2");
    f.records.push_back(r);
  }
  return f;
}

}  // namespace ember::cuda
