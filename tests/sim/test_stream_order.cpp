// tests/sim/test_stream_order.cpp — the emulator's stream-order checker
// (cuda/sim/stream_order.cpp): work on two streams that touches the same
// block with nothing ordering the two fails with a message naming both;
// events, stream waits, host synchronisation and the legacy stream's
// implicit ordering each order them, as on a GPU.
//
// Compiled like a .cu file for the emulator (-DEMBER_CUDASIM).
#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "cuda/common.cuh"
#include "tests/support/test_helpers.h"

namespace {

using ember::testing::contains;

// x: [n] = v
__global__ void k_fill_value(float* x, float v, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) x[i] = v;
}
// y: [n] = 2 * x
__global__ void k_double(const float* x, float* y, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = 2 * x[i];
}

constexpr int kN = 256;

struct Buffer {
  float* p = nullptr;
  Buffer() { REQUIRE(cudaMalloc(reinterpret_cast<void**>(&p), kN * sizeof(float)) == cudaSuccess); }
  ~Buffer() { cudaFree(p); }
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
};

struct Stream {
  cudaStream_t s = nullptr;
  explicit Stream(unsigned flags = cudaStreamNonBlocking) {
    REQUIRE(cudaStreamCreateWithFlags(&s, flags) == cudaSuccess);
  }
  ~Stream() { cudaStreamDestroy(s); }
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;
};

struct Event {
  cudaEvent_t e = nullptr;
  Event() { REQUIRE(cudaEventCreateWithFlags(&e, cudaEventDisableTiming) == cudaSuccess); }
  ~Event() { cudaEventDestroy(e); }
  Event(const Event&) = delete;
  Event& operator=(const Event&) = delete;
};

void fill(const Buffer& b, float v, cudaStream_t s) { ember::cuda::launch(k_fill_value, dim3(1), dim3(kN), 0, s, b.p, v, kN); }

// The message of the error the last call set (and clears it), "" if none.
std::string last_error_message() {
  const cudaError_t e = cudaGetLastError();
  return e == cudaSuccess ? "" : cudaGetErrorString(e);
}

std::vector<float> host_copy(const Buffer& b) {
  std::vector<float> v(kN);
  REQUIRE(cudaDeviceSynchronize() == cudaSuccess);
  REQUIRE(cudaMemcpy(v.data(), b.p, kN * sizeof(float), cudaMemcpyDeviceToHost) == cudaSuccess);
  return v;
}

}  // namespace

TEST_CASE("stream order: a copy on a second stream into a block a kernel wrote, with nothing between, is a race") {
  Stream compute, copy;
  Buffer b;
  std::vector<float> host(kN, 7.0f);
  fill(b, 1.0f, compute.s);
  REQUIRE(cudaMemcpyAsync(b.p, host.data(), kN * sizeof(float), cudaMemcpyHostToDevice, copy.s) ==
          cudaErrorIllegalState);
  const std::string m = last_error_message();
  CHECK(contains(m, "stream race: a copy on stream"));
  CHECK(contains(m, "(non-blocking"));
  CHECK(contains(m, "writes the 1024-byte block"));
  CHECK(contains(m, "which kernel"));
  CHECK(contains(m, "k_fill_value"));
  CHECK(contains(m, "wrote"));
  CHECK(host_copy(b)[0] == 1.0f);  // the racing copy did not run
}

TEST_CASE("stream order: an event recorded after the kernel and waited on by the second stream orders the copy") {
  Stream compute, copy;
  Buffer b;
  Event done;
  std::vector<float> host(kN, 7.0f);
  fill(b, 1.0f, compute.s);
  REQUIRE(cudaEventRecord(done.e, compute.s) == cudaSuccess);
  REQUIRE(cudaStreamWaitEvent(copy.s, done.e, 0) == cudaSuccess);
  CHECK(cudaMemcpyAsync(b.p, host.data(), kN * sizeof(float), cudaMemcpyHostToDevice, copy.s) == cudaSuccess);
  // ... and the first stream reads the copy only after waiting for it in turn.
  Buffer y;
  const std::string m = ember::testing::thrown_message(
      [&] { ember::cuda::launch(k_double, dim3(1), dim3(kN), 0, compute.s, static_cast<const float*>(b.p), y.p, kN); });
  CHECK(contains(m, "kernel (anonymous namespace)::k_double(float const*, float*, int)"));  // not waited for: a race
  CHECK(contains(m, "reads the 1024-byte block"));
  CHECK(contains(m, "which a copy on stream"));
  Event copied;
  REQUIRE(cudaEventRecord(copied.e, copy.s) == cudaSuccess);
  REQUIRE(cudaStreamWaitEvent(compute.s, copied.e, 0) == cudaSuccess);
  ember::cuda::launch(k_double, dim3(1), dim3(kN), 0, compute.s, static_cast<const float*>(b.p), y.p, kN);
  CHECK(host_copy(y)[5] == 14.0f);
}

TEST_CASE("stream order: an event recorded before the kernel does not order it") {
  Stream compute, copy;
  Buffer b;
  Event early;
  REQUIRE(cudaEventRecord(early.e, compute.s) == cudaSuccess);
  fill(b, 1.0f, compute.s);
  REQUIRE(cudaStreamWaitEvent(copy.s, early.e, 0) == cudaSuccess);
  CHECK(cudaMemsetAsync(b.p, 0, kN * sizeof(float), copy.s) == cudaErrorIllegalState);
  CHECK(contains(last_error_message(), "a memset on stream"));
}

TEST_CASE("stream order: the host waiting for the first stream orders what it issues next") {
  Stream compute, copy;
  Buffer b;
  fill(b, 1.0f, compute.s);
  SUBCASE("cudaStreamSynchronize") { REQUIRE(cudaStreamSynchronize(compute.s) == cudaSuccess); }
  SUBCASE("cudaEventSynchronize") {
    Event e;
    REQUIRE(cudaEventRecord(e.e, compute.s) == cudaSuccess);
    REQUIRE(cudaEventSynchronize(e.e) == cudaSuccess);
  }
  SUBCASE("cudaEventQuery that says done") {
    Event e;
    REQUIRE(cudaEventRecord(e.e, compute.s) == cudaSuccess);
    REQUIRE(cudaEventQuery(e.e) == cudaSuccess);
  }
  SUBCASE("cudaDeviceSynchronize") { REQUIRE(cudaDeviceSynchronize() == cudaSuccess); }
  CHECK(cudaMemsetAsync(b.p, 0, kN * sizeof(float), copy.s) == cudaSuccess);
  CHECK(host_copy(b)[3] == 0.0f);
}

TEST_CASE("stream order: reads of one block on two streams do not race") {
  Stream first, second;
  Buffer x, y1, y2;
  fill(x, 3.0f, first.s);
  REQUIRE(cudaStreamSynchronize(first.s) == cudaSuccess);
  ember::cuda::launch(k_double, dim3(1), dim3(kN), 0, first.s, static_cast<const float*>(x.p), y1.p, kN);
  ember::cuda::launch(k_double, dim3(1), dim3(kN), 0, second.s, static_cast<const float*>(x.p), y2.p, kN);
  CHECK(last_error_message().empty());
  CHECK(host_copy(y2)[0] == 6.0f);
}

TEST_CASE("stream order: a write after another stream's unordered read is reported as such") {
  Stream first, second;
  Buffer x, y;
  fill(x, 3.0f, first.s);
  REQUIRE(cudaDeviceSynchronize() == cudaSuccess);
  ember::cuda::launch(k_double, dim3(1), dim3(kN), 0, first.s, static_cast<const float*>(x.p), y.p, kN);
  CHECK(cudaMemsetAsync(x.p, 0, kN * sizeof(float), second.s) == cudaErrorIllegalState);
  const std::string m = last_error_message();
  CHECK(contains(m, "a memset on stream"));
  CHECK(contains(m, "k_double"));
  CHECK(contains(m, " read with no event"));
}

TEST_CASE("stream order: the legacy default stream orders blocking streams, not non-blocking ones") {
  Buffer b;
  std::vector<float> host(kN, 2.0f);
  {
    Stream blocking(cudaStreamDefault);
    fill(b, 1.0f, blocking.s);
    CHECK(cudaMemcpyAsync(b.p, host.data(), kN * sizeof(float), cudaMemcpyHostToDevice, nullptr) == cudaSuccess);
    fill(b, 1.0f, blocking.s);  // and the other way round
    CHECK(last_error_message().empty());
  }
  REQUIRE(cudaDeviceSynchronize() == cudaSuccess);
  Stream non_blocking(cudaStreamNonBlocking);
  fill(b, 1.0f, non_blocking.s);
  CHECK(cudaMemcpyAsync(b.p, host.data(), kN * sizeof(float), cudaMemcpyHostToDevice, nullptr) ==
        cudaErrorIllegalState);
  CHECK(contains(last_error_message(), "on the legacy default stream"));
}

TEST_CASE("stream order: cudaFree waits for the device and a new block starts with no history") {
  Stream first, second;
  for (int round = 0; round < 3; ++round) {  // the allocator may hand back the same address
    Buffer b;
    fill(b, 1.0f, first.s);
    REQUIRE(cudaStreamSynchronize(first.s) == cudaSuccess);
    fill(b, 2.0f, second.s);  // ordered by the host's wait
    CHECK(last_error_message().empty());
  }
  Buffer c;
  CHECK(cudaMemsetAsync(c.p, 0, kN * sizeof(float), second.s) == cudaSuccess);
}
