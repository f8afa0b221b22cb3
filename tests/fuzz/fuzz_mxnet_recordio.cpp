// tests/fuzz/fuzz_mxnet_recordio.cpp — libFuzzer target of the MXNet
// RecordIO import (data/mxnet_recordio.cpp, im2rec --from-mxnet): the part
// structure of a .rec (magic, cflag, lengths, split records joined with the
// magic put back), the IRHeader and its labels, the .idx file (key<TAB>offset
// lines whose offsets must start records), the label-type choice, the decode
// check of every image, and writing the ember record file, which must then
// open and read back cleanly.
//
// Input: the .rec bytes, optionally followed by the 8 bytes "EMBERIDX" and the
// .idx text; both are written to scratch files (the importer takes paths).
// Seeds: tests/fuzz/corpus/fuzz_mxnet_recordio (tests/fuzz/make_seeds.cpp);
// dictionary tests/fuzz/fuzz_mxnet_recordio.dict.
// Expected: ember::Error. A failure (crash, sanitizer report, leak, another
// exception, an output that does not read back, > 1 s) is a bug in
// data/mxnet_recordio.cpp (or the record writer it feeds).
#include <algorithm>
#include <cstring>

#include "data/mxnet_recordio.h"
#include "data/record_file.h"
#include "tests/fuzz/fuzz_util.h"

using namespace ember;
using namespace ember::data;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const char kSplit[] = "EMBERIDX";
  const uint8_t* split = std::search(data, data + size, kSplit, kSplit + 8);
  const size_t rec_size = size_t(split - data);
  fuzz::ScratchFiles scratch;
  const std::string rec = fuzz::write_scratch("input.rec", data, rec_size);
  const std::string out = fuzz::scratch_dir() + "/output.erec";
  scratch.paths = {rec, out};
  std::string idx;
  if (split != data + size) {
    idx = fuzz::write_scratch("input.idx", split + 8, size - rec_size - 8);
    scratch.paths.push_back(idx);
  }
  MxnetConvertReport report;
  try {
    MxnetConvertOptions options;
    options.on_skip = [](const std::string&, const std::string&) {};
    report = convert_mxnet(rec, idx, out, options);
  } catch (const Error& e) {
    fuzz::check_one_line(e);
    return 0;
  }
  // Converted: the output is an ember record file holding every packed record.
  try {
    RecordFile f(out);
    if (f.size() != report.packed) fuzz::fuzz_fail("output holds a different number of records");
    Record r;
    for (int64_t i = 0; i < f.size(); ++i) f.read(i, r);
  } catch (const Error& e) {
    fuzz::fuzz_fail(std::string("the converted file does not read back: ") + e.what());
  }
  return 0;
}
