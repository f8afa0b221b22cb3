// tests/support/test_makefile.cpp — what a bare `make` does (the README's
// first build command): it plans the library, the programs and the test
// binaries, not just the first rule of the Makefile. `make -n` (nothing
// run) into an empty build directory; the tests run from the repository
// root, as make test starts them.
#include <doctest/doctest.h>

#include <string>

#include "tests/support/process_helpers.h"
#include "tests/support/test_helpers.h"

TEST_CASE("Makefile: a bare make builds the library, the programs and the tests (the default goal is all)") {
  const ember::testing::TempDir dir;
  std::string out;
  const int code = ember::testing::process::run_command(
      {"make", "-n", "--no-print-directory", "CUDA=0", "NO_GPU_HERE=1", "BUILD=" + dir.file("build")}, 120,
      dir.path.string(), "make", &out);
  INFO(out.substr(0, 2000));
  CHECK(code == 0);
  for (const char* target : {"/libember.a", "/train_resnet", "/finetune_resnet", "/predict", "/test_ember"})
    CHECK(out.find(dir.file("build") + target) != std::string::npos);
}
