// ops/cpu/conv/conv_bf16_kernels.h — the window-row convolution's register tiles
// for bf16 data on CPUs with AVX512-BF16 (vdpbf16ps: 32 bf16 products
// summed pairwise into 16 f32 lanes per instruction, twice the f32 FMA's
// multiplies), chosen at run time; internal to ops/cpu (conv_window.cpp).
//
// vdpbf16ps multiplies pairs, so both operands hold two consecutive values
// of the inner dimension per 32-bit lane:
//   forward       the inner dimension is (channel, r, s): the grid interleaves
//                 channels 2c and 2c + 1 (each grid position holds the pair),
//                 so a window row of a channel pair is one run of pairs, and
//                 the filter is packed as (w[k, 2c, r, s], w[k, 2c + 1, r, s])
//                 pairs, broadcast as one 32-bit value;
//   filter grad   the inner dimension is the grid column j: window rows of
//                 the plain bf16 grid give pairs (x[j], x[j + 1]) as they are,
//                 and the output gradient is packed with pairs of columns
//                 per output channel (pack_transposed of 4F-byte elements),
//                 F pairs folded into the lanes for few output channels as in
//                 the f32 tiles (conv_micro.h).
// Accumulation is f32 (vdpbf16ps adds both products to the f32 lane; the
// pair sum is rounded to f32 once, like an FMA, not twice); outputs are f32.
// bf16 values are their 16 raw bits (uint16_t) here.
#pragma once
#include <cstdint>
#include <string>

namespace ember::cpu {

struct Bf16ConvKernels {
  int mr = 0, nr = 0;  // tile: MR rows x NR f32 lanes
  // Forward: acc[MR x NR] = sum over pairs kp of a[kp][i] . B_kp[j], where
  // B_kp = base + offsets[kp] holds the pairs of NR consecutive positions
  // (2 NR bf16, read whole: the caller's rows have the slack), a is packed
  // [kpairs][MR] pairs (32 bits each). C = acc (f32) on the (mr x nr) corner.
  void (*window_tile)(int64_t kpairs, const uint32_t* a, const uint16_t* base, const int64_t* offsets, float* C,
                      int64_t ldc, int mr, int nr) = nullptr;
  // Filter gradient: row i of A is base + offsets[i] (MR rows of bf16, read
  // along k = grid columns in groups of 2F), b packed [ceil(kc / 2F)][NR]
  // lanes of 2 bf16, lane l holding output channel l / F; C[MR x NR] += acc.
  // Index f of the array is F = 1, 2, 4. kc need not be a multiple of 2F (the
  // last group reads only what exists, zeros for the rest).
  void (*window_tile_t[3])(int64_t kc, const uint16_t* base, const int64_t* offsets, const uint32_t* b, float* C,
                           int64_t ldc) = {};
  // Transposes into window_tile_t's b: dst lane r of group jj gets the 2F
  // bf16 src[r*lds + jj*2F ..]; lanes from rows to NR are zero.
  void (*pack_transposed)(const uint16_t* src, int64_t lds, int rows, int64_t groups, int F, uint32_t* dst,
                          int NR) = nullptr;
  // `iters` rounds of independent vdpbf16ps held in registers (no memory
  // traffic): the CPU's bf16 arithmetic peak. Returns the floating-point
  // operations done (4 per f32 lane); *sink keeps the result live.
  double (*dot_peak_loop)(int64_t iters, float* sink) = nullptr;
};

// Whether the tiles run: having AVX512-BF16 is not enough. A Zen 5 core
// was measured to retire vdpbf16ps at the f32 FMA's instruction rate (twice
// its multiplies), a Sapphire Rapids core at half that (so as many multiplies per
// cycle as f32 FMAs, plus the pair packing): there bf16 convolutions are
// faster in f32 through conversions. So the choice is measured once per
// process (bf16_dot_speedup, a few ms) unless EMBER_CPU_BF16 sets it:
//   unset / auto  the tiles run where the measured speedup >= kBf16MinSpeedup
//   1             wherever the CPU has AVX512-BF16 (A/B measurements)
//   0             never (bf16 convolutions in f32 through conversions)
enum class Bf16KernelMode { automatic, on, off };
constexpr double kBf16MinSpeedup = 1.25;

// The kernels, or nullptr when this CPU (or this build) has no AVX512-BF16
// or the mode above turns them down.
const Bf16ConvKernels* bf16_conv_kernels();
// The kernels wherever the CPU has AVX512-BF16, whatever the mode (tests
// check them on every such CPU); nullptr elsewhere.
const Bf16ConvKernels* bf16_conv_kernels_supported();
// The CPU's bf16 pair-dot rate over its f32 FMA rate (floating-point
// operations per second on the calling thread: the active GEMM kernel set's
// fma_peak_loop against dot_peak_loop), measured once, on first call; 0
// without AVX512-BF16.
double bf16_dot_speedup();
// For tests and benchmarks: override EMBER_CPU_BF16 (automatic restores the
// measured choice).
void set_bf16_conv_kernel_mode(Bf16KernelMode mode);
// The mode in force: EMBER_CPU_BF16's, or the last set_bf16_conv_kernel_mode.
Bf16KernelMode bf16_conv_kernel_mode();
// One line for program banners: "AVX512-BF16 (measured 2.0x f32)", "f32
// (AVX512-BF16 measured 0.5x f32)", "f32 (no AVX512-BF16)", ...
std::string bf16_conv_kernels_description();

}  // namespace ember::cpu
