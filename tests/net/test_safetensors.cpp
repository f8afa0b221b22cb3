// tests/net/test_safetensors.cpp — JSON reader/writer, safetensors checkpoints
// (round trips, byte layout against the reference writer, rejection of
// hostile files) and the atomic file writer.
#include <doctest/doctest.h>

#include "tests/support/process_helpers.h"
#include "tests/support/refs_env.h"
#include "tests/support/test_helpers.h"

#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <map>
#include <filesystem>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "data/image.h"
#include "engine/file_io.h"
#include "engine/tensor.h"
#include "net/json.h"
#include "net/safetensors.h"
#include "ops/ops.h"

using namespace ember;
namespace fs = std::filesystem;

namespace {

using ember::testing::contains;
using ember::testing::error_of;
using ember::testing::TempDir;
using ember::testing::write_bytes;

std::vector<uint8_t> bytes_of(const std::string& s) { return {s.begin(), s.end()}; }

// A tensor whose bytes are a deterministic pattern (bit-exact comparisons,
// including NaN payloads in float dtypes).
Tensor patterned(const Shape& shape, DType dtype, int seed) {
  Tensor t = Tensor::empty(shape, dtype);
  uint8_t* p = static_cast<uint8_t*>(t.raw_data());
  for (size_t i = 0; i < t.nbytes(); ++i) p[i] = uint8_t(i * 37 + size_t(seed) * 11 + 5);
  return t;
}

bool same_tensor(const Tensor& a, const Tensor& b) {
  if (a.dtype() != b.dtype() || a.shape() != b.shape() || !b.device().is_cpu()) return false;
  return a.nbytes() == 0 || std::memcmp(a.raw_data(), b.raw_data(), a.nbytes()) == 0;
}

// A safetensors file from a header text and data bytes; the header is padded
// with spaces to a multiple of 8 unless pad is false.
std::vector<uint8_t> make_file(std::string header, const std::vector<uint8_t>& data, bool pad = true) {
  if (pad) header.append((8 - header.size() % 8) % 8, ' ');
  // Sized once and filled with memcpy (GCC 12 warns falsely on vector::insert here).
  std::vector<uint8_t> out(8 + header.size() + data.size());
  for (int i = 0; i < 8; ++i) out[size_t(i)] = uint8_t(uint64_t(header.size()) >> (8 * i));
  if (!header.empty()) std::memcpy(out.data() + 8, header.data(), header.size());
  if (!data.empty()) std::memcpy(out.data() + 8 + header.size(), data.data(), data.size());
  return out;
}

SafetensorsFile parse(const std::vector<uint8_t>& b, const std::string& name = "t.safetensors") {
  return parse_safetensors(b.data(), b.size(), name);
}

uint64_t u64_le(const uint8_t* p) {
  uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v |= uint64_t(p[i]) << (8 * i);
  return v;
}

}  // namespace

// =================================================================== JSON

TEST_CASE("json: parses every kind of value and keeps object order") {
  const json::Value v =
      json::parse(" {\"z\":[1,-2,3.5,true,false,null,\"x\"],\"a\":{},\"m\":[],\"e\":-1.5e2,"
                  "\"big\":9223372036854775807,\"small\":-9223372036854775808,\"neg0\":-0} \n");
  REQUIRE(v.is_object());
  const json::Object& o = v.as_object();
  REQUIRE(o.size() == 7);
  CHECK(o[0].first == "z");
  CHECK(o[1].first == "a");
  CHECK(o[2].first == "m");
  const json::Array& z = v.find("z")->as_array();
  REQUIRE(z.size() == 7);
  CHECK(z[0].as_int() == 1);
  CHECK(z[1].as_int() == -2);
  CHECK(z[2].type() == json::Value::Type::number);
  CHECK(z[2].as_number() == 3.5);
  CHECK(z[3].as_bool() == true);
  CHECK(z[4].as_bool() == false);
  CHECK(z[5].is_null());
  CHECK(z[6].as_string() == "x");
  CHECK(v.find("a")->as_object().empty());
  CHECK(v.find("m")->as_array().empty());
  CHECK(v.find("e")->as_number() == -150.0);
  CHECK(v.find("big")->as_int() == INT64_MAX);
  CHECK(v.find("small")->as_int() == INT64_MIN);
  CHECK(v.find("neg0")->as_int() == 0);
  CHECK(v.find("missing") == nullptr);
  CHECK_ERROR_HAS(v.find("z")->as_string(), "json: expected string, got array");
  CHECK_ERROR_HAS(z[2].as_int(), "json: expected integer, got number");
}

TEST_CASE("json: string escapes, surrogate pairs and raw UTF-8") {
  const json::Value v = json::parse(R"("q\"b\\s\/b\bf\fn\nr\rt\tA\u0041e\u00e9E\u20acG\ud83d\ude00Z\u0000.")");
  const std::string want = std::string("q\"b\\s/b\bf\fn\nr\rt\tAAe\xc3\xa9" "E\xe2\x82\xac" "G\xf0\x9f\x98\x80Z") +
                           std::string(1, '\0') + ".";
  CHECK(v.as_string() == want);
  CHECK(json::parse("\"\\uD83D\\uDE00\"").as_string() == "\xf0\x9f\x98\x80");  // upper-case hex
  // Raw (unescaped) multi-byte UTF-8 passes through unchanged.
  const std::string raw = "\"\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80\xf4\x8f\xbf\xbf\"";
  CHECK(json::parse(raw).as_string() == raw.substr(1, raw.size() - 2));
}

TEST_CASE("json: hostile inputs are rejected with the byte position") {
  struct Case {
    std::string text;
    std::string message;
  };
  const std::vector<Case> cases = {
      {"", "json: unexpected end of input at byte 0"},
      {"   ", "json: unexpected end of input at byte 3"},
      {"[1,2", "unterminated array at byte 4"},
      {"[1,]", "expected a value, found character ']' at byte 3"},
      {"[1 2]", "expected ',' or ']' in array, found character '2' at byte 3"},
      {"{\"a\":1,\"a\":2}", "json: duplicate key \"a\" at byte 7"},
      {"{\"b\":1,\"a\":2,\"b\":3}", "duplicate key \"b\" at byte 13"},
      {"{\"a\" 1}", "expected ':' after object key"},
      {"{1:2}", "expected a string key"},
      {"{\"a\":1,}", "expected a string key"},
      {"{\"a\":1", "unterminated object"},
      {"1 2", "trailing characters after the value at byte 2"},
      {"[1]x", "trailing characters after the value at byte 3"},
      {std::string("[1]\0", 4), "trailing characters after the value at byte 3"},
      {"01", "leading zero in number at byte 1"},
      {"-", "expected a digit, found end of input at byte 1"},
      {"+1", "expected a value, found character '+' at byte 0"},
      {".5", "expected a value"},
      {"1.", "expected a digit after '.'"},
      {"1e", "expected a digit in exponent"},
      {"1e+", "expected a digit in exponent"},
      {"9223372036854775808", "integer out of range of int64 at byte 0"},
      {"[-9223372036854775809]", "integer out of range of int64 at byte 1"},
      {"1e999", "number out of range at byte 0"},
      {"NaN", "expected a value"},
      {"tru", "invalid literal at byte 0"},
      {"nul", "invalid literal"},
      {"[falsey]", "expected ',' or ']' in array, found character 'y'"},
      {"\"abc", "unterminated string at byte 0"},
      {"\"a\nb\"", "control character in string at byte 2"},
      {"\"\\x\"", "invalid escape, found character 'x' after a backslash at byte 2"},
      {"\"\\", "unterminated string"},
      {"\"\\u12\" ", "expected a hex digit in \\u escape, found character '\"' at byte 5"},
      {"\"\\u12", "truncated \\u escape"},
      {"\"\\u12G4\"", "expected a hex digit in \\u escape, found character 'G' at byte 5"},
      {"\"\\ud800\"", "high surrogate not followed by a low surrogate at byte 1"},
      {"\"\\ud800\\u0041\"", "high surrogate not followed by a low surrogate"},
      {"\"\\udc00\"", "unpaired low surrogate in \\u escape at byte 1"},
      {"\"\xff\"", "invalid UTF-8 in string at byte 1"},
      {"\"\xc0\xaf\"", "invalid UTF-8 in string"},          // overlong '/'
      {"\"\xe0\x80\xaf\"", "invalid UTF-8 in string"},      // overlong, 3 bytes
      {"\"\xed\xa0\x80\"", "invalid UTF-8 in string"},      // encoded surrogate
      {"\"\xf4\x90\x80\x80\"", "invalid UTF-8 in string"},  // past U+10FFFF
      {"\"\xc3\"", "invalid UTF-8 in string"},              // continuation missing
      {"\"\xe2\x82", "truncated UTF-8 sequence"},
      {"\x80", "expected a value, found byte 0x80 at byte 0"},
  };
  for (const Case& c : cases) {
    INFO("input: " << json::quote(c.text));
    CHECK_ERROR_HAS(json::parse(c.text), c.message);
  }
}

TEST_CASE("json: nesting depth and value count are limited") {
  auto nested = [](int n) { return std::string(size_t(n), '[') + std::string(size_t(n), ']'); };
  CHECK(json::parse(nested(64)).is_array());
  CHECK_ERROR_HAS(json::parse(nested(65)), "json: nesting deeper than 64 at byte 64");
  // Far deeper than any stack could recurse: rejected at the limit, no crash.
  CHECK_ERROR_HAS(json::parse(std::string(1000000, '[')), "nesting deeper than 64");
  CHECK_ERROR_HAS(json::parse(std::string(100000, '{') ), "expected a string key");  // depth 1 fails first on the key
  std::string objs;
  for (int i = 0; i < 100; ++i) objs += "{\"a\":";
  CHECK_ERROR_HAS(json::parse(objs), "nesting deeper than 64");

  json::ParseLimits small;
  small.max_depth = 2;
  CHECK(json::parse("[[1]]", small).is_array());
  CHECK_ERROR_HAS(json::parse("[[[1]]]", small), "nesting deeper than 2");
  small.max_values = 4;
  CHECK(json::parse("[1,2,3]", small).as_array().size() == 3);
  CHECK_ERROR_HAS(json::parse("[1,2,3,4]", small), "more than 4 values");
}

TEST_CASE("json: writer is compact, escapes, and round-trips") {
  json::Object o;
  o.emplace_back("b", json::Value(json::Array{json::Value(1), json::Value(int64_t(-2)), json::Value(true),
                                              json::Value(nullptr), json::Value(0.5), json::Value(2.0)}));
  o.emplace_back("a", json::Value("x\"y\\z/\b\f\n\r\t\x01\x1f\x7f\xc3\xa9"));
  o.emplace_back("c", json::Value(json::Object{}));
  const std::string text = json::write(json::Value(o));
  CHECK(text == "{\"b\":[1,-2,true,null,0.5,2.0],\"a\":\"x\\\"y\\\\z/\\b\\f\\n\\r\\t\\u0001\\u001f\x7f\xc3\xa9\","
                "\"c\":{}}");
  const json::Value back = json::parse(text);
  CHECK(back.find("a")->as_string() == "x\"y\\z/\b\f\n\r\t\x01\x1f\x7f\xc3\xa9");
  CHECK(back.find("b")->as_array()[5].type() == json::Value::Type::number);  // 2.0 stays a float
  CHECK(json::write(back) == text);
  CHECK(json::quote("a\nb") == "\"a\\nb\"");
  CHECK_ERROR_HAS(json::write(json::Value(std::nan(""))), "non-finite");
}

TEST_CASE("json: random mutations never crash the parser") {
  const std::string base =
      "{\"__metadata__\":{\"format\":\"pt\",\"k\":\"\\u00e9\\ud83d\\ude00\"},\"w\":{\"dtype\":\"F32\","
      "\"shape\":[2,3],\"data_offsets\":[0,24]},\"x\":[1.5e3,-0,true,false,null]}";
  REQUIRE(json::parse(base).is_object());
  std::mt19937 rng(1234);
  const char alphabet[] = "{}[]\",:\\u0123456789abcdefE.-+ \xc3\xa9\xff\x00tnr";
  int ok = 0, rejected = 0;
  for (int iter = 0; iter < 20000; ++iter) {
    std::string s = base;
    const int edits = 1 + int(rng() % 4);
    for (int e = 0; e < edits; ++e) {
      const size_t at = rng() % s.size();
      const char c = alphabet[rng() % (sizeof alphabet - 1)];
      switch (rng() % 3) {
        case 0: s[at] = c; break;
        case 1: s.insert(s.begin() + long(at), c); break;
        default: s.erase(at, 1 + rng() % 3); break;
      }
      if (s.empty()) s.push_back('x');
    }
    try {
      json::parse(s);
      ++ok;
    } catch (const Error& err) {
      CHECK(std::string(err.what()).rfind("json: ", 0) == 0);
      ++rejected;
    }
  }
  CHECK(ok > 0);
  CHECK(rejected > 0);
}

// ============================================================ safetensors

TEST_CASE("safetensors: round trip of every dtype, scalars, empty tensors and metadata") {
  TempDir dir;
  const std::vector<std::pair<std::string, Tensor>> tensors = {
      {"conv1.weight", patterned({4, 3, 2, 2}, DType::f32, 1)},
      {"fc.bias", patterned({5}, DType::f64, 2)},
      {"half", patterned({3, 1}, DType::f16, 3)},
      {"brain", patterned({2, 5}, DType::bf16, 9)},
      {"labels", patterned({2, 2}, DType::i32, 4)},
      {"num_batches_tracked", patterned({}, DType::i64, 5)},  // 0-d, as in torchvision
      {"image", patterned({2, 3, 7}, DType::u8, 6)},
      {"empty_f32", Tensor::empty({0, 3}, DType::f32)},
      {"empty_u8", Tensor::empty({0}, DType::u8)},
      {"scalar_f16", patterned({}, DType::f16, 7)},
      {"scalar_bf16", patterned({}, DType::bf16, 10)},
      {"weird \"name\"\n\xc3\xa9", patterned({1}, DType::f32, 8)},
  };
  const std::map<std::string, std::string> meta = {
      {"format", "pt"}, {"note", "quote \" backslash \\ newline \n"}, {"unicode", "\xc3\xa9\xe2\x82\xac"}, {"", ""}};
  const std::string path = dir.file("model.safetensors");
  save_safetensors(path, tensors, meta);
  CHECK(dir.entries() == std::vector<std::string>{"model.safetensors"});  // no temp file left

  const SafetensorsFile f = load_safetensors(path);
  CHECK(f.metadata == meta);
  REQUIRE(f.tensors.size() == tensors.size());
  for (const auto& entry : tensors) {
    const std::string& name = entry.first;
    const Tensor& t = entry.second;
    INFO("tensor " << name);
    const Tensor* got = f.find(name);
    REQUIRE(got != nullptr);
    CHECK(same_tensor(t, *got));
  }
  CHECK(f.find("nope") == nullptr);
  // The 0-d tensor stays 0-d (not [1]).
  CHECK(f.find("num_batches_tracked")->ndim() == 0);
  CHECK(f.find("empty_f32")->shape() == Shape({0, 3}));

  // The in-memory serializer writes the same bytes as the file.
  CHECK(read_file(path) == serialize_safetensors(tensors, meta));

  // No tensors and no metadata is a valid file too.
  save_safetensors(path, {});
  const SafetensorsFile empty = load_safetensors(path);
  CHECK(empty.tensors.empty());
  CHECK(empty.metadata.empty());
}

TEST_CASE("safetensors: the file layout follows the spec") {
  const std::vector<std::pair<std::string, Tensor>> tensors = {
      {"u", patterned({3}, DType::u8, 1)},     {"h", patterned({3}, DType::f16, 2)},
      {"b", patterned({2, 2}, DType::f32, 3)}, {"a", patterned({2}, DType::f32, 4)},
      {"d", patterned({1}, DType::f64, 5)},    {"i", patterned({2}, DType::i32, 6)},
      {"l", patterned({}, DType::i64, 7)},     {"g", patterned({3}, DType::bf16, 8)},
  };
  const std::vector<uint8_t> file = serialize_safetensors(tensors, {{"format", "pt"}});
  REQUIRE(file.size() >= 8);
  const uint64_t n = u64_le(file.data());
  CHECK(n % 8 == 0);
  REQUIRE(8 + n <= file.size());
  const std::string header(file.begin() + 8, file.begin() + 8 + long(n));
  const size_t close = header.find_last_of('}');
  REQUIRE(close != std::string::npos);
  CHECK(header.size() - close - 1 < 8);
  CHECK(header.find_first_not_of(' ', close + 1) == std::string::npos);  // padded with spaces only
  CHECK(header.find(": ") == std::string::npos);                         // compact JSON
  CHECK(header.rfind("{\"__metadata__\":{\"format\":\"pt\"},", 0) == 0);

  // Reference order: the reference's Dtype enum descending (I64, F64, F32, I32, BF16, F16, U8), then name.
  const json::Value h = json::parse(header);
  const std::vector<std::string> want_order = {"__metadata__", "l", "d", "a", "b", "i", "g", "h", "u"};
  REQUIRE(h.as_object().size() == want_order.size());
  uint64_t cursor = 0;
  for (size_t k = 0; k < want_order.size(); ++k) {
    const auto& [name, entry] = h.as_object()[k];
    CHECK(name == want_order[k]);
    if (k == 0) continue;
    const json::Array& off = entry.find("data_offsets")->as_array();
    CHECK(uint64_t(off[0].as_int()) == cursor);  // contiguous, in order
    cursor = uint64_t(off[1].as_int());
    // Each tensor's bytes are where its offsets say.
    for (const auto& [tn, t] : tensors)
      if (tn == name) {
        CHECK(cursor - uint64_t(off[0].as_int()) == t.nbytes());
        CHECK(std::memcmp(file.data() + 8 + n + off[0].as_int(), t.raw_data(), t.nbytes()) == 0);
        CHECK((8 + n + uint64_t(off[0].as_int())) % dtype_size(t.dtype()) == 0);  // aligned
      }
  }
  CHECK(file.size() == 8 + n + cursor);
  CHECK(h.find("l")->find("shape")->as_array().empty());
  CHECK(h.find("l")->find("dtype")->as_string() == "I64");
  CHECK(h.find("h")->find("dtype")->as_string() == "F16");
  CHECK(h.find("g")->find("dtype")->as_string() == "BF16");
}

TEST_CASE("safetensors: byte-identical to the reference writer") {
  // Byte arrays from the reference implementation's own tests (safetensors
  // crate, tensor.rs: test_empty and test_serialization_forced_alignement).
  const std::vector<uint8_t> ref_empty = {8, 0, 0, 0, 0, 0, 0, 0, 123, 125, 32, 32, 32, 32, 32, 32};
  CHECK(serialize_safetensors({}) == ref_empty);
  CHECK(parse(ref_empty).tensors.empty());

  const std::vector<uint8_t> ref_meta = {40,  0,   0,   0,   0,   0,   0,   0,   123, 34,  95,  95,  109, 101,
                                         116, 97,  100, 97,  116, 97,  95,  95,  34,  58,  123, 34,  102, 114,
                                         97,  109, 101, 119, 111, 114, 107, 34,  58,  34,  112, 116, 34,  125,
                                         125, 32,  32,  32,  32,  32};
  CHECK(serialize_safetensors({}, {{"framework", "pt"}}) == ref_meta);
  CHECK(parse(ref_meta).metadata == std::map<std::string, std::string>{{"framework", "pt"}});

  const std::vector<uint8_t> ref_attn0 = {
      72,  0,   0,   0,   0,   0,   0,   0,   123, 34,  97,  116, 116, 110, 48,  34,  58, 123, 34, 100, 116,
      121, 112, 101, 34,  58,  34,  70,  51,  50,  34,  44,  34,  115, 104, 97,  112, 101, 34, 58,  91, 49,  44,
      49,  44,  50,  44,  51,  93,  44,  34,  100, 97,  116, 97,  95,  111, 102, 102, 115, 101, 116, 115, 34,
      58,  91,  48,  44,  50,  52,  93,  125, 125, 32,  32,  32,  32,  32,  32,  32,  0,  0,  0,  0,  0,
      0,   128, 63,  0,   0,   0,   64,  0,   0,   64,  64,  0,   0,   128, 64,  0,   0,  160, 64};
  const float vals[] = {0, 1, 2, 3, 4, 5};
  const Tensor attn0 = Tensor::from_data(vals, {1, 1, 2, 3});
  CHECK(serialize_safetensors({{"attn0", attn0}}) == ref_attn0);
  const SafetensorsFile f = parse(ref_attn0);
  REQUIRE(f.find("attn0") != nullptr);
  CHECK(same_tensor(attn0, *f.find("attn0")));
}

TEST_CASE("safetensors: loads a hand-built file laid out like the Python writer") {
  // What safetensors.torch.save_file({"weight": [[1,2],[3,4]] f32, "bias": [1,-2] f16,
  // "step": 7 i64 0-d, "labels": [1,2,3] u8}, metadata={"format": "pt"}) writes:
  // tensors by descending dtype alignment then name, compact JSON, 265 bytes
  // padded with 7 spaces to 272 = 0x110.
  const std::string header =
      "{\"__metadata__\":{\"format\":\"pt\"},"
      "\"step\":{\"dtype\":\"I64\",\"shape\":[],\"data_offsets\":[0,8]},"
      "\"weight\":{\"dtype\":\"F32\",\"shape\":[2,2],\"data_offsets\":[8,24]},"
      "\"bias\":{\"dtype\":\"F16\",\"shape\":[2],\"data_offsets\":[24,28]},"
      "\"labels\":{\"dtype\":\"U8\",\"shape\":[3],\"data_offsets\":[28,31]}}"
      "       ";
  REQUIRE(header.size() == 272);
  std::vector<uint8_t> file = {0x10, 0x01, 0, 0, 0, 0, 0, 0};
  file.insert(file.end(), header.begin(), header.end());
  const std::vector<uint8_t> data = {
      7,    0,    0,    0,    0,    0,    0,    0,     // step = 7
      0,    0,    0x80, 0x3f, 0,    0,    0,    0x40,  // 1.0f 2.0f
      0,    0,    0x40, 0x40, 0,    0,    0x80, 0x40,  // 3.0f 4.0f
      0x00, 0x3c, 0x00, 0xc0,                          // 1.0h -2.0h
      1,    2,    3};
  file.insert(file.end(), data.begin(), data.end());

  TempDir dir;
  const std::string path = dir.file("python.safetensors");
  write_bytes(path, file);
  const SafetensorsFile f = load_safetensors(path);
  CHECK(f.metadata == std::map<std::string, std::string>{{"format", "pt"}});
  REQUIRE(f.tensors.size() == 4);
  CHECK(f.tensors[0].first == "step");  // header order
  CHECK(f.tensors[3].first == "labels");
  const Tensor* step = f.find("step");
  REQUIRE(step);
  CHECK(step->dtype() == DType::i64);
  CHECK(step->ndim() == 0);
  CHECK(step->item() == 7.0);
  const Tensor* w = f.find("weight");
  REQUIRE(w);
  CHECK(w->shape() == Shape({2, 2}));
  CHECK(w->to_double_vector() == std::vector<double>{1, 2, 3, 4});
  const Tensor* b = f.find("bias");
  REQUIRE(b);
  CHECK(b->dtype() == DType::f16);
  CHECK(b->to_double_vector() == std::vector<double>{1, -2});
  const Tensor* l = f.find("labels");
  REQUIRE(l);
  CHECK(l->dtype() == DType::u8);
  CHECK(l->to_double_vector() == std::vector<double>{1, 2, 3});

  // And ember writes exactly these bytes for the same tensors, given in another order.
  CHECK(serialize_safetensors({{"weight", *w}, {"labels", *l}, {"bias", *b}, {"step", *step}}, {{"format", "pt"}}) ==
        file);
}

TEST_CASE("safetensors: every truncation of a file is an error, never a crash") {
  TempDir dir;
  const std::vector<std::pair<std::string, Tensor>> tensors = {
      {"a", patterned({3}, DType::f32, 1)}, {"b", patterned({}, DType::i64, 2)}, {"c", patterned({5}, DType::u8, 3)}};
  const std::vector<uint8_t> full = serialize_safetensors(tensors, {{"k", "v"}});
  CHECK(parse(full).tensors.size() == 3);
  const std::string path = dir.file("trunc.safetensors");
  for (size_t len = 0; len < full.size(); ++len) {
    INFO("length " << len << " of " << full.size());
    const std::vector<uint8_t> cut(full.begin(), full.begin() + long(len));
    const std::string m1 = error_of([&] { parse(cut, "mem"); });
    CHECK(m1.rfind("mem: ", 0) == 0);
    write_bytes(path, cut);
    const std::string m2 = error_of([&] { load_safetensors(path); });
    CHECK(m2.rfind(path + ": ", 0) == 0);
    if (len < 8) CHECK(contains(m2, "too short for the 8-byte header length"));
  }
  const uint64_t n = u64_le(full.data());
  CHECK_ERROR_HAS(parse({full.begin(), full.begin() + long(8 + n) - 1}), "points past the end of the file");
  CHECK_ERROR_HAS(parse({full.begin(), full.end() - 1}), "go past the end of the data section");
  CHECK_ERROR_HAS(parse({full.begin(), full.begin() + long(8 + n)}), "go past the end of the data section (0 bytes)");
}

TEST_CASE("safetensors: hostile headers are rejected with a clear message") {
  const std::vector<uint8_t> d16(16, 0);
  const std::vector<uint8_t> d8(8, 0);
  auto check = [](const std::vector<uint8_t>& file, const std::string& part) {
    const std::string msg = error_of([&] { parse(file); });
    INFO("message: " << msg);
    CHECK(msg.rfind("t.safetensors: ", 0) == 0);
    CHECK(contains(msg, part));
    CHECK(msg.find('\n') == std::string::npos);
  };
  auto entry = [](const std::string& dtype, const std::string& shape, const std::string& offsets) {
    return "{\"dtype\":" + dtype + ",\"shape\":" + shape + ",\"data_offsets\":" + offsets + "}";
  };

  SUBCASE("header length") {
    std::vector<uint8_t> f = make_file("{}", {});
    for (int i = 0; i < 8; ++i) f[size_t(i)] = 0xff;
    check(f, "header length 18446744073709551615 exceeds the limit of 100000000 bytes");
    f[0] = 0x01, f[1] = 0xe1, f[2] = 0xf5, f[3] = 0x05;  // 100000001
    for (int i = 4; i < 8; ++i) f[size_t(i)] = 0;
    check(f, "header length 100000001 exceeds the limit");
    f = make_file("{}", {});
    f[0] = 17;
    check(f, "header length 17 points past the end of the file (16 bytes)");
    f[0] = 0;
    check(f, "header is not valid JSON: json: unexpected end of input at byte 0");
  }
  SUBCASE("not JSON, not an object") {
    check(make_file("{\"a\":", {}), "header is not valid JSON: json: unexpected end of input at byte 8");
    check(make_file("{\"a\":1} x", {}), "trailing characters");
    check(make_file("[]", {}), "header is a JSON array, not an object");
    check(make_file("\"str\"", {}), "header is a JSON string, not an object");
    check(make_file("{\"a\":1,\"a\":1}", {}), "duplicate key \"a\"");
    check(make_file("{\"\xff\":1}", {}), "invalid UTF-8");
    std::string deep = "{\"a\":";
    for (int i = 0; i < 100; ++i) deep += "[";
    check(make_file(deep, {}), "nesting deeper than 64");
  }
  SUBCASE("wrong entry structure and field types") {
    check(make_file("{\"w\":\"F32\"}", {}), "tensor \"w\": entry is a JSON string, not an object");
    check(make_file("{\"w\":{\"shape\":[],\"data_offsets\":[0,4]}}", {}), "tensor \"w\": missing \"dtype\"");
    check(make_file("{\"w\":{\"dtype\":\"F32\",\"data_offsets\":[0,4]}}", {}), "tensor \"w\": missing \"shape\"");
    check(make_file("{\"w\":{\"dtype\":\"F32\",\"shape\":[]}}", {}), "tensor \"w\": missing \"data_offsets\"");
    check(make_file("{\"w\":" + entry("5", "[4]", "[0,16]") + "}", d16), "\"dtype\" is a JSON integer, not a string");
    check(make_file("{\"w\":" + entry("\"F32\"", "\"4\"", "[0,16]") + "}", d16), "\"shape\" is a JSON string, not an array");
    check(make_file("{\"w\":" + entry("\"F32\"", "[4.0]", "[0,16]") + "}", d16), "\"shape\" holds a JSON number");
    check(make_file("{\"w\":" + entry("\"F32\"", "[null]", "[0,16]") + "}", d16), "\"shape\" holds a JSON null");
    check(make_file("{\"w\":" + entry("\"F32\"", "[4]", "[16]") + "}", d16), "\"data_offsets\" is not an array [begin, end]");
    check(make_file("{\"w\":" + entry("\"F32\"", "[4]", "[0,16,16]") + "}", d16), "\"data_offsets\" is not an array");
    check(make_file("{\"w\":" + entry("\"F32\"", "[4]", "[\"0\",\"16\"]") + "}", d16), "\"data_offsets\" is not an array");
    check(make_file("{\"w\":" + entry("\"F32\"", "[4]", "{}") + "}", d16), "\"data_offsets\" is not an array");
  }
  SUBCASE("dtypes") {
    check(make_file("{\"w\":" + entry("\"F8_E4M3\"", "[8]", "[0,8]") + "}", d8),
          "tensor \"w\": dtype \"F8_E4M3\" is not supported (ember reads F32, F64, F16, BF16, I32, I64, U8)");
    check(make_file("{\"w\":" + entry("\"BF16\"", "[8]", "[0,8]") + "}", d8),
          "tensor \"w\": data_offsets [0, 8] hold 8 bytes, shape [8] BF16 needs 16");
    check(make_file("{\"w\":" + entry("\"f32\"", "[4]", "[0,16]") + "}", d16), "dtype \"f32\" is not supported");
    check(make_file("{\"w\":" + entry("\"\"", "[4]", "[0,16]") + "}", d16), "dtype \"\" is not supported");
  }
  SUBCASE("shapes") {
    check(make_file("{\"w\":" + entry("\"F32\"", "[2,-2]", "[0,16]") + "}", d16),
          "tensor \"w\": shape [2, -2] has a negative dimension");
    check(make_file("{\"w\":" + entry("\"U8\"", "[1,1,1,1,1,1,1,1,16]", "[0,16]") + "}", d16),
          "shape has 9 dimensions, ember supports at most 8");
    check(make_file("{\"w\":" + entry("\"U8\"", "[4294967296,4294967296,4]", "[0,16]") + "}", d16),
          "shape [4294967296, 4294967296, 4] has too many elements (more than 2^63 - 1)");
    check(make_file("{\"w\":" + entry("\"U8\"", "[9223372036854775807,2]", "[0,16]") + "}", d16),
          "shape [9223372036854775807, 2] has too many elements");
    check(make_file("{\"w\":" + entry("\"F32\"", "[4611686018427387904]", "[0,16]") + "}", d16),
          "shape [4611686018427387904] f32 needs more bytes than fit in 64 bits");
    check(make_file("{\"w\":" + entry("\"F32\"", "[1152921504606846976]", "[0,16]") + "}", d16),
          "hold 16 bytes, shape [1152921504606846976] f32 needs 4611686018427387904");
  }
  SUBCASE("offsets") {
    check(make_file("{\"w\":" + entry("\"F32\"", "[4]", "[-16,0]") + "}", d16), "data_offsets [-16, 0] are negative");
    check(make_file("{\"w\":" + entry("\"F32\"", "[0]", "[8,4]") + "}", d16), "data_offsets [8, 4] have begin > end");
    check(make_file("{\"w\":" + entry("\"F32\"", "[8]", "[0,32]") + "}", d16),
          "tensor \"w\": data_offsets [0, 32] go past the end of the data section (16 bytes)");
    check(make_file("{\"w\":" + entry("\"F32\"", "[1]", "[9223372036854775800,9223372036854775804]") + "}", d16),
          "go past the end of the data section");
    check(make_file("{\"w\":" + entry("\"F32\"", "[2]", "[0,16]") + "}", d16),
          "tensor \"w\": data_offsets [0, 16] hold 16 bytes, shape [2] f32 needs 8");
    // The message from the design brief, exactly.
    const std::vector<uint8_t> f = make_file("{\"fc.weight\":" + entry("\"F32\"", "[10,64]", "[0,100]") + "}",
                                             std::vector<uint8_t>(100, 0));
    CHECK(error_of([&] { parse(f, "model-0003.safetensors"); }) ==
          "model-0003.safetensors: tensor \"fc.weight\": data_offsets [0, 100] hold 100 bytes, shape [10, 64] f32 "
          "needs 2560");
  }
  SUBCASE("coverage of the data section") {
    check(make_file("{\"a\":" + entry("\"F32\"", "[2]", "[0,8]") + ",\"b\":" + entry("\"F32\"", "[2]", "[4,12]") + "}",
                    std::vector<uint8_t>(12, 0)),
          "tensor \"b\": data_offsets [4, 12] overlap tensor \"a\" [0, 8]");
    check(make_file("{\"a\":" + entry("\"F32\"", "[2]", "[0,8]") + ",\"b\":" + entry("\"F32\"", "[2]", "[0,8]") + "}",
                    std::vector<uint8_t>(8, 0)),
          "overlap tensor");
    check(make_file("{\"a\":" + entry("\"F32\"", "[4]", "[0,16]") + ",\"e\":" + entry("\"F32\"", "[0]", "[8,8]") + "}",
                    d16),
          "tensor \"e\": data_offsets [8, 8] overlap tensor \"a\" [0, 16]");
    check(make_file("{\"a\":" + entry("\"F32\"", "[1]", "[0,4]") + ",\"b\":" + entry("\"F32\"", "[1]", "[8,12]") + "}",
                    std::vector<uint8_t>(12, 0)),
          "bytes [4, 8) of the data section belong to no tensor (before tensor \"b\")");
    check(make_file("{\"a\":" + entry("\"F32\"", "[1]", "[0,4]") + "}", std::vector<uint8_t>(8, 0)),
          "bytes [4, 8) at the end of the data section belong to no tensor");
    check(make_file("{}", std::vector<uint8_t>(1, 0)), "bytes [0, 1) at the end of the data section belong to no tensor");
    // Out-of-order offsets are fine, as are empty tensors on boundaries.
    const SafetensorsFile ok = parse(make_file(
        "{\"b\":" + entry("\"F32\"", "[2]", "[8,16]") + ",\"e\":" + entry("\"U8\"", "[0]", "[8,8]") +
            ",\"a\":" + entry("\"F32\"", "[2]", "[0,8]") + ",\"z\":" + entry("\"F32\"", "[0,2]", "[16,16]") + "}",
        d16));
    CHECK(ok.tensors.size() == 4);
    CHECK(ok.tensors[0].first == "b");
  }
  SUBCASE("__metadata__") {
    check(make_file("{\"__metadata__\":{\"k\":1}}", {}), "\"__metadata__\" value of \"k\" is a JSON integer, not a string");
    check(make_file("{\"__metadata__\":{\"k\":{}}}", {}), "value of \"k\" is a JSON object, not a string");
    check(make_file("{\"__metadata__\":[]}", {}), "\"__metadata__\" is a JSON array, not an object");
    CHECK(parse(make_file("{\"__metadata__\":{}}", {})).metadata.empty());
    CHECK(parse(make_file("{\"__metadata__\":{\"a\":\"1\"}}", {}, false)).metadata.at("a") == "1");  // unpadded is fine
  }
  SUBCASE("names in messages stay on one line and short") {
    check(make_file("{\"a\\nb\":" + entry("\"Q4\"", "[8]", "[0,16]") + "}", d16), "tensor \"a\\nb\": dtype");
    const std::string long_name(100000, 'n');
    const std::string msg = error_of([&] { parse(make_file("{\"" + long_name + "\":[]}", {})); });
    CHECK(contains(msg, "tensor \"" + std::string(200, 'n') + "\"...: entry is a JSON array"));
    CHECK(msg.size() < 400);
    std::string dims = "[-1";
    for (int i = 0; i < 100000; ++i) dims += ",1";
    const std::string msg2 = error_of([&] { parse(make_file("{\"w\":" + entry("\"U8\"", dims + "]", "[0,0]") + "}", {})); });
    CHECK(contains(msg2, "shape has 100001 dimensions, ember supports at most 8"));
    CHECK(msg2.size() < 200);
  }
  SUBCASE("the number of JSON values in a header is bounded") {
    std::string many = "{\"a\":[0";
    for (int i = 0; i < 4'000'000; ++i) many += ",0";
    check(make_file(many + "]}", {}), "header is not valid JSON: json: more than 4000000 values");
  }
}

TEST_CASE("safetensors: an image, a torch.save file or a record file given as a checkpoint says what it looks like") {
  TempDir dir;
  data::Image img;
  img.height = 8, img.width = 8, img.channels = 3;
  img.pixels.assign(8 * 8 * 3, 200);
  std::vector<uint8_t> jpeg, png;
  data::encode_jpeg(img, 90, jpeg);
  data::encode_png(img, png);
  const std::string photo = dir.file("photo.jpg");
  write_bytes(photo, jpeg);
  CHECK_THROWS_WITH_AS(load_safetensors(photo), (photo + " is not a safetensors checkpoint (it looks like a JPEG image)").c_str(),
                       Error);
  CHECK_THROWS_WITH_AS(parse(png), "t.safetensors is not a safetensors checkpoint (it looks like a PNG image)", Error);
  std::vector<uint8_t> zip = bytes_of("PK\x03\x04");
  zip.resize(200, 0);
  CHECK_ERROR_HAS(parse(zip), "it looks like a zip archive, as torch.save writes .pt/.pth files");
  std::vector<uint8_t> records = bytes_of("EMBERREC");
  records.resize(256, 0);
  CHECK_ERROR_HAS(parse(records), "it looks like an ember record file (.erec)");
  // An MXNet .params file: its magic 0x112 reads as a plausible header length, then no JSON.
  std::vector<uint8_t> params(400, 0);
  params[0] = 0x12, params[1] = 0x01;
  CHECK_ERROR_HAS(parse(params), "it looks like an MXNet .params file");
  // A damaged safetensors file whose first bytes happen to match a signature stays a damaged safetensors file.
  std::vector<uint8_t> damaged = make_file("{\"a\":", {});
  damaged[0] = 0xff, damaged[1] = 0xd8, damaged[2] = 0xff;
  const std::string msg = error_of([&] { parse(damaged); });
  CHECK(msg.rfind("t.safetensors: header length ", 0) == 0);
  CHECK(!contains(msg, "JPEG"));
  // Unknown bytes keep the plain message.
  std::vector<uint8_t> noise(64, 0xee);
  CHECK_ERROR_HAS(parse(noise), "t.safetensors: header length 17216961135462248174 exceeds the limit");
}

TEST_CASE("safetensors: mutated files load or fail cleanly") {
  const std::vector<std::pair<std::string, Tensor>> tensors = {
      {"w", patterned({2, 3}, DType::f32, 1)}, {"s", patterned({}, DType::i64, 2)}, {"h", patterned({3}, DType::f16, 3)}};
  const std::vector<uint8_t> full = serialize_safetensors(tensors, {{"format", "pt"}});
  const uint8_t values[] = {0, 1, 0xff, '{', '}', '[', ']', '"', ',', ':', '0', '9', '-', ' ', 'e', 0x80};
  int loaded = 0, rejected = 0;
  auto attempt = [&](const std::vector<uint8_t>& f) {
    try {
      const SafetensorsFile s = parse(f);
      for (const auto& [name, t] : s.tensors) CHECK(t.device().is_cpu());
      ++loaded;
    } catch (const Error& e) {
      CHECK(std::string(e.what()).rfind("t.safetensors: ", 0) == 0);
      ++rejected;
    }
  };
  for (size_t at = 0; at < full.size(); ++at)
    for (uint8_t v : values) {
      std::vector<uint8_t> f = full;
      f[at] = v;
      attempt(f);
    }
  std::mt19937 rng(42);
  for (int iter = 0; iter < 5000; ++iter) {
    std::vector<uint8_t> f = full;
    const int edits = 1 + int(rng() % 3);
    for (int e = 0; e < edits && !f.empty(); ++e) {
      const size_t at = rng() % f.size();
      switch (rng() % 3) {
        case 0: f[at] = values[rng() % sizeof values]; break;
        case 1: f.insert(f.begin() + long(at), values[rng() % sizeof values]); break;
        default: f.erase(f.begin() + long(at)); break;
      }
    }
    attempt(f);
  }
  CHECK(loaded > 0);  // mutations of the data bytes still load
  CHECK(rejected > 0);
}

TEST_CASE("safetensors: save rejects bad input and leaves the old file") {
  TempDir dir;
  const std::string path = dir.file("ckpt.safetensors");
  const Tensor a = patterned({4}, DType::f32, 1);
  save_safetensors(path, {{"a", a}});
  const std::vector<uint8_t> good = read_file(path);

  CHECK_ERROR_HAS(save_safetensors(path, {{"a", a}, {"b", a}, {"a", a}}),
                  "save_safetensors: duplicate tensor name \"a\"");
  CHECK_ERROR_HAS(save_safetensors(path, {{"__metadata__", a}}), "\"__metadata__\" is reserved");
  CHECK_ERROR_HAS(save_safetensors(path, {{"u", Tensor()}}), "tensor \"u\" is undefined");
  CHECK(read_file(path) == good);
  CHECK(dir.entries() == std::vector<std::string>{"ckpt.safetensors"});

  CHECK_ERROR_HAS(save_safetensors(dir.file("no/such/dir/x.safetensors"), {{"a", a}}),
              dir.file("no/such/dir/x.safetensors") + ": cannot create temporary file");
  CHECK_ERROR_HAS(load_safetensors(dir.file("missing.safetensors")),
              dir.file("missing.safetensors") + ": cannot open: No such file or directory");
  CHECK_ERROR_HAS(load_safetensors(dir.path.string()), "is a directory");
}

TEST_CASE("file_io: atomic writes replace the file or leave it untouched") {
  TempDir dir;
  const std::string path = dir.file("data.bin");
  write_file_atomic(path, "old content", 11);
  CHECK(read_file(path) == bytes_of("old content"));

  SUBCASE("a throwing fill keeps the old file and removes the temp file") {
    const std::string msg = [&] {
      try {
        write_file_atomic(path, [&](FileWriter& w) {
          w.write("new partial", 11);
          CHECK(fs::exists(w.path()));
          CHECK(w.path() == atomic_temp_path(path));
          throw std::runtime_error("boom");
        });
      } catch (const std::runtime_error& e) {
        return std::string(e.what());
      }
      return std::string("<nothing thrown>");
    }();
    CHECK(msg == "boom");  // the fill's own exception propagates unchanged
    CHECK(read_file(path) == bytes_of("old content"));
    CHECK(dir.entries() == std::vector<std::string>{"data.bin"});
  }
  SUBCASE("a successful write replaces the content, with no temp file left") {
    write_file_atomic(path, [](FileWriter& w) {
      w.write("new ", 4);
      w.write("content!", 8);
      CHECK(w.bytes_written() == 12);
    });
    CHECK(read_file(path) == bytes_of("new content!"));
    CHECK(dir.entries() == std::vector<std::string>{"data.bin"});
    write_file_atomic(path, "", 0);
    CHECK(read_file(path).empty());
  }
  SUBCASE("a stale temp file from a crashed run does not get in the way") {
    write_bytes(atomic_temp_path(path), bytes_of("junk junk junk junk junk"));
    write_file_atomic(path, "fresh", 5);
    CHECK(read_file(path) == bytes_of("fresh"));
    CHECK(dir.entries() == std::vector<std::string>{"data.bin"});
  }
  SUBCASE("a process killed in the middle of a write leaves the old file intact") {
    const pid_t child = ::fork();
    REQUIRE(child >= 0);
    if (child == 0) {
      try {
        write_file_atomic(path, [](FileWriter& w) {
          w.write("torn", 4);
          ::_exit(3);  // crash: no cleanup, no rename
        });
      } catch (...) {
      }
      ::_exit(4);
    }
    int status = 0;
    REQUIRE(::waitpid(child, &status, 0) == child);
    CHECK(WIFEXITED(status));
    CHECK(WEXITSTATUS(status) == 3);
    CHECK(read_file(path) == bytes_of("old content"));
  }
  SUBCASE("errors name the path") {
    CHECK_ERROR_HAS(write_file_atomic(dir.file("nodir/f"), "x", 1),
                dir.file("nodir/f") + ": cannot create temporary file " + dir.file("nodir/f") + ".tmp.");
    CHECK_ERROR_HAS(write_file_atomic(dir.file("nodir/f"), "x", 1), "No such file or directory");
    // Renaming over a directory fails after the temp file was written: it is removed.
    fs::create_directory(dir.file("adir"));
    CHECK_ERROR_HAS(write_file_atomic(dir.file("adir"), "x", 1), dir.file("adir") + ": cannot rename");
    CHECK(dir.entries() == std::vector<std::string>{"adir", "data.bin"});
    CHECK_ERROR_HAS(read_file(dir.file("absent")), dir.file("absent") + ": cannot open: No such file or directory");
    CHECK_ERROR_HAS(read_file(dir.file("adir")), dir.file("adir") + ": is a directory");
    CHECK_ERROR_HAS(write_file_atomic("", "x", 1), "empty path");
  }
  SUBCASE("FileReader checks every range") {
    FileReader r(path);
    CHECK(r.size() == 11);
    char buf[16] = {};
    r.read_at(4, buf, 7);
    CHECK(std::string(buf, 7) == "content");
    r.read_at(11, buf, 0);
    CHECK_ERROR_HAS(r.read_at(5, buf, 7), "read of 7 bytes at offset 5 is past the end of the file (11 bytes)");
    CHECK_ERROR_HAS(r.read_at(UINT64_MAX, buf, 1), "past the end of the file");
    CHECK_ERROR_HAS(r.read_at(1, buf, SIZE_MAX), "past the end of the file");
    // A file that shrinks after it was opened: a clear error, not garbage.
    REQUIRE(::truncate(path.c_str(), 3) == 0);
    CHECK_ERROR_HAS(r.read_at(0, buf, 11), "unexpected end of file");
  }
}

TEST_CASE("safetensors: BF16 tensors are read as bf16 with their bits, and widen to f32 exactly") {
  // BF16 bits: 1.0, -3.0, the smallest normal, +inf, a NaN, -0.0; and the
  // top halves of two f32 values that are not exact in BF16.
  const std::vector<uint16_t> bits = {0x3f80, 0xc040, 0x0080, 0x7f80, 0x7fc1, 0x8000, 0x4049, 0xbdcc};
  std::vector<uint8_t> data(bits.size() * 2);
  std::memcpy(data.data(), bits.data(), data.size());
  const std::string header = "{\"w\":{\"dtype\":\"BF16\",\"shape\":[2,4],\"data_offsets\":[0,16]}}";
  std::vector<uint8_t> bytes(8);
  for (int i = 0; i < 8; ++i) bytes[size_t(i)] = uint8_t(uint64_t(header.size()) >> (8 * i));
  bytes.insert(bytes.end(), header.begin(), header.end());
  bytes.insert(bytes.end(), data.begin(), data.end());
  const SafetensorsFile f = parse_safetensors(bytes.data(), bytes.size(), "bf16.safetensors");
  REQUIRE(f.tensors.size() == 1);
  const Tensor& t = f.tensors[0].second;
  CHECK(t.dtype() == DType::bf16);
  CHECK(t.shape() == Shape{2, 4});
  CHECK(std::memcmp(t.raw_data(), bits.data(), 16) == 0);
  const Tensor w = ops::cast(t, DType::f32);
  const uint32_t* got = static_cast<const uint32_t*>(w.raw_data());
  for (size_t i = 0; i < bits.size(); ++i) CHECK(got[i] == uint32_t(bits[i]) << 16);
  CHECK(w.data<float>()[0] == 1.0f);
  CHECK(w.data<float>()[1] == -3.0f);
  CHECK(std::isinf(w.data<float>()[3]));
  CHECK(std::isnan(w.data<float>()[4]));
  // Written back, the file is the same bytes (the header as the reference writer lays it out).
  const std::vector<uint8_t> again = serialize_safetensors({{"w", t}});
  const SafetensorsFile g = parse_safetensors(again.data(), again.size(), "again.safetensors");
  CHECK(std::memcmp(g.tensors.at(0).second.raw_data(), bits.data(), 16) == 0);
  CHECK(std::string(again.begin() + 8, again.begin() + 8 + long(header.size())) == header);
}

// The other way: the official safetensors package (0.4.5, in the reference
// environment of make refs) reads what ember writes, every dtype it shares
// with NumPy, and writes it again; ember reads that back bit for bit, with
// the metadata. (PyTorch 2.x's strict load of a checkpoint:
// tests/net/test_torchvision_parity.cpp.)
TEST_CASE("safetensors: the official package reads ember's file exactly (read, written again, compared)" *
          ember::testing::kNeedsMxnetRefs) {
  const TempDir dir;
  std::vector<std::pair<std::string, Tensor>> tensors;
  std::mt19937 rng(5);
  std::normal_distribution<double> normal;
  const auto filled = [&](const Shape& s, DType dt) {
    std::vector<double> v(size_t(s.numel()));
    for (double& x : v) x = dt == DType::u8 ? double(rng() % 256) : dt == DType::i32 || dt == DType::i64 ? double(int(rng() % 2001) - 1000) : normal(rng);
    return Tensor::from_vector(v, s, dt);
  };
  tensors.emplace_back("layer1.0.conv1.weight", filled({8, 4, 3, 3}, DType::f32));
  tensors.emplace_back("bn1.running_var", filled({8}, DType::f64));
  tensors.emplace_back("head.half", filled({3, 5}, DType::f16));
  tensors.emplace_back("counts", filled({7}, DType::i32));
  tensors.emplace_back("bn1.num_batches_tracked", Tensor::full(Shape{}, 12345, DType::i64));
  tensors.emplace_back("pixels", filled({2, 3, 4}, DType::u8));
  tensors.emplace_back("empty", Tensor::zeros({0, 3}, DType::f32));
  const std::map<std::string, std::string> metadata = {
      {"format", "pt"}, {"variant", "mxnet-preact"}, {"class_names", R"(["a","b\"c","ü"])"}};
  const std::string ours = dir.file("ember.safetensors"), theirs = dir.file("official.safetensors");
  save_safetensors(ours, tensors, metadata);
  const std::string script =
      "import sys, safetensors\n"
      "from safetensors import safe_open\n"
      "from safetensors.numpy import load_file, save_file\n"
      "t = load_file(sys.argv[1])\n"
      "with safe_open(sys.argv[1], 'np') as f: m = f.metadata()\n"
      "save_file(t, sys.argv[2], metadata=m)\n"
      "print('safetensors', safetensors.__version__, len(t), 'tensors,', ' '.join('%s:%s%s' % (k, v.dtype, list(v.shape)) "
      "for k, v in sorted(t.items())))\n";
  std::string out;
  const int rc = ember::testing::process::run_command({ember::testing::mxnet_refs_python(), "-c", script, ours, theirs},
                                                       60, dir.path.string(), "official", &out);
  INFO(out);
  REQUIRE(rc == 0);
  CHECK(contains(out, "safetensors 0.4.5 7 tensors"));
  CHECK(contains(out, "bn1.num_batches_tracked:int64[]"));
  CHECK(contains(out, "head.half:float16[3, 5]"));
  const SafetensorsFile back = load_safetensors(theirs);
  CHECK(back.metadata == metadata);
  REQUIRE(back.tensors.size() == tensors.size());
  for (const auto& [name, t] : tensors) {
    CAPTURE(name);
    const Tensor* b = back.find(name);
    REQUIRE(b);
    CHECK(b->dtype() == t.dtype());
    CHECK(b->shape() == t.shape());
    CHECK((t.nbytes() == 0 || std::memcmp(b->raw_data(), t.raw_data(), t.nbytes()) == 0));
  }
}
