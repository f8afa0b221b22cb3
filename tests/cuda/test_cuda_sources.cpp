// tests/cuda/test_cuda_sources.cpp — the rules every CUDA source of ember follows,
// checked on the source tree (run from the repository root, as `make test` does):
// - `<<<` appears only in cuda/common.cuh's launch(): every launch goes
//   through the one helper, so the emulator runs every kernel;
// - dynamic shared memory only through EMBER_DYNAMIC_SHARED (no other
//   `extern __shared__`);
// - kernels have no __CUDA_ARCH__ branches and no inline PTX: the emulator
//   could not run them. The one exception is cuda/ptx_instructions.cuh,
//   whose every instruction has its emulator twin in
//   cuda/sim/ptx_instructions.h.
#include <doctest/doctest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

namespace {

namespace fs = std::filesystem;

std::vector<fs::path> source_files() {
  std::vector<fs::path> out;
  for (const char* dir : {"engine", "ops", "cuda", "data", "net", "apps", "tests"}) {
    if (!fs::exists(dir)) continue;
    for (const auto& e : fs::recursive_directory_iterator(dir)) {
      const std::string ext = e.path().extension().string();
      if (e.is_regular_file() && (ext == ".h" || ext == ".cpp" || ext == ".cu" || ext == ".cuh" || ext == ".S"))
        out.push_back(e.path());
    }
  }
  return out;
}

std::string read(const fs::path& p) {
  std::ifstream in(p);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// 1-based line numbers of every occurrence of needle in text.
std::vector<int> lines_of(const std::string& text, const std::string& needle) {
  std::vector<int> lines;
  for (size_t pos = text.find(needle); pos != std::string::npos; pos = text.find(needle, pos + 1))
    lines.push_back(1 + int(std::count(text.begin(), text.begin() + long(pos), '\n')));
  return lines;
}

}  // namespace

TEST_CASE("cuda sources: one launch site, one dynamic shared memory macro, no arch branches or inline PTX") {
  REQUIRE_MESSAGE(fs::exists("ops/kernels.h"), "run the tests from the repository root");
  const auto files = source_files();
  REQUIRE(files.size() > 50);
  // Needles assembled at run time so this file does not match itself.
  const std::string launch_syntax = std::string("<<") + "<";
  const std::string extern_shared = std::string("extern ") + "__shared__";
  const std::string arch = std::string("__CUDA") + "_ARCH__";
  int cu_files = 0;
  for (const auto& p : files) {
    const std::string path = p.generic_string();
    // The file that states the rules (and holds the one launch), and this test.
    if (path == "cuda/common.cuh" || path == "tests/cuda/test_cuda_sources.cpp") continue;
    const std::string text = read(p);
    {
      for (int line : lines_of(text, launch_syntax)) FAIL_CHECK(path << ":" << line << ": kernel launch outside launch()");
      for (int line : lines_of(text, extern_shared))
        FAIL_CHECK(path << ":" << line << ": dynamic shared memory outside EMBER_DYNAMIC_SHARED");
    }
    if (p.extension() == ".cu" || p.extension() == ".cuh") {
      ++cu_files;
      for (int line : lines_of(text, arch)) FAIL_CHECK(path << ":" << line << ": " << arch << " branch in a kernel source");
      for (const char* asm_kw : {"asm(", "asm volatile", "__asm__"})
        for (int line : path == "cuda/ptx_instructions.cuh" ? std::vector<int>{} : lines_of(text, asm_kw)) FAIL_CHECK(path << ":" << line << ": inline assembly in a kernel source");
    }
  }
  CHECK(cu_files >= 3);
}
