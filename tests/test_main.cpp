// tests/test_main.cpp — doctest's main for build/test_ember.
//
// Every tests/*.cpp file is linked into one binary; run
// `build/test_ember --help` for doctest's filters (-tc=, -ts=, ...).
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>
