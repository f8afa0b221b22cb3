// engine/error.h — the one error type of ember and the EMBER_CHECK macro.
//
// Every user-facing failure (bad shape, bad file, bad flag) is an ember::Error
// carrying a one-line message; apps catch it in main() and print it.
#pragma once
#include <sstream>
#include <stdexcept>
#include <string>

namespace ember {

// A message made one line: a control character (a newline from a file's
// bytes quoted without json::shown, say) is shown escaped, as \n or \xNN.
inline std::string one_line(const std::string& s) {
  std::string out;
  out.reserve(s.size());
  for (const char c : s) {
    const auto u = static_cast<unsigned char>(c);
    if (u >= 0x20 && u != 0x7f) {
      out += c;
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\r') {
      out += "\\r";
    } else if (c == '\t') {
      out += "\\t";
    } else {
      const char hex[] = "0123456789abcdef";
      out += "\\x";
      out += hex[u >> 4];
      out += hex[u & 15];
    }
  }
  return out;
}

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& what) : std::runtime_error(one_line(what)) {}
};

// Concatenates any streamable values into one string: cat("got ", 3, " dims").
template <typename... Args>
std::string cat(const Args&... args) {
  std::ostringstream os;
  (os << ... << args);
  return os.str();
}

[[noreturn]] inline void fail(const std::string& message) { throw Error(message); }

}  // namespace ember

// EMBER_CHECK(cond, parts...): throws ember::Error(cat(parts...)) when cond is false.
#define EMBER_CHECK(cond, ...)                                   \
  do {                                                           \
    if (!(cond)) ::ember::fail(::ember::cat(__VA_ARGS__));       \
  } while (0)
