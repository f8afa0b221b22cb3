// tests/fuzz/fuzz_states.cpp — libFuzzer target of checkpoint `.states`
// files (PREFIX-EEEE[-BBBBBB].states.safetensors): what a resumed run reads,
// apps::read_training_position() (the safetensors file and the position in
// its metadata) and net::load_optimizer() (momentum buffers checked by name,
// shape and dtype against a model's parameters, the "steps" metadata).
//
// Input: a whole .states.safetensors file, written to a scratch file (both
// readers take a path). The model is a Linear(3, 2) (parameters weight [2, 3]
// and bias [2]), the one the seed was saved from.
// Seeds: tests/fuzz/corpus/fuzz_states (tests/fuzz/make_seeds.cpp) plus
// tests/fuzz/seeds/safetensors; dictionary tests/fuzz/fuzz_states.dict.
// Expected: ember::Error. A failure (crash, sanitizer report, leak, another
// exception, > 1 s) is a bug in apps/training/training_checkpoint.cpp,
// net/checkpoint.cpp, net/sgd.cpp or the safetensors reader.
#include "apps/training/training_checkpoint.h"
#include "net/checkpoint.h"
#include "net/layers.h"
#include "tests/fuzz/fuzz_util.h"

using namespace ember;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  fuzz::ScratchFiles scratch;
  const std::string path = fuzz::write_scratch("run-0003-000120.states.safetensors", data, size);
  scratch.paths.push_back(path);
  try {
    const apps::TrainingPosition p = apps::read_training_position(path);
    (void)p;
  } catch (const Error& e) {
    fuzz::check_one_line(e);
  }
  try {
    net::Linear model(3, 2);
    net::SGD opt(model.named_parameters(), {0.9, 1e-4, false});
    net::load_optimizer(path, opt);
  } catch (const Error& e) {
    fuzz::check_one_line(e);
  }
  return 0;
}
