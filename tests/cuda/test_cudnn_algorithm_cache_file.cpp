// tests/cuda/test_cudnn_algorithm_cache_file.cpp — the file format of
// --cudnn-algo-cache (cuda/cudnn/algorithm_cache_file.h), which needs no
// cuDNN: a written file reads back the same, and every malformed file is an
// error naming the file and line. That a cuDNN run writes and reuses it is
// tests/cuda/test_cudnn.cpp (on a GPU).
#include <doctest/doctest.h>

#include <string>

#include "cuda/cudnn/algorithm_cache_file.h"
#include "tests/support/test_helpers.h"

using ember::testing::thrown_message;
using namespace ember::cuda;

TEST_CASE("cudnn algorithm cache file: written choices read back the same") {
  AlgorithmCacheFile f;
  f.device = "NVIDIA H200 | cuDNN 91000";
  f.records.push_back({{0, 2, 1, 1, 0, 64, 3, 224, 224, 64, 7, 7, 2, 2, 3, 3, 1}, 1, 1605632, 1});
  f.records.push_back({{2, 0, 3, 0, 1, 64, 256, 56, 56, 64, 1, 1, 1, 1, 0, 0, 0}, 5, 0, 3});
  const std::string text = format_algorithm_cache(f);
  CHECK(text.rfind("ember cudnn algorithm cache 2\ndevice: NVIDIA H200 | cuDNN 91000\n", 0) == 0);
  CHECK(text.find("0 2 1 1 0 64 3 224 224 64 7 7 2 2 3 3 1 -> 1 1605632 1\n") != std::string::npos);
  const AlgorithmCacheFile back = parse_algorithm_cache(text, "algos.txt");
  CHECK(back.device == f.device);
  REQUIRE(back.records.size() == 2);
  for (size_t i = 0; i < 2; ++i) {
    CHECK(back.records[i].key == f.records[i].key);
    CHECK(back.records[i].algo == f.records[i].algo);
    CHECK(back.records[i].workspace == f.records[i].workspace);
    CHECK(back.records[i].math == f.records[i].math);
  }
  // no records, and blank lines, are fine
  CHECK(parse_algorithm_cache("ember cudnn algorithm cache 2\ndevice: x\n\n", "a").records.empty());
  // a file of the first format (no memory format in the key) reads as one
  // from another device: no records, so it is replaced
  const AlgorithmCacheFile old = parse_algorithm_cache(
      "ember cudnn algorithm cache 1\ndevice: NVIDIA H200 | cuDNN 91000\n0 2 1 1 0 64 3 224 224 64 7 7 2 2 3 3 -> 1 0 1\n",
      "old.txt");
  CHECK(old.records.empty());
  CHECK(old.device != "NVIDIA H200 | cuDNN 91000");
}

TEST_CASE("cudnn algorithm cache file: a malformed file names the file, the line and what is wrong") {
  const std::string head = "ember cudnn algorithm cache 2\ndevice: GPU | cuDNN 9\n";
  const std::string good = "0 2 1 1 0 64 3 224 224 64 7 7 2 2 3 3 0 -> 1 1605632 1\n";
  auto error = [](const std::string& text) {
    return thrown_message([&] { parse_algorithm_cache(text, "/tmp/algos.txt"); });
  };
  CHECK(error("") == "/tmp/algos.txt:1: not an ember cuDNN algorithm cache (the first line must be 'ember cudnn "
                     "algorithm cache 2')");
  CHECK(error("ember cudnn algorithm cache 3\n").find("/tmp/algos.txt:1: not an ember cuDNN algorithm cache") == 0);
  CHECK(error("ember cudnn algorithm cache 2\nGPU\n") ==
        "/tmp/algos.txt:2: expected 'device: <GPU> | cuDNN <version>'");
  CHECK(error(head + good + "0 2 1 1 0 64 3 224 224 64 7 7 2 2 3 3 -> 1 1605632 1\n")
            .find("/tmp/algos.txt:4: expected 17 numbers, '->' and 3 numbers, got '0 2 1") == 0);
  CHECK(error(head + "0 2 1 1 0 64 3 224 224 64 7 7 2 2 3 3 0 => 1 1605632 1\n").find("/tmp/algos.txt:3: expected") == 0);
  CHECK(error(head + "0 2 1 1 0 64 3 224 2x4 64 7 7 2 2 3 3 0 -> 1 1605632 1\n") ==
        "/tmp/algos.txt:3: '2x4' is not an integer");
  CHECK(error(head + "0 2 1 1 0 64 3 224 224 64 7 7 2 2 3 3 0 -> 1 -5 1\n") ==
        "/tmp/algos.txt:3: '-5' is not a non-negative integer");
  CHECK(error(head + "0 2 1 1 0 64 3 224 224 64 7 7 2 2 3 3 0 -> 1 99999999999999999999999 1\n")
            .find("is not a non-negative integer") != std::string::npos);
  CHECK(error(head + "3 2 1 1 0 64 3 224 224 64 7 7 2 2 3 3 0 -> 1 0 1\n") ==
        "/tmp/algos.txt:3: direction 3 is not 0, 1 or 2");
  // a very long line is shown cut
  const std::string junk(500, 'z');
  const std::string long_error = error(head + junk + "\n");
  CHECK(long_error.size() < 250);
  CHECK(long_error.find("zzz...'") != std::string::npos);
}
