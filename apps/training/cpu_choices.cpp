// apps/training/cpu_choices.cpp — recording and re-adopting the measured CPU
// kernel choices across a checkpoint (cpu_choices.h).
#include "apps/training/cpu_choices.h"

#include "engine/error.h"
#include "net/json.h"
#include "ops/cpu/conv/conv_bf16_kernels.h"
#include "ops/cpu/conv/conv_policy.h"

namespace ember::apps {
namespace {

const char* const kWinogradKey = "cpu.winograd";
const char* const kBf16TilesKey = "cpu.bf16_tiles";

int read_flag(const std::map<std::string, std::string>& meta, const char* key, const std::string& path) {
  const auto it = meta.find(key);
  if (it == meta.end()) return -1;
  EMBER_CHECK(it->second == "0" || it->second == "1", path, ": metadata ", key, " is ", json::shown(it->second),
              " (expected 0 or 1)");
  return it->second == "1" ? 1 : 0;
}

const char* on_off(bool on) { return on ? "on" : "off"; }

}  // namespace

CpuChoices current_cpu_choices(bool bf16) {
  CpuChoices c;
  c.winograd = cpu::winograd_pays() ? 1 : 0;
  if (bf16) c.bf16_tiles = cpu::bf16_conv_kernels() ? 1 : 0;
  return c;
}

void write_cpu_choices(const CpuChoices& c, std::map<std::string, std::string>& meta) {
  if (c.winograd >= 0) meta[kWinogradKey] = std::to_string(c.winograd);
  if (c.bf16_tiles >= 0) meta[kBf16TilesKey] = std::to_string(c.bf16_tiles);
}

CpuChoices read_cpu_choices(const std::map<std::string, std::string>& meta, const std::string& path) {
  CpuChoices c;
  c.winograd = read_flag(meta, kWinogradKey, path);
  c.bf16_tiles = read_flag(meta, kBf16TilesKey, path);
  return c;
}

void adopt_cpu_choices(const CpuChoices& recorded, const std::string& path, std::FILE* out) {
  if (recorded.winograd >= 0) {
    const bool want = recorded.winograd == 1;
    if (cpu::winograd_rule() == cpu::WinogradRule::automatic) {
      cpu::set_winograd_rule(want ? cpu::WinogradRule::on : cpu::WinogradRule::off);
      std::fprintf(out, "Winograd %s, as in %s (EMBER_CPU_WINOGRAD overrides)\n", on_off(want), path.c_str());
    } else if (cpu::winograd_pays() != want) {
      std::fprintf(out, "warning: EMBER_CPU_WINOGRAD turns Winograd %s; %s ran with it %s: the run will not "
                   "continue exactly as it was\n", on_off(cpu::winograd_pays()), path.c_str(), on_off(want));
    }
  }
  if (recorded.bf16_tiles >= 0) {
    const bool want = recorded.bf16_tiles == 1;
    if (want && !cpu::bf16_conv_kernels_supported()) {
      std::fprintf(out, "warning: %s ran bf16 convolutions in AVX512-BF16 tiles, which this CPU (or build) lacks: "
                   "the run will not continue exactly as it was\n", path.c_str());
    } else if (cpu::bf16_conv_kernel_mode() == cpu::Bf16KernelMode::automatic) {
      cpu::set_bf16_conv_kernel_mode(want ? cpu::Bf16KernelMode::on : cpu::Bf16KernelMode::off);
      std::fprintf(out, "bf16 convolutions in %s, as in %s (EMBER_CPU_BF16 overrides)\n",
                   want ? "AVX512-BF16" : "f32", path.c_str());
    } else if ((cpu::bf16_conv_kernels() != nullptr) != want) {
      std::fprintf(out, "warning: EMBER_CPU_BF16 runs bf16 convolutions in %s; %s ran them in %s: the run will not "
                   "continue exactly as it was\n", cpu::bf16_conv_kernels() ? "AVX512-BF16" : "f32", path.c_str(),
                   want ? "AVX512-BF16" : "f32");
    }
  }
}

}  // namespace ember::apps
