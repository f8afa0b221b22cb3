// cuda/lab/ptx_instruction_probes.cu — the probe kernels of
// ptx_instruction_probes.h: each builds its operands by the fragment layouts
// written at the top of cuda/ptx_instructions.cuh, runs the instruction and
// stores what every lane got, so a test can hold the layouts (and the
// emulator's model of them) against a scalar reference and against a GPU.
#include "cuda/lab/ptx_instruction_probes.h"

#include "cuda/common.cuh"
#include "cuda/ptx_instructions.cuh"
#include "engine/error.h"

namespace ember::cuda::lab {
namespace {

__device__ __forceinline__ uint32_t pair(uint16_t lo, uint16_t hi) { return uint32_t(lo) | uint32_t(hi) << 16; }

__device__ __forceinline__ uint32_t f32_bits(float x) {
  uint32_t u;
  memcpy(&u, &x, 4);
  return u;
}

template <MmaInput In>
__device__ __forceinline__ void mma(float (&d)[4], const uint32_t (&a)[4], const uint32_t (&b)[2],
                                    const float (&c)[4]) {
  if constexpr (In == MmaInput::f16)
    ptx::mma_m16n8k16_f16(d, a, b, c);
  else if constexpr (In == MmaInput::bf16)
    ptx::mma_m16n8k16_bf16(d, a, b, c);
  else
    ptx::mma_m16n8k8_tf32(d, a, b, c);
}

// C, D: [16, 8] f32 row-major; lane (g, t) holds rows g and g + 8, columns 2t and 2t + 1.
__device__ __forceinline__ void load_c(float (&c)[4], const float* C, int g, int t) {
  c[0] = C[g * 8 + 2 * t];
  c[1] = C[g * 8 + 2 * t + 1];
  c[2] = C[(g + 8) * 8 + 2 * t];
  c[3] = C[(g + 8) * 8 + 2 * t + 1];
}
__device__ __forceinline__ void store_d(float* D, const float (&d)[4], int g, int t) {
  D[g * 8 + 2 * t] = d[0];
  D[g * 8 + 2 * t + 1] = d[1];
  D[(g + 8) * 8 + 2 * t] = d[2];
  D[(g + 8) * 8 + 2 * t + 1] = d[3];
}

// A: [16, K], B: [K, 8] row-major (16-bit values for f16/bf16, K = 16; f32 for tf32, K = 8).
template <MmaInput In>
__global__ void mma_probe_kernel(const void* A, const void* B, const float* C, float* D, bool round_tf32) {
  const int lane = int(threadIdx.x), g = lane / 4, t = lane % 4;
  uint32_t a[4], b[2];
  if constexpr (In == MmaInput::tf32) {
    const float* af = static_cast<const float*>(A);
    const float* bf = static_cast<const float*>(B);
    const auto v = [&](float x) { return round_tf32 ? ptx::to_tf32(x) : f32_bits(x); };
    a[0] = v(af[g * 8 + t]);
    a[1] = v(af[(g + 8) * 8 + t]);
    a[2] = v(af[g * 8 + t + 4]);
    a[3] = v(af[(g + 8) * 8 + t + 4]);
    b[0] = v(bf[t * 8 + g]);
    b[1] = v(bf[(t + 4) * 8 + g]);
  } else {
    const uint16_t* ah = static_cast<const uint16_t*>(A);
    const uint16_t* bh = static_cast<const uint16_t*>(B);
    a[0] = pair(ah[g * 16 + 2 * t], ah[g * 16 + 2 * t + 1]);
    a[1] = pair(ah[(g + 8) * 16 + 2 * t], ah[(g + 8) * 16 + 2 * t + 1]);
    a[2] = pair(ah[g * 16 + 2 * t + 8], ah[g * 16 + 2 * t + 9]);
    a[3] = pair(ah[(g + 8) * 16 + 2 * t + 8], ah[(g + 8) * 16 + 2 * t + 9]);
    b[0] = pair(bh[(2 * t) * 8 + g], bh[(2 * t + 1) * 8 + g]);
    b[1] = pair(bh[(2 * t + 8) * 8 + g], bh[(2 * t + 9) * 8 + g]);
  }
  float c[4], d[4];
  load_c(c, C, g, t);
  mma<In>(d, a, b, c);
  store_d(D, d, g, t);
}

// rows: [32, 8] 16-bit; shared: [32, row_stride]; out: [32, N].
template <int N, bool Trans>
__global__ void ldmatrix_probe_kernel(const uint16_t* rows, int row_stride, const int* row_of_lane, uint32_t* out) {
  EMBER_DYNAMIC_SHARED(uint16_t, shared_rows);
  const int lane = int(threadIdx.x);
  for (int i = lane; i < 32 * row_stride; i += 32) {
    const int r = i / row_stride, c = i % row_stride;
    shared_rows[i] = c < 8 ? rows[r * 8 + c] : uint16_t(0);
  }
  __syncthreads();
  uint32_t r[N];
  const uint16_t* row = shared_rows + row_of_lane[lane] * row_stride;
  if constexpr (Trans)
    ptx::ldmatrix_trans<N>(r, row);
  else
    ptx::ldmatrix<N>(r, row);
  for (int i = 0; i < N; ++i) out[lane * N + i] = r[i];
}

// A: [16, 16], B: [16, 8] 16-bit row-major; D: [16, 8] f32.
template <MmaInput In>
__global__ void mma_from_shared_kernel(const uint16_t* A, const uint16_t* B, float* D) {
  __shared__ __align__(16) uint16_t a_tile[16 * 16];
  __shared__ __align__(16) uint16_t b_tile[16 * 8];
  const int lane = int(threadIdx.x), g = lane / 4, t = lane % 4;
  for (int i = lane; i < 16 * 16; i += 32) a_tile[i] = A[i];
  for (int i = lane; i < 16 * 8; i += 32) b_tile[i] = B[i];
  __syncthreads();
  uint32_t a[4], b[2];
  // Matrices 0..3 of A: rows 0-7 / 8-15 of columns 0-7, then of columns 8-15.
  ptx::ldmatrix<4>(a, a_tile + (lane % 16) * 16 + (lane / 16) * 8);
  // B's rows k = 0-7 and 8-15, transposed: each lane gets two consecutive k of column g.
  ptx::ldmatrix_trans<2>(b, b_tile + (lane % 16) * 8);
  float c[4] = {0.0f, 0.0f, 0.0f, 0.0f}, d[4];
  mma<In>(d, a, b, c);
  store_d(D, d, g, t);
}

// src, dst: tiles of 128 copies of Bytes; shared: `Stages` buffers of one tile.
template <int Bytes, int Stages>
__global__ void cp_async_pipeline_kernel(const unsigned char* src, int src_bytes, int64_t tiles, unsigned char* dst) {
  EMBER_DYNAMIC_SHARED(unsigned char, buffers);
  constexpr int kThreads = 128, kTile = kThreads * Bytes;
  const int i = int(threadIdx.x);
  const auto issue = [&](int64_t tile) {
    if (tile < tiles)
      ptx::cp_async<Bytes>(buffers + (tile % Stages) * kTile + i * Bytes, src + tile * kTile + i * Bytes, src_bytes);
    ptx::cp_async_commit();  // an empty group past the end keeps the count of groups in step
  };
  for (int s = 0; s < Stages - 1; ++s) issue(s);
  for (int64_t tile = 0; tile < tiles; ++tile) {
    ptx::cp_async_wait<Stages - 2>();  // this thread's copies of `tile` have landed
    __syncthreads();                   // and everyone else's; the buffer of tile - 1 is free
    issue(tile + Stages - 1);
    const int j = kThreads - 1 - i;  // another thread's copy
    const unsigned char* from = buffers + (tile % Stages) * kTile + j * Bytes;
    for (int b = 0; b < Bytes; ++b) dst[tile * kTile + j * Bytes + b] = from[b];
  }
  ptx::cp_async_wait<0>();
}

template <int Bytes>
void launch_pipeline(int stages, int src_bytes, const void* src, int64_t tiles, void* dst, cudaStream_t s) {
  const auto* from = static_cast<const unsigned char*>(src);
  auto* to = static_cast<unsigned char*>(dst);
  const size_t smem = size_t(stages) * 128 * Bytes;
  if (stages == 2)
    launch(cp_async_pipeline_kernel<Bytes, 2>, dim3(1), dim3(128), smem, s, from, src_bytes, tiles, to);
  else if (stages == 3)
    launch(cp_async_pipeline_kernel<Bytes, 3>, dim3(1), dim3(128), smem, s, from, src_bytes, tiles, to);
  else
    launch(cp_async_pipeline_kernel<Bytes, 4>, dim3(1), dim3(128), smem, s, from, src_bytes, tiles, to);
}

}  // namespace

void mma_probe(MmaInput input, const void* A, const void* B, const float* C, float* D, bool round_tf32,
               Stream stream) {
  const cudaStream_t s = as_cuda_stream(stream);
  if (input == MmaInput::f16)
    launch(mma_probe_kernel<MmaInput::f16>, dim3(1), dim3(32), 0, s, A, B, C, D, round_tf32);
  else if (input == MmaInput::bf16)
    launch(mma_probe_kernel<MmaInput::bf16>, dim3(1), dim3(32), 0, s, A, B, C, D, round_tf32);
  else
    launch(mma_probe_kernel<MmaInput::tf32>, dim3(1), dim3(32), 0, s, A, B, C, D, round_tf32);
}

void ldmatrix_probe(int count, bool trans, const uint16_t* rows, int row_stride, const int* row_of_lane,
                    uint32_t* out, Stream stream) {
  if (row_stride < 8 || row_stride % 8 != 0) fail(cat("ldmatrix_probe: row_stride ", row_stride, " is not a multiple of 8"));
  const cudaStream_t s = as_cuda_stream(stream);
  const size_t smem = size_t(32) * size_t(row_stride) * 2;
  const auto go = [&](auto kernel) { launch(kernel, dim3(1), dim3(32), smem, s, rows, row_stride, row_of_lane, out); };
  if (count == 1)
    trans ? go(ldmatrix_probe_kernel<1, true>) : go(ldmatrix_probe_kernel<1, false>);
  else if (count == 2)
    trans ? go(ldmatrix_probe_kernel<2, true>) : go(ldmatrix_probe_kernel<2, false>);
  else if (count == 4)
    trans ? go(ldmatrix_probe_kernel<4, true>) : go(ldmatrix_probe_kernel<4, false>);
  else
    fail(cat("ldmatrix_probe: ", count, " matrices (ldmatrix loads 1, 2 or 4)"));
}

void mma_from_shared_probe(MmaInput input, const void* A, const void* B, float* D, Stream stream) {
  const cudaStream_t s = as_cuda_stream(stream);
  const auto* a = static_cast<const uint16_t*>(A);
  const auto* b = static_cast<const uint16_t*>(B);
  if (input == MmaInput::f16)
    launch(mma_from_shared_kernel<MmaInput::f16>, dim3(1), dim3(32), 0, s, a, b, D);
  else if (input == MmaInput::bf16)
    launch(mma_from_shared_kernel<MmaInput::bf16>, dim3(1), dim3(32), 0, s, a, b, D);
  else
    fail("mma_from_shared_probe: 16-bit inputs only (ldmatrix moves 16-bit values)");
}

void cp_async_pipeline_probe(int copy_bytes, int src_bytes, int stages, const void* src, int64_t tiles, void* dst,
                             Stream stream) {
  if (stages < 2 || stages > 4) fail(cat("cp_async_pipeline_probe: ", stages, " stages (2 to 4)"));
  const cudaStream_t s = as_cuda_stream(stream);
  if (copy_bytes == 4)
    launch_pipeline<4>(stages, src_bytes, src, tiles, dst, s);
  else if (copy_bytes == 8)
    launch_pipeline<8>(stages, src_bytes, src, tiles, dst, s);
  else if (copy_bytes == 16)
    launch_pipeline<16>(stages, src_bytes, src, tiles, dst, s);
  else
    fail(cat("cp_async_pipeline_probe: copies of ", copy_bytes, " bytes (4, 8 or 16)"));
}

}  // namespace ember::cuda::lab
