// tests/sim/test_stream_order.cpp — the emulator's stream-order checker
// (cuda/sim/stream_order.cpp): work on two streams that touches the same
// block with nothing ordering the two fails with a message naming both;
// events, stream waits, host synchronisation and the legacy stream's
// implicit ordering each order them, as on a GPU; the GEMM's and the
// convolutions' operands, passed inside functor structs, are seen too.
//
// Compiled like a .cu file for the emulator (-DEMBER_CUDASIM).
#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "cuda/common.cuh"
#include "cuda/cuda_kernels.h"
#include "engine/error.h"
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

// The GEMM and the implicit-GEMM convolutions take their operands inside
// functor structs (MatrixA{a, ld}, LoadPlanes{x, ...}, PhaseStore{gx, ...}):
// the checker sees those pointers too (cuda/sim/argument_pointers.h).
// A: [16, 16] written on one stream, read by a GEMM on another with no event.
TEST_CASE("stream order: a GEMM on a second stream reading what a kernel wrote, with no event, is a race") {
  Stream compute, other;
  Buffer a, b, c;  // 256 floats each: 16 x 16
  fill(b, 1.0f, compute.s);
  fill(c, 0.0f, compute.s);
  REQUIRE(cudaStreamSynchronize(compute.s) == cudaSuccess);
  fill(a, 3.0f, compute.s);  // not waited for
  std::string m;
  try {
    ember::cuda::gemm(ember::DType::f32, false, false, 16, 16, 16, 1.0, a.p, 16, b.p, 16, 0.0, c.p, 16, other.s);
  } catch (const ember::Error& e) {
    m = e.what();
  }
  CHECK_MESSAGE(contains(m, "stream race"), m);
  CHECK_MESSAGE(contains(m, "gemm"), m);          // the GEMM's kernel ...
  CHECK_MESSAGE(contains(m, "k_fill_value"), m);  // ... and the kernel that wrote A
  CHECK_MESSAGE(contains(m, "reads the 1024-byte block"), m);
  // With the event, the same GEMM runs.
  Event done;
  REQUIRE(cudaEventRecord(done.e, compute.s) == cudaSuccess);
  REQUIRE(cudaStreamWaitEvent(other.s, done.e, 0) == cudaSuccess);
  ember::cuda::gemm(ember::DType::f32, false, false, 16, 16, 16, 1.0, a.p, 16, b.p, 16, 0.0, c.p, 16, other.s);
  CHECK(host_copy(c)[0] == 48.0f);  // 16 * 3 * 1
}

// x: [1, 1, 16, 16], w: [1, 1, 3, 3] (in a 256-float block), y: [1, 1, 16, 16]:
// y written by a convolution on one stream, overwritten by another on a second.
TEST_CASE("stream order: a convolution on a second stream writing what another convolution wrote, with no event, is a race") {
  Stream compute, other;
  Buffer x, w, y;
  fill(x, 1.0f, compute.s);
  fill(w, 0.5f, compute.s);
  REQUIRE(cudaStreamSynchronize(compute.s) == cudaSuccess);
  const ember::Conv2dGeometry g = ember::make_conv2d_geometry(1, 1, 16, 16, 1, 3, 3, 1, 1, 1, 1);
  ember::cuda::conv2d_forward(ember::DType::f32, g, x.p, w.p, y.p, compute.s);
  std::string m;
  try {
    ember::cuda::conv2d_forward(ember::DType::f32, g, x.p, w.p, y.p, other.s);
  } catch (const ember::Error& e) {
    m = e.what();
  }
  CHECK_MESSAGE(contains(m, "stream race"), m);
  CHECK_MESSAGE(contains(m, "writes the"), m);  // y (or the convolution's own scratch)
  CHECK_MESSAGE(contains(m, "wrote"), m);
  CHECK(host_copy(y)[17] == 4.5f);  // the first convolution's result: 9 taps of 1 * 0.5
}

namespace {
struct InnerOperand {
  const float* a;
  int64_t ld;
};
struct OuterOperand {
  InnerOperand in;
  float* out;
  int n;
  double* more;
};
struct NoPointers {
  float a[4];
  using argument_has_no_pointers = void;
};
}  // namespace

TEST_CASE("stream order: the pointers of a kernel argument are found inside nested structs, with read or write") {
  using cudasim::detail::add_touches;
  using cudasim::detail::Touch;
  float x = 0, y = 0;
  double z = 0;
  std::vector<Touch> t;
  add_touches(OuterOperand{InnerOperand{&x, 4}, &y, 3, &z}, t);
  REQUIRE(t.size() == 3);
  CHECK(t[0].p == &x);
  CHECK_FALSE(t[0].writes);  // const float*
  CHECK(t[1].p == &y);
  CHECK(t[1].writes);
  CHECK(t[2].p == &z);
  CHECK(cudasim::detail::field_count<OuterOperand>() == 4);
  t.clear();
  add_touches(NoPointers{}, t);
  add_touches(42, t);
  add_touches(dim3(1, 2, 3), t);  // a class with constructors: opaque
  CHECK(t.empty());
  add_touches(static_cast<const int*>(nullptr), t);
  CHECK(t.size() == 1);
}
