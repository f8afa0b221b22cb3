// tests/support/doctest_config.h — included (g++ -include, see the Makefile) before
// every test source of every test binary, so that all of them print a
// `const char*` the same way.
//
// doctest prints a character pointer as an address: CAPTURE(dtype_name(dt))
// showed `dtype_name(dt) := 0x55...`. DOCTEST_CONFIG_TREAT_CHAR_STAR_AS_STRING
// would print the text, but in doctest 2.4.9 (Debian's doctest-dev) that
// switch does not compile (its not_char_pointer lacks a type; fixed in
// 2.4.10), and it would also turn CHECK(p == q) on char pointers into string
// comparisons. These specializations only change the printing: the text, in
// quotes, or nullptr. They must be seen before any use in every test source,
// hence the forced include rather than a header each test includes.
//
// It also includes the standard headers most test sources use: the plain
// tree compiles this header once, precompiled (the Makefile's PCH), and
// every test source then skips parsing them. Test sources still include
// what they use themselves.
// (An include guard, not #pragma once: g++ warns about the pragma in the
// header it precompiles.)
#ifndef EMBER_TESTS_DOCTEST_CONFIG_H
#define EMBER_TESTS_DOCTEST_CONFIG_H
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

namespace doctest {
template <>
struct StringMaker<const char*> {
  static String convert(const char* s) { return s ? String("\"") + s + "\"" : String("nullptr"); }
};
template <>
struct StringMaker<char*> {
  static String convert(const char* s) { return StringMaker<const char*>::convert(s); }
};
}  // namespace doctest

#endif  // EMBER_TESTS_DOCTEST_CONFIG_H
