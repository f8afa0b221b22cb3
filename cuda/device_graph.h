// cuda/device_graph.h — CUDA's side of engine/device_graph.h (see
// cuda/device_graph.cu): the capture, and whether one is under way on this
// thread (host-to-device copies refuse to be captured).
#pragma once
#include <functional>
#include <memory>

#include "engine/device_graph.h"

namespace ember::cuda {

std::unique_ptr<DeviceGraph> capture_graph(const std::function<void()>& work);
bool capturing();

}  // namespace ember::cuda
