// ops/cpu/gemm/gemm.cpp — blocked, packed, register-tiled GEMM for f32 and f64,
// and the `gemm` kernel of the CPU table.
//
// Loop nest (BLIS): for each NC block of columns, for each KC block of the
// inner dimension, pack op(B)[KC, NC] into NR-wide panels; for each MC block
// of rows pack op(A)[MC, KC] into MR-tall panels; then every MR x NR tile of
// C is one micro-kernel call that keeps the whole tile in registers.
// Padding rows/columns of partial panels are packed as zeros, so the
// micro-kernel has no edge cases; partial tiles are stored through a buffer.
//
// f16 and bf16 operands go through ops/cpu/gemm/gemm_f16.cpp, which converts
// them around this f32 GEMM.
#include "ops/cpu/gemm/gemm.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "engine/parallel.h"
#include "ops/cpu/cpu_kernels.h"
#include "ops/cpu/f16_util.h"
#include "ops/cpu/gemm/gemm_f16.h"
#include "ops/cpu/gemm/gemm_isa.h"

namespace ember::cpu {
namespace {

// Cache blocks (elements): the micro-kernel streams an A panel (MR x KC) from
// L1 against a B panel (KC x NR) from L2; the packed B block (KC x NC) is
// reused by every MC-row block of A.
// MC is rounded down to a whole number of MR-row panels. Chosen with
// build/bench_gemm on a Zen 4 EPYC, 2 threads (KC 256 / MC 128 / NC 2048
// before: ~172 -> ~196 GFLOP/s at n = 1024, ~164 -> ~200 at 2048; sweeps
// vary by +-8% from run to run on this shared machine). Rechecked on an
// Emerald Rapids Xeon (KC/MC 256/288, 384/192, 512/144, alternating): no
// difference above that machine's +-15% noise.
constexpr int64_t kKC = 512;
constexpr int64_t kMC = 144;
constexpr int64_t kNC = 3072;

// Packs rows [0, mc) x inner [0, kc) of op(A) into MR-row panels, zero padded,
// converting A's type TA (T, or f16/bf16 for T = float) on the way.
//   A(i, k) = trans_a ? A[k * lda + i] : A[i * lda + k]
template <typename T, typename TA>
void pack_a(bool trans_a, const TA* A, int64_t lda, int64_t mc, int64_t kc, int MR, T* dst) {
  for (int64_t i0 = 0; i0 < mc; i0 += MR) {
    const int rows = int(std::min<int64_t>(MR, mc - i0));
    T* panel = dst + i0 * kc;
    if (!trans_a) {
      if constexpr (std::is_same_v<TA, T>) {
        // An MR x kc transpose, in 8 x 8 register blocks where the ISA has
        // them; it zero-fills rows [rows, MR) itself.
        gemm_kernels<T>().pack_transposed(A + i0 * lda, lda, rows, kc, 1, panel, MR);
        continue;
      } else {  // convert each row with vector instructions, then spread it
        for (int i = 0; i < rows; ++i) {
          alignas(64) T row[kKC];
          copy_values(A + (i0 + i) * lda, row, kc);
          for (int64_t k = 0; k < kc; ++k) panel[k * MR + i] = row[k];
        }
      }
    } else {
      for (int64_t k = 0; k < kc; ++k) {
        const TA* src = A + k * lda + i0;
        if (rows == MR)
          copy_values(src, panel + k * MR, MR);
        else
          for (int i = 0; i < rows; ++i) panel[k * MR + i] = convert_value<T>(src[i]);
      }
    }
    for (int i = rows; i < MR; ++i)
      for (int64_t k = 0; k < kc; ++k) panel[k * MR + i] = T(0);
  }
}

// Packs inner [0, kc) x columns [0, nc) of op(B) into NR-column panels, zero padded.
//   B(k, j) = trans_b ? B[j * ldb + k] : B[k * ldb + j]
template <typename T>
void pack_b(bool trans_b, const T* B, int64_t ldb, int64_t kc, int64_t nc, int NR, T* dst) {
  for (int64_t j0 = 0; j0 < nc; j0 += NR) {
    const int cols = int(std::min<int64_t>(NR, nc - j0));
    T* panel = dst + j0 * kc;
    if (!trans_b) {
      for (int64_t k = 0; k < kc; ++k) {
        const T* src = B + k * ldb + j0;
        T* d = panel + k * NR;
        if (cols == NR) {
          std::memcpy(d, src, sizeof(T) * NR);
        } else {
          for (int j = 0; j < cols; ++j) d[j] = src[j];
          for (int j = cols; j < NR; ++j) d[j] = T(0);
        }
      }
    } else {
      // Transpose in 8 x NR blocks: reads of up to NR rows of B advance
      // together (prefetch-friendly), writes are contiguous.
      const T* rows[64];
      for (int j = 0; j < NR; ++j) rows[j] = B + (j0 + std::min(j, cols - 1)) * ldb;
      for (int64_t k0 = 0; k0 < kc; k0 += 8) {
        const int64_t k1 = std::min(kc, k0 + 8);
        for (int j = 0; j < NR; ++j) {
          const T* src = rows[j];
          for (int64_t k = k0; k < k1; ++k) panel[k * NR + j] = j < cols ? src[k] : T(0);
        }
      }
    }
  }
}

// A growable 64-byte aligned scratch buffer, one per thread and type.
template <typename T>
class Scratch {
 public:
  ~Scratch() { std::free(data_); }
  T* get(size_t n) {
    if (n > capacity_) {
      std::free(data_);
      capacity_ = (n + 15) & ~size_t(15);
      data_ = static_cast<T*>(std::aligned_alloc(64, capacity_ * sizeof(T)));
      EMBER_CHECK(data_, "gemm: out of memory for a ", capacity_ * sizeof(T), "-byte packing buffer");
    }
    return data_;
  }

 private:
  T* data_ = nullptr;
  size_t capacity_ = 0;
};

template <typename T>
void scale_c(int64_t M, int64_t N, T beta, T* C, int64_t ldc) {
  for (int64_t i = 0; i < M; ++i)
    for (int64_t j = 0; j < N; ++j) C[i * ldc + j] = beta == T(0) ? T(0) : beta * C[i * ldc + j];
}

// The Goto loop nest over blocks, with op(B) supplied by a packer.
template <typename T, typename TA>
void gemm_blocked(bool trans_a, int64_t M, int64_t N, int64_t K, T alpha, const TA* A, int64_t lda,
                  const PackB<T>& pack, T beta, T* C, int64_t ldc) {
  const GemmKernels<T>& kern = gemm_kernels<T>();
  const int NR = kern.nr, kMR = kern.mr;
  const int64_t MC = kMC / kMR * kMR;
  static thread_local Scratch<T> a_buf, b_buf;
  const int64_t kc_max = std::min(K, kKC);
  T* bp = b_buf.get(size_t(kc_max * ((std::min(N, kNC) + NR - 1) / NR * NR)));
  T* ap = a_buf.get(size_t(kc_max * ((std::min(M, MC) + kMR - 1) / kMR * kMR)));
  for (int64_t jc = 0; jc < N; jc += kNC) {
    const int64_t nc = std::min(kNC, N - jc);
    for (int64_t pc = 0; pc < K; pc += kKC) {
      const int64_t kc = std::min(kKC, K - pc);
      const T beta_here = pc == 0 ? beta : T(1);
      pack(pc, kc, jc, nc, bp);
      for (int64_t ic = 0; ic < M; ic += MC) {
        const int64_t mc = std::min(MC, M - ic);
        pack_a(trans_a, trans_a ? A + pc * lda + ic : A + ic * lda + pc, lda, mc, kc, kMR, ap);
        for (int64_t jr = 0; jr < nc; jr += NR) {
          const int nr = int(std::min<int64_t>(NR, nc - jr));
          for (int64_t ir = 0; ir < mc; ir += kMR) {
            const int mr = int(std::min<int64_t>(kMR, mc - ir));
            kern.micro_kernel(kc, ap + ir * kc, bp + jr * kc, C + (ic + ir) * ldc + jc + jr, ldc, alpha, beta_here, mr, nr);
          }
        }
      }
    }
  }
}

}  // namespace

template <typename T>
int gemm_panel_width() {
  return gemm_kernels<T>().nr;
}
template int gemm_panel_width<float>();
template int gemm_panel_width<double>();

template <typename T>
void gemm_serial(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, T alpha, const T* A, int64_t lda,
                 const T* B, int64_t ldb, T beta, T* C, int64_t ldc) {
  if (M <= 0 || N <= 0) return;
  if (K <= 0 || alpha == T(0)) {
    scale_c(M, N, beta, C, ldc);
    return;
  }
  if (!trans_a && trans_b && K >= 128 && M * N <= 64 * K) {
    std::vector<const T*> rows(static_cast<size_t>(N));
    for (int64_t j = 0; j < N; ++j) rows[size_t(j)] = B + j * ldb;
    gemm_kernels<T>().nt_dot_rows(M, N, K, alpha, A, lda, rows.data(), beta, C, ldc);
    return;
  }
  const PackB<T> pack = [&](int64_t k0, int64_t kc, int64_t j0, int64_t nc, T* dst) {
    pack_b(trans_b, trans_b ? B + j0 * ldb + k0 : B + k0 * ldb + j0, ldb, kc, nc, gemm_kernels<T>().nr, dst);
  };
  gemm_blocked(trans_a, M, N, K, alpha, A, lda, pack, beta, C, ldc);
}

template <typename T, typename TA>
void gemm_serial_packed(bool trans_a, int64_t M, int64_t N, int64_t K, T alpha, const TA* A, int64_t lda,
                        const PackB<T>& pack_b, T beta, T* C, int64_t ldc) {
  if (M <= 0 || N <= 0) return;
  if (K <= 0 || alpha == T(0)) {
    scale_c(M, N, beta, C, ldc);
    return;
  }
  gemm_blocked(trans_a, M, N, K, alpha, A, lda, pack_b, beta, C, ldc);
}

template <typename T>
void gemm_nt_rows(int64_t M, int64_t N, int64_t K, T alpha, const T* A, int64_t lda, const T* const* b_rows, T beta,
                  T* C, int64_t ldc) {
  if (M <= 0 || N <= 0) return;
  if (K <= 0 || alpha == T(0)) {
    scale_c(M, N, beta, C, ldc);
    return;
  }
  gemm_kernels<T>().nt_dot_rows(M, N, K, alpha, A, lda, b_rows, beta, C, ldc);
}

template <typename T>
void gemm_parallel(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, T alpha, const T* A, int64_t lda,
                   const T* B, int64_t ldb, T beta, T* C, int64_t ldc) {
  const int NR = gemm_kernels<T>().nr;
  const int threads = num_threads();
  // Too little work to share, or too few column panels: one thread.
  if (threads <= 1 || M * N * K < (int64_t(1) << 18) || N < 2 * NR) {
    gemm_serial(trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
    return;
  }
  // Split the columns into per-thread slices aligned to NR.
  const int64_t panels = (N + NR - 1) / NR;
  parallel_for(0, panels, 1, [&](int64_t p0, int64_t p1) {
    const int64_t j0 = p0 * NR, j1 = std::min(N, p1 * NR);
    const T* Bj = trans_b ? B + j0 * ldb : B + j0;
    gemm_serial(trans_a, trans_b, M, j1 - j0, K, alpha, A, lda, Bj, ldb, beta, C + j0, ldc);
  });
}

#define EMBER_GEMM_INSTANTIATE(T)                                                                       \
  template void gemm_serial<T>(bool, bool, int64_t, int64_t, int64_t, T, const T*, int64_t, const T*, int64_t, T, \
                               T*, int64_t);                                                                  \
  template void gemm_parallel<T>(bool, bool, int64_t, int64_t, int64_t, T, const T*, int64_t, const T*, int64_t, \
                                 T, T*, int64_t);                                                             \
  template void gemm_serial_packed<T, T>(bool, int64_t, int64_t, int64_t, T, const T*, int64_t, const PackB<T>&, T, \
                                         T*, int64_t);                                                        \
  template void gemm_nt_rows<T>(int64_t, int64_t, int64_t, T, const T*, int64_t, const T* const*, T, T*, int64_t);
EMBER_GEMM_INSTANTIATE(float)
EMBER_GEMM_INSTANTIATE(double)
#undef EMBER_GEMM_INSTANTIATE
template void gemm_serial_packed<float, f16>(bool, int64_t, int64_t, int64_t, float, const f16*, int64_t,
                                             const PackB<float>&, float, float*, int64_t);
template void gemm_serial_packed<float, bf16>(bool, int64_t, int64_t, int64_t, float, const bf16*, int64_t,
                                              const PackB<float>&, float, float*, int64_t);


void gemm(DType dt, bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, double alpha, const void* A,
          int64_t lda, const void* B, int64_t ldb, double beta, void* C, int64_t ldc, Stream) {
  if (dt == DType::f16) {
    gemm_f16(trans_a, trans_b, M, N, K, float(alpha), static_cast<const f16*>(A), lda, static_cast<const f16*>(B),
             ldb, float(beta), static_cast<f16*>(C), ldc);
    return;
  }
  if (dt == DType::bf16) {
    gemm_f16(trans_a, trans_b, M, N, K, float(alpha), static_cast<const bf16*>(A), lda, static_cast<const bf16*>(B),
             ldb, float(beta), static_cast<bf16*>(C), ldc);
    return;
  }
  dispatch_float(dt, "gemm", [&](auto zero) {
    using T = decltype(zero);
    gemm_parallel<T>(trans_a, trans_b, M, N, K, T(alpha), static_cast<const T*>(A), lda, static_cast<const T*>(B),
                     ldb, T(beta), static_cast<T*>(C), ldc);
  });
}

}  // namespace ember::cpu
