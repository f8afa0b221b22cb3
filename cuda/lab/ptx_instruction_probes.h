// cuda/lab/ptx_instruction_probes.h — small kernels that run each PTX
// instruction of cuda/ptx_instructions.cuh (mma.sync, ldmatrix, cp.async)
// once or in a short pipeline and write what every lane got to global
// memory, so tests/cuda/test_ptx_instructions.cpp can compare them with a
// scalar reference: on the emulator, and on a GPU, where the hardware is the
// judge of the fragment layouts the emulator assumes. Not part of the
// kernel table. All pointers are device memory.
#pragma once
#include <cstdint>

#include "ops/kernels.h"

namespace ember::cuda::lab {

enum class MmaInput { f16, bf16, tf32 };

// One warp, one mma.sync: D [16, 8] = A [16, K] B [K, 8] + C, f32 C and D,
// all row-major. f16/bf16 (m16n8k16): A and B hold 16-bit values, K = 16.
// tf32 (m16n8k8): A and B hold f32 values, K = 8, passed to the instruction
// as they are (round_tf32 false: the hardware ignores the low 13 mantissa
// bits) or rounded by to_tf32 first.
void mma_probe(MmaInput input, const void* A, const void* B, const float* C, float* D, bool round_tf32,
               Stream stream);

// One warp, one ldmatrix of `count` (1, 2, 4) 8x8 matrices of 16-bit values,
// transposed or not. rows: [32][8] 16-bit values, copied to shared memory
// with each row padded to `row_stride` values (a multiple of 8); lane l
// gives the address of shared row row_of_lane[l]. out: [32][count], the
// registers of each lane.
void ldmatrix_probe(int count, bool trans, const uint16_t* rows, int row_stride, const int* row_of_lane,
                    uint32_t* out, Stream stream);

// One warp: A [16, 16] and B [16, 8] (16-bit, row-major) staged in shared
// memory; A's fragment loaded with ldmatrix x4, B's with ldmatrix x2 .trans,
// then one mma.sync: D [16, 8] f32 = A B. The composition tensor-core
// kernels rely on.
void mma_from_shared_probe(MmaInput input, const void* A, const void* B, float* D, Stream stream);

// A cp.async pipeline of `stages` (2 to 4) shared buffers in one block of
// 128 threads: tile t (128 copies of `copy_bytes` = 4, 8 or 16 bytes, of
// which src_bytes are read and the rest zero-filled) of src lands in buffer
// t % stages; after the wait and a barrier, thread i moves copy 127 - i of
// the tile (another thread's) to dst. dst then equals src tile by tile, with
// each copy's last copy_bytes - src_bytes bytes zero.
void cp_async_pipeline_probe(int copy_bytes, int src_bytes, int stages, const void* src, int64_t tiles, void* dst,
                             Stream stream);

}  // namespace ember::cuda::lab
