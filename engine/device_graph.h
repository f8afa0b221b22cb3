// engine/device_graph.h — device work captured once and replayed: a CUDA
// graph on a GPU. The engine only names the idea; cuda/device_graph.cu makes
// them, through the device's MemoryBackend (engine/memory.h). A training step
// replayed as a graph costs one launch instead of hundreds
// (apps/training/step_graph.h).
#pragma once
#include <cstdint>
#include <functional>
#include <memory>

#include "engine/device.h"

namespace ember {

class DeviceGraph {
 public:
  virtual ~DeviceGraph() = default;
  // Queues the captured work again, with the arguments and addresses it was
  // captured with (it reads whatever that memory holds now).
  virtual void replay() = 0;
  virtual int64_t nodes() const = 0;  // the captured kernels, copies and memsets
  virtual size_t pool_bytes() const = 0;  // device memory held for the graph's own allocations
};

// Runs `work` on the host once with the device work it issues on `device`
// captured, not run (call replay() to run it), its allocations served from
// a pool that belongs to the graph. Errors on the CPU and on backends
// without graphs, and when `work` waits for the device.
std::unique_ptr<DeviceGraph> capture_device_graph(Device device, const std::function<void()>& work);

}  // namespace ember
