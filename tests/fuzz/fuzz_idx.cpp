// tests/fuzz/fuzz_idx.cpp — libFuzzer target of the IDX reader
// (data/idx.cpp, MNIST / Fashion-MNIST files): the magic, dtype, dimension
// count, big-endian dimensions, the data-size limit, truncated and trailing
// data, and gzip'd files (zlib reads plain and .gz alike).
//
// Input: a whole IDX file, plain or gzip'd, written to a scratch file
// (read_idx takes a path; gzip needs a file). The 2 GiB default limit is kept:
// the reader must not allocate what a lying header asks for.
// Seeds: tests/fuzz/corpus/fuzz_idx (tests/fuzz/make_seeds.cpp).
// Expected: ember::Error. A failure (crash, sanitizer report, leak, another
// exception, > 1 s) is a bug in data/idx.cpp.
#include "data/idx.h"
#include "tests/fuzz/fuzz_util.h"

using namespace ember;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  fuzz::ScratchFiles scratch;
  const std::string path = fuzz::write_scratch("input-idx1-ubyte", data, size);
  scratch.paths.push_back(path);
  try {
    const data::IdxArray a = data::read_idx(path);
    uint64_t n = 1;
    for (int64_t d : a.dims) n *= uint64_t(d);
    if (a.dims.empty() || a.dims.size() > 4 || n != a.bytes.size()) fuzz::fuzz_fail("dims disagree with the data");
  } catch (const Error& e) {
    fuzz::check_one_line(e);
  }
  return 0;
}
