// tests/apps/test_flags.cpp — the apps' flag parser: forms, types, errors, help.
#include <doctest/doctest.h>

#include <vector>

#include "apps/training/flags.h"
#include "engine/error.h"

namespace {

using ember::Error;
using ember::apps::Flags;

struct Parsed {
  int64_t batch = 128;
  int layers = 20;
  double lr = 0.1;
  std::string prefix;
  bool bench = false;
  std::vector<int> steps;
};

// Parses a command line given as one string (space separated).
bool parse(Flags& f, std::vector<std::string> args) {
  args.insert(args.begin(), "prog");
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  return f.parse(int(argv.size()), argv.data());
}

Flags make(Parsed& p) {
  Flags f("prog", "test program");
  f.group("g");
  f.add("batch-size", &p.batch, "images per step");
  f.add("num-layers", &p.layers, "depth");
  f.add("lr", &p.lr, "learning rate");
  f.add("model-prefix", &p.prefix, "prefix");
  f.add("benchmark", &p.bench, "synthetic");
  f.add("lr-step-epochs", &p.steps, "epochs");
  return f;
}

}  // namespace

TEST_CASE("flags: both forms, every type, defaults kept") {
  Parsed p;
  Flags f = make(p);
  CHECK(parse(f, {"--batch-size", "64", "--lr=0.05", "--benchmark", "1", "--lr-step-epochs", "30,60,,90"}));
  CHECK(p.batch == 64);
  CHECK(p.lr == 0.05);
  CHECK(p.bench);
  CHECK(p.steps == std::vector<int>{30, 60, 90});
  CHECK(p.layers == 20);
  CHECK(f.was_set("lr"));
  CHECK(!f.was_set("num-layers"));
  CHECK(f.settings().find("batch-size=64 num-layers=20 lr=0.05") != std::string::npos);
}

TEST_CASE("flags: one-line errors name the flag") {
  Parsed p;
  Flags f = make(p);
  CHECK_THROWS_WITH_AS(parse(f, {"--batch-sise", "3"}), doctest::Contains("unknown flag --batch-sise (did you mean --batch-size?)"), Error);
  CHECK_THROWS_WITH_AS(parse(f, {"--lr", "fast"}), doctest::Contains("--lr: 'fast' is not a number"), Error);
  CHECK_THROWS_WITH_AS(parse(f, {"--num-layers", "9999999999"}), doctest::Contains("out of range"), Error);
  CHECK_THROWS_WITH_AS(parse(f, {"--batch-size"}), doctest::Contains("--batch-size needs a value"), Error);
  CHECK_THROWS_WITH_AS(parse(f, {"--benchmark=yes"}), doctest::Contains("expected 0 or 1"), Error);
  CHECK_THROWS_WITH_AS(parse(f, {"--benchmark", "yes"}), doctest::Contains("unexpected argument 'yes'"), Error);
  CHECK_THROWS_WITH_AS(parse(f, {"--benchmark", "2"}), doctest::Contains("--benchmark: expected 0 or 1, got '2'"), Error);
  CHECK_THROWS_WITH_AS(parse(f, {"stray"}), doctest::Contains("unexpected argument 'stray'"), Error);
  CHECK_THROWS_WITH_AS(parse(f, {"--lr-step-epochs", "30,x"}), doctest::Contains("'x' is not an integer"), Error);
}

TEST_CASE("flags: --help lists every flag with its default and stops parsing") {
  Parsed p;
  Flags f = make(p);
  const std::string h = f.help();
  for (const char* name : {"--batch-size 128", "--num-layers 20", "--lr 0.1", "--model-prefix \"\"", "--benchmark 0"})
    CHECK(h.find(name) != std::string::npos);
  CHECK_FALSE(parse(f, {"--help"}));
}

TEST_CASE("flags: bare booleans, and operands collected by positional()") {
  Parsed p;
  Flags f = make(p);
  std::vector<std::string> files;
  f.positional(&files, "IMAGE...");
  CHECK(parse(f, {"a.jpg", "--benchmark", "b.png", "--lr", "0.5", "c.jpg", "--", "--d.jpg"}));
  CHECK(p.bench);
  CHECK(p.lr == 0.5);
  CHECK(files == std::vector<std::string>{"a.jpg", "b.png", "c.jpg", "--d.jpg"});
  CHECK(f.help().find("usage: prog [--flag value ...] IMAGE...") != std::string::npos);
  Parsed q;
  Flags g = make(q);
  CHECK(parse(g, {"--benchmark", "0", "--num-layers", "8"}));  // a literal after a boolean is its value
  CHECK_FALSE(q.bench);
  CHECK(parse(g, {"--benchmark"}));  // last argument
  CHECK(q.bench);
  CHECK(q.layers == 8);
}

TEST_CASE("flags: floating types by name, in the programs' and the kernel lab's spellings") {
  using ember::DType;
  using ember::apps::parse_float_dtype;
  CHECK(parse_float_dtype("fp32", "--precision") == DType::f32);
  CHECK(parse_float_dtype("f32", "--dtype") == DType::f32);
  CHECK(parse_float_dtype("fp16", "--precision") == DType::f16);
  CHECK(parse_float_dtype("f16", "--dtype") == DType::f16);
  CHECK(parse_float_dtype("bf16", "--dtype") == DType::bf16);
  CHECK_THROWS_WITH_AS(parse_float_dtype("f64", "--dtype"), "--dtype 'f64': fp32 (f32), fp16 (f16) or bf16", Error);
  CHECK_THROWS_WITH_AS(parse_float_dtype("FP16", "--precision"),
                       "--precision 'FP16': fp32 (f32), fp16 (f16) or bf16", Error);
}
