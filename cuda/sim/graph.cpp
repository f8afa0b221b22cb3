// cuda/sim/graph.cpp — stream capture and CUDA graphs on the emulator:
// cudaStreamBeginCapture / cudaStreamEndCapture record what is queued on one
// stream (kernel launches with a copy of their arguments, cudaMemcpyAsync,
// cudaMemsetAsync) into a graph instead of running it; cudaGraphInstantiate
// and cudaGraphLaunch replay the recorded work, in order, on any stream, as
// often as asked. Replayed work goes through the same launch path as eager
// work, so the stream-order checker and the profiler see it too.
//
// As on a GPU, a graph keeps the argument values and pointers of its
// capture: a replay reads whatever memory then holds at those addresses.
// What waits for the device while a capture is under way fails with
// cudaErrorStreamCaptureUnsupported and invalidates the capture
// (cudaStreamEndCapture then returns cudaErrorStreamCaptureInvalidated):
// cudaStreamSynchronize of the capturing stream, and in the global and
// thread-local modes cudaDeviceSynchronize, cudaMemcpy, cudaMemset and
// cudaFree. Not emulated: captures across streams (an event recorded on or
// waited for by a capturing stream fails the same way), graph editing, and
// conditional nodes.
#include <atomic>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <vector>

#include "cuda/sim/cudasim.h"
#include "cuda/sim/internal.h"

namespace cudasim::detail {

// One recorded operation.
struct GraphNode {
  enum class Kind { kernel, copy, fill } kind = Kind::kernel;
  // kernel
  std::shared_ptr<void> ctx;  // the kernel and a copy of its arguments (cudasim::launch's Ctx)
  void (*run)(void*) = nullptr;
  const void* kernel = nullptr;
  dim3 grid, block;
  size_t smem = 0;
  std::vector<Touch> touches;
  // copy and fill
  void* dst = nullptr;
  const void* src = nullptr;
  size_t count = 0;
  cudaMemcpyKind copy_kind = cudaMemcpyDefault;
  int value = 0;
};

}  // namespace cudasim::detail

struct CUgraph_st {
  std::vector<cudasim::detail::GraphNode> nodes;
};
struct CUgraphExec_st {
  std::vector<cudasim::detail::GraphNode> nodes;
};

namespace cudasim::detail {
namespace {

struct Capture {
  std::unique_ptr<CUgraph_st> graph;
  cudaStreamCaptureMode mode = cudaStreamCaptureModeGlobal;
  std::string invalidated;  // why, once something failed the capture
};

struct Graphs {
  std::mutex mu;
  std::map<cudaStream_t, Capture> captures;
  std::set<const CUgraph_st*> graphs;
  std::set<const CUgraphExec_st*> execs;
};
Graphs& graphs() {
  static Graphs* g = new Graphs;
  return *g;
}
std::atomic<int> g_capturing{0};  // captures under way: launches check nothing while it is 0

// Records `node` into the capture of `stream`, if there is one.
bool record(cudaStream_t stream, GraphNode&& node) {
  if (g_capturing.load(std::memory_order_relaxed) == 0) return false;
  Graphs& g = graphs();
  std::lock_guard<std::mutex> lock(g.mu);
  const auto it = g.captures.find(stream);
  if (it == g.captures.end()) return false;
  if (it->second.invalidated.empty()) it->second.graph->nodes.push_back(std::move(node));
  return true;
}

bool is_capture_stream(cudaStream_t s) { return s && s != cudaStreamLegacy && s != cudaStreamPerThread; }

}  // namespace

bool stream_capturing(cudaStream_t stream) {
  if (g_capturing.load(std::memory_order_relaxed) == 0) return false;
  Graphs& g = graphs();
  std::lock_guard<std::mutex> lock(g.mu);
  return g.captures.count(stream) != 0;
}

void capture_kernel(cudaStream_t stream, std::shared_ptr<void> ctx, void (*run)(void*), const void* kernel, dim3 grid,
                    dim3 block, size_t smem, const Touch* touches, size_t touch_count) {
  GraphNode n;
  n.kind = GraphNode::Kind::kernel;
  n.ctx = std::move(ctx);
  n.run = run;
  n.kernel = kernel;
  n.grid = grid;
  n.block = block;
  n.smem = smem;
  n.touches.assign(touches, touches + touch_count);
  record(stream, std::move(n));
}

bool capture_copy(cudaStream_t stream, void* dst, const void* src, size_t count, cudaMemcpyKind kind) {
  GraphNode n;
  n.kind = GraphNode::Kind::copy;
  n.dst = dst;
  n.src = src;
  n.count = count;
  n.copy_kind = kind;
  return record(stream, std::move(n));
}

bool capture_fill(cudaStream_t stream, void* dst, int value, size_t count) {
  GraphNode n;
  n.kind = GraphNode::Kind::fill;
  n.dst = dst;
  n.value = value;
  n.count = count;
  return record(stream, std::move(n));
}

cudaError_t capture_refuses(const char* fn, cudaStream_t stream) {
  if (g_capturing.load(std::memory_order_relaxed) == 0) return cudaSuccess;
  Graphs& g = graphs();
  std::lock_guard<std::mutex> lock(g.mu);
  for (auto& [s, c] : g.captures) {
    const bool refused = stream ? s == stream : c.mode != cudaStreamCaptureModeRelaxed;
    if (!refused) continue;
    if (c.invalidated.empty()) c.invalidated = fmt("%s was called while the stream was capturing", fn);
    return set_error(cudaErrorStreamCaptureUnsupported,
                     fmt("cudasim: %s: not permitted while a stream is capturing (the capture is invalidated)", fn));
  }
  return cudaSuccess;
}

}  // namespace cudasim::detail

using namespace cudasim::detail;

extern "C" {

cudaError_t cudaStreamBeginCapture(cudaStream_t stream, enum cudaStreamCaptureMode mode) {
  if (!valid_stream(stream)) return set_error(cudaErrorInvalidResourceHandle, "cudasim: cudaStreamBeginCapture: not a stream");
  if (!is_capture_stream(stream))
    return set_error(cudaErrorStreamCaptureUnsupported,
                     "cudasim: cudaStreamBeginCapture: the legacy default stream cannot be captured");
  Graphs& g = graphs();
  std::lock_guard<std::mutex> lock(g.mu);
  if (g.captures.count(stream))
    return set_error(cudaErrorIllegalState, "cudasim: cudaStreamBeginCapture: the stream is capturing already");
  Capture c;
  c.graph = std::make_unique<CUgraph_st>();
  c.mode = mode;
  g.captures.emplace(stream, std::move(c));
  g_capturing.fetch_add(1);
  return cudaSuccess;
}

cudaError_t cudaStreamEndCapture(cudaStream_t stream, cudaGraph_t* pGraph) {
  if (!pGraph) return set_error(cudaErrorInvalidValue, "cudasim: cudaStreamEndCapture: a null pointer");
  *pGraph = nullptr;
  Graphs& g = graphs();
  std::lock_guard<std::mutex> lock(g.mu);
  const auto it = g.captures.find(stream);
  if (it == g.captures.end())
    return set_error(cudaErrorIllegalState, "cudasim: cudaStreamEndCapture: the stream is not capturing");
  Capture c = std::move(it->second);
  g.captures.erase(it);
  g_capturing.fetch_sub(1);
  if (!c.invalidated.empty())
    return set_error(cudaErrorStreamCaptureInvalidated,
                     fmt("cudasim: cudaStreamEndCapture: the capture was invalidated: %s", c.invalidated.c_str()));
  *pGraph = c.graph.release();
  g.graphs.insert(*pGraph);
  return cudaSuccess;
}

cudaError_t cudaStreamIsCapturing(cudaStream_t stream, enum cudaStreamCaptureStatus* pCaptureStatus) {
  if (!pCaptureStatus) return set_error(cudaErrorInvalidValue, "cudasim: cudaStreamIsCapturing: a null pointer");
  if (!valid_stream(stream)) return set_error(cudaErrorInvalidResourceHandle, "cudasim: cudaStreamIsCapturing: not a stream");
  Graphs& g = graphs();
  std::lock_guard<std::mutex> lock(g.mu);
  const auto it = g.captures.find(stream);
  *pCaptureStatus = it == g.captures.end()         ? cudaStreamCaptureStatusNone
                    : it->second.invalidated.empty() ? cudaStreamCaptureStatusActive
                                                     : cudaStreamCaptureStatusInvalidated;
  return cudaSuccess;
}

// Only the node count (nodes == null): the emulator's graphs have no node handles.
cudaError_t cudaGraphGetNodes(cudaGraph_t graph, cudaGraphNode_t* nodes, size_t* numNodes) {
  Graphs& g = graphs();
  std::lock_guard<std::mutex> lock(g.mu);
  if (!numNodes || !g.graphs.count(graph))
    return set_error(cudaErrorInvalidValue, "cudasim: cudaGraphGetNodes: not a graph, or a null count");
  if (nodes) return set_error(cudaErrorNotSupported, "cudasim: cudaGraphGetNodes: node handles are not emulated");
  *numNodes = graph->nodes.size();
  return cudaSuccess;
}

cudaError_t cudaGraphInstantiate(cudaGraphExec_t* pGraphExec, cudaGraph_t graph, unsigned long long) {
  if (!pGraphExec) return set_error(cudaErrorInvalidValue, "cudasim: cudaGraphInstantiate: a null pointer");
  Graphs& g = graphs();
  std::lock_guard<std::mutex> lock(g.mu);
  if (!g.graphs.count(graph)) return set_error(cudaErrorInvalidValue, "cudasim: cudaGraphInstantiate: not a graph");
  auto* exec = new CUgraphExec_st{graph->nodes};
  g.execs.insert(exec);
  *pGraphExec = exec;
  return cudaSuccess;
}

cudaError_t cudaGraphLaunch(cudaGraphExec_t graphExec, cudaStream_t stream) {
  if (!valid_stream(stream)) return set_error(cudaErrorInvalidResourceHandle, "cudasim: cudaGraphLaunch: not a stream");
  std::vector<GraphNode> nodes;
  {
    Graphs& g = graphs();
    std::lock_guard<std::mutex> lock(g.mu);
    if (!g.execs.count(graphExec))
      return set_error(cudaErrorInvalidValue, "cudasim: cudaGraphLaunch: not an instantiated graph (destroyed?)");
    if (g.captures.count(stream))
      return set_error(cudaErrorStreamCaptureUnsupported,
                       "cudasim: cudaGraphLaunch: into a capturing stream (graphs in graphs are not emulated)");
    nodes = graphExec->nodes;  // the shared arguments stay alive while they run
  }
  for (const GraphNode& n : nodes) {
    cudaError_t e = cudaSuccess;
    switch (n.kind) {
      case GraphNode::Kind::kernel:
        (void)cudaGetLastError();  // a launch reports its failure as the last error
        launch_impl(n.run, n.ctx.get(), n.kernel, n.grid, n.block, n.smem, stream, n.touches.data(), n.touches.size());
        e = cudaPeekAtLastError();
        break;
      case GraphNode::Kind::copy: e = cudaMemcpyAsync(n.dst, n.src, n.count, n.copy_kind, stream); break;
      case GraphNode::Kind::fill: e = cudaMemsetAsync(n.dst, n.value, n.count, stream); break;
    }
    if (e != cudaSuccess) return e;
  }
  return cudaSuccess;
}

cudaError_t cudaGraphExecDestroy(cudaGraphExec_t graphExec) {
  Graphs& g = graphs();
  std::lock_guard<std::mutex> lock(g.mu);
  if (!g.execs.erase(graphExec)) return set_error(cudaErrorInvalidValue, "cudasim: cudaGraphExecDestroy: not a graph");
  delete graphExec;
  return cudaSuccess;
}

cudaError_t cudaGraphDestroy(cudaGraph_t graph) {
  Graphs& g = graphs();
  std::lock_guard<std::mutex> lock(g.mu);
  if (!g.graphs.erase(graph)) return set_error(cudaErrorInvalidValue, "cudasim: cudaGraphDestroy: not a graph");
  delete graph;
  return cudaSuccess;
}

}  // extern "C"
