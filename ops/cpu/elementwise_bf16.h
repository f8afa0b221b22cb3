// ops/cpu/elementwise_bf16.h — fused bf16 loops for the elementwise ops a
// ResNet step runs most (add, add + relu, relu's gradient), internal to
// ops/cpu/elementwise.cpp.
//
// The generic bf16 path converts chunks of both inputs to f32 buffers,
// runs the f32 loop and converts back: three passes, which made these ops
// slower in bf16 than in f32 although they move half the bytes. Here one
// pass widens 16 values of each input, computes in f32 and rounds to bf16
// exactly as engine/bfloat16.h's float_to_bf16 (nearest-even, NaN kept
// quiet; no flushing of subnormals), so the bits equal the generic path's.
// Compiled for AVX-512 (x86-64-v4: F, BW, DQ, VL) in elementwise_bf16_avx512.cpp; absent
// (nullptr) on CPUs or builds without it.
#pragma once
#include <cstdint>

namespace ember::cpu {

enum class Bf16Binary {
  add,            // y = a + b
  add_relu,       // y = max(a + b, 0), NaN kept
  relu_backward,  // y = a > 0 ? b : 0 (a: relu's output, b: its output gradient)
};

// y[i] = op(a[i], b[i]) for i < n (bf16 bits); y may be a or b.
using Bf16BinaryFn = void (*)(Bf16Binary op, const uint16_t* a, const uint16_t* b, uint16_t* y, int64_t n);

// The AVX-512 loop where this CPU and build have it, else nullptr.
Bf16BinaryFn bf16_binary_kernel();

// For tests and benchmarks: false makes bf16_binary_kernel() return nullptr
// (the generic path), true restores the CPU's choice.
void set_bf16_binary_vector(bool on);

}  // namespace ember::cpu
