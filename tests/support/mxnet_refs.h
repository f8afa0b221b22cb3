// tests/support/mxnet_refs.h — the MXNet 1.9.1 reference environment the
// interop tests run MXNet in (make refs: .refs/mxnet, outside the product;
// EMBER_REFS_DIR names another directory). Tests that need it carry
// kNeedsMxnetRefs (tests/support/skip.h): skipped, with the reason, where it
// is not built. Paths are relative to the repository root the tests run in.
#pragma once
#include <unistd.h>

#include <cstdlib>
#include <string>

#include "tests/support/skip.h"

namespace ember::testing {

// The reference environment's Python.
inline std::string mxnet_refs_python() {
  const char* dir = std::getenv("EMBER_REFS_DIR");
  return std::string(dir && *dir ? dir : ".refs") + "/mxnet/bin/python";
}
inline bool mxnet_refs_built() { return ::access(mxnet_refs_python().c_str(), X_OK) == 0; }
inline const needs kNeedsMxnetRefs{"the MXNet 1.9.1 reference environment is not built (make refs)",
                                   mxnet_refs_built};

}  // namespace ember::testing
