// tests/test_helpers.h — small helpers shared by the test files.
#pragma once
#include <doctest/doctest.h>

#include <exception>
#include <string>

#include "engine/error.h"

namespace ember::testing {

// The message of the ember::Error that f throws; fails the test (and
// returns "<no error>" / "<other exception>") when f throws nothing or
// something else.
template <typename F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  } catch (const std::exception& e) {
    FAIL_CHECK("threw a non-ember exception: " << e.what());
    return "<other exception>";
  }
  FAIL_CHECK("expected an ember::Error, nothing was thrown");
  return "<no error>";
}

// Checks that f throws an ember::Error whose message contains `substring`.
template <typename F>
void expect_error(F&& f, const std::string& substring) {
  const std::string what = error_of(f);
  CHECK_MESSAGE(what.find(substring) != std::string::npos,
                "error '" << what << "' does not contain '" << substring << "'");
}

}  // namespace ember::testing
