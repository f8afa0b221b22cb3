// engine/error.h — the one error type of ember and the EMBER_CHECK macro.
//
// Every user-facing failure (bad shape, bad file, bad flag) is an ember::Error
// carrying a one-line message; apps catch it in main() and print it.
#pragma once
#include <sstream>
#include <stdexcept>
#include <string>

namespace ember {

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& what) : std::runtime_error(what) {}
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
