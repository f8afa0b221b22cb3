// net/json.h — a small JSON reader and writer, enough for safetensors headers.
//
// parse() treats its input as hostile: strict RFC 8259 grammar, nesting depth
// and value-count limits, UTF-8 validated, duplicate object keys and trailing
// garbage rejected, integers that overflow int64 rejected. Every failure is an
// ember::Error "json: <what> at byte N". Objects keep their keys in file
// order. write() produces compact JSON (no spaces), the way serde_json does.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

namespace ember::json {

class Value;
using Array = std::vector<Value>;
using Object = std::vector<std::pair<std::string, Value>>;  // file order, unique keys

class Value {
 public:
  enum class Type { null, boolean, integer, number, string, array, object };

  Value() = default;  // null
  Value(std::nullptr_t) {}
  Value(bool b) : v_(b) {}
  Value(int i) : v_(int64_t(i)) {}
  Value(int64_t i) : v_(i) {}
  Value(uint64_t) = delete;  // would be silently narrowed; convert explicitly
  Value(double d) : v_(d) {}
  Value(const char* s) : v_(std::string(s)) {}
  Value(std::string s) : v_(std::move(s)) {}
  Value(Array a) : v_(std::move(a)) {}
  Value(Object o) : v_(std::move(o)) {}

  Type type() const { return Type(v_.index()); }
  bool is_null() const { return type() == Type::null; }
  bool is_bool() const { return type() == Type::boolean; }
  bool is_int() const { return type() == Type::integer; }
  bool is_number() const { return type() == Type::integer || type() == Type::number; }
  bool is_string() const { return type() == Type::string; }
  bool is_array() const { return type() == Type::array; }
  bool is_object() const { return type() == Type::object; }

  // Accessors throw ember::Error "json: expected <type>, got <type>".
  bool as_bool() const;
  int64_t as_int() const;
  double as_number() const;  // integer or floating
  const std::string& as_string() const;
  const Array& as_array() const;
  Array& as_array();
  const Object& as_object() const;
  Object& as_object();

  // Object lookup: the value under key, or nullptr (also when not an object).
  const Value* find(std::string_view key) const;

 private:
  std::variant<std::nullptr_t, bool, int64_t, double, std::string, Array, Object> v_;
};

// "null", "boolean", "integer", "number", "string", "array", "object".
const char* type_name(Value::Type t);

struct ParseLimits {
  int max_depth = 64;              // nested arrays/objects
  size_t max_values = 1u << 24;    // total values, bounds memory per input byte
};

// Parses exactly one JSON value; whitespace may surround it, nothing else.
Value parse(std::string_view text, const ParseLimits& limits = {});

// Compact JSON text of v. Floats that are not finite are an error.
std::string write(const Value& v);
// Appends s as a JSON string literal with quotes and escapes (", \, control
// characters; other bytes verbatim, like serde_json). Also used to quote names
// in error messages so that they stay on one line.
void write_string(std::string& out, std::string_view s);
// quote() keeps at most max_bytes of s and marks a cut with "..." after the
// closing quote, so a hostile 50 MB name cannot flood an error message.
std::string quote(std::string_view s, size_t max_bytes = SIZE_MAX);
constexpr size_t kMessageNameBytes = 200;  // the cap error messages use
// A string read from a file (a tensor name, a metadata value) as an error
// message shows it: quoted, escaped onto one line, cut at kMessageNameBytes.
inline std::string shown(std::string_view s) { return quote(s, kMessageNameBytes); }

}  // namespace ember::json
