// cuda/ptx_instructions.cuh — the PTX instructions fast tensor-core kernels
// are built from, as device functions: mma.sync (warp-wide matrix multiply-
// accumulate on register fragments), ldmatrix (a warp loads 8x8 tiles of
// 16-bit values from shared memory straight into those fragments) and
// cp.async (a thread copies 4, 8 or 16 bytes from global to shared memory
// without passing through registers, in groups it commits and later waits
// for: the multistage pipeline).
//
// Under nvcc each is one inline PTX instruction; this is the one kernel
// header allowed inline PTX (tests/cuda/test_cuda_sources.cpp), because each
// function has a twin in cuda/sim/ptx_instructions.h that the emulator runs,
// lane by lane, with the fragment layouts of the PTX ISA (section "Matrix
// fragments for mma.m16n8k16"). Needs sm_80 (the Makefile's CUDA_ARCH
// starts there). Include after cuda/common.cuh.
//
// Fragments, per lane (g = lane / 4, t = lane % 4; a pair is two 16-bit
// values in one 32-bit register, the lower-numbered column or row in the
// low half):
//   m16n8k16, A [16 x 16] row-major, 4 registers of pairs:
//     a[0] = A[g][2t, 2t+1]   a[1] = A[g+8][2t, 2t+1]
//     a[2] = A[g][2t+8, +9]   a[3] = A[g+8][2t+8, +9]
//   B [16 x 8] ("col": k runs along the pair), 2 registers:
//     b[0] = B[2t, 2t+1][g]   b[1] = B[2t+8, 2t+9][g]
//   C, D [16 x 8] f32, 4 floats:
//     c[0] = C[g][2t]  c[1] = C[g][2t+1]  c[2] = C[g+8][2t]  c[3] = C[g+8][2t+1]
//   m16n8k8 tf32: A [16 x 8]: a[0] = A[g][t], a[1] = A[g+8][t], a[2] = A[g][t+4],
//     a[3] = A[g+8][t+4]; B [8 x 8]: b[0] = B[t][g], b[1] = B[t+4][g]; C, D as above.
//   ldmatrix x1/x2/x4: lanes 8i..8i+7 give the addresses of the 8 rows (16
//     bytes each) of matrix i; every lane receives r[i] = row g of matrix i,
//     columns 2t, 2t+1 (with .trans: rows 2t, 2t+1 of column g). So x4 of a
//     16x16 row-major A tile (lane l addressing row l % 16, column 8 (l / 16))
//     gives exactly a[0..3] above.
#pragma once
#include "cuda/common.cuh"
#if defined(EMBER_CUDASIM)
#include "cuda/sim/ptx_instructions.h"
#else

namespace ember::cuda::ptx {

// D = A B + C, f16 inputs, f32 accumulators (D may be C).
__device__ __forceinline__ void mma_m16n8k16_f16(float (&d)[4], const uint32_t (&a)[4], const uint32_t (&b)[2],
                                                 const float (&c)[4]) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%10,%11,%12,%13};\n"
      : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]), "f"(c[0]), "f"(c[1]), "f"(c[2]),
        "f"(c[3]));
}

// The same with bf16 inputs.
__device__ __forceinline__ void mma_m16n8k16_bf16(float (&d)[4], const uint32_t (&a)[4], const uint32_t (&b)[2],
                                                  const float (&c)[4]) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%10,%11,%12,%13};\n"
      : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]), "f"(c[0]), "f"(c[1]), "f"(c[2]),
        "f"(c[3]));
}

// D = A B + C, TF32 inputs (f32 bit patterns; the low 13 mantissa bits are
// not used), f32 accumulators.
__device__ __forceinline__ void mma_m16n8k8_tf32(float (&d)[4], const uint32_t (&a)[4], const uint32_t (&b)[2],
                                                 const float (&c)[4]) {
  asm volatile(
      "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%10,%11,%12,%13};\n"
      : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]), "f"(c[0]), "f"(c[1]), "f"(c[2]),
        "f"(c[3]));
}

// f32 -> TF32, rounded to nearest (ties away from zero), as cvt.rna.tf32.f32.
__device__ __forceinline__ uint32_t to_tf32(float x) {
  uint32_t r;
  asm("cvt.rna.tf32.f32 %0, %1;\n" : "=r"(r) : "f"(x));
  return r;
}

__device__ __forceinline__ uint32_t shared_address(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// r[i] = this lane's pair of 8x8 matrix i (see the top of the file); `row`
// is this lane's row address in shared memory, 16-byte aligned.
template <int N>
__device__ __forceinline__ void ldmatrix(uint32_t (&r)[N], const void* row) {
  static_assert(N == 1 || N == 2 || N == 4, "ldmatrix loads 1, 2 or 4 matrices");
  const uint32_t a = shared_address(row);
  if constexpr (N == 1)
    asm volatile("ldmatrix.sync.aligned.m8n8.x1.shared.b16 {%0}, [%1];\n" : "=r"(r[0]) : "r"(a));
  else if constexpr (N == 2)
    asm volatile("ldmatrix.sync.aligned.m8n8.x2.shared.b16 {%0,%1}, [%2];\n" : "=r"(r[0]), "=r"(r[1]) : "r"(a));
  else
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(a));
}

// The same, each matrix transposed on the way (.trans).
template <int N>
__device__ __forceinline__ void ldmatrix_trans(uint32_t (&r)[N], const void* row) {
  static_assert(N == 1 || N == 2 || N == 4, "ldmatrix loads 1, 2 or 4 matrices");
  const uint32_t a = shared_address(row);
  if constexpr (N == 1)
    asm volatile("ldmatrix.sync.aligned.m8n8.x1.trans.shared.b16 {%0}, [%1];\n" : "=r"(r[0]) : "r"(a));
  else if constexpr (N == 2)
    asm volatile("ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16 {%0,%1}, [%2];\n"
                 : "=r"(r[0]), "=r"(r[1])
                 : "r"(a));
  else
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(a));
}

// Copies `Bytes` (4, 8 or 16; both addresses aligned to it) from global
// `src` to shared `dst` asynchronously: the first src_bytes are read, the
// rest of dst is filled with zeros (src_bytes 0: no read at all, the
// padding of a convolution). The copy joins the thread's open group.
template <int Bytes>
__device__ __forceinline__ void cp_async(void* dst, const void* src, int src_bytes = Bytes) {
  static_assert(Bytes == 4 || Bytes == 8 || Bytes == 16, "cp.async copies 4, 8 or 16 bytes");
  const uint32_t d = shared_address(dst);
  if constexpr (Bytes == 16)  // .cg: through L2 only, as 16-byte copies may
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(d), "l"(src), "r"(src_bytes) : "memory");
  else
    asm volatile("cp.async.ca.shared.global [%0], [%1], %2, %3;\n" ::"r"(d), "l"(src), "n"(Bytes), "r"(src_bytes)
                 : "memory");
}

// Closes the thread's open group of copies.
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }

// Waits until at most `Pending` of the thread's committed groups are still
// in flight (the newest ones). Other threads' copies need a barrier after.
template <int Pending>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(Pending) : "memory");
}

}  // namespace ember::cuda::ptx

#endif
