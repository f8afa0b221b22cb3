// ops/cpu/gemm/gemm_isa.h — the GEMM inner kernels, one set per instruction set,
// chosen at run time from the CPU's features (internal to ops/cpu).
//
// The blocked loop nest and the packers (gemm.cpp) are compiled for the
// build's baseline; only the parts that do the arithmetic are compiled once
// per instruction set (gemm_kernels_avx512.cpp, gemm_kernels_avx2.cpp,
// gemm_kernels_portable.cpp, each with its own -march in the Makefile) and
// reached through this table. So one binary runs at AVX-512 speed on an
// AVX-512 CPU and still runs on a CPU without AVX2.
//
// The register tile (MR x NR) belongs to the kernel set: the packers lay A
// out in MR-row panels and B in NR-column panels of whatever set is active.
//
// Choice: the best set the CPU supports (AVX-512 F/BW/DQ/VL, then AVX2 + FMA,
// then portable), unless the environment variable EMBER_CPU_ISA names one
// (avx512, avx2, portable; for A/B benchmarks) or a test calls set_gemm_isa.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace ember::cpu {

enum class GemmIsa { portable, avx2, avx512 };

template <typename T>
struct GemmKernels {
  const char* isa = "";
  int mr = 0, nr = 0;  // register tile: MR rows of A x NR columns of B
  // acc[MR x NR] = sum over k of a[k][0..MR) (x) b[k][0..NR); then
  // C = alpha * acc + beta * C on the valid (mr x nr) corner of the tile.
  //   a: packed [kc, MR]   b: packed [kc, NR]   C: [mr, nr] with row stride ldc
  void (*micro_kernel)(int64_t kc, const T* a, const T* b, T* C, int64_t ldc, T alpha, T beta, int mr,
                       int nr) = nullptr;
  // C = alpha * A * B^T + beta * C from rows along the inner dimension
  // (dot products, no packing).
  //   A: [M, K] (lda)   B: N rows of K at b_rows[j]   C: [M, N] (ldc)
  void (*nt_dot_rows)(int64_t M, int64_t N, int64_t K, T alpha, const T* A, int64_t lda, const T* const* b_rows,
                      T beta, T* C, int64_t ldc) = nullptr;
  // Benchmarks only: `iters` rounds of independent vector FMAs held in
  // registers (no memory traffic), the arithmetic peak of one core for this
  // set. Returns the floating-point operations done; *sink keeps the result live.
  double (*fma_peak_loop)(int64_t iters, T* sink) = nullptr;

  // The window-row convolution's tiles (conv_micro.h, conv_window.h), same
  // MR x NR register tile. Forward: row k of B is base + offsets[k], read in
  // place for NR columns; C = acc + beta * C on the (mr x nr) corner.
  //   a: packed [kc, MR]   C: [mr, nr] (ldc)
  void (*window_tile)(int64_t kc, const T* a, const T* base, const int64_t* offsets, T* C, int64_t ldc, T beta,
                      int mr, int nr) = nullptr;
  // Filter gradient: row i of A is base + offsets[i] (MR rows, read along k
  // in groups of G values), b packed [ceil(kc / G), NR] with output channel
  // l / G of lane l; C[MR, NR] = acc (+ C when accumulating). Index g of the
  // array is G = 1, 2, 4 (nullptr where G does not divide a vector).
  void (*window_tile_t[3])(int64_t kc, const T* base, const int64_t* offsets, const T* b, T* C, int64_t ldc,
                           bool accumulate) = {};
  // Packs b for window_tile_t: dst[jj*NR + r*G + e] = src[r*lds + jj*G + e]
  // for rows r < rows, groups jj < groups, e < G; lanes from rows*G to NR
  // are zero. (lds a multiple of G.)
  void (*pack_transposed)(const T* src, int64_t lds, int rows, int64_t groups, int G, T* dst, int NR) = nullptr;
  // Rows of images into contiguous rows of a grid (or back): dst row
  // i * images + g (of `width` values) = zeros on [0, left), row i of
  // image g (src + i * ldsrc + g * ldimage) on [left, left + n), zeros
  // after. Reads and writes nothing outside the rows' span (conv_micro.h).
  void (*copy_rows)(const T* src, int64_t ldsrc, int64_t n, T* dst, int64_t left, int64_t width, int64_t rows,
                    int64_t images, int64_t ldimage) = nullptr;
  // The F(2x2, 3x3) tile transforms of one tile row of tw tiles
  // (winograd_micro.h, conv_winograd.h): input (4 padded rows of stride wb)
  // to V[16, plane]; products M[16, plane] to output rows o0 and o0 + 2 tw;
  // output-gradient rows g0, g1 (read exactly) to Z[16, plane]. Whole
  // vectors (at most 8 values): the input transform reads up to 18 values
  // past its rows, and they write up to 7 past a row of V or Z and 15 past
  // an output row pair (see there).
  void (*winograd_input_row)(const T* rows, int64_t wb, int64_t tw, T* v, int64_t plane) = nullptr;
  void (*winograd_output_row)(const T* m, int64_t plane, int64_t tw, T* o0) = nullptr;
  void (*winograd_grad_row)(const T* g0, const T* g1, int64_t tw, T* z, int64_t plane) = nullptr;
  // The F(4x4, 3x3) ones (winograd4_micro.h): input (6 padded rows) to
  // V[36, plane]; products M[36, plane] to the 4 output rows o0 + i * 4 tw;
  // the 4 output-gradient rows g0 + r * ldg (read exactly) to Z[36, plane].
  // The input transform reads up to 34 values past its rows; they write up
  // to 7 past a row of V or Z and 28 past the last output row.
  void (*winograd4_input_row)(const T* rows, int64_t wb, int64_t tw, T* v, int64_t plane) = nullptr;
  void (*winograd4_output_row)(const T* m, int64_t plane, int64_t tw, T* o0) = nullptr;
  void (*winograd4_grad_row)(const T* g0, int64_t ldg, int64_t tw, T* z, int64_t plane) = nullptr;
};

// The kernel sets of each instruction set (defined in the per-ISA files;
// available only where compiled: x86-64 builds compile all three).
GemmKernels<float> gemm_kernels_avx512_f32();
GemmKernels<double> gemm_kernels_avx512_f64();
GemmKernels<float> gemm_kernels_avx2_f32();
GemmKernels<double> gemm_kernels_avx2_f64();
GemmKernels<float> gemm_kernels_portable_f32();
GemmKernels<double> gemm_kernels_portable_f64();

// The active set (picked on first use, see above).
template <typename T>
const GemmKernels<T>& gemm_kernels();

// Whether this CPU (and this build) can run the set.
bool gemm_isa_supported(GemmIsa isa);
// Switches the active set; false (and no change) if unsupported. Not thread
// safe against GEMMs running at the same moment: for tests and benchmarks.
bool set_gemm_isa(GemmIsa isa);
GemmIsa active_gemm_isa();
const char* gemm_isa_name(GemmIsa isa);
// Every set this CPU supports, best last.
std::vector<GemmIsa> supported_gemm_isas();
// "avx512" | "avx2" | "portable" -> the set; throws ember::Error naming the value otherwise.
GemmIsa parse_gemm_isa(const std::string& name);

}  // namespace ember::cpu
