// tests/support/kernel_coverage.h — which kernels of a backend the tests actually ran.
//
// install_counting_table(type, base) registers, for a device type, a table
// whose every entry counts its call and forwards to `base`; the CUDA tests
// install the native (or cuDNN) table that way. tests/support/test_main.cpp reports
// at the end of a run how many of ops/kernels.h's kernels were called through
// it, and fails a run of the whole suite when one never was.
#pragma once
#include <string>
#include <vector>

#include "ops/kernels.h"

namespace ember::testing {

void install_counting_table(DeviceType type, const Kernels& base);

struct KernelCoverage {
  bool used = false;                 // a counting table was installed at all
  std::string backends;              // names of the tables it forwarded to
  std::vector<std::string> called;   // kernels called at least once
  std::vector<std::string> missing;  // kernels never called
};
KernelCoverage kernel_coverage();

}  // namespace ember::testing
