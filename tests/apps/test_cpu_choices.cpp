// tests/apps/test_cpu_choices.cpp — the measured CPU kernel choices a training
// checkpoint records and a resume takes over (apps/training/cpu_choices.h):
// the metadata round trip through a real checkpoint, a bad value named with
// its file, and adopting them: pinned where the environment leaves them
// automatic, kept (with a warning where they differ) where it pins them.
// The kill-and-resume test in test_long_runs.cpp runs it on the program.
#include <doctest/doctest.h>

#include <cstdio>
#include <string>

#include "apps/training/cpu_choices.h"
#include "apps/training/training_checkpoint.h"
#include "engine/error.h"
#include "net/resnet.h"
#include "net/sgd.h"
#include "ops/cpu/conv/conv_bf16_kernels.h"
#include "ops/cpu/conv/conv_policy.h"
#include "tests/support/test_helpers.h"

namespace {

using namespace ember;
using ember::testing::contains;
using ember::testing::TempDir;

// What adopt_cpu_choices printed.
std::string adopt(const apps::CpuChoices& c) {
  std::FILE* f = std::tmpfile();
  REQUIRE(f);
  apps::adopt_cpu_choices(c, "m-0001.states.safetensors", f);
  std::rewind(f);
  std::string text;
  char buf[512];
  while (std::fgets(buf, sizeof buf, f)) text += buf;
  std::fclose(f);
  return text;
}

struct RestoreRules {
  cpu::WinogradRule winograd = cpu::winograd_rule();
  cpu::Bf16KernelMode bf16 = cpu::bf16_conv_kernel_mode();
  ~RestoreRules() {
    cpu::set_winograd_rule(winograd);
    cpu::set_bf16_conv_kernel_mode(bf16);
  }
};

TEST_CASE("cpu choices: a checkpoint records them and reads them back; unrecorded ones stay unrecorded") {
  TempDir dir;
  Generator gen(1);
  net::ResNetConfig cfg;
  cfg.num_layers = 8;
  cfg.num_classes = 10;
  cfg.in_channels = 1;
  cfg.image_size = 28;
  net::ResNet model(cfg, gen);
  net::SGD opt(model.named_parameters(), {0.9, 0.0, false});
  for (const apps::CpuChoices c : {apps::CpuChoices{1, 0}, apps::CpuChoices{0, 1}, apps::CpuChoices{1, -1},
                                   apps::CpuChoices{-1, -1}}) {
    CAPTURE(c.winograd);
    CAPTURE(c.bf16_tiles);
    const std::string path = (dir.path / "m-0001.safetensors").string();
    apps::TrainingPosition p;
    p.epoch = 1;
    p.cpu = c;
    apps::save_training_checkpoint(path, model, opt, {}, p);
    const apps::TrainingPosition back = apps::read_training_position(apps::states_path_of(path));
    CHECK(back.cpu.winograd == c.winograd);
    CHECK(back.cpu.bf16_tiles == c.bf16_tiles);
  }
  // What a CPU run records: this process's own choices (bf16 tiles only for bf16 runs).
  const apps::CpuChoices now = apps::current_cpu_choices(false);
  CHECK(now.winograd == (cpu::winograd_pays() ? 1 : 0));
  CHECK(now.bf16_tiles == -1);
  CHECK(apps::current_cpu_choices(true).bf16_tiles == (cpu::bf16_conv_kernels() ? 1 : 0));
}

TEST_CASE("cpu choices: a value other than 0 or 1 is an error naming the file and key") {
  const std::map<std::string, std::string> bad = {{"cpu.winograd", "yes"}};
  CHECK_THROWS_WITH_AS(apps::read_cpu_choices(bad, "run/m-0003.states.safetensors"),
                       "run/m-0003.states.safetensors: metadata cpu.winograd is \"yes\" (expected 0 or 1)", Error);
  CHECK(apps::read_cpu_choices({{"cpu.bf16_tiles", "1"}}, "x").bf16_tiles == 1);
  CHECK(apps::read_cpu_choices({}, "x").winograd == -1);
}

TEST_CASE("cpu choices: a resume pins the recorded choices unless the environment pins them") {
  RestoreRules restore;
  // Automatic: the recorded choice is pinned, either way, and said.
  for (int w : {0, 1}) {
    cpu::set_winograd_rule(cpu::WinogradRule::automatic);
    const std::string said = adopt({w, -1});
    CHECK(cpu::winograd_rule() == (w ? cpu::WinogradRule::on : cpu::WinogradRule::off));
    CHECK(cpu::winograd_pays() == (w == 1));
    CHECK(said == std::string("Winograd ") + (w ? "on" : "off") +
                      ", as in m-0001.states.safetensors (EMBER_CPU_WINOGRAD overrides)\n");
  }
  // Pinned by the environment (here: by the setter, as EMBER_CPU_WINOGRAD
  // does): kept; a different recorded choice is a warning, the same is silent.
  cpu::set_winograd_rule(cpu::WinogradRule::on);
  const std::string differs = adopt({0, -1});
  CHECK(cpu::winograd_rule() == cpu::WinogradRule::on);
  CHECK(contains(differs, "warning: EMBER_CPU_WINOGRAD turns Winograd on; m-0001.states.safetensors ran with it off"));
  CHECK(adopt({1, -1}).empty());
  // Nothing recorded: nothing changes, nothing said.
  cpu::set_winograd_rule(cpu::WinogradRule::automatic);
  CHECK(adopt({-1, -1}).empty());
  CHECK(cpu::winograd_rule() == cpu::WinogradRule::automatic);
  // bf16 tiles: pinned off anywhere; on only where the CPU has them.
  cpu::set_bf16_conv_kernel_mode(cpu::Bf16KernelMode::automatic);
  CHECK(adopt({-1, 0}) == "bf16 convolutions in f32, as in m-0001.states.safetensors (EMBER_CPU_BF16 overrides)\n");
  CHECK(cpu::bf16_conv_kernels() == nullptr);
  cpu::set_bf16_conv_kernel_mode(cpu::Bf16KernelMode::automatic);
  const std::string tiles = adopt({-1, 1});
  if (cpu::bf16_conv_kernels_supported()) {
    CHECK(tiles == "bf16 convolutions in AVX512-BF16, as in m-0001.states.safetensors (EMBER_CPU_BF16 overrides)\n");
    CHECK(cpu::bf16_conv_kernels() != nullptr);
  } else {
    CHECK(contains(tiles, "warning: m-0001.states.safetensors ran bf16 convolutions in AVX512-BF16 tiles, which this "
                          "CPU (or build) lacks"));
  }
}

}  // namespace
