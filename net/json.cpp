// net/json.cpp — recursive-descent JSON parser (hostile input) and compact writer.
// See net/json.h for the contract.
#include "net/json.h"

#include <algorithm>
#include <charconv>
#include <cmath>

#include "engine/error.h"

namespace ember::json {

// ------------------------------------------------------------------ Value

const char* type_name(Value::Type t) {
  switch (t) {
    case Value::Type::null: return "null";
    case Value::Type::boolean: return "boolean";
    case Value::Type::integer: return "integer";
    case Value::Type::number: return "number";
    case Value::Type::string: return "string";
    case Value::Type::array: return "array";
    case Value::Type::object: return "object";
  }
  return "?";
}

namespace {
[[noreturn]] void wrong_type(Value::Type want, Value::Type got) {
  fail(cat("json: expected ", type_name(want), ", got ", type_name(got)));
}
}  // namespace

bool Value::as_bool() const {
  if (!is_bool()) wrong_type(Type::boolean, type());
  return std::get<bool>(v_);
}
int64_t Value::as_int() const {
  if (!is_int()) wrong_type(Type::integer, type());
  return std::get<int64_t>(v_);
}
double Value::as_number() const {
  if (is_int()) return double(std::get<int64_t>(v_));
  if (type() != Type::number) wrong_type(Type::number, type());
  return std::get<double>(v_);
}
const std::string& Value::as_string() const {
  if (!is_string()) wrong_type(Type::string, type());
  return std::get<std::string>(v_);
}
const Array& Value::as_array() const {
  if (!is_array()) wrong_type(Type::array, type());
  return std::get<Array>(v_);
}
Array& Value::as_array() {
  if (!is_array()) wrong_type(Type::array, type());
  return std::get<Array>(v_);
}
const Object& Value::as_object() const {
  if (!is_object()) wrong_type(Type::object, type());
  return std::get<Object>(v_);
}
Object& Value::as_object() {
  if (!is_object()) wrong_type(Type::object, type());
  return std::get<Object>(v_);
}
const Value* Value::find(std::string_view key) const {
  if (!is_object()) return nullptr;
  for (const auto& [k, v] : std::get<Object>(v_))
    if (k == key) return &v;
  return nullptr;
}

// ----------------------------------------------------------------- parser

namespace {

class Parser {
 public:
  Parser(std::string_view text, const ParseLimits& limits) : s_(text), limits_(limits) {}

  Value parse_document() {
    Value v = parse_value(0);
    skip_ws();
    if (pos_ != s_.size()) error("trailing characters after the value");
    return v;
  }

 private:
  [[noreturn]] void error(const std::string& what) const { error_at(what, pos_); }
  [[noreturn]] void error_at(const std::string& what, size_t at) const {
    fail(cat("json: ", what, " at byte ", at));
  }
  bool eof() const { return pos_ >= s_.size(); }
  unsigned char peek() const { return static_cast<unsigned char>(s_[pos_]); }  // only when !eof()

  std::string describe_current() const {
    if (eof()) return "end of input";
    const unsigned char c = peek();
    if (c >= 0x20 && c < 0x7f) return cat("character '", char(c), "'");
    static const char* hex = "0123456789abcdef";
    return cat("byte 0x", hex[c >> 4], hex[c & 15]);
  }
  [[noreturn]] void unexpected(const std::string& wanted) const {
    error(cat("expected ", wanted, ", found ", describe_current()));
  }

  void skip_ws() {
    while (!eof()) {
      const unsigned char c = peek();
      if (c != ' ' && c != '\t' && c != '\n' && c != '\r') break;
      ++pos_;
    }
  }

  void count_value() {
    if (++values_ > limits_.max_values) error(cat("more than ", limits_.max_values, " values"));
  }

  Value parse_value(int depth) {
    skip_ws();
    if (eof()) error("unexpected end of input");
    count_value();
    switch (peek()) {
      case '{': return parse_object(depth + 1);
      case '[': return parse_array(depth + 1);
      case '"': return Value(parse_string());
      case 't': expect_literal("true"); return Value(true);
      case 'f': expect_literal("false"); return Value(false);
      case 'n': expect_literal("null"); return Value(nullptr);
      default:
        if (peek() == '-' || (peek() >= '0' && peek() <= '9')) return parse_number();
        unexpected("a value");
    }
  }

  void expect_literal(std::string_view word) {
    if (s_.substr(pos_, word.size()) != word) error("invalid literal");
    pos_ += word.size();
  }

  void check_depth(int depth) const {
    if (depth > limits_.max_depth) error(cat("nesting deeper than ", limits_.max_depth));
  }

  Value parse_array(int depth) {
    check_depth(depth);
    ++pos_;  // '['
    Array items;
    skip_ws();
    if (!eof() && peek() == ']') {
      ++pos_;
      return Value(std::move(items));
    }
    for (;;) {
      items.push_back(parse_value(depth));
      skip_ws();
      if (eof()) error("unterminated array");
      if (peek() == ',') {
        ++pos_;
        continue;
      }
      if (peek() == ']') {
        ++pos_;
        return Value(std::move(items));
      }
      unexpected("',' or ']' in array");
    }
  }

  Value parse_object(int depth) {
    check_depth(depth);
    ++pos_;  // '{'
    Object members;
    std::vector<size_t> key_pos;  // byte offset of each key, for duplicate reports
    skip_ws();
    if (!eof() && peek() == '}') {
      ++pos_;
      return Value(std::move(members));
    }
    for (;;) {
      skip_ws();
      if (eof()) error("unterminated object");
      if (peek() != '"') unexpected("a string key");
      key_pos.push_back(pos_);
      std::string key = parse_string();
      skip_ws();
      if (eof() || peek() != ':') unexpected("':' after object key");
      ++pos_;
      Value v = parse_value(depth);
      members.emplace_back(std::move(key), std::move(v));
      skip_ws();
      if (eof()) error("unterminated object");
      if (peek() == ',') {
        ++pos_;
        continue;
      }
      if (peek() == '}') {
        ++pos_;
        break;
      }
      unexpected("',' or '}' in object");
    }
    // Duplicate keys: sort indices by key (O(n log n), hostile inputs may hold many keys).
    std::vector<size_t> order(members.size());
    for (size_t i = 0; i < order.size(); ++i) order[i] = i;
    std::stable_sort(order.begin(), order.end(),
                     [&](size_t a, size_t b) { return members[a].first < members[b].first; });
    for (size_t i = 1; i < order.size(); ++i)
      if (members[order[i]].first == members[order[i - 1]].first)
        error_at(cat("duplicate key ", quote(members[order[i]].first, kMessageNameBytes)), key_pos[order[i]]);
    return Value(std::move(members));
  }

  static int hex_digit(unsigned char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
  }

  // Reads the 4 hex digits after "\u" (pos_ at the first digit).
  uint32_t parse_hex4() {
    if (s_.size() - pos_ < 4) error("truncated \\u escape");
    uint32_t v = 0;
    for (int i = 0; i < 4; ++i) {
      const int d = hex_digit(peek());
      if (d < 0) unexpected("a hex digit in \\u escape");
      v = v * 16 + uint32_t(d);
      ++pos_;
    }
    return v;
  }

  static void append_utf8(std::string& out, uint32_t cp) {
    if (cp < 0x80) {
      out += char(cp);
    } else if (cp < 0x800) {
      out += char(0xC0 | (cp >> 6));
      out += char(0x80 | (cp & 0x3F));
    } else if (cp < 0x10000) {
      out += char(0xE0 | (cp >> 12));
      out += char(0x80 | ((cp >> 6) & 0x3F));
      out += char(0x80 | (cp & 0x3F));
    } else {
      out += char(0xF0 | (cp >> 18));
      out += char(0x80 | ((cp >> 12) & 0x3F));
      out += char(0x80 | ((cp >> 6) & 0x3F));
      out += char(0x80 | (cp & 0x3F));
    }
  }

  // One escape sequence; pos_ at the backslash.
  void parse_escape(std::string& out) {
    const size_t start = pos_;
    ++pos_;
    if (eof()) error("unterminated string");
    const unsigned char c = peek();
    ++pos_;
    switch (c) {
      case '"': out += '"'; return;
      case '\\': out += '\\'; return;
      case '/': out += '/'; return;
      case 'b': out += '\b'; return;
      case 'f': out += '\f'; return;
      case 'n': out += '\n'; return;
      case 'r': out += '\r'; return;
      case 't': out += '\t'; return;
      case 'u': break;
      default: --pos_; error(cat("invalid escape, found ", describe_current(), " after a backslash"));
    }
    uint32_t cp = parse_hex4();
    if (cp >= 0xDC00 && cp <= 0xDFFF) error_at("unpaired low surrogate in \\u escape", start);
    if (cp >= 0xD800 && cp <= 0xDBFF) {
      if (s_.substr(pos_, 2) != "\\u") error_at("high surrogate not followed by a low surrogate", start);
      pos_ += 2;
      const uint32_t lo = parse_hex4();
      if (lo < 0xDC00 || lo > 0xDFFF) error_at("high surrogate not followed by a low surrogate", start);
      cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
    }
    append_utf8(out, cp);
  }

  // One multi-byte UTF-8 sequence, validated (no overlongs, surrogates or
  // code points past U+10FFFF); pos_ at its lead byte.
  void copy_utf8(std::string& out) {
    const size_t start = pos_;
    const unsigned char c = peek();
    int n = 0;
    unsigned char lo = 0x80, hi = 0xBF;  // allowed range of the second byte
    if (c >= 0xC2 && c <= 0xDF) {
      n = 1;
    } else if (c >= 0xE0 && c <= 0xEF) {
      n = 2;
      if (c == 0xE0) lo = 0xA0;
      if (c == 0xED) hi = 0x9F;
    } else if (c >= 0xF0 && c <= 0xF4) {
      n = 3;
      if (c == 0xF0) lo = 0x90;
      if (c == 0xF4) hi = 0x8F;
    } else {
      error("invalid UTF-8 in string");
    }
    if (s_.size() - pos_ <= size_t(n)) error("truncated UTF-8 sequence in string");
    for (int i = 1; i <= n; ++i) {
      const unsigned char b = static_cast<unsigned char>(s_[pos_ + size_t(i)]);
      const bool ok = i == 1 ? (b >= lo && b <= hi) : (b >= 0x80 && b <= 0xBF);
      if (!ok) error_at("invalid UTF-8 in string", start);
    }
    out.append(s_.substr(pos_, size_t(n) + 1));
    pos_ += size_t(n) + 1;
  }

  std::string parse_string() {
    const size_t start = pos_;
    ++pos_;  // opening quote
    std::string out;
    for (;;) {
      if (eof()) error_at("unterminated string", start);
      const unsigned char c = peek();
      if (c == '"') {
        ++pos_;
        return out;
      }
      if (c == '\\') {
        parse_escape(out);
      } else if (c < 0x20) {
        error("control character in string");
      } else if (c < 0x80) {
        // Copy a run of plain ASCII at once.
        size_t end = pos_ + 1;
        while (end < s_.size()) {
          const unsigned char d = static_cast<unsigned char>(s_[end]);
          if (d == '"' || d == '\\' || d < 0x20 || d >= 0x80) break;
          ++end;
        }
        out.append(s_.substr(pos_, end - pos_));
        pos_ = end;
      } else {
        copy_utf8(out);
      }
    }
  }

  static bool is_digit(unsigned char c) { return c >= '0' && c <= '9'; }

  Value parse_number() {
    const size_t start = pos_;
    bool is_float = false;
    if (peek() == '-') ++pos_;
    if (eof() || !is_digit(peek())) unexpected("a digit");
    if (peek() == '0') {
      ++pos_;
      if (!eof() && is_digit(peek())) error("leading zero in number");
    } else {
      while (!eof() && is_digit(peek())) ++pos_;
    }
    if (!eof() && peek() == '.') {
      is_float = true;
      ++pos_;
      if (eof() || !is_digit(peek())) unexpected("a digit after '.'");
      while (!eof() && is_digit(peek())) ++pos_;
    }
    if (!eof() && (peek() == 'e' || peek() == 'E')) {
      is_float = true;
      ++pos_;
      if (!eof() && (peek() == '+' || peek() == '-')) ++pos_;
      if (eof() || !is_digit(peek())) unexpected("a digit in exponent");
      while (!eof() && is_digit(peek())) ++pos_;
    }
    const char* b = s_.data() + start;
    const char* e = s_.data() + pos_;
    if (!is_float) {
      int64_t v = 0;
      const auto r = std::from_chars(b, e, v);
      if (r.ec != std::errc() || r.ptr != e) error_at("integer out of range of int64", start);
      return Value(v);
    }
    double d = 0;
    const auto r = std::from_chars(b, e, d);
    if (r.ec != std::errc() || r.ptr != e) error_at("number out of range", start);
    return Value(d);
  }

  std::string_view s_;
  ParseLimits limits_;
  size_t pos_ = 0;
  size_t values_ = 0;
};

// ----------------------------------------------------------------- writer

void write_value(std::string& out, const Value& v) {
  switch (v.type()) {
    case Value::Type::null: out += "null"; return;
    case Value::Type::boolean: out += v.as_bool() ? "true" : "false"; return;
    case Value::Type::integer: out += std::to_string(v.as_int()); return;
    case Value::Type::number: {
      const double d = v.as_number();
      EMBER_CHECK(std::isfinite(d), "json: cannot write the non-finite number ", d);
      char buf[64];
      const auto r = std::to_chars(buf, buf + sizeof buf, d);
      std::string_view text(buf, size_t(r.ptr - buf));
      out += text;
      if (text.find_first_of(".eE") == std::string_view::npos) out += ".0";  // stays a float
      return;
    }
    case Value::Type::string: write_string(out, v.as_string()); return;
    case Value::Type::array: {
      out += '[';
      bool first = true;
      for (const Value& item : v.as_array()) {
        if (!first) out += ',';
        first = false;
        write_value(out, item);
      }
      out += ']';
      return;
    }
    case Value::Type::object: {
      out += '{';
      bool first = true;
      for (const auto& [k, item] : v.as_object()) {
        if (!first) out += ',';
        first = false;
        write_string(out, k);
        out += ':';
        write_value(out, item);
      }
      out += '}';
      return;
    }
  }
}

}  // namespace

Value parse(std::string_view text, const ParseLimits& limits) { return Parser(text, limits).parse_document(); }

std::string write(const Value& v) {
  std::string out;
  write_value(out, v);
  return out;
}

void write_string(std::string& out, std::string_view s) {
  static const char* hex = "0123456789abcdef";
  out += '"';
  for (const char ch : s) {
    const unsigned char c = static_cast<unsigned char>(ch);
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\b': out += "\\b"; break;
      case '\f': out += "\\f"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      default:
        if (c < 0x20) {
          out += "\\u00";
          out += hex[c >> 4];
          out += hex[c & 15];
        } else {
          out += ch;
        }
    }
  }
  out += '"';
}

std::string quote(std::string_view s, size_t max_bytes) {
  std::string out;
  write_string(out, s.substr(0, max_bytes));
  if (s.size() > max_bytes) out += "...";
  return out;
}

}  // namespace ember::json
