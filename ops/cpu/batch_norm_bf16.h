// ops/cpu/batch_norm_bf16.h — fused bf16 loops for the training batch norm
// (ops/cpu/batch_norm.cpp), one plane of a channel at a time.
//
// The generic bf16 path converts each plane of every operand to an f32
// buffer, runs the f32 loop and converts the output back: on ResNet-20's
// planes of 49-784 values that made bf16 batch norm slower than f32's,
// although it moves half the bytes. These loops widen 16 values of each
// operand in registers, compute in f32 exactly as the f32 loops do (the
// same fused multiply-adds; sums in f32 runs of kBatchNormChunk values, each
// run's total added in double) and round outputs as float_to_bf16. Outputs
// formed from the same coefficients are the generic path's bits; sums may
// differ from it in the last f32 bits (16-lane partial sums combined in
// another order), as the f32 path's own clones differ from one another.
// Compiled for AVX-512 (x86-64-v4: F, BW, DQ, VL) in batch_norm_bf16_avx512.cpp; absent
// (nullptr) on CPUs or builds without it.
#pragma once
#include <cstdint>

namespace ember::cpu {

// Values summed in f32 before the partial sum joins the double total (the
// f32 and bf16 paths alike).
constexpr int64_t kBatchNormChunk = 1024;

// Every pointer is to bf16 bits; n values from each.
struct Bf16BatchNormLoops {
  // s += sum (x - shift), ss += sum (x - shift)^2
  void (*shifted_sums)(const uint16_t* x, int64_t n, float shift, double& s, double& ss);
  // y = (x - m) * a + b, then max(., 0) when relu (NaN kept); y may be x
  void (*affine)(const uint16_t* x, uint16_t* y, int64_t n, float m, float a, float b, bool relu);
  // with g' = relu_y ? (relu_y > 0 ? g : 0) : g:
  // s1 += sum g', s2 += sum g' * (x - mean)
  void (*gradient_sums)(const uint16_t* x, const uint16_t* relu_y, const uint16_t* g, int64_t n, float mean,
                        double& s1, double& s2);
  // out = a * g' + (b * (x - mean) + d); out may be any input
  void (*gradient_apply)(const uint16_t* x, const uint16_t* relu_y, const uint16_t* g, uint16_t* out, int64_t n,
                         float mean, float a, float b, float d);
};

// The AVX-512 loops where this CPU and build have them, else nullptr.
const Bf16BatchNormLoops* bf16_batch_norm_loops();

// For tests and benchmarks: false makes bf16_batch_norm_loops() return
// nullptr (the generic path), true restores the CPU's choice.
void set_bf16_batch_norm_vector(bool on);

}  // namespace ember::cpu
