// tests/fuzz/fuzz_json.cpp — libFuzzer target of ember's JSON reader and
// writer (net/json.cpp), the parser under every safetensors header.
//
// Input: JSON text (the first byte, when it is 0x01..0x07, sets a small
// nesting limit instead of the default 64, so the depth checks are reached).
// Besides "never crash", every accepted text must round-trip: write() of the
// value parses back, and writing that again gives the same text; quote() of
// the input stays on one line.
// Seeds: tests/fuzz/corpus/fuzz_json; dictionary tests/fuzz/fuzz_json.dict.
// Expected: ember::Error ("json: <what> at byte N"). A failure (crash,
// sanitizer report, leak, another exception, a broken round trip, > 1 s) is a
// bug in net/json.cpp.
#include <string_view>

#include "net/json.h"
#include "tests/fuzz/fuzz_util.h"

using namespace ember;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view text(reinterpret_cast<const char*>(data), size);
  json::ParseLimits limits;
  if (size > 0 && data[0] >= 1 && data[0] <= 7) {
    limits.max_depth = data[0];
    limits.max_values = 64;
    text.remove_prefix(1);
  }
  const std::string q = json::quote(text, json::kMessageNameBytes);
  if (q.find('\n') != std::string::npos) fuzz::fuzz_fail("quote() left a newline: " + q);
  json::Value v;
  try {
    v = json::parse(text, limits);
  } catch (const Error& e) {
    fuzz::check_one_line(e);
    return 0;
  }
  std::string once;
  try {
    once = json::write(v);
  } catch (const Error& e) {
    fuzz::fuzz_fail(std::string("an accepted value cannot be written: ") + e.what());
  }
  try {
    const std::string twice = json::write(json::parse(once));
    if (twice != once) fuzz::fuzz_fail("write(parse(write(v))) != write(v): " + once + " vs " + twice);
  } catch (const Error& e) {
    fuzz::fuzz_fail(std::string("written JSON does not parse back: ") + e.what() + " in " + once);
  }
  return 0;
}
