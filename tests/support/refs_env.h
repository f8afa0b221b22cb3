// tests/support/refs_env.h — the reference environments the interop tests
// run the real things in, outside the product (scripts/refs/refs.mk; under
// .refs, or EMBER_REFS_DIR): make refs builds .refs/mxnet (MXNet 1.9.1 and
// the official safetensors; CI builds it), make refs-torch .refs/torch
// (current PyTorch and torchvision; several GB, not in CI). Tests that need
// one carry kNeedsMxnetRefs or kNeedsTorchRefs (tests/support/skip.h):
// skipped, with the reason, where it is not built. Paths are relative to the
// repository root the tests run in.
#pragma once
#include <unistd.h>

#include <cstdlib>
#include <string>

#include "tests/support/skip.h"

namespace ember::testing {

// The Python of a reference environment ("mxnet" or "torch").
inline std::string refs_python(const std::string& env) {
  const char* dir = std::getenv("EMBER_REFS_DIR");
  return std::string(dir && *dir ? dir : ".refs") + "/" + env + "/bin/python";
}
inline std::string mxnet_refs_python() { return refs_python("mxnet"); }
inline std::string torch_refs_python() { return refs_python("torch"); }
inline bool mxnet_refs_built() { return ::access(mxnet_refs_python().c_str(), X_OK) == 0; }
inline bool torch_refs_built() { return ::access(torch_refs_python().c_str(), X_OK) == 0; }
inline const needs kNeedsMxnetRefs{"the MXNet 1.9.1 reference environment is not built (make refs)",
                                   mxnet_refs_built};
inline const needs kNeedsTorchRefs{"the PyTorch 2.x reference environment is not built (make refs-torch)",
                                   torch_refs_built};

}  // namespace ember::testing
