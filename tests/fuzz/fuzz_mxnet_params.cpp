// tests/fuzz/fuzz_mxnet_params.cpp — libFuzzer target of MXNet's .params
// reader (net/mxnet_params.cpp: the list header, V2/V3 arrays with their
// storage type, shape, device, dtype and data, and the names), through its
// in-memory entry point parse_mxnet_params().
//
// Input: a whole .params file. Besides "never crash", a file the parser
// accepts whose arrays all have names and shapes must survive a round trip:
// serialize_mxnet_params() of what was read (as f32) parses back to the same
// names, shapes and values, bit for bit.
// Seeds: tests/fuzz/corpus/fuzz_mxnet_params (tests/fuzz/make_seeds.cpp).
// Expected: ember::Error. A failure (crash, sanitizer report, leak, another
// exception, a broken round trip, > 1 s) is a bug in net/mxnet_params.cpp.
#include <cstring>

#include "net/mxnet_params.h"
#include "tests/fuzz/fuzz_util.h"

using namespace ember;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::vector<net::MxnetArray> arrays;
  try {
    arrays = net::parse_mxnet_params(data, size, "input.params");
  } catch (const Error& e) {
    fuzz::check_one_line(e);
    return 0;
  }
  for (const net::MxnetArray& a : arrays)
    if (a.name.empty() || a.shape.empty()) return 0;  // a plain list or a scalar: not writable as V2 with names
  std::vector<uint8_t> bytes;
  try {
    bytes = net::serialize_mxnet_params(arrays, "round-trip.params");
  } catch (const Error& e) {
    fuzz::fuzz_fail(std::string("an accepted file cannot be written back: ") + e.what());
  }
  std::vector<net::MxnetArray> again;
  try {
    again = net::parse_mxnet_params(bytes.data(), bytes.size(), "round-trip.params");
  } catch (const Error& e) {
    fuzz::fuzz_fail(std::string("the written-back file does not parse: ") + e.what());
  }
  if (again.size() != arrays.size()) fuzz::fuzz_fail("array count changed in the round trip");
  for (size_t i = 0; i < arrays.size(); ++i) {
    const net::MxnetArray &a = arrays[i], &b = again[i];
    if (a.name != b.name || a.shape != b.shape || a.values.size() != b.values.size() ||
        (!a.values.empty() && std::memcmp(a.values.data(), b.values.data(), a.values.size() * 4) != 0))
      fuzz::fuzz_fail("array changed in the round trip: " + a.name);
  }
  return 0;
}
