// tests/support/kernel_coverage.cpp — the counting table behind kernel_coverage().
#include "tests/support/kernel_coverage.h"

#include <array>
#include <atomic>

namespace ember::testing {
namespace {

enum KernelIndex {
#define EMBER_KERNEL_INDEX_(name) k_##name,
  EMBER_FOR_EACH_KERNEL(EMBER_KERNEL_INDEX_)
#undef EMBER_KERNEL_INDEX_
  kKernelCount
};
static_assert(kKernelCount == kNumKernels);

constexpr const char* kKernelNames[] = {
#define EMBER_KERNEL_NAME_(name) #name,
    EMBER_FOR_EACH_KERNEL(EMBER_KERNEL_NAME_)
#undef EMBER_KERNEL_NAME_
};

std::array<std::atomic<long>, kKernelCount> g_calls{};
std::atomic<const Kernels*> g_base{nullptr};  // where the counting entries forward to
std::string g_backends;

// Every entry counts, then forwards to the installed base table. The entries
// are captureless generic lambdas, which convert to the table's pointer types.
Kernels make_counting_table() {
  Kernels t{};
#define EMBER_COUNT_ENTRY_(name)                  \
  t.name = [](auto... args) {                     \
    ++g_calls[k_##name];                          \
    return g_base.load()->name(args...);          \
  };
  EMBER_FOR_EACH_KERNEL(EMBER_COUNT_ENTRY_)
#undef EMBER_COUNT_ENTRY_
  return t;
}

}  // namespace

void install_counting_table(DeviceType type, const Kernels& base) {
  static Kernels table = make_counting_table();
  g_base = &base;
  table.name = base.name;
  if (g_backends.find(base.name) == std::string::npos) g_backends += (g_backends.empty() ? "" : ", ") + std::string(base.name);
  register_kernels(type, &table);
}

KernelCoverage kernel_coverage() {
  KernelCoverage c;
  c.used = g_base.load() != nullptr;
  c.backends = g_backends;
  for (int i = 0; i < kKernelCount; ++i) (g_calls[size_t(i)] > 0 ? c.called : c.missing).push_back(kKernelNames[i]);
  return c;
}

}  // namespace ember::testing
