// ops/cpu/gemm/gemm.h — the CPU matrix multiply used by the gemm kernel and by
// the convolutions (internal to ops/cpu).
//
// Row-major C[M, N] = alpha * op(A)[M, K] * op(B)[K, N] + beta * C, with the
// Goto/BLIS structure: B is packed into NR-column panels and A into MR-row
// panels per cache block, and a register-tiled micro-kernel computes MR x NR
// tiles: AVX-512, AVX2 + FMA or portable, picked at run time from the CPU's
// features (gemm_isa.h). gemm_serial runs on the calling thread
// (the convolutions parallelise over images); gemm_parallel splits N across
// the OpenMP threads.
#pragma once
#include <cstdint>
#include <functional>

namespace ember::cpu {

// Width NR of the column panels B is packed into: the active kernel set's
// (gemm_isa.h; 32 f32 columns with AVX-512, 16 with AVX2, 8 portable).
template <typename T>
int gemm_panel_width();

// Packs op(B)[k0, k0 + kc) x [j0, j0 + nc) into panels of gemm_panel_width
// columns: element (k, j) goes to dst[(j / NR) * kc * NR + k * NR + j % NR],
// and the columns of the last panel beyond nc are zeros.
template <typename T>
using PackB = std::function<void(int64_t k0, int64_t kc, int64_t j0, int64_t nc, T* dst)>;

template <typename T>
void gemm_serial(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, T alpha, const T* A, int64_t lda,
                 const T* B, int64_t ldb, T beta, T* C, int64_t ldc);

// C = alpha * op(A) * B + beta * C where B is never materialised: the
// packer produces its panels (the convolutions pack straight from images).
// A may be f16 or bf16 with T = float (16-bit weights): it is converted as it is packed.
template <typename T, typename TA = T>
void gemm_serial_packed(bool trans_a, int64_t M, int64_t N, int64_t K, T alpha, const TA* A, int64_t lda,
                        const PackB<T>& pack_b, T beta, T* C, int64_t ldc);

// C = alpha * A * B^T + beta * C with B given as N row pointers, each row K
// contiguous values (rows may sit anywhere, e.g. shifted windows of one image).
//   A: [M, K] (lda)   C: [M, N] (ldc)
template <typename T>
void gemm_nt_rows(int64_t M, int64_t N, int64_t K, T alpha, const T* A, int64_t lda, const T* const* b_rows, T beta,
                  T* C, int64_t ldc);

template <typename T>
void gemm_parallel(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, T alpha, const T* A, int64_t lda,
                   const T* B, int64_t ldb, T beta, T* C, int64_t ldc);

}  // namespace ember::cpu
