// tests/fuzz/fuzz_util.h — what the libFuzzer targets (tests/fuzz/fuzz_*.cpp)
// share: a per-process scratch folder for parsers that only take a path, and
// the rule for what counts as a finding.
//
// Rule: a parser may refuse an input only with an ember::Error (a one-line
// message naming the file); the targets catch exactly that. Anything else —
// a crash, a sanitizer report, a leak, another exception, more than the
// runner's -timeout — reaches libFuzzer and is a bug. A target that checks a
// property itself (a round trip) reports a violation through fuzz_fail().
#pragma once
#include <fcntl.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>

#include "engine/error.h"

namespace ember::fuzz {

// A folder of this process: /dev/shm/ember-fuzz-PID (RAM, so a file per
// input costs no disk I/O), else $TMPDIR. Removed at exit; run_fuzz.sh
// removes the folders of processes that died (crashes skip atexit).
inline const std::string& scratch_dir() {
  // Never destroyed: the atexit handler runs after static destructors would.
  static const std::string* dir = [] {
    std::string base = "/dev/shm";
    if (access(base.c_str(), W_OK) != 0) base = std::getenv("TMPDIR") ? std::getenv("TMPDIR") : "/tmp";
    auto* d = new std::string(base + "/ember-fuzz-" + std::to_string(getpid()));
    std::filesystem::create_directories(*d);
    std::atexit([] {
      std::error_code ec;
      std::filesystem::remove_all(scratch_dir(), ec);
    });
    return d;
  }();
  return *dir;
}

// Writes bytes to scratch_dir()/name (replacing it) and returns the path.
inline std::string write_scratch(const std::string& name, const uint8_t* data, size_t size) {
  const std::string path = scratch_dir() + "/" + name;
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) {
    std::perror(path.c_str());
    std::abort();
  }
  size_t done = 0;
  while (done < size) {
    const ssize_t w = ::write(fd, data + done, size - done);
    if (w <= 0) {
      std::perror(path.c_str());
      std::abort();
    }
    done += size_t(w);
  }
  ::close(fd);
  return path;
}

// Removes the files it names when it goes out of scope.
struct ScratchFiles {
  std::vector<std::string> paths;
  ~ScratchFiles() {
    for (const std::string& p : paths) ::unlink(p.c_str());
  }
};

// A property the target checks failed: print and abort (libFuzzer saves the input).
[[noreturn]] inline void fuzz_fail(const std::string& what) {
  std::fprintf(stderr, "FUZZ PROPERTY VIOLATED: %s\n", what.c_str());
  std::abort();
}

// An ember::Error's message must be one line a terminal can show (it is
// what a user sees): no newline, and bytes quoted from the input are cut
// (json::shown caps each at 200), so a message stays short whatever the
// input holds. The scratch paths are short; 2,000 bytes leaves room for a
// message that quotes a few names.
constexpr size_t kMaxMessageBytes = 2000;
inline void check_one_line(const Error& e) {
  const char* m = e.what();
  if (std::strchr(m, '\n') != nullptr) fuzz_fail(std::string("multi-line error message: ") + m);
  if (std::strlen(m) > kMaxMessageBytes)
    fuzz_fail("error message of " + std::to_string(std::strlen(m)) + " bytes: " + std::string(m, 300) + "...");
}

}  // namespace ember::fuzz
