// tests/support/test_skip_lint.cpp — no test case may print that it skips and
// then return: doctest counts such a test case as passed, having checked
// nothing. A test case that cannot run where it is says so with a `needs`
// decorator (tests/support/skip.h) and is counted as skipped, with its reason.
// This lint reads every source under tests/ and fails on a line that prints
// a message about skipping (doctest's MESSAGE/WARN/INFO, printf, puts,
// std::cout/cerr) followed, within the next three lines, by a `return`.
#include <doctest/doctest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

namespace {

namespace fs = std::filesystem;

// "FILE:LINE: ..." for each print about skipping followed by a return in `text`.
std::vector<std::string> silent_skips(const std::string& file, const std::string& text) {
  static const std::regex print_about_skip(
      R"((\bMESSAGE|\bWARN|\bINFO|\bprintf|\bputs|\bstd::cout|\bstd::cerr|\bcout|\bcerr)\b.*\bskip)",
      std::regex::icase);
  static const std::regex early_return(R"(\breturn\b)");
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  std::vector<std::string> found;
  for (size_t i = 0; i < lines.size(); ++i) {
    if (!std::regex_search(lines[i], print_about_skip)) continue;
    for (size_t j = i; j < std::min(lines.size(), i + 4); ++j) {
      if (std::regex_search(lines[j], early_return)) {
        found.push_back(file + ":" + std::to_string(i + 1) + ": prints a skip and returns (line " + std::to_string(j + 1) +
                        "): doctest counts it as passed; use ember::testing::needs (tests/support/skip.h)");
        break;
      }
    }
  }
  return found;
}

}  // namespace

TEST_CASE("skip lint: a print about skipping followed by a return is found; a needs decorator is not") {
  CHECK(silent_skips("t.cpp", "TEST_CASE(\"x\") {\n  if (!k) {\n    MESSAGE(\"skipped: no AVX-512\");\n    return;\n  }\n}\n") ==
        std::vector<std::string>{"t.cpp:3: prints a skip and returns (line 4): doctest counts it as passed; use "
                                 "ember::testing::needs (tests/support/skip.h)"});
  CHECK(silent_skips("t.cpp", "  if (!ok) { std::printf(\"Skipping: no GPU\\n\"); return; }\n").size() == 1);
  CHECK(silent_skips("t.cpp", "  WARN(\"the file system makes no sparse files: skipped\");\n\n\n  return;\n").size() == 1);
  // A return further away, or no print, or a skip that is a test's subject, is not one.
  CHECK(silent_skips("t.cpp", "  MESSAGE(\"skipped\");\n\n\n\n  return;\n").empty());
  CHECK(silent_skips("t.cpp", "TEST_CASE(\"x\" * kNeedsGpu) {\n  return;\n}\n").empty());
  CHECK(silent_skips("t.cpp", "  CHECK(warnings.find(\"warning: skipping \" + path) != npos);\n  return;\n").empty());
}

// Tests run from the repository's root.
TEST_CASE("skip lint: no test source prints a skip and returns") {
  REQUIRE_MESSAGE(fs::is_directory("tests/support"), "run the tests from the repository's root");
  int files = 0;
  for (const auto& e : fs::recursive_directory_iterator("tests")) {
    const std::string ext = e.path().extension().string();
    if (!e.is_regular_file() || (ext != ".cpp" && ext != ".h")) continue;
    if (e.path() == fs::path("tests/support/test_skip_lint.cpp")) continue;  // its own examples
    std::ifstream in(e.path());
    std::stringstream text;
    text << in.rdbuf();
    ++files;
    for (const std::string& f : silent_skips(e.path().string(), text.str())) FAIL_CHECK(f);
  }
  CHECK(files > 50);
}
