// tests/data/test_mxnet_interop.cpp — record files written by MXNet 1.9.1
// itself, read by ember (data/mxnet_recordio.h, as `im2rec --from-mxnet`
// converts them), against what MXNet's own ImageRecordIter reads from them:
// the same records in the same order, the same labels (single floats and
// 3-value label arrays), and the same decoded pixels, PNG and JPEG, with
// and without .idx, a record MXNet wrote split in parts, and the two parts
// MXNet's im2rec tool packs from a folder of photos with --chunks 2 (those
// through build/im2rec --from-mxnet, which joins them into one file). The files and MXNet's readings come from
// scripts/refs/mxnet_records.py, run with the reference environment's
// Python (make refs); without it the test is skipped with that reason.
#include <doctest/doctest.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "data/image.h"
#include "data/mxnet_recordio.h"
#include "data/record_file.h"
#include "engine/file_io.h"
#include "tests/support/refs_env.h"
#include "tests/support/process_helpers.h"
#include "tests/support/skip.h"
#include "tests/support/test_helpers.h"

using namespace ember;
using namespace ember::data;

namespace {

// What ImageRecordIter read, per record.
struct Reading {
  std::vector<double> labels;
  std::vector<uint8_t> rgb;  // [H, W, 3]
};

std::vector<Reading> read_expected(const std::string& path, size_t pixels) {
  const std::vector<uint8_t> bytes = read_file(path);
  std::vector<Reading> out;
  size_t at = 0;
  const auto line = [&] {
    const size_t end = std::string(bytes.begin() + long(at), bytes.end()).find('\n');
    REQUIRE(end != std::string::npos);
    std::string s(bytes.begin() + long(at), bytes.begin() + long(at + end));
    at += end + 1;
    return s;
  };
  while (at < bytes.size()) {
    Reading r;
    const std::string labels = line();
    REQUIRE(labels.rfind("labels ", 0) == 0);
    char* p = const_cast<char*>(labels.c_str()) + 7;
    while (*p) {
      char* end = nullptr;
      r.labels.push_back(std::strtod(p, &end));
      REQUIRE(end != p);
      p = end;
      while (*p == ' ') ++p;
    }
    REQUIRE(line() == "pixels");
    REQUIRE(at + pixels <= bytes.size());
    r.rgb.assign(bytes.begin() + long(at), bytes.begin() + long(at + pixels));
    at += pixels;
    out.push_back(r);
  }
  return out;
}

}  // namespace

TEST_CASE("mxnet interop: files written by MXNet 1.9.1 read as MXNet's ImageRecordIter reads them" * ember::testing::kNeedsMxnetRefs) {
  const ember::testing::TempDir dir;
  std::string out;
  const int code = ember::testing::process::run_command(
      {ember::testing::mxnet_refs_python(), "scripts/refs/mxnet_records.py", dir.file("mx")}, 120, dir.path.string(), "mxnet_records",
      &out);
  INFO(out.substr(0, 3000));
  REQUIRE(code == 0);
  constexpr int H = 24, W = 32;
  // The converted file against ImageRecordIter's readings, record by record.
  const auto compare = [&](const std::string& erec, const std::vector<Reading>& want, size_t label_width) {
    RecordFile records(erec);
    REQUIRE(records.size() == int64_t(want.size()));
    Record r;
    Image img;
    for (int64_t i = 0; i < records.size(); ++i) {
      CAPTURE(i);
      records.read(i, r);
      const Reading& w = want[size_t(i)];
      REQUIRE(w.labels.size() == label_width);
      if (label_width == 1) {
        CHECK(double(r.label) == w.labels[0]);
      } else {
        REQUIRE(r.label_values.size() == label_width);
        for (size_t k = 0; k < label_width; ++k) CHECK(double(r.label_values[k]) == w.labels[k]);
      }
      decode_image(r.payload.data(), r.payload.size(), 3, img, erec + " record " + std::to_string(i));
      REQUIRE(img.height == H);
      REQUIRE(img.width == W);
      int64_t differ = 0, worst = 0;
      for (size_t k = 0; k < img.pixels.size(); ++k) {
        const int64_t d = std::abs(int64_t(img.pixels[k]) - int64_t(w.rgb[k]));
        differ += d != 0;
        worst = std::max(worst, d);
      }
      CHECK_MESSAGE(differ == 0, differ << " of " << img.pixels.size() << " values differ, by up to " << worst);
    }
  };

  SUBCASE("recordio.pack files: PNG and JPEG with .idx, label arrays and a split record without") {
    struct File {
      const char* name;
      bool has_index;
      size_t label_width;
    };
    for (const File& f : {File{"png", true, 1}, File{"jpeg", true, 1}, File{"multi", false, 3}}) {
      CAPTURE(f.name);
      const std::string stem = dir.file(std::string("mx/") + f.name);
      const std::vector<Reading> want = read_expected(stem + ".expected", size_t(H * W * 3));
      REQUIRE(want.size() == 6);
      MxnetConvertOptions o;
      o.on_skip = [](const std::string& what, const std::string& why) { FAIL_CHECK(what << " skipped: " << why); };
      const MxnetConvertReport rep = convert_mxnet(stem + ".rec", f.has_index ? stem + ".idx" : "", stem + ".erec", o);
      CHECK(rep.used_index == f.has_index);
      CHECK(rep.rec_records == 6);
      compare(stem + ".erec", want, f.label_width);
    }
  }
  SUBCASE("MXNet's im2rec tool on a photo folder, two parts (--chunks 2), through build/im2rec --from-mxnet") {
    std::vector<Reading> want;
    for (const char* part : {"im2rec_0", "im2rec_1"}) {
      const auto w = read_expected(dir.file(std::string("mx/") + part + ".expected"), size_t(H * W * 3));
      REQUIRE(w.size() == 6);
      want.insert(want.end(), w.begin(), w.end());
    }
    // The .idx files after both .rec files: each pairs with its .rec by name.
    const std::string erec = dir.file("photos.erec");
    std::string log;
    const int rc = ember::testing::process::run_command(
        {ember::testing::process::binary_dir() + "/im2rec", "--from-mxnet", dir.file("mx/im2rec_0.rec"),
         dir.file("mx/im2rec_1.rec"), dir.file("mx/im2rec_1.idx"), dir.file("mx/im2rec_0.idx"), erec},
        60, dir.path.string(), "im2rec_from_mxnet", &log);
    INFO(log);
    REQUIRE(rc == 0);
    CHECK(log.find("in the order of " + dir.file("mx/im2rec_0.idx")) != std::string::npos);
    CHECK(log.find("converted 12 images") != std::string::npos);
    compare(erec, want, 1);
    // The folder's 3 classes, as im2rec's list numbered them.
    CHECK(RecordFile(erec).header().num_classes == 3);
  }
}
