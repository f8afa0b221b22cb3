// tests/sim/profiler_kernels.h — kernels with known memory behaviour, for
// tests/sim/test_profiler.cpp. Their file (profiler_kernels.cpp) is compiled
// with the profiler's instrumentation (see the Makefile), the test file
// without. Each launcher takes device pointers (cudaMalloc) and launches
// once; the comments say what a GPU's counters show for it.
#pragma once

namespace profiler_kernels {

// y[t] = x[t * stride] for 32 threads (one warp): 4 sectors per request at
// stride 1, 8 at stride 2, 32 from stride 8 up; x: [32 * stride], y: [32].
void strided_load(const float* x, float* y, int stride);
// Every lane reads x[0]: one sector, a broadcast. y: [32].
void broadcast_load(const float* x, float* y);
// A 32x32 transpose through shared memory: rows written, columns read.
// padded = false: tile[32][32], the column read is a 32-way bank conflict;
// padded = true: tile[32][33], none. x, y: [32 * 32].
void shared_transpose(const float* x, float* y, bool padded);
// Shared doubles read at an even index (tile[2 * lane]): each half-warp
// hits every bank twice, 2-way; then a read whose half-warps conflict
// differently (17 wavefronts). y: [32].
void shared_double_stride2(double* y);
// 16-byte shared accesses (float4, cuda::load_vec4) are served a quarter-warp
// at a time: 4 wavefronts for a warp of distinct float4s, contiguous or a
// broadcast (the ideal); 8 when lanes l and l + 4 share banks. y: [128].
void shared_float4(float* y);
// Lanes 0-15 of each warp load and store (16 of 32 lanes active), declare
// one FLOP each, and shuffle among themselves (mask 0x0000ffff).
// x, y: [threads].
void half_warp(const float* x, float* y, int threads);
// y[i] = x[i] over `blocks` blocks of 128 threads, through a per-thread
// local array (the thread's stack here: registers on a GPU, not counted).
void copy_through_registers(const float* x, float* y, int blocks);

// One ldmatrix x4 by one warp, lane l giving shared row l at l * row_stride
// 16-bit values (row_stride a multiple of 8). A GPU serves it in 4 phases of
// 8 rows: row_stride 8 (rows packed) is 4 wavefronts; row_stride 64 puts
// the 8 rows of a phase 128 bytes apart, on the same 4 banks: 32. out: [32].
void ldmatrix_rows(unsigned* out, int row_stride);
// A cp.async pipeline of `stages` (2 to 4) buffers in one warp: 8 tiles of
// 32 copies of 16 bytes from x, each copied on to y. x, y: [8 * 32 * 4].
void cp_async_stages(const float* x, float* y, int stages);

}  // namespace profiler_kernels
