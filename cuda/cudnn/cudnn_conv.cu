// cuda/cudnn/cudnn_conv.cu — convolution forward, backward-data and
// backward-filter through cuDNN.
//
// Algorithms are chosen once per (direction, dtype, math, benchmark mode,
// determinism, geometry) and cached: by cuDNN's heuristics (cudnnGet*Algorithm_v7) by default, or by
// timing every candidate (cudnnFind*AlgorithmEx, with its workspace from the
// caching allocator, so no cudaMalloc outside it) when set_cudnn_benchmark(true)
// is on (PyTorch's cudnn.benchmark). Among the candidates that succeed and fit
// the workspace limit, a deterministic one is preferred, so training runs
// repeat bit for bit, when set_cudnn_deterministic(true); by default (PyTorch's)
// the first-ranked one runs (the fastest, by the heuristics or the timing).
// With set_cudnn_algorithm_cache(path), the choices are also kept in a file
// (cuda/cudnn/algorithm_cache_file.h): read when set, rewritten atomically
// whenever a new shape was timed (with every choice made so far), so a
// later run on the same GPU and cuDNN times nothing it has timed before.
//
// Math: f32 convolutions use FMA math (no TF32) unless set_tf32(true), then
// cuDNN's default math, which may run TF32 tensor cores (PyTorch's
// cudnn.allow_tf32). f16 and bf16 convolutions take 16-bit tensors and
// filters with an f32 compute type (f32 accumulation) and tensor-core math
// (bf16 needs sm 80+). Each candidate names the math type it was ranked or
// timed with, and the chosen one's is set on the descriptor before the
// convolution runs, as PyTorch does: the descriptor's type only says what
// may be tried. A candidate that converts f32 data to f16 (..._ALLOW_CONVERSION)
// is never taken.
#include <algorithm>
#include <array>
#include <cstdio>
#include <filesystem>
#include <map>
#include <mutex>
#include <tuple>

#include "cuda/allocator.h"
#include "cuda/common.cuh"
#include "cuda/cudnn/algorithm_cache_file.h"
#include "cuda/cudnn/cudnn_common.h"
#include "cuda/cuda_device.h"
#include "cuda/cudnn/cudnn_kernels.h"
#include "engine/file_io.h"

namespace ember::cuda {
namespace {

constexpr size_t kWorkspaceLimit = size_t(1) << 30;  // 1 GiB

bool g_benchmark = false;
bool g_deterministic = false;

enum class Direction { forward, backward_data, backward_filter };

// What a dtype's convolutions may run with: tensor cores for 16-bit data, TF32 or not for f32.
cudnnMathType_t allowed_math(DType dt) {
  if (is_16bit_float(dt)) return CUDNN_TENSOR_OP_MATH;
  if (dt == DType::f32 && tf32_enabled()) return CUDNN_DEFAULT_MATH;
  return CUDNN_FMA_MATH;
}

using Key = std::tuple<int, int, int, bool, bool, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t,
                       int64_t, int64_t, int64_t, bool>;
Key key_of(Direction d, DType dt, const Conv2dGeometry& g) {
  return {int(d), int(dt), int(allowed_math(dt)), g_benchmark, g_deterministic, g.N, g.C, g.H, g.W, g.K, g.R, g.S,
          g.stride_h, g.stride_w, g.pad_h, g.pad_w, g.channels_last};
}

struct Choice {
  int algo = 0;
  size_t workspace = 0;
  cudnnMathType_t math = CUDNN_FMA_MATH;
};

std::mutex g_cache_mu;
std::map<Key, Choice> g_cache;
std::string g_cache_path;  // --cudnn-algo-cache, or empty

// The GPU and cuDNN version a cache file's choices hold for.
std::string device_label() {
  int device = 0;
  CUDA_CHECK(cudaGetDevice(&device));
  cudaDeviceProp prop{};
  CUDA_CHECK(cudaGetDeviceProperties(&prop, device));
  return cat(prop.name, " | cuDNN ", cudnnGetVersion());
}

// Key <-> the 17 numbers of a file record.
std::array<int64_t, kAlgorithmKeyFields> key_fields(const Key& k) {
  return std::apply([](auto... v) { return std::array<int64_t, kAlgorithmKeyFields>{int64_t(v)...}; }, k);
}
Key key_from_fields(const std::array<int64_t, kAlgorithmKeyFields>& f) {
  return {int(f[0]),  int(f[1]), int(f[2]), f[3] != 0, f[4] != 0, f[5],  f[6],  f[7],
          f[8],       f[9],      f[10],     f[11],     f[12],     f[13], f[14], f[15], f[16] != 0};
}

// Whether a record names an algorithm and math type cuDNN has for its direction.
bool record_valid(const AlgorithmRecord& r) {
  const int64_t count = r.key[0] == int(Direction::forward)         ? int64_t(CUDNN_CONVOLUTION_FWD_ALGO_COUNT)
                        : r.key[0] == int(Direction::backward_data) ? int64_t(CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT)
                                                                    : int64_t(CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT);
  return r.algo < count && r.workspace <= int64_t(kWorkspaceLimit) && r.math <= CUDNN_FMA_MATH;
}

// Writes every choice to g_cache_path (the caller holds g_cache_mu).
void save_cache_locked() {
  AlgorithmCacheFile f;
  f.device = device_label();
  for (const auto& [key, c] : g_cache)
    f.records.push_back(AlgorithmRecord{key_fields(key), c.algo, int64_t(c.workspace), int64_t(c.math)});
  const std::string text = format_algorithm_cache(f);
  write_file_atomic(g_cache_path, text.data(), text.size());
}

// The descriptors of one convolution.
struct ConvDescriptors {
  TensorDesc x, y;
  FilterDesc w;
  ConvDesc conv;
  ConvDescriptors(DType dt, const Conv2dGeometry& g, const char* kernel) {
    const cudnnDataType_t t = cudnn_type(dt, kernel);
    const cudnnTensorFormat_t f = g.channels_last ? CUDNN_TENSOR_NHWC : CUDNN_TENSOR_NCHW;
    x.dense(f, t, g.N, g.C, g.H, g.W);
    y.dense(f, t, g.N, g.K, g.P, g.Q);
    w.dense(f, t, g.K, g.C, g.R, g.S);
    CUDNN_CHECK(cudnnSetConvolution2dDescriptor(conv, int(g.pad_h), int(g.pad_w), int(g.stride_h), int(g.stride_w), 1,
                                                1, CUDNN_CROSS_CORRELATION, cudnn_compute_type(dt)));
    CUDNN_CHECK(cudnnSetConvolutionMathType(conv, allowed_math(dt)));
  }
  void use(const Choice& c) { CUDNN_CHECK(cudnnSetConvolutionMathType(conv, c.math)); }
};

// Whether a candidate ranked or timed with math type m may run: never one
// that converts data to f16, and no tensor cores where FMA math is asked for.
bool math_ok(DType dt, cudnnMathType_t m) {
  if (m == CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION) return false;
  return allowed_math(dt) != CUDNN_FMA_MATH || m == CUDNN_FMA_MATH || m == CUDNN_DEFAULT_MATH;
}

// Picks from cuDNN's ranked candidates: the first that succeeded, fits and
// has an allowed math type, preferring deterministic ones unless told not to.
template <typename Perf>
Choice pick(DType dt, const Perf* perf, int count, const char* what) {
  const Perf* best = nullptr;
  for (int i = 0; i < count; ++i) {
    if (perf[i].status != CUDNN_STATUS_SUCCESS || perf[i].memory > kWorkspaceLimit || !math_ok(dt, perf[i].mathType))
      continue;
    if (!g_deterministic || perf[i].determinism == CUDNN_DETERMINISTIC) {
      best = &perf[i];
      break;
    }
    if (!best) best = &perf[i];
  }
  EMBER_CHECK(best, "cudnn ", what, ": no algorithm available for this convolution");
  // With FMA math asked for, run with it whatever the candidate was ranked with (DEFAULT would allow TF32).
  const cudnnMathType_t math = allowed_math(dt) == CUDNN_FMA_MATH ? CUDNN_FMA_MATH : best->mathType;
  return {int(best->algo), best->memory, math};
}

// The candidates of one direction: cuDNN's heuristics ranking, or with
// benchmarking on, every algorithm timed on the caller's buffers with a
// workspace as large as the largest the heuristics listed within the limit.
// get(perf, n*) and find(perf, n*, workspace, bytes) call the direction's
// cuDNN functions.
template <typename Perf, int kCount, typename Get, typename Find>
Choice choose(DType dt, const char* what, Get&& get, Find&& find) {
  Perf perf[kCount];
  int n = 0;
  get(perf, &n);
  if (g_benchmark) {
    size_t bytes = 0;
    for (int i = 0; i < n; ++i)
      if (perf[i].status == CUDNN_STATUS_SUCCESS && perf[i].memory <= kWorkspaceLimit)
        bytes = std::max(bytes, perf[i].memory);
    const DeviceBuffer workspace(bytes);
    find(perf, &n, workspace.get(), bytes);
  }
  return pick(dt, perf, n, what);
}

template <typename F>
Choice cached(Direction d, DType dt, const Conv2dGeometry& g, F&& choose_now) {
  const Key key = key_of(d, dt, g);
  {
    std::lock_guard<std::mutex> lock(g_cache_mu);
    if (auto it = g_cache.find(key); it != g_cache.end()) return it->second;
  }
  const Choice c = choose_now();
  std::lock_guard<std::mutex> lock(g_cache_mu);
  g_cache[key] = c;
  // Only a timed choice is worth a durable write (an fsync per shape); ranked ones are as quick to redo.
  if (!g_cache_path.empty() && g_benchmark) save_cache_locked();
  return c;
}

}  // namespace

void set_cudnn_benchmark(bool on) { g_benchmark = on; }
void set_cudnn_deterministic(bool on) { g_deterministic = on; }

void set_cudnn_algorithm_cache(const std::string& path) {
  std::lock_guard<std::mutex> lock(g_cache_mu);
  g_cache_path = path;
  std::error_code ec;
  if (path.empty() || !std::filesystem::exists(path, ec)) return;
  const std::vector<uint8_t> bytes = read_file(path);
  const AlgorithmCacheFile f = parse_algorithm_cache(std::string(bytes.begin(), bytes.end()), path);
  const std::string here = device_label();
  if (f.device != here) {
    std::fprintf(stderr, "cudnn: %s holds algorithm choices made on %s, not %s: choosing again (and replacing it)\n",
                 path.c_str(), f.device.c_str(), here.c_str());
    return;
  }
  for (const AlgorithmRecord& r : f.records) {
    EMBER_CHECK(record_valid(r), path, ": a choice of algorithm ", r.algo, " (math ", r.math, ", ", r.workspace,
                " bytes of workspace) that cuDNN ", cudnnGetVersion(), " does not have for direction ", r.key[0]);
    g_cache[key_from_fields(r.key)] = Choice{int(r.algo), size_t(r.workspace), cudnnMathType_t(r.math)};
  }
}

void cudnn_conv2d_forward(DType dt, const Conv2dGeometry& g, const void* x, const void* w, void* y, Stream s) {
  cudnnHandle_t h = cudnn_handle(as_cuda_stream(s));
  ConvDescriptors d(dt, g, "conv2d_forward");
  constexpr int kCount = CUDNN_CONVOLUTION_FWD_ALGO_COUNT;
  const Choice c = cached(Direction::forward, dt, g, [&] {
    return choose<cudnnConvolutionFwdAlgoPerf_t, kCount>(
        dt, "conv2d_forward",
        [&](auto* perf, int* n) {
          CUDNN_CHECK(cudnnGetConvolutionForwardAlgorithm_v7(h, d.x, d.w, d.conv, d.y, kCount, n, perf));
        },
        [&](auto* perf, int* n, void* ws, size_t bytes) {
          CUDNN_CHECK(cudnnFindConvolutionForwardAlgorithmEx(h, d.x, x, d.w, w, d.conv, d.y, y, kCount, n, perf, ws,
                                                             bytes));
        });
  });
  d.use(c);
  DeviceBuffer ws(c.workspace);
  const Blend b;
  CUDNN_CHECK(cudnnConvolutionForward(h, b.one(dt), d.x, x, d.w, w, d.conv, cudnnConvolutionFwdAlgo_t(c.algo),
                                      ws.get(), c.workspace, b.zero(dt), d.y, y));
  count_device_work(DeviceWork::library_call);
}

void cudnn_conv2d_backward_data(DType dt, const Conv2dGeometry& g, const void* gy, const void* w, void* gx,
                                Stream s) {
  cudnnHandle_t h = cudnn_handle(as_cuda_stream(s));
  ConvDescriptors d(dt, g, "conv2d_backward_data");
  constexpr int kCount = CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT;
  const Choice c = cached(Direction::backward_data, dt, g, [&] {
    return choose<cudnnConvolutionBwdDataAlgoPerf_t, kCount>(
        dt, "conv2d_backward_data",
        [&](auto* perf, int* n) {
          CUDNN_CHECK(cudnnGetConvolutionBackwardDataAlgorithm_v7(h, d.w, d.y, d.conv, d.x, kCount, n, perf));
        },
        [&](auto* perf, int* n, void* ws, size_t bytes) {
          CUDNN_CHECK(cudnnFindConvolutionBackwardDataAlgorithmEx(h, d.w, w, d.y, gy, d.conv, d.x, gx, kCount, n,
                                                                  perf, ws, bytes));
        });
  });
  d.use(c);
  DeviceBuffer ws(c.workspace);
  const Blend b;
  CUDNN_CHECK(cudnnConvolutionBackwardData(h, b.one(dt), d.w, w, d.y, gy, d.conv,
                                           cudnnConvolutionBwdDataAlgo_t(c.algo), ws.get(), c.workspace, b.zero(dt),
                                           d.x, gx));
  count_device_work(DeviceWork::library_call);
}

void cudnn_conv2d_backward_filter(DType dt, const Conv2dGeometry& g, const void* x, const void* gy, void* gw,
                                  Stream s) {
  cudnnHandle_t h = cudnn_handle(as_cuda_stream(s));
  ConvDescriptors d(dt, g, "conv2d_backward_filter");
  constexpr int kCount = CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT;
  const Choice c = cached(Direction::backward_filter, dt, g, [&] {
    return choose<cudnnConvolutionBwdFilterAlgoPerf_t, kCount>(
        dt, "conv2d_backward_filter",
        [&](auto* perf, int* n) {
          CUDNN_CHECK(cudnnGetConvolutionBackwardFilterAlgorithm_v7(h, d.x, d.y, d.conv, d.w, kCount, n, perf));
        },
        [&](auto* perf, int* n, void* ws, size_t bytes) {
          CUDNN_CHECK(cudnnFindConvolutionBackwardFilterAlgorithmEx(h, d.x, x, d.y, gy, d.conv, d.w, gw, kCount, n,
                                                                    perf, ws, bytes));
        });
  });
  d.use(c);
  DeviceBuffer ws(c.workspace);
  const Blend b;
  CUDNN_CHECK(cudnnConvolutionBackwardFilter(h, b.one(dt), d.x, x, d.y, gy, d.conv,
                                             cudnnConvolutionBwdFilterAlgo_t(c.algo), ws.get(), c.workspace,
                                             b.zero(dt), d.w, gw));
  count_device_work(DeviceWork::library_call);
}

}  // namespace ember::cuda
