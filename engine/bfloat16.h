// engine/bfloat16.h — bfloat16 (bf16) storage type and conversions on the CPU.
//
// bf16 is the top 16 bits of an IEEE binary32: sign, the same 8-bit
// exponent, 7 stored mantissa bits. bf16 -> f32 is exact (a shift);
// f32 -> bf16 rounds to nearest even, keeps inf, subnormals and signed
// zeros, and turns every NaN into a quiet NaN of the same sign (the top
// payload bits kept, the quiet bit set), never into inf.
//
// The bulk converters pick the widest path the CPU has at run time:
// AVX512-BF16 (vcvtneps2bf16, with subnormal inputs fixed up, since the
// instruction flushes them to zero), AVX-512F or AVX2 integer rounding, or
// scalar code. Every path gives the scalar routine's bits.
#pragma once
#include <cstddef>
#include <cstdint>

#include "engine/dtype.h"

namespace ember {

struct bf16 {
  uint16_t bits = 0;
};
template <> struct dtype_of<bf16> { static constexpr DType value = DType::bf16; };

inline float bf16_to_float(uint16_t h) {
  const uint32_t bits = uint32_t(h) << 16;
  float f;
  __builtin_memcpy(&f, &bits, 4);
  return f;
}

inline uint16_t float_to_bf16(float f) {
  uint32_t x;
  __builtin_memcpy(&x, &f, 4);
  if ((x & 0x7fffffffu) > 0x7f800000u) return uint16_t((x >> 16) | 0x40u);  // NaN: quiet, sign and top payload kept
  x += 0x7fffu + ((x >> 16) & 1u);  // round to nearest even (a carry into the exponent is correct, up to inf)
  return uint16_t(x >> 16);
}

// The correctly rounded bf16 of a double (one rounding): the double is
// narrowed to float rounding to odd, which the float -> bf16 rounding then
// cannot turn into a second rounding (f32 keeps 24 >= 2*8 + 2 bits).
uint16_t double_to_bf16(double d);

// Bulk converters: n elements, any n, the best path of this CPU.
void bf16_to_float_n(const uint16_t* src, float* dst, size_t n);
void float_to_bf16_n(const float* src, uint16_t* dst, size_t n);

// The individual paths, for tests and benchmarks. A path the CPU lacks is
// not available (calling it is an error).
enum class Bf16Path { scalar, avx2, avx512f, avx512bf16 };
constexpr Bf16Path kBf16Paths[] = {Bf16Path::scalar, Bf16Path::avx2, Bf16Path::avx512f, Bf16Path::avx512bf16};
const char* bf16_path_name(Bf16Path p);
bool bf16_path_available(Bf16Path p);
Bf16Path bf16_best_path();  // what the bulk converters use
void bf16_to_float_n(Bf16Path p, const uint16_t* src, float* dst, size_t n);
void float_to_bf16_n(Bf16Path p, const float* src, uint16_t* dst, size_t n);

}  // namespace ember
