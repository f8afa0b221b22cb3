// tests/sim/profiler_kernels.cpp — the kernels of profiler_kernels.h. This
// file is compiled like a .cu file for the emulator and instrumented for
// its profiler (Makefile: PROF_FLAGS), so every load and store below is
// counted when profiling is on. tests/sim/test_profiler.cpp finds the lines
// it checks by their "profile:" comments.
#include "tests/sim/profiler_kernels.h"

#include "cuda/common.cuh"
#include "cuda/ptx_instructions.cuh"

namespace profiler_kernels {
namespace {

// x: [32 * stride], y: [32]
__global__ void strided_load_kernel(const float* x, float* y, int stride) {
  const unsigned t = threadIdx.x;
  const float v = x[t * stride];  // profile: strided load
  y[t] = v;
}

// x: [1], y: [32]
__global__ void broadcast_load_kernel(const float* x, float* y) {
  const float v = x[0];  // profile: broadcast load
  y[threadIdx.x] = v;
}

// x, y: [32, 32]; block (32, 32)
template <int W>
__global__ void shared_transpose_kernel(const float* x, float* y) {
  __shared__ float tile[32][W];
  const unsigned tx = threadIdx.x, ty = threadIdx.y;
  tile[ty][tx] = x[ty * 32 + tx];  // profile: row store
  __syncthreads();
  const float v = tile[tx][ty];  // profile: column load
  y[ty * 32 + tx] = v;
}

// y: [32]
__global__ void shared_double_stride2_kernel(double* y) {
  __shared__ double tile[256];
  const unsigned lane = threadIdx.x;
  for (unsigned i = 0; i < 8; ++i) tile[lane + 32 * i] = lane;
  __syncthreads();
  const double v = tile[2 * lane];  // profile: double stride 2
  // lanes 0-15: tile[16 * lane], all in banks 0-1 (16 wavefronts); lanes
  // 16-31: tile[lane], one wavefront; 17 in all, where one pass over the
  // whole warp would count 16 (word 32 is read by both halves)
  const double u = tile[lane < 16 ? 16 * lane : lane];  // profile: double halves
  y[lane] = v + u;
}

// y: [32 * 4]
__global__ void shared_float4_kernel(float* y) {
  __shared__ float4 tile4[64];  // float4 elements: 16-byte aligned
  float* tile = reinterpret_cast<float*>(tile4);
  const unsigned lane = threadIdx.x;
  using ember::cuda::load_vec4;
  ember::cuda::store_vec4(tile + 4 * lane, make_float4(lane, lane, lane, lane));      // profile: float4 store
  ember::cuda::store_vec4(tile + 128 + 4 * lane, make_float4(lane, lane, lane, lane));
  __syncthreads();
  const float4 a = load_vec4(tile + 4 * lane);  // profile: float4 contiguous
  // lanes l and l + 4 of a quarter-warp meet the same 4 banks: 2-way
  const float4 b = load_vec4(tile + 8 * lane);  // profile: float4 stride 2
  const float4 c = load_vec4(tile + 4);         // profile: float4 broadcast
  ember::cuda::store_vec4(y + 4 * lane, make_float4(a.x + b.y, a.y + c.z, a.z, a.w));
}

// out: [32]; shared rows: [32, 64] 16-bit values
__global__ void ldmatrix_rows_kernel(unsigned* out, int row_stride) {
  __shared__ __align__(16) uint16_t rows[32 * 64];
  for (int i = int(threadIdx.x); i < 32 * 64; i += 32) rows[i] = uint16_t(i);
  __syncthreads();
  uint32_t r[4];
  ember::cuda::ptx::ldmatrix<4>(r, rows + threadIdx.x * unsigned(row_stride));
  out[threadIdx.x] = r[0] ^ r[1] ^ r[2] ^ r[3];
}

// x, y: [8, 32, 4] floats; shared: Stages buffers of [32, 4]
template <int Stages>
__global__ void cp_async_stages_kernel(const float* x, float* y) {
  namespace ptx = ember::cuda::ptx;
  __shared__ __align__(16) float buffers[Stages][32 * 4];
  const int lane = int(threadIdx.x), tiles = 8;
  const auto issue = [&](int tile) {
    if (tile < tiles) ptx::cp_async<16>(&buffers[tile % Stages][lane * 4], x + (tile * 32 + lane) * 4);
    ptx::cp_async_commit();
  };
  for (int s = 0; s < Stages - 1; ++s) issue(s);
  for (int tile = 0; tile < tiles; ++tile) {
    ptx::cp_async_wait<Stages - 2>();
    __syncthreads();
    issue(tile + Stages - 1);
    for (int k = 0; k < 4; ++k) y[(tile * 32 + lane) * 4 + k] = buffers[tile % Stages][lane * 4 + k];
  }
  ptx::cp_async_wait<0>();
}

// x, y: [threads]
__global__ void half_warp_kernel(const float* x, float* y, int threads) {
  const unsigned i = blockIdx.x * blockDim.x + threadIdx.x, lane = threadIdx.x & 31;
  if (lane < 16 && int(i) < threads) {
    float v = x[i] * 2.0f;  // profile: half-warp load
    EMBER_PROFILE_FLOPS(1);
    v += __shfl_down_sync(0x0000ffffu, v, 1);
    y[i] = v;
  }
}

// x, y: [blocks * 128]
__global__ void copy_through_registers_kernel(const float* x, float* y, unsigned seed) {
  const unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
  volatile float local[4];  // on the emulated thread's stack: not global, not shared
  local[seed & 3] = x[i];
  y[i] = local[seed & 3];
}

}  // namespace

void strided_load(const float* x, float* y, int stride) {
  ember::cuda::launch(strided_load_kernel, dim3(1), dim3(32), 0, nullptr, x, y, stride);
}
void broadcast_load(const float* x, float* y) {
  ember::cuda::launch(broadcast_load_kernel, dim3(1), dim3(32), 0, nullptr, x, y);
}
void shared_transpose(const float* x, float* y, bool padded) {
  if (padded)
    ember::cuda::launch(shared_transpose_kernel<33>, dim3(1), dim3(32, 32), 0, nullptr, x, y);
  else
    ember::cuda::launch(shared_transpose_kernel<32>, dim3(1), dim3(32, 32), 0, nullptr, x, y);
}
void shared_double_stride2(double* y) {
  ember::cuda::launch(shared_double_stride2_kernel, dim3(1), dim3(32), 0, nullptr, y);
}
void ldmatrix_rows(unsigned* out, int row_stride) {
  ember::cuda::launch(ldmatrix_rows_kernel, dim3(1), dim3(32), 0, nullptr, out, row_stride);
}
void cp_async_stages(const float* x, float* y, int stages) {
  if (stages == 2)
    ember::cuda::launch(cp_async_stages_kernel<2>, dim3(1), dim3(32), 0, nullptr, x, y);
  else if (stages == 3)
    ember::cuda::launch(cp_async_stages_kernel<3>, dim3(1), dim3(32), 0, nullptr, x, y);
  else
    ember::cuda::launch(cp_async_stages_kernel<4>, dim3(1), dim3(32), 0, nullptr, x, y);
}
void shared_float4(float* y) { ember::cuda::launch(shared_float4_kernel, dim3(1), dim3(32), 0, nullptr, y); }
void half_warp(const float* x, float* y, int threads) {
  ember::cuda::launch(half_warp_kernel, dim3((threads + 63) / 64), dim3(64), 0, nullptr, x, y, threads);
}
void copy_through_registers(const float* x, float* y, int blocks) {
  ember::cuda::launch(copy_through_registers_kernel, dim3(blocks), dim3(128), 0, nullptr, x, y, 1u);
}

}  // namespace profiler_kernels
