// apps/training/cpu_choices.h — the CPU kernel choices a process measures for
// itself (whether Winograd pays on this CPU: ops/cpu/conv/conv_policy.h; whether
// the AVX512-BF16 tiles run: ops/cpu/conv/conv_bf16_kernels.h), recorded in a
// training checkpoint and taken over by the run that resumes it.
//
// Each process measures these once, on the spot; a resumed process on a
// busy machine (or in a sanitizer build) can land on the other side of a
// threshold and then compute every later step with other kernels, so the
// run would not continue as the uninterrupted one. A checkpoint therefore
// records what its run used, and --resume pins the same choices, unless
// EMBER_CPU_WINOGRAD / EMBER_CPU_BF16 set them (then a difference is
// reported). Used by apps/training/fit.cpp (saving) and train_program.cpp
// (resuming); CPU runs only.
#pragma once
#include <cstdio>
#include <map>
#include <string>

namespace ember::apps {

// 1: used, 0: not used, -1: not recorded (an older checkpoint, a GPU run,
// or bf16 tiles in a run that was not bf16).
struct CpuChoices {
  int winograd = -1;
  int bf16_tiles = -1;
};

// What this process uses now (measuring where not yet measured); bf16_tiles
// only when `bf16` (the run's precision).
CpuChoices current_cpu_choices(bool bf16);

// As checkpoint metadata ("cpu.winograd", "cpu.bf16_tiles": "0" or "1";
// unrecorded choices are left out), and back. `path` names the file in
// errors: a value other than 0 or 1 is one.
void write_cpu_choices(const CpuChoices& c, std::map<std::string, std::string>& meta);
CpuChoices read_cpu_choices(const std::map<std::string, std::string>& meta, const std::string& path);

// Pins the recorded choices for this process, or, where the environment
// pins a choice already, keeps it; one line on `out` for each recorded
// choice saying which (and warning where the run will not continue as it
// was: a different pinned choice, or bf16 tiles on a CPU without them).
void adopt_cpu_choices(const CpuChoices& recorded, const std::string& path, std::FILE* out);

}  // namespace ember::apps
