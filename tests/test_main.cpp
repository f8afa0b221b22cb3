// tests/test_main.cpp — main of the doctest binaries (build/test_ember, build/test_sim).
//
// Runs doctest (see `--help` for filters such as -tc=), then, when the tests
// ran kernels through the counting table (tests/kernel_coverage.h) — the CUDA
// backend on a GPU or on the emulator — prints how many of ops/kernels.h's
// kernels they covered. A whole-suite run that missed one fails.
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include <cstdio>
#include <cstring>

#include "tests/kernel_coverage.h"

namespace {

// True when the command line selects a subset of the tests.
bool filtered(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    const char* a = argv[i];
    for (const char* f : {"-tc", "-tce", "-ts", "-tse", "-sf", "-sfe", "--test-case", "--test-suite", "--source-file",
                          "-sc", "--subcase", "--first", "--last", "-f=", "-l="})
      if (std::strncmp(a, f, std::strlen(f)) == 0) return true;
  }
  return false;
}

}  // namespace

int main(int argc, char** argv) {
  doctest::Context context(argc, argv);
  int rc = context.run();
  if (context.shouldExit()) return rc;
  const auto cov = ember::testing::kernel_coverage();
  if (!cov.used) return rc;
  std::printf("kernel coverage of %s: %zu of %d kernels of ops/kernels.h called\n", cov.backends.c_str(),
              cov.called.size(), ember::kNumKernels);
  if (!cov.missing.empty()) {
    std::printf("never called:");
    for (const auto& m : cov.missing) std::printf(" %s", m.c_str());
    std::printf("\n");
    if (!filtered(argc, argv) && rc == 0) {
      std::printf("kernel coverage FAILED: the suite must call every kernel of the CUDA backend\n");
      rc = 1;
    }
  }
  return rc;
}
