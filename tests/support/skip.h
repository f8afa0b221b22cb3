// tests/support/skip.h — skipping a test case that this machine or this build cannot
// run, so that it counts as skipped, never as passed.
//
//   TEST_CASE("cuda ..." * ember::testing::needs{"no CUDA device on this machine", cuda_device_present})
//
// `needs` is a doctest decorator. At static initialization it only records
// which test case it decorates; main() (tests/support/test_main.cpp) calls each
// predicate once, after static initialization and before the first test,
// and marks the test cases whose predicate is false as skipped (doctest's own
// skip flag: doctest reports them under "skipped", and --no-skip runs them
// anyway). main() prints each reason with the number of test cases it skips,
// and the results file (EMBER_TEST_RESULTS, tests/run_tests.sh) lists them as
// skipped with the reason. Several `needs` on one test case: the first unmet
// one is the reason. A predicate may use the CUDA runtime or the emulator:
// it runs inside main(), never during static initialization.
#pragma once
#include <doctest/doctest.h>

#include <cstdlib>
#include <string>
#include <vector>

namespace ember::testing {

struct needs {
  const char* missing;  // why the test case is skipped when `met` returns false
  bool (*met)();

  void fill(doctest::detail::TestCase& tc) const;
};

struct Need {
  std::string file;
  unsigned line;
  needs what;
};
// Every `needs` of every test case, in registration order.
inline std::vector<Need>& registered_needs() {
  static std::vector<Need> all;
  return all;
}
inline void needs::fill(doctest::detail::TestCase& tc) const {
  registered_needs().push_back({tc.m_file.c_str(), tc.m_line, *this});
}

// A slow variant of what a quicker test case already covers (another
// precision of an end-to-end training, the same training through another
// data path). make check runs it; make test sets EMBER_QUICK=1, which skips
// it with this reason, so that the newcomer's check stays within minutes.
inline bool full_suite() {
  const char* quick = std::getenv("EMBER_QUICK");
  return quick == nullptr || *quick == '\0' || std::string(quick) == "0";
}
inline const needs slow_variant{"a slow variant of an end-to-end test (EMBER_QUICK=1, make test; make check runs it)",
                                full_suite};

}  // namespace ember::testing
