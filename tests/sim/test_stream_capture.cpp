// tests/sim/test_stream_capture.cpp — stream capture and graphs on the
// emulator (cuda/sim/graph.cpp): what a capturing stream is given is
// recorded, not run; an instantiated graph replays it, as often as asked,
// with the captured argument values and the memory's current contents, bit
// for bit what the eager calls give; calls that wait for the device fail
// and invalidate the capture. Then ember's own kernels (batch norm + add +
// ReLU, whose last block finalizes through a ticket counter, and the
// elementwise loop) captured and replayed against the eager results.
#include <doctest/doctest.h>

#include <cstring>
#include <string>
#include <vector>

#include "cuda/common.cuh"
#include "cuda/cuda_kernels.h"
#include "tests/support/test_helpers.h"

namespace {

using ember::testing::contains;

__global__ void k_scale_add(const float* x, float* y, float a, float b, int n) {  // y = a * x + b
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = a * x[i] + b;
}

constexpr int kN = 300;

struct Buffer {
  float* p = nullptr;
  explicit Buffer(int n = kN) { REQUIRE(cudaMalloc(reinterpret_cast<void**>(&p), size_t(n) * sizeof(float)) == cudaSuccess); }
  ~Buffer() { cudaFree(p); }
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
  std::vector<float> read(int n = kN) const {
    std::vector<float> v(static_cast<size_t>(n));
    REQUIRE(cudaMemcpy(v.data(), p, v.size() * sizeof(float), cudaMemcpyDeviceToHost) == cudaSuccess);
    return v;
  }
  void write(const std::vector<float>& v) {
    REQUIRE(cudaMemcpy(p, v.data(), v.size() * sizeof(float), cudaMemcpyHostToDevice) == cudaSuccess);
  }
};

struct Stream {
  cudaStream_t s = nullptr;
  Stream() { REQUIRE(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking) == cudaSuccess); }
  ~Stream() { cudaStreamDestroy(s); }
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;
};

std::vector<float> ramp(int n, float start) {
  std::vector<float> v(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) v[size_t(i)] = start + 0.25f * float(i);
  return v;
}

cudaStreamCaptureStatus status_of(cudaStream_t s) {
  cudaStreamCaptureStatus st{};
  REQUIRE(cudaStreamIsCapturing(s, &st) == cudaSuccess);
  return st;
}

}  // namespace

TEST_CASE("cudasim graphs: a capture records instead of running; each replay runs it all, in order") {
  Stream s;
  Buffer x, y, z, w;
  x.write(ramp(kN, 1.0f));
  w.write(std::vector<float>(kN, -1.0f));
  y.write(std::vector<float>(kN, -1.0f));
  z.write(std::vector<float>(kN, -1.0f));
  const std::vector<float> host = ramp(kN, 100.0f);

  CHECK(status_of(s.s) == cudaStreamCaptureStatusNone);
  REQUIRE(cudaStreamBeginCapture(s.s, cudaStreamCaptureModeGlobal) == cudaSuccess);
  CHECK(status_of(s.s) == cudaStreamCaptureStatusActive);
  REQUIRE(cudaMemsetAsync(w.p, 0, kN * sizeof(float), s.s) == cudaSuccess);
  ember::cuda::launch(k_scale_add, dim3(2), dim3(256), 0, s.s, static_cast<const float*>(x.p), y.p, 3.0f, 1.0f, kN);
  ember::cuda::launch(k_scale_add, dim3(2), dim3(256), 0, s.s, static_cast<const float*>(y.p), z.p, 0.5f, 0.0f, kN);
  REQUIRE(cudaMemcpyAsync(x.p, host.data(), 4 * sizeof(float), cudaMemcpyHostToDevice, s.s) == cudaSuccess);
  cudaGraph_t graph = nullptr;
  REQUIRE(cudaStreamEndCapture(s.s, &graph) == cudaSuccess);
  REQUIRE(graph != nullptr);
  CHECK(status_of(s.s) == cudaStreamCaptureStatusNone);
  size_t nodes = 0;
  REQUIRE(cudaGraphGetNodes(graph, nullptr, &nodes) == cudaSuccess);
  CHECK(nodes == 4);
  // nothing ran
  CHECK(y.read() == std::vector<float>(kN, -1.0f));
  CHECK(z.read() == std::vector<float>(kN, -1.0f));
  CHECK(w.read() == std::vector<float>(kN, -1.0f));
  CHECK(x.read() == ramp(kN, 1.0f));

  cudaGraphExec_t exec = nullptr;
  REQUIRE(cudaGraphInstantiate(&exec, graph, 0) == cudaSuccess);
  REQUIRE(cudaGraphLaunch(exec, s.s) == cudaSuccess);
  REQUIRE(cudaStreamSynchronize(s.s) == cudaSuccess);
  // the eager sequence on the same values
  std::vector<float> xs = ramp(kN, 1.0f), ys(kN), zs(kN);
  for (int i = 0; i < kN; ++i) ys[size_t(i)] = 3.0f * xs[size_t(i)] + 1.0f, zs[size_t(i)] = 0.5f * ys[size_t(i)];
  CHECK(y.read() == ys);
  CHECK(z.read() == zs);
  CHECK(w.read() == std::vector<float>(kN, 0.0f));  // the memset node
  std::memcpy(xs.data(), host.data(), 4 * sizeof(float));
  CHECK(x.read() == xs);  // the copy node, from the host memory captured by address

  // a second replay reads memory as it is now (x's first four values came from `host`)
  REQUIRE(cudaGraphLaunch(exec, s.s) == cudaSuccess);
  REQUIRE(cudaStreamSynchronize(s.s) == cudaSuccess);
  for (int i = 0; i < kN; ++i) ys[size_t(i)] = 3.0f * xs[size_t(i)] + 1.0f, zs[size_t(i)] = 0.5f * ys[size_t(i)];
  CHECK(y.read() == ys);
  CHECK(z.read() == zs);

  // the graph may be destroyed once instantiated; the instance lives on, on another stream too
  CHECK(cudaGraphDestroy(graph) == cudaSuccess);
  Stream other;
  REQUIRE(cudaGraphLaunch(exec, other.s) == cudaSuccess);
  REQUIRE(cudaStreamSynchronize(other.s) == cudaSuccess);
  CHECK(z.read() == zs);
  CHECK(cudaGraphExecDestroy(exec) == cudaSuccess);
  CHECK(cudaGraphExecDestroy(exec) == cudaErrorInvalidValue);  // twice
  CHECK(cudaGraphLaunch(exec, s.s) == cudaErrorInvalidValue);
  (void)cudaGetLastError();
}

TEST_CASE("cudasim graphs: waiting for the device during a capture fails and invalidates it; misuse is an error") {
  Stream s;
  Buffer x;
  cudaGraph_t graph = nullptr;
  // what the legacy stream and a stream not capturing cannot do
  CHECK(cudaStreamBeginCapture(nullptr, cudaStreamCaptureModeGlobal) == cudaErrorStreamCaptureUnsupported);
  CHECK(cudaStreamEndCapture(s.s, &graph) == cudaErrorIllegalState);
  REQUIRE(cudaStreamBeginCapture(s.s, cudaStreamCaptureModeGlobal) == cudaSuccess);
  CHECK(cudaStreamBeginCapture(s.s, cudaStreamCaptureModeGlobal) == cudaErrorIllegalState);
  CHECK(contains(cudaGetErrorString(cudaGetLastError()), "capturing already"));

  struct Refused {
    const char* name;
    cudaError_t (*call)(cudaStream_t, float*);
  };
  const Refused refused[] = {
      {"cudaStreamSynchronize", [](cudaStream_t st, float*) { return cudaStreamSynchronize(st); }},
      {"cudaDeviceSynchronize", [](cudaStream_t, float*) { return cudaDeviceSynchronize(); }},
      {"cudaMemcpy", [](cudaStream_t, float* p) {
         float v = 0;
         return cudaMemcpy(&v, p, sizeof v, cudaMemcpyDeviceToHost);
       }},
      {"cudaMemset", [](cudaStream_t, float* p) { return cudaMemset(p, 0, 4); }},
  };
  for (const Refused& r : refused) {
    CAPTURE(r.name);
    if (status_of(s.s) == cudaStreamCaptureStatusNone)
      REQUIRE(cudaStreamBeginCapture(s.s, cudaStreamCaptureModeGlobal) == cudaSuccess);
    ember::cuda::launch(k_scale_add, dim3(1), dim3(32), 0, s.s, static_cast<const float*>(x.p), x.p, 1.0f, 0.0f, 8);
    CHECK(r.call(s.s, x.p) == cudaErrorStreamCaptureUnsupported);
    CHECK(contains(cudaGetErrorString(cudaGetLastError()), std::string(r.name) + ": not permitted while a stream is capturing"));
    CHECK(status_of(s.s) == cudaStreamCaptureStatusInvalidated);
    CHECK(cudaStreamEndCapture(s.s, &graph) == cudaErrorStreamCaptureInvalidated);
    CHECK(graph == nullptr);
    CHECK(contains(cudaGetErrorString(cudaGetLastError()), std::string(r.name) + " was called while"));
    CHECK(status_of(s.s) == cudaStreamCaptureStatusNone);
  }
  // in the relaxed mode, device-wide calls are the caller's business; the captured stream's own wait is not
  REQUIRE(cudaStreamBeginCapture(s.s, cudaStreamCaptureModeRelaxed) == cudaSuccess);
  CHECK(cudaDeviceSynchronize() == cudaSuccess);
  CHECK(cudaStreamSynchronize(s.s) == cudaErrorStreamCaptureUnsupported);
  CHECK(cudaStreamEndCapture(s.s, &graph) == cudaErrorStreamCaptureInvalidated);
  (void)cudaGetLastError();
}

TEST_CASE("cudasim graphs: ember's batch norm + add + ReLU and its elementwise loop, captured and replayed, give the "
          "eager bits") {
  using namespace ember;
  cudaStream_t s = nullptr;
  REQUIRE(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking) == cudaSuccess);
  const int64_t N = 2, C = 3, HW = 64, n = N * C * HW;
  const int values = int(n), channels = int(C);
  Buffer x(values), r(values), y(values), y2(values), gamma(channels), beta(channels);
  Buffer mean(channels), invstd(channels), rmean(channels), rvar(channels);
  auto reset = [&] {  // the inputs and the running statistics each run starts from
    x.write(ramp(int(n), -3.0f));
    std::vector<float> rv = ramp(int(n), 2.0f);
    for (float& v : rv) v = float(int(v * 7.0f) % 5) - 2.0f;
    r.write(rv);
    gamma.write({1.0f, 0.5f, 2.0f});
    beta.write({0.0f, 0.25f, -0.5f});
    rmean.write({0.0f, 0.0f, 0.0f});
    rvar.write({1.0f, 1.0f, 1.0f});
  };
  auto step = [&] {  // batch norm + add + ReLU, then y2 = y + r
    cuda::batch_norm_add_relu_forward_train(DType::f32, x.p, r.p, gamma.p, beta.p, y.p, mean.p, invstd.p, rmean.p,
                                           rvar.p, N, C, HW, 0.1, 1e-5, s);
    cuda::add(DType::f32, y.p, r.p, y2.p, n, s);
  };
  reset();
  step();
  REQUIRE(cudaStreamSynchronize(s) == cudaSuccess);
  const std::vector<float> eager_y = y.read(int(n)), eager_y2 = y2.read(int(n)), eager_rv = rvar.read(int(C));

  reset();
  y.write(std::vector<float>(size_t(n), 0.0f));
  REQUIRE(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal) == cudaSuccess);
  step();
  cudaGraph_t graph = nullptr;
  REQUIRE(cudaStreamEndCapture(s, &graph) == cudaSuccess);
  CHECK(y.read(int(n)) == std::vector<float>(size_t(n), 0.0f));  // captured, not run
  cudaGraphExec_t exec = nullptr;
  REQUIRE(cudaGraphInstantiate(&exec, graph, 0) == cudaSuccess);
  for (int replay = 0; replay < 2; ++replay) {
    CAPTURE(replay);
    reset();
    REQUIRE(cudaGraphLaunch(exec, s) == cudaSuccess);
    REQUIRE(cudaStreamSynchronize(s) == cudaSuccess);
    CHECK(y.read(int(n)) == eager_y);
    CHECK(y2.read(int(n)) == eager_y2);
    CHECK(rvar.read(int(C)) == eager_rv);  // the finalizing block ran each time (its ticket was reset)
  }
  CHECK(cudaGraphExecDestroy(exec) == cudaSuccess);
  CHECK(cudaGraphDestroy(graph) == cudaSuccess);
  cudaStreamDestroy(s);
}
