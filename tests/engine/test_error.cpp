// tests/engine/test_error.cpp — ember::Error (engine/error.h): every message is
// one line, whatever bytes reached it.
#include <doctest/doctest.h>

#include <string>

#include "engine/error.h"

using namespace ember;

TEST_CASE("error messages: a control character that reaches an Error is shown escaped, so the message is one line") {
  CHECK(std::string(Error("a\nb\rc\td").what()) == "a\\nb\\rc\\td");
  CHECK(std::string(Error(std::string("x\x01y\x7fz", 5)).what()) == "x\\x01y\\x7fz");
  CHECK(std::string(Error("caf\xc3\xa9 ok").what()) == "caf\xc3\xa9 ok");  // UTF-8 is left as it is
  CHECK_THROWS_WITH_AS(EMBER_CHECK(false, "line\n", 2), "line\\n2", Error);
}
