// tests/cuda/mma_operands.h — operands for the tests of the tensor-core
// kernels (conv_mma, gemm_mma) in each dtype they take: f16, bf16, and f32
// multiplied as TF32. An operand keeps the bytes the kernel reads, the
// values as stored, and the values the tensor cores multiply: the stored
// ones for 16-bit types, and for f32 each rounded to TF32 as the kernels do
// (cvt.rna.tf32.f32: a 10-bit mantissa, ties away from zero). A reference
// built from `multiplied` in double is then what a correct kernel computes
// up to its f32 accumulation; one that skips the rounding, or truncates,
// misses by about 2^-12 of each product.
#pragma once
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "cuda/cuda_device.h"
#include "engine/dtype.h"
#include "tests/cuda/device_buffer.h"

namespace ember::testing {

inline double tf32_round(float v) {
  uint32_t bits;
  std::memcpy(&bits, &v, 4);
  if ((bits & 0x7f800000u) != 0x7f800000u) bits += 0x1000u;
  bits &= 0xffffe000u;
  float r;
  std::memcpy(&r, &bits, 4);
  return r;
}

// Element i of `bytes` read as dt (f16, bf16 or f32).
inline double stored_value(const std::vector<unsigned char>& bytes, size_t i, DType dt) {
  if (dt == DType::f32) {
    float v;
    std::memcpy(&v, bytes.data() + i * 4, 4);
    return v;
  }
  uint16_t b;
  std::memcpy(&b, bytes.data() + i * 2, 2);
  return from_bits16(b, dt);
}

// The relative step of a result stored as dt (f32: its accumulation, not its storage, limits it).
inline double result_unit(DType dt) {
  return dt == DType::f16 ? 1.0 / 1024 : dt == DType::bf16 ? 1.0 / 128 : 1.0 / (1 << 22);
}

// The error allowed per unit of sum(|terms|): f32 accumulation (the
// order differs from the reference's) is far below it; a TF32 product
// computed from unrounded f32 inputs is off by ~2^-12 of itself, which for
// sums of up to a thousand random terms is still over 1e-6 of the sum of
// |terms|.
inline double sum_tolerance(DType dt) { return dt == DType::f32 ? 1e-6 : 1e-5; }

// TF32 allowed while it lives (cuda_device.h's set_tf32), then off again.
struct Tf32On {
  Tf32On() { ember::cuda::set_tf32(true); }
  ~Tf32On() { ember::cuda::set_tf32(false); }
  Tf32On(const Tf32On&) = delete;
  Tf32On& operator=(const Tf32On&) = delete;
};

struct MmaOperand {
  DType dt;
  std::vector<unsigned char> bytes;
  std::vector<double> stored, multiplied;

  MmaOperand(size_t n, DType type) : dt(type), bytes(n * dtype_size(type)), stored(n), multiplied(n) {}
  size_t size() const { return stored.size(); }
  void set(size_t i, float v) {
    if (dt == DType::f32) {
      std::memcpy(bytes.data() + i * 4, &v, 4);
      stored[i] = v;
      multiplied[i] = tf32_round(v);
      return;
    }
    const uint16_t b = to_bits16(v, dt);
    std::memcpy(bytes.data() + i * 2, &b, 2);
    stored[i] = multiplied[i] = from_bits16(b, dt);
  }
};

// n values uniform in [-1, 1).
inline MmaOperand random_mma_operand(size_t n, DType dt, std::mt19937& rng) {
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  MmaOperand op(n, dt);
  for (size_t i = 0; i < n; ++i) op.set(i, u(rng));
  return op;
}

}  // namespace ember::testing
