// ops/cpu/cpu_kernels.cpp — the CPU kernel table.
#include "ops/cpu/cpu_kernels.h"

namespace ember {

const Kernels& cpu_kernels() {
#define EMBER_CPU_ENTRY_(name) t.name = &cpu::name;
  static const Kernels table = [] {
    Kernels t{};
    t.name = "cpu";
    EMBER_FOR_EACH_KERNEL(EMBER_CPU_ENTRY_)
    return t;
  }();
#undef EMBER_CPU_ENTRY_
  return table;
}

}  // namespace ember
