// cuda/device_graph.cu — engine/device_graph.h on CUDA: work issued on the
// compute stream captured into a CUDA graph (cudaStreamBeginCapture ...
// cudaStreamEndCapture, then cudaGraphInstantiate), replayed with one
// cudaGraphLaunch. What the captured work allocates comes from a private
// pool (cuda/allocator.h) that the graph owns, so no later allocation is
// handed an address the graph writes. A host-to-device copy during a
// capture is an error: its node would copy the staging buffer again at each
// replay, by then holding other bytes (upload inputs before capturing, into
// buffers the graph reads). The emulator (cuda/sim/graph.cpp) captures and
// replays the same calls, so a captured training step is tested on the CPU.
#include "cuda/device_graph.h"

#include <string>

#include "cuda/allocator.h"
#include "cuda/common.cuh"
#include "cuda/host_staging.h"
#include "engine/device_graph.h"

namespace ember::cuda {
namespace {

thread_local bool t_capturing = false;

class CudaGraph final : public DeviceGraph {
 public:
  CudaGraph(std::unique_ptr<DevicePrivatePool> pool, cudaGraphExec_t exec, int64_t nodes)
      : pool_(std::move(pool)), exec_(exec), nodes_(nodes) {}
  ~CudaGraph() override {
    // The pool's blocks go back to the device only once no replay can still use them.
    cudaStreamSynchronize(compute_stream());
    cudaGraphExecDestroy(exec_);
  }
  void replay() override {
    CUDA_CHECK(cudaGraphLaunch(exec_, compute_stream()));
    count_device_work(DeviceWork::graph);
  }
  int64_t nodes() const override { return nodes_; }
  size_t pool_bytes() const override { return pool_->bytes(); }

 private:
  std::unique_ptr<DevicePrivatePool> pool_;  // destroyed after the executable graph (members in reverse order)
  cudaGraphExec_t exec_;
  int64_t nodes_;
};

// Ends a capture that `work` left by throwing: the partial graph is dropped.
void abandon_capture(cudaStream_t stream) {
  cudaGraph_t partial = nullptr;
  cudaStreamEndCapture(stream, &partial);
  if (partial) cudaGraphDestroy(partial);
  cudaGetLastError();  // the capture's error, if it was invalidated, is the exception's business
}

}  // namespace

bool capturing() { return t_capturing; }

std::unique_ptr<DeviceGraph> capture_graph(const std::function<void()>& work) {
  const cudaStream_t stream = compute_stream();
  finish_copies_ahead();  // nothing of the copy stream is joined into the capture
  auto pool = std::make_unique<DevicePrivatePool>();
  cudaGraph_t graph = nullptr;
  {
    const ActivePrivatePool active(*pool);
    CUDA_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
    t_capturing = true;
    try {
      work();
    } catch (...) {
      t_capturing = false;
      abandon_capture(stream);
      throw;
    }
    t_capturing = false;
    const cudaError_t ended = cudaStreamEndCapture(stream, &graph);
    if (ended != cudaSuccess) {
      cudaGetLastError();
      fail(cat("CUDA graph: the captured step could not be recorded (", cudaGetErrorString(ended),
               "): it waited for the device or used another stream"));
    }
  }
  size_t nodes = 0;
  CUDA_CHECK(cudaGraphGetNodes(graph, nullptr, &nodes));
  cudaGraphExec_t exec = nullptr;
  const cudaError_t made = cudaGraphInstantiate(&exec, graph, 0);
  cudaGraphDestroy(graph);
  CUDA_CHECK(made);
  return std::make_unique<CudaGraph>(std::move(pool), exec, int64_t(nodes));
}

}  // namespace ember::cuda
