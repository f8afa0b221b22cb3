// engine/dtype.h — element types a Tensor can hold.
//
// f32 is the training type; f64 exists on the CPU so gradient checks can use
// central differences without round-off swamping them; f16 (IEEE binary16)
// and bf16 (bfloat16: the top half of an f32) are storage types (math in
// f32); i32/i64 hold indices and labels; u8 images. The enumerators' values
// travel in the TCP ring's frame headers: append, never renumber.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string_view>

namespace ember {

enum class DType : uint8_t { f32, f64, f16, i32, i64, u8, bf16 };
constexpr int kNumDTypes = 7;  // enumerators of DType

constexpr size_t dtype_size(DType t) {
  switch (t) {
    case DType::f32: return 4;
    case DType::f64: return 8;
    case DType::f16: return 2;
    case DType::i32: return 4;
    case DType::i64: return 8;
    case DType::u8: return 1;
    case DType::bf16: return 2;
  }
  return 0;
}

constexpr const char* dtype_name(DType t) {
  switch (t) {
    case DType::f32: return "f32";
    case DType::f64: return "f64";
    case DType::f16: return "f16";
    case DType::i32: return "i32";
    case DType::i64: return "i64";
    case DType::u8: return "u8";
    case DType::bf16: return "bf16";
  }
  return "?";
}

constexpr bool is_floating(DType t) {
  return t == DType::f32 || t == DType::f64 || t == DType::f16 || t == DType::bf16;
}
// The 16-bit storage types (f16, bf16): kept in 16 bits, computed in f32.
constexpr bool is_16bit_float(DType t) { return t == DType::f16 || t == DType::bf16; }

// The C++ type stored for a dtype, and back.
template <typename T> struct dtype_of;
template <> struct dtype_of<float> { static constexpr DType value = DType::f32; };
template <> struct dtype_of<double> { static constexpr DType value = DType::f64; };
template <> struct dtype_of<int32_t> { static constexpr DType value = DType::i32; };
template <> struct dtype_of<int64_t> { static constexpr DType value = DType::i64; };
template <> struct dtype_of<uint8_t> { static constexpr DType value = DType::u8; };

}  // namespace ember
