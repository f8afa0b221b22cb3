// tests/support/test_run_tests.cpp — tests/run_tests.sh, the runner of make
// test and make check, driven with small fake suites (shell scripts that
// write EMBER_TEST_RESULTS lines and a doctest summary, as test_main.cpp's
// listener and doctest do): its counts, and that nothing passes by not
// running: a suite that ran no test case fails, a hung suite is stopped at
// its time limit naming the test case it was in, a suite the build left out
// counts as skipped with its reason; and a suite started in the background
// ("& ...") is counted and printed.
#include <doctest/doctest.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "tests/support/process_helpers.h"
#include "tests/support/test_helpers.h"

namespace {

using ember::testing::contains;
using ember::testing::TempDir;

// A fake suite: `lines` go to the results file (one per line, fields split
// by tabs), `summary` to stdout, then it sleeps `sleep_s` and exits `code`.
std::string fake_suite(const TempDir& dir, const std::string& name, const std::string& lines, const std::string& summary,
                       int sleep_s = 0, int code = 0) {
  const std::string path = dir.file(name + ".sh");
  std::ofstream f(path);
  f << "printf '" << lines << "' >> \"$EMBER_TEST_RESULTS\"\n";
  if (!summary.empty()) f << "echo '" << summary << "'\n";
  if (sleep_s) f << "sleep " << sleep_s << "\n";
  f << "exit " << code << "\n";
  return "bash " + path;
}

// Runs tests/run_tests.sh in `dir` (its output files land there).
int run(const TempDir& dir, const std::vector<std::string>& suites, std::string* out) {
  std::vector<std::string> argv = {"bash", std::filesystem::absolute("tests/run_tests.sh").string()};
  argv.insert(argv.end(), suites.begin(), suites.end());
  return ember::testing::process::run_command(argv, 60, dir.path.string(), "run_tests", out);
}

}  // namespace

// Tests run from the repository's root.
TEST_CASE("run_tests.sh: counts each test case once, and a clean run ends with its closing line and exit 0") {
  const TempDir dir;
  const std::string a = fake_suite(dir, "a", "running\\tone\\npassed\\tone\\nskipped\\ttwo\\tno GPU here\\n",
                                   "[doctest] test cases: 1 | 1 passed | 0 failed | 1 skipped");
  const std::string b = fake_suite(dir, "b", "running\\tone\\npassed\\tone\\n",
                                   "[doctest] test cases: 1 | 1 passed | 0 failed | 0 skipped");
  std::string out;
  CHECK_MESSAGE(run(dir, {a, "& " + b}, &out) == 0, out);
  CHECK_MESSAGE(contains(out, "skipped: 1, no GPU here"), out);
  CHECK_MESSAGE(contains(out, "(started in the background; its output follows when it ends)"), out);
  CHECK_MESSAGE(contains(out, "=== " + b + ": 1 passed, 0 failed, 0 skipped, exit 0"), out);
  CHECK_MESSAGE(contains(out, "\n1 passed, 0 failed, 1 skipped\n"), out);
}

TEST_CASE("run_tests.sh: a suite that ran nothing fails, and so does a hung one, naming its test case") {
  const TempDir dir;
  const std::string empty = fake_suite(dir, "empty", "", "[doctest] test cases: 0 | 0 passed | 0 failed | 0 skipped");
  const std::string hung = fake_suite(dir, "hung", "running\\tthe slow one\\n", "", 30);
  std::string out;
  const auto t0 = ember::testing::process::Clock::now();
  CHECK(run(dir, {empty, "timeout=1 " + hung, "skipped: build/test_sim: no cuda_runtime.h (SIM=0)"}, &out) != 0);
  CHECK(ember::testing::process::seconds_since(t0) < 20);
  CHECK_MESSAGE(contains(out, "ran no test case (a filter that matches nothing?)"), out);
  CHECK_MESSAGE(contains(out, "1 crashed: \"the slow one\""), out);
  CHECK_MESSAGE(contains(out, "timed out: still running after the suite's limit of 1 s"), out);
  CHECK_MESSAGE(contains(out, "=== build/test_sim: not built, skipped: no cuda_runtime.h (SIM=0)"), out);
  // The empty suite's failure, the hung test case; the left-out suite is a skip.
  CHECK_MESSAGE(contains(out, "\n0 passed, 2 failed, 1 skipped\n"), out);
}
