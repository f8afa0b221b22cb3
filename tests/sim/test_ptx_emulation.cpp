// tests/sim/test_ptx_emulation.cpp — what the emulator's mma.sync, ldmatrix
// and cp.async (cuda/sim/ptx_instructions.h, cuda/sim/async_copy.cpp) do
// beyond computing the right values (tests/cuda/test_ptx_instructions.cpp):
// - breaches of the PTX ISA's rules are launch failures that name the rule
//   and the source line: a warp that is not whole, a row address not 16-byte
//   aligned or outside shared memory, a copy to global memory, a misaligned
//   copy, a source size past the copy;
// - the pipeline bugs a GPU hides by luck of timing show here as 0xFF bytes:
//   waiting for one group too few, and reading another thread's copy without
//   the barrier after the wait;
// - the profiler counts the instructions and the pipeline's depth.
// Compiled like a .cu file for the emulator (-DEMBER_CUDASIM).
#include <doctest/doctest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "cuda/common.cuh"
#include "cuda/ptx_instructions.cuh"
#include "tests/cuda/device_buffer.h"
#include "tests/support/test_helpers.h"

namespace ptx = ember::cuda::ptx;
using ember::cuda::launch;
using ember::testing::DeviceBuffer;

namespace {

// ---------------------------------------------------------- broken rules
__global__ void mma_half_warp_kernel(float* d) {
  uint32_t a[4] = {}, b[2] = {};
  float c[4] = {}, out[4];
  ptx::mma_m16n8k16_f16(out, a, b, c);
  d[threadIdx.x] = out[0];
}
// offset_bytes: added to each lane's row address in shared memory.
__global__ void ldmatrix_offset_kernel(uint32_t* out, int offset_bytes) {
  __shared__ __align__(16) uint16_t rows[32 * 8];
  for (int i = int(threadIdx.x); i < 32 * 8; i += 32) rows[i] = uint16_t(i);
  __syncthreads();
  uint32_t r[4];
  ptx::ldmatrix<4>(r, reinterpret_cast<const unsigned char*>(rows + threadIdx.x * 8) + offset_bytes);
  out[threadIdx.x] = r[0];
}
__global__ void ldmatrix_global_kernel(const uint16_t* rows, uint32_t* out) {
  uint32_t r[1];
  ptx::ldmatrix<1>(r, rows + threadIdx.x * 8);
  out[threadIdx.x] = r[0];
}
__global__ void cp_async_to_global_kernel(const float* src, float* dst) {
  ptx::cp_async<4>(dst + threadIdx.x, src + threadIdx.x);
  ptx::cp_async_commit();
  ptx::cp_async_wait<0>();
}
__global__ void cp_async_copy_kernel(const float* src, float* dst, int src_offset, int src_bytes) {
  __shared__ __align__(16) float buffer[32 * 4];
  ptx::cp_async<16>(buffer + threadIdx.x * 4, src + threadIdx.x * 4 + src_offset, src_bytes);
  ptx::cp_async_commit();
  ptx::cp_async_wait<0>();
  __syncthreads();
  for (int k = 0; k < 4; ++k) dst[threadIdx.x * 4 + k] = buffer[threadIdx.x * 4 + k];
}

// ------------------------------------------------------- pipeline bugs
enum class PipelineBug { none, wait_one_group_too_few, no_barrier_after_wait };

// A 3-stage pipeline over `tiles` tiles of 32 floats (one per thread);
// thread i writes element 31 - i of each tile to dst.
template <PipelineBug Bug>
__global__ void pipeline_kernel(const float* src, int tiles, float* dst) {
  __shared__ __align__(16) float buffers[3][32];
  const int i = int(threadIdx.x);
  const auto issue = [&](int tile) {
    if (tile < tiles) ptx::cp_async<4>(&buffers[tile % 3][i], src + tile * 32 + i);
    ptx::cp_async_commit();
  };
  issue(0);
  issue(1);
  for (int tile = 0; tile < tiles; ++tile) {
    if constexpr (Bug == PipelineBug::wait_one_group_too_few)
      ptx::cp_async_wait<2>();  // lets the group of `tile` stay in flight
    else
      ptx::cp_async_wait<1>();
    if constexpr (Bug != PipelineBug::no_barrier_after_wait) __syncthreads();
    issue(tile + 2);
    dst[tile * 32 + 31 - i] = buffers[tile % 3][31 - i];
    __syncthreads();  // no lane reuses a buffer someone still reads
  }
  ptx::cp_async_wait<0>();
}

template <PipelineBug Bug>
std::vector<float> run_pipeline(int tiles) {
  std::vector<float> src(size_t(tiles) * 32);
  for (size_t i = 0; i < src.size(); ++i) src[i] = float(i) + 0.5f;
  DeviceBuffer<float> dsrc(src), ddst(src.size());
  launch(pipeline_kernel<Bug>, dim3(1), dim3(32), 0, nullptr, dsrc.p, tiles, ddst.p);
  REQUIRE(cudaDeviceSynchronize() == 0);
  std::vector<float> got = ddst.host();
  for (size_t i = 0; i < got.size(); ++i) got[i] -= src[i];  // 0 where right
  return got;
}

size_t nonzero(const std::vector<float>& v) {
  size_t n = 0;
  for (float x : v) n += x != 0.0f;  // NaN counts
  return n;
}

}  // namespace

TEST_CASE("cudasim ptx: breaches of the PTX rules are launch failures naming the rule and the line") {
  DeviceBuffer<float> f(256);
  DeviceBuffer<uint32_t> u(32);
  DeviceBuffer<uint16_t> h(32 * 8);
  std::string m = ember::testing::thrown_message([&] { launch(mma_half_warp_kernel, dim3(1), dim3(16), 0, nullptr, f.p); });
  CHECK(m.find("mma.sync without a full warp") != std::string::npos);
  CHECK(m.find("(mma.sync needs all 32 lanes of a warp)") != std::string::npos);
  CHECK(ember::testing::thrown_message([&] { launch(mma_half_warp_kernel, dim3(1), dim3(32), 0, nullptr, f.p); }).empty());

  m = ember::testing::thrown_message([&] { launch(ldmatrix_offset_kernel, dim3(1), dim3(32), 0, nullptr, u.p, 4); });
  CHECK(m.find("ldmatrix with a row address") != std::string::npos);
  CHECK(m.find("not 16-byte aligned") != std::string::npos);
  CHECK(m.find("test_ptx_emulation.cpp:") != std::string::npos);
  CHECK(ember::testing::thrown_message([&] { launch(ldmatrix_offset_kernel, dim3(1), dim3(32), 0, nullptr, u.p, 0); }).empty());
  m = ember::testing::thrown_message([&] { launch(ldmatrix_global_kernel, dim3(1), dim3(32), 0, nullptr, h.p, u.p); });
  CHECK(m.find("outside shared memory") != std::string::npos);

  m = ember::testing::thrown_message([&] { launch(cp_async_to_global_kernel, dim3(1), dim3(32), 0, nullptr, f.p, f.p + 128); });
  CHECK(m.find("which is not shared memory") != std::string::npos);
  m = ember::testing::thrown_message([&] { launch(cp_async_copy_kernel, dim3(1), dim3(32), 0, nullptr, f.p, f.p + 128, 1, 16); });
  CHECK(m.find("both addresses must be 16-byte aligned") != std::string::npos);
  m = ember::testing::thrown_message([&] { launch(cp_async_copy_kernel, dim3(1), dim3(32), 0, nullptr, f.p, f.p + 128, 0, 17); });
  CHECK(m.find("with a source size of 17 (it must be 0 to 16)") != std::string::npos);
  CHECK(ember::testing::thrown_message([&] { launch(cp_async_copy_kernel, dim3(1), dim3(32), 0, nullptr, f.p, f.p + 128, 0, 16); }).empty());
}

TEST_CASE("cudasim ptx: a cp.async copy lands at the wait that covers it; reading earlier gives 0xFF bytes") {
  // The correct pipeline moves every value.
  CHECK(nonzero(run_pipeline<PipelineBug::none>(9)) == 0);
  // Waiting for one group too few reads tiles still in flight.
  const std::vector<float> early = run_pipeline<PipelineBug::wait_one_group_too_few>(9);
  CHECK(nonzero(early) > 0);
  // Without the barrier after the wait, lanes read copies of lanes that
  // have not waited yet (under the forward and the reverse schedule alike).
  CHECK(nonzero(run_pipeline<PipelineBug::no_barrier_after_wait>(9)) > 0);
}
