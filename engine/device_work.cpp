// engine/device_work.cpp — the counters of engine/device_work.h.
#include "engine/device_work.h"

#include <atomic>

namespace ember {
namespace {
std::atomic<int64_t> g_counts[5];
}  // namespace

void count_device_work(DeviceWork kind) noexcept { g_counts[int(kind)].fetch_add(1, std::memory_order_relaxed); }

DeviceWorkCounts device_work_counts() {
  auto get = [](DeviceWork k) { return g_counts[int(k)].load(std::memory_order_relaxed); };
  return {get(DeviceWork::kernel), get(DeviceWork::library_call), get(DeviceWork::copy), get(DeviceWork::host_wait),
          get(DeviceWork::graph)};
}

}  // namespace ember
