// cuda/cudnn/cudnn_conv.cu — convolution forward, backward-data and
// backward-filter through cuDNN.
//
// Algorithms are chosen once per (direction, dtype, geometry) and cached:
// by cuDNN's heuristics (cudnnGet*Algorithm_v7) by default, or by timing
// every candidate (cudnnFind*Algorithm) when set_cudnn_benchmark(true) is on
// (PyTorch's cudnn.benchmark). Among the candidates that succeed and fit the
// workspace limit, a deterministic one is preferred, so training runs repeat
// bit for bit. f32 convolutions use FMA math (no TF32): results stay within
// f32 rounding of the CPU's. f16 and bf16 convolutions take 16-bit tensors
// and filters with an f32 compute type in the convolution descriptor (f32
// accumulation) and may use tensor cores (CUDNN_TENSOR_OP_MATH, which with
// 16-bit data and f32 compute accumulates in f32; bf16 needs sm 80+). Workspaces come from the caching allocator.
#include <map>
#include <mutex>
#include <tuple>

#include "cuda/allocator.h"
#include "cuda/common.cuh"
#include "cuda/cudnn/cudnn_common.h"
#include "cuda/cuda_device.h"
#include "cuda/cudnn/cudnn_kernels.h"

namespace ember::cuda {
namespace {

constexpr size_t kWorkspaceLimit = size_t(1) << 30;  // 1 GiB

bool g_benchmark = false;

enum class Direction { forward, backward_data, backward_filter };

using Key = std::tuple<int, int, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t,
                       int64_t, int64_t>;
Key key_of(Direction d, DType dt, const Conv2dGeometry& g) {
  return {int(d), int(dt), g.N, g.C, g.H, g.W, g.K, g.R, g.S, g.stride_h, g.stride_w, g.pad_h, g.pad_w};
}

struct Choice {
  int algo = 0;
  size_t workspace = 0;
};

std::mutex g_cache_mu;
std::map<Key, Choice> g_cache;

// The descriptors of one convolution.
struct ConvDescriptors {
  TensorDesc x, y;
  FilterDesc w;
  ConvDesc conv;
  ConvDescriptors(DType dt, const Conv2dGeometry& g, const char* kernel) {
    const cudnnDataType_t t = cudnn_type(dt, kernel);
    x.nchw(t, g.N, g.C, g.H, g.W);
    y.nchw(t, g.N, g.K, g.P, g.Q);
    w.kcrs(t, g.K, g.C, g.R, g.S);
    CUDNN_CHECK(cudnnSetConvolution2dDescriptor(conv, int(g.pad_h), int(g.pad_w), int(g.stride_h), int(g.stride_w), 1,
                                                1, CUDNN_CROSS_CORRELATION, cudnn_compute_type(dt)));
    CUDNN_CHECK(cudnnSetConvolutionMathType(conv, is_16bit_float(dt) ? CUDNN_TENSOR_OP_MATH : CUDNN_FMA_MATH));
  }
};

// Picks from cuDNN's ranked candidates: the first that succeeded and fits,
// preferring deterministic ones.
template <typename Perf>
Choice pick(const Perf* perf, int count, const char* what) {
  const Perf* best = nullptr;
  for (int i = 0; i < count; ++i) {
    if (perf[i].status != CUDNN_STATUS_SUCCESS || perf[i].memory > kWorkspaceLimit) continue;
    if (perf[i].determinism == CUDNN_DETERMINISTIC) {
      best = &perf[i];
      break;
    }
    if (!best) best = &perf[i];
  }
  EMBER_CHECK(best, "cudnn ", what, ": no algorithm available for this convolution");
  return {int(best->algo), best->memory};
}

template <typename F>
Choice cached(Direction d, DType dt, const Conv2dGeometry& g, F&& choose) {
  const Key key = key_of(d, dt, g);
  {
    std::lock_guard<std::mutex> lock(g_cache_mu);
    if (auto it = g_cache.find(key); it != g_cache.end()) return it->second;
  }
  const Choice c = choose();
  std::lock_guard<std::mutex> lock(g_cache_mu);
  g_cache[key] = c;
  return c;
}

}  // namespace

void set_cudnn_benchmark(bool on) { g_benchmark = on; }

void cudnn_conv2d_forward(DType dt, const Conv2dGeometry& g, const void* x, const void* w, void* y, Stream s) {
  cudnnHandle_t h = cudnn_handle(as_cuda_stream(s));
  ConvDescriptors d(dt, g, "conv2d_forward");
  const Choice c = cached(Direction::forward, dt, g, [&] {
    cudnnConvolutionFwdAlgoPerf_t perf[CUDNN_CONVOLUTION_FWD_ALGO_COUNT];
    int n = 0;
    if (g_benchmark)
      CUDNN_CHECK(cudnnFindConvolutionForwardAlgorithm(h, d.x, d.w, d.conv, d.y, CUDNN_CONVOLUTION_FWD_ALGO_COUNT, &n,
                                                       perf));
    else
      CUDNN_CHECK(cudnnGetConvolutionForwardAlgorithm_v7(h, d.x, d.w, d.conv, d.y, CUDNN_CONVOLUTION_FWD_ALGO_COUNT,
                                                         &n, perf));
    return pick(perf, n, "conv2d_forward");
  });
  DeviceBuffer ws(c.workspace);
  const Blend b;
  CUDNN_CHECK(cudnnConvolutionForward(h, b.one(dt), d.x, x, d.w, w, d.conv, cudnnConvolutionFwdAlgo_t(c.algo),
                                      ws.get(), c.workspace, b.zero(dt), d.y, y));
}

void cudnn_conv2d_backward_data(DType dt, const Conv2dGeometry& g, const void* gy, const void* w, void* gx,
                                Stream s) {
  cudnnHandle_t h = cudnn_handle(as_cuda_stream(s));
  ConvDescriptors d(dt, g, "conv2d_backward_data");
  const Choice c = cached(Direction::backward_data, dt, g, [&] {
    cudnnConvolutionBwdDataAlgoPerf_t perf[CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT];
    int n = 0;
    if (g_benchmark)
      CUDNN_CHECK(cudnnFindConvolutionBackwardDataAlgorithm(h, d.w, d.y, d.conv, d.x,
                                                            CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT, &n, perf));
    else
      CUDNN_CHECK(cudnnGetConvolutionBackwardDataAlgorithm_v7(h, d.w, d.y, d.conv, d.x,
                                                              CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT, &n, perf));
    return pick(perf, n, "conv2d_backward_data");
  });
  DeviceBuffer ws(c.workspace);
  const Blend b;
  CUDNN_CHECK(cudnnConvolutionBackwardData(h, b.one(dt), d.w, w, d.y, gy, d.conv,
                                           cudnnConvolutionBwdDataAlgo_t(c.algo), ws.get(), c.workspace, b.zero(dt),
                                           d.x, gx));
}

void cudnn_conv2d_backward_filter(DType dt, const Conv2dGeometry& g, const void* x, const void* gy, void* gw,
                                  Stream s) {
  cudnnHandle_t h = cudnn_handle(as_cuda_stream(s));
  ConvDescriptors d(dt, g, "conv2d_backward_filter");
  const Choice c = cached(Direction::backward_filter, dt, g, [&] {
    cudnnConvolutionBwdFilterAlgoPerf_t perf[CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT];
    int n = 0;
    if (g_benchmark)
      CUDNN_CHECK(cudnnFindConvolutionBackwardFilterAlgorithm(h, d.x, d.y, d.conv, d.w,
                                                              CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT, &n, perf));
    else
      CUDNN_CHECK(cudnnGetConvolutionBackwardFilterAlgorithm_v7(h, d.x, d.y, d.conv, d.w,
                                                                CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT, &n, perf));
    return pick(perf, n, "conv2d_backward_filter");
  });
  DeviceBuffer ws(c.workspace);
  const Blend b;
  CUDNN_CHECK(cudnnConvolutionBackwardFilter(h, b.one(dt), d.x, x, d.y, gy, d.conv,
                                             cudnnConvolutionBwdFilterAlgo_t(c.algo), ws.get(), c.workspace,
                                             b.zero(dt), d.w, gw));
}

}  // namespace ember::cuda
