// tests/support/torch_reference.h — the PyTorch side of the optional parity tests:
// whether Debian's python has torch, torchvision and PIL (probed once per
// test process), and the full-size fixtures of
// tests/fixtures/make_torchvision_fixtures.py --full (torchvision resnet18 and
// resnet50, a photo and PyTorch's results), generated once per test process
// into a temp dir that lives until the process exits. Tests that need them
// carry kNeedsPythonTorch (tests/support/skip.h): skipped, with the reason, when
// python_torch() is false.
#pragma once
#include <doctest/doctest.h>

#include <unistd.h>

#include <memory>
#include <string>

#include "tests/support/process_helpers.h"
#include "tests/support/skip.h"
#include "tests/support/test_helpers.h"

namespace ember::testing {

inline const std::string kTorchPython = "/usr/bin/python3";

// True when kTorchPython can import torch, torchvision and PIL; else *why says what is missing.
inline bool python_torch(std::string* why) {
  static int state = -1;
  static std::string reason;
  if (state < 0) {
    if (::access(kTorchPython.c_str(), X_OK) != 0) {
      state = 0;
      reason = kTorchPython + " is not installed";
    } else {
      TempDir dir;
      std::string out;
      const int rc = process::run_command({kTorchPython, "-c", "import torch, torchvision, PIL"}, 120,
                                          dir.path.string(), "probe", &out);
      state = rc == 0 ? 1 : 0;
      if (rc != 0)
        reason = kTorchPython +
                 " cannot import torch, torchvision and PIL (Debian's python3-torch, python3-torchvision, python3-pil: "
                 "make torch-deps)";
    }
  }
  if (why) *why = reason;
  return state == 1;
}

inline bool python_torch_present() { return python_torch(nullptr); }
inline constexpr needs kNeedsPythonTorch{
    "/usr/bin/python3 cannot import torch, torchvision and PIL (Debian's python3-torch, python3-torchvision, "
    "python3-pil: make torch-deps)",
    python_torch_present};

// The directory holding the generator's --full output (REQUIREs that it ran).
// Call only after python_torch() said yes.
inline std::string full_size_fixtures() {
  static std::unique_ptr<TempDir> dir;
  static bool ok = false;
  static std::string output;
  if (!dir) {
    dir = std::make_unique<TempDir>();
    const int rc = process::run_command({kTorchPython, "tests/fixtures/make_torchvision_fixtures.py", "--full",
                                         dir->path.string()},
                                        600, dir->path.string(), "full", &output);
    ok = rc == 0;
  }
  INFO("make_torchvision_fixtures.py --full: " << output);
  REQUIRE(ok);
  return dir->path.string();
}

}  // namespace ember::testing
