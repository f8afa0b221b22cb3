// engine/half.h — IEEE binary16 (f16) storage type and conversions on the CPU.
//
// f16 is stored as its 16 raw bits. Scalar conversions are exact software
// routines (round to nearest even, subnormals, inf/nan); the bulk converters
// use the F16C instructions when the compiler targets them.
#pragma once
#include <cstddef>
#include <cstdint>

#include "engine/dtype.h"

namespace ember {

struct f16 {
  uint16_t bits = 0;
};
template <> struct dtype_of<f16> { static constexpr DType value = DType::f16; };

float half_to_float(uint16_t h);
uint16_t float_to_half(float f);

// Bulk converters: n elements, any n.
void half_to_float_n(const uint16_t* src, float* dst, size_t n);
void float_to_half_n(const float* src, uint16_t* dst, size_t n);

}  // namespace ember
