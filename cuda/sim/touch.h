// cuda/sim/touch.h — one block of memory an emulated operation reads or
// writes, as the stream-order checker (stream_order.cpp) sees it; shared by
// cudasim.h (a launch's pointer arguments) and runtime.cpp (copies, memsets).
#pragma once

namespace cudasim::detail {

struct Touch {
  const void* p = nullptr;  // anywhere inside the block; null or not a cudaMalloc/cudaMallocHost block: ignored
  bool writes = false;
};

}  // namespace cudasim::detail
