// tests/fuzz/fuzz_list_file.cpp — libFuzzer target of im2rec's list files
// (MXNet .lst, "index<TAB>label[<TAB>label...]<TAB>path" per line):
// data::read_list_file() in data/image_folder.cpp, which im2rec --list uses.
//
// Input: a whole .lst file, written to a scratch file (the reader takes a
// path). Every accepted entry must have a path and finite labels.
// Seeds: tests/fuzz/corpus/fuzz_list_file (tests/fuzz/make_seeds.cpp).
// Expected: ember::Error naming FILE:LINE. A failure (crash, sanitizer
// report, leak, another exception, > 1 s) is a bug in data/image_folder.cpp.
#include <cmath>

#include "data/image_folder.h"
#include "tests/fuzz/fuzz_util.h"

using namespace ember;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  fuzz::ScratchFiles scratch;
  const std::string path = fuzz::write_scratch("input.lst", data, size);
  scratch.paths.push_back(path);
  for (const char* root : {"", "/data/images"}) {
    try {
      const data::SourceList list = data::read_list_file(path, root);
      if (list.items.empty()) fuzz::fuzz_fail("accepted a list without entries");
      for (const data::SourceItem& item : list.items) {
        if (item.path.empty()) fuzz::fuzz_fail("accepted an entry without a path");
        for (float v : item.labels)
          if (!std::isfinite(v)) fuzz::fuzz_fail("accepted a label that is not finite");
      }
    } catch (const Error& e) {
      fuzz::check_one_line(e);
    }
  }
  return 0;
}
