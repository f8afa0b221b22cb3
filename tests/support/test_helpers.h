// tests/support/test_helpers.h — small helpers shared by the test files.
#pragma once
#include <doctest/doctest.h>

#include <unistd.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <filesystem>
#include <fstream>
#include <string>
#include <system_error>
#include <vector>

#include "engine/error.h"

namespace ember::testing {

// The message of the ember::Error that f throws; fails the test (and
// returns "<no error>" / "<other exception>") when f throws nothing or
// something else.
template <typename F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  } catch (const std::exception& e) {
    FAIL_CHECK("threw a non-ember exception: " << e.what());
    return "<other exception>";
  }
  FAIL_CHECK("expected an ember::Error, nothing was thrown");
  return "<no error>";
}

// The message of the ember::Error that f throws, or "" when it throws none
// (for checks that expect either outcome, e.g. an emulated kernel launch).
template <typename F>
std::string thrown_message(F&& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return {};
}

// Checks that f throws an ember::Error whose message contains `substring`.
template <typename F>
void expect_error(F&& f, const std::string& substring) {
  const std::string what = error_of(f);
  CHECK_MESSAGE(what.find(substring) != std::string::npos,
                "error '" << what << "' does not contain '" << substring << "'");
}

inline bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

// A fresh directory under the system temp dir (ember_test_<pid>_<n>),
// removed with everything in it at the end of scope.
struct TempDir {
  std::filesystem::path path;
  TempDir() {
    static int counter = 0;
    path = std::filesystem::temp_directory_path() /
           ("ember_test_" + std::to_string(getpid()) + "_" + std::to_string(counter++));
    std::filesystem::remove_all(path);
    std::filesystem::create_directories(path);
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  std::string file(const std::string& name) const { return (path / name).string(); }
  // The names directly in the directory, sorted.
  std::vector<std::string> entries() const {
    std::vector<std::string> names;
    for (const auto& e : std::filesystem::directory_iterator(path)) names.push_back(e.path().filename().string());
    std::sort(names.begin(), names.end());
    return names;
  }
};

// Writes the first n bytes (all by default) to `path` as a new file, creating
// its folder. The old file is removed first so each write is a fresh inode:
// truncating and rewriting one file in a loop makes ext4 flush it to disk
// each time, which is slow. (Reading back: ember::read_file, engine/file_io.h.)
inline void write_bytes(const std::string& path, const std::vector<uint8_t>& bytes, size_t n = SIZE_MAX) {
  const std::filesystem::path p(path);
  std::error_code ec;
  if (p.has_parent_path()) std::filesystem::create_directories(p.parent_path(), ec);
  std::filesystem::remove(p, ec);
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f.write(reinterpret_cast<const char*>(bytes.data()), std::streamsize(std::min(n, bytes.size())));
  f.close();
  REQUIRE_MESSAGE(f.good(), "cannot write " << path);
}

}  // namespace ember::testing

// Checks that `expr` throws an ember::Error whose message contains `part`
// and is one line (the message is shown when it does not).
#define CHECK_ERROR_HAS(expr, part)                                                   \
  do {                                                                                \
    const std::string msg_ = ::ember::testing::error_of([&] { (void)(expr); });       \
    INFO("message: ", msg_);                                                          \
    CHECK(::ember::testing::contains(msg_, part));                                    \
    CHECK(msg_.find('\n') == std::string::npos); /* errors are one line */         \
  } while (0)
