// tests/fuzz/fuzz_safetensors.cpp — libFuzzer target of the safetensors
// reader (net/safetensors.cpp: the 8-byte header length, the JSON header,
// dtypes, shapes, data_offsets and their exact tiling of the data section),
// through its in-memory entry point parse_safetensors().
//
// Input: a whole .safetensors file. Besides "never crash", every file the
// parser accepts must survive a round trip: serialize_safetensors() of what
// was read parses back to the same tensors (names, dtypes, shapes, bytes) and
// metadata.
// Seeds: tests/fuzz/seeds/safetensors (make_safetensors_seeds.py); dictionary
// tests/fuzz/fuzz_safetensors.dict.
// Expected: ember::Error. A failure (crash, sanitizer report, leak, another
// exception, a broken round trip, > 1 s) is a bug in net/safetensors.cpp or
// net/json.cpp.
#include <cstring>
#include <map>

#include "net/safetensors.h"
#include "tests/fuzz/fuzz_util.h"

using namespace ember;

namespace {

std::map<std::string, const Tensor*> by_name(const SafetensorsFile& f) {
  std::map<std::string, const Tensor*> m;
  for (const auto& [name, t] : f.tensors)
    if (!m.emplace(name, &t).second) fuzz::fuzz_fail("duplicate tensor name accepted: " + name);
  return m;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  SafetensorsFile file;
  try {
    file = parse_safetensors(data, size, "input.safetensors");
  } catch (const Error& e) {
    fuzz::check_one_line(e);
    return 0;
  }
  // Accepted: what it holds must write and read back unchanged.
  std::vector<uint8_t> bytes;
  try {
    bytes = serialize_safetensors(file.tensors, file.metadata);
  } catch (const Error& e) {
    fuzz::fuzz_fail(std::string("an accepted file cannot be written back: ") + e.what());
  }
  SafetensorsFile again;
  try {
    again = parse_safetensors(bytes.data(), bytes.size(), "round-trip.safetensors");
  } catch (const Error& e) {
    fuzz::fuzz_fail(std::string("the written-back file does not parse: ") + e.what());
  }
  if (again.metadata != file.metadata) fuzz::fuzz_fail("metadata changed in the round trip");
  const auto a = by_name(file), b = by_name(again);
  if (a.size() != b.size()) fuzz::fuzz_fail("tensor count changed in the round trip");
  for (const auto& [name, t] : a) {
    const auto it = b.find(name);
    if (it == b.end()) fuzz::fuzz_fail("tensor lost in the round trip: " + name);
    const Tensor& u = *it->second;
    if (u.dtype() != t->dtype() || !(u.shape() == t->shape()) || u.nbytes() != t->nbytes() ||
        (t->nbytes() > 0 && std::memcmp(u.raw_data(), t->raw_data(), t->nbytes()) != 0))
      fuzz::fuzz_fail("tensor changed in the round trip: " + name);
  }
  return 0;
}
