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

// make refs / make refs-torch (scripts/refs/refs.mk): a virtual environment
// each, from PyPI by exact version (nothing run here: make -n).
TEST_CASE("Makefile: make refs and make refs-torch plan virtual environments pinned to exact versions") {
  const ember::testing::TempDir dir;
  for (const char* target : {"refs", "refs-torch"}) {
    CAPTURE(target);
    std::string out;
    const int code = ember::testing::process::run_command(
        {"make", "-n", "--no-print-directory", target, "REFS_DIR=" + dir.file("refs")}, 60, dir.path.string(), "make",
        &out);
    INFO(out.substr(0, 3000));
    CHECK(code == 0);
    const bool mxnet = std::string(target) == "refs";
    const std::string env = dir.file("refs") + (mxnet ? "/mxnet" : "/torch");
    CHECK(out.find("python3 -m venv " + env) != std::string::npos);
    CHECK(out.find(env + "/bin/pip install") != std::string::npos);
    if (mxnet) {
      for (const char* pin : {"mxnet==1.9.1", "numpy==1.23.5", "safetensors=="}) CHECK(out.find(pin) != std::string::npos);
    } else {
      for (const char* pin : {"torch==2.", "torchvision==0.", "safetensors=="}) CHECK(out.find(pin) != std::string::npos);
    }
    // Every package pinned: no bare name in the install line.
    const size_t at = out.find(env + "/bin/pip install");
    const std::string line = at == std::string::npos ? "" : out.substr(at, out.find('\n', at) - at);
    size_t packages = 0, pinned = 0;
    for (size_t p = line.find(" -q ") + 4; p != std::string::npos && p < line.size();) {
      const size_t end = line.find(' ', p);
      const std::string word = line.substr(p, end == std::string::npos ? std::string::npos : end - p);
      if (word.empty() || word[0] == '>' || word.find("2>&1") != std::string::npos) break;
      ++packages;
      pinned += word.find("==") != std::string::npos;
      p = end == std::string::npos ? end : end + 1;
    }
    CHECK(packages >= 3);
    CHECK(pinned == packages);
  }
}
