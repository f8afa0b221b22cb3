// ops/cpu/gemm/gemm_micro.h — the arithmetic of the CPU GEMM, written once with
// GCC vector extensions and compiled once per instruction set by the
// gemm_kernels_*.cpp files (which set -march): a vector of VB bytes is one
// zmm register in the AVX-512 file, one ymm in the AVX2 file, one xmm in the
// portable one. Internal to those files; gemm_isa.h is the interface.
//
// Everything here sits in an unnamed namespace: each of those files gets its
// own copies, so the linker can never merge an AVX-512 instantiation into the
// portable kernels (inline templates of one name compiled under different
// -march flags would otherwise be folded into one, chosen arbitrarily).
#pragma once
#include <algorithm>
#include <cstdint>
#include <cstring>

#include "ops/cpu/gemm/gemm_isa.h"

namespace ember::cpu::gemm_micro {
namespace {

template <typename T, int VB>
struct Vec {
  typedef T type __attribute__((vector_size(VB)));
  static constexpr int lanes = int(VB / sizeof(T));
};

template <typename V, typename T>
inline V load_vec(const T* p) {
  V v;
  std::memcpy(&v, p, sizeof(V));
  return v;
}
template <typename V, typename T>
inline void store_vec(T* p, const V& v) {
  std::memcpy(p, &v, sizeof(V));
}

// Asks for the mr rows of NR values at C (row stride ldc) to be brought into
// the cache for writing. The GEMM tile calls it before its inner loop: the rows are
// ldc apart (a page or more in large problems), and their misses would
// otherwise stall the stores at the end. With gemm.cpp's vector packing of
// A: f32 GEMM 2048^3, 2 threads, median 226 -> 249 GFLOP/s and 1024^3
// 204 -> 274, alternating in one sitting on an Emerald Rapids Xeon. No
// change was measured on the convolution's window tile, so it has none.
template <typename T, int NR>
inline void prefetch_tile(const T* C, int64_t ldc, int mr) {
  constexpr int bytes = NR * int(sizeof(T));
  for (int i = 0; i < mr; ++i) {
    const char* row = reinterpret_cast<const char*>(C + i * ldc);
    for (int off = 0; off < bytes; off += 64) __builtin_prefetch(row + off, 1, 3);
    __builtin_prefetch(row + bytes - 1, 1, 3);  // the last line, where the row is not 64-byte aligned
  }
}

// The MR x (NV vectors) register tile. See GemmKernels::micro_kernel.
//   a: packed [kc, MR]   b: packed [kc, NR]   C: [mr, nr] with row stride ldc
template <typename T, int VB, int MR, int NV>
void micro_kernel(int64_t kc, const T* __restrict a, const T* __restrict b, T* __restrict C, int64_t ldc, T alpha,
                  T beta, int mr, int nr) {
  using V = typename Vec<T, VB>::type;
  constexpr int L = Vec<T, VB>::lanes;
  constexpr int NR = NV * L;
  prefetch_tile<T, NR>(C, ldc, mr);
  V acc[MR][NV];
  for (int i = 0; i < MR; ++i)
    for (int v = 0; v < NV; ++v) acc[i][v] = V{};
#pragma GCC unroll 4
  for (int64_t k = 0; k < kc; ++k) {
    V bv[NV];
    for (int v = 0; v < NV; ++v) bv[v] = load_vec<V>(b + k * NR + v * L);
#pragma GCC unroll 16
    for (int i = 0; i < MR; ++i) {
      const T ai = a[k * MR + i];
      for (int v = 0; v < NV; ++v) acc[i][v] += ai * bv[v];
    }
  }
  if (mr == MR && nr == NR) {
    for (int i = 0; i < MR; ++i) {
      T* c = C + i * ldc;
      for (int v = 0; v < NV; ++v) {
        if (beta == T(0))
          store_vec(c + v * L, alpha * acc[i][v]);
        else
          store_vec(c + v * L, alpha * acc[i][v] + beta * load_vec<V>(c + v * L));
      }
    }
    return;
  }
  alignas(64) T tile[MR * NR];
  for (int i = 0; i < MR; ++i)
    for (int v = 0; v < NV; ++v) store_vec(tile + i * NR + v * L, acc[i][v]);
  for (int i = 0; i < mr; ++i)
    for (int j = 0; j < nr; ++j) {
      T& c = C[i * ldc + j];
      c = beta == T(0) ? alpha * tile[i * NR + j] : alpha * tile[i * NR + j] + beta * c;
    }
}

// Sum of the lanes of a vector, as a tree of halvings.
template <typename T, int VB>
inline T reduce_add(const typename Vec<T, VB>::type& v) {
  if constexpr (VB > 16) {
    using H = typename Vec<T, VB / 2>::type;
    H lo, hi;
    std::memcpy(&lo, &v, VB / 2);
    std::memcpy(&hi, reinterpret_cast<const char*>(&v) + VB / 2, VB / 2);
    return reduce_add<T, VB / 2>(lo + hi);
  } else {
    T sum = T(0);
    for (int l = 0; l < Vec<T, VB>::lanes; ++l) sum += v[l];
    return sum;
  }
}

// A 4 x 4 block of dot products with vectors along the inner dimension. See
// GemmKernels::nt_dot_rows.
//   A: [M, K] (lda)   B: N rows of K, row j at b_rows[j]   C: [M, N] (ldc)
template <typename T, int VB>
void nt_dot_rows(int64_t M, int64_t N, int64_t K, T alpha, const T* A, int64_t lda, const T* const* b_rows, T beta,
                 T* C, int64_t ldc) {
  using V = typename Vec<T, VB>::type;
  constexpr int L = Vec<T, VB>::lanes;
  constexpr int B4 = 4;
  const int64_t k_vec = K / L * L;
  for (int64_t i0 = 0; i0 < M; i0 += B4) {
    const T* a[B4];
    for (int i = 0; i < B4; ++i) a[i] = A + std::min(i0 + i, M - 1) * lda;  // clamp: extra rows discarded
    for (int64_t j0 = 0; j0 < N; j0 += B4) {
      const T* b[B4];
      for (int j = 0; j < B4; ++j) b[j] = b_rows[std::min(j0 + j, N - 1)];
      V acc[B4][B4];
      for (int i = 0; i < B4; ++i)
        for (int j = 0; j < B4; ++j) acc[i][j] = V{};
      for (int64_t k = 0; k < k_vec; k += L) {
        V av[B4], bv[B4];
        for (int i = 0; i < B4; ++i) av[i] = load_vec<V>(a[i] + k);
        for (int j = 0; j < B4; ++j) bv[j] = load_vec<V>(b[j] + k);
        for (int i = 0; i < B4; ++i)
          for (int j = 0; j < B4; ++j) acc[i][j] += av[i] * bv[j];
      }
      if (k_vec < K) {  // the last partial vector, zero-filled
        const size_t rem = size_t(K - k_vec) * sizeof(T);
        V av[B4], bv[B4];
        for (int i = 0; i < B4; ++i) {
          av[i] = V{};
          std::memcpy(&av[i], a[i] + k_vec, rem);
        }
        for (int j = 0; j < B4; ++j) {
          bv[j] = V{};
          std::memcpy(&bv[j], b[j] + k_vec, rem);
        }
        for (int i = 0; i < B4; ++i)
          for (int j = 0; j < B4; ++j) acc[i][j] += av[i] * bv[j];
      }
      const int mi = int(std::min<int64_t>(B4, M - i0)), nj = int(std::min<int64_t>(B4, N - j0));
      for (int i = 0; i < mi; ++i)
        for (int j = 0; j < nj; ++j) {
          const T dot = reduce_add<T, VB>(acc[i][j]);
          T& c = C[(i0 + i) * ldc + j0 + j];
          c = beta == T(0) ? alpha * dot : alpha * dot + beta * c;
        }
    }
  }
}

// Independent FMA chains, as many as the tile has accumulators (enough to
// cover the FMA latency on two pipes). See GemmKernels::fma_peak_loop.
template <typename T, int VB, int CHAINS>
double fma_peak_loop(int64_t iters, T* sink) {
  using V = typename Vec<T, VB>::type;
  V acc[CHAINS];
  for (int c = 0; c < CHAINS; ++c) acc[c] = V{} + T(c) * T(1e-3);
  V m = V{} + T(0.999999), a = V{} + *sink;
  for (int64_t i = 0; i < iters; ++i) {
#pragma GCC unroll 32
    for (int c = 0; c < CHAINS; ++c) acc[c] = acc[c] * m + a;
    __asm__ volatile("" : "+x"(m));  // m unknown to the optimiser: no folding of the chains
  }
  V total = V{};
  for (int c = 0; c < CHAINS; ++c) total += acc[c];
  *sink = reduce_add<T, VB>(total);
  return 2.0 * double(iters) * CHAINS * Vec<T, VB>::lanes;
}

}  // namespace
}  // namespace ember::cpu::gemm_micro

#include "ops/cpu/conv/conv_micro.h"
#include "ops/cpu/conv/winograd_micro.h"
#include "ops/cpu/conv/winograd4_micro.h"

namespace ember::cpu::gemm_micro {
namespace {

// The kernel set for vectors of VB bytes and an MR x NV-vector tile.
template <typename T, int VB, int MR, int NV>
GemmKernels<T> make_kernels(const char* isa) {
  GemmKernels<T> k;
  k.isa = isa;
  k.mr = MR;
  k.nr = NV * Vec<T, VB>::lanes;
  k.micro_kernel = &micro_kernel<T, VB, MR, NV>;
  k.nt_dot_rows = &nt_dot_rows<T, VB>;
  k.fma_peak_loop = &fma_peak_loop<T, VB, MR * NV>;
  k.window_tile = &window_tile<T, VB, MR, NV>;
  constexpr int L = Vec<T, VB>::lanes;
  k.window_tile_t[0] = &window_tile_t<T, VB, MR, NV, 1>;
  k.pack_transposed = &pack_transposed<T>;
  k.copy_rows = &copy_rows<T, VB>;
  constexpr int TVB = VB < 32 ? VB : 32;  // (winograd_micro.h: at most 32-byte vectors)
  k.winograd_input_row = &winograd_input_row<T, TVB>;
  k.winograd_output_row = &winograd_output_row<T, TVB>;
  k.winograd_grad_row = &winograd_grad_row<T, TVB>;
  k.winograd4_input_row = &winograd4_input_row<T, TVB>;
  k.winograd4_output_row = &winograd4_output_row<T, TVB>;
  k.winograd4_grad_row = &winograd4_grad_row<T, TVB>;
  // (a group is broadcast as one element of at most 16 bytes)
  if constexpr (L % 2 == 0 && 2 * sizeof(T) <= 16) k.window_tile_t[1] = &window_tile_t<T, VB, MR, NV, 2>;
  if constexpr (L % 4 == 0 && 4 * sizeof(T) <= 16) k.window_tile_t[2] = &window_tile_t<T, VB, MR, NV, 4>;
  return k;
}

}  // namespace
}  // namespace ember::cpu::gemm_micro
