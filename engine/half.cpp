// engine/half.cpp — binary16 conversions (scalar reference + F16C and
// AVX-512 bulk paths chosen at run time).
#include "engine/half.h"

#include <cstring>
#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace ember {

float half_to_float(uint16_t h) {
  const uint32_t sign = uint32_t(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1fu;
  uint32_t mant = h & 0x3ffu;
  uint32_t bits;
  if (exp == 0) {
    if (mant == 0) {
      bits = sign;  // signed zero
    } else {        // subnormal: normalise
      int e = -1;
      do {
        ++e;
        mant <<= 1;
      } while ((mant & 0x400u) == 0);
      bits = sign | uint32_t(127 - 15 - e) << 23 | (mant & 0x3ffu) << 13;
    }
  } else if (exp == 0x1f) {
    bits = sign | 0x7f800000u | mant << 13;  // inf / nan (payload kept)
  } else {
    bits = sign | (exp + 127 - 15) << 23 | mant << 13;
  }
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

uint16_t float_to_half(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  const uint16_t sign = uint16_t((x >> 16) & 0x8000u);
  const uint32_t exp = (x >> 23) & 0xffu;
  uint32_t mant = x & 0x7fffffu;
  if (exp == 0xff) return uint16_t(sign | 0x7c00u | (mant ? 0x200u | (mant >> 13) : 0));  // inf/nan
  const int e = int(exp) - 127 + 15;
  if (e >= 0x1f) return uint16_t(sign | 0x7c00u);  // overflow to inf
  if (e <= 0) {                                    // subnormal or zero in f16
    if (e < -10) return sign;
    mant |= 0x800000u;
    const int shift = 14 - e;
    uint32_t half_mant = mant >> shift;
    const uint32_t rem = mant & ((1u << shift) - 1);
    const uint32_t halfway = 1u << (shift - 1);
    if (rem > halfway || (rem == halfway && (half_mant & 1u))) ++half_mant;
    return uint16_t(sign | half_mant);
  }
  uint32_t h = uint32_t(e) << 10 | mant >> 13;
  const uint32_t rem = mant & 0x1fffu;
  if (rem > 0x1000u || (rem == 0x1000u && (h & 1u))) ++h;  // may carry into exponent: correct
  return uint16_t(sign | h);
}

// Bulk conversions: the widest the CPU has, chosen once at run time (the
// build's baseline may predate F16C: ARCH=x86-64-v2), with GCC's target
// attributes so each body may use its instructions whatever -march says.
namespace {

void half_to_float_scalar(const uint16_t* src, float* dst, size_t n) {
  for (size_t i = 0; i < n; ++i) dst[i] = half_to_float(src[i]);
}
void float_to_half_scalar(const float* src, uint16_t* dst, size_t n) {
  for (size_t i = 0; i < n; ++i) dst[i] = float_to_half(src[i]);
}

#if defined(__x86_64__) && defined(__GNUC__)
__attribute__((target("avx,f16c"))) void half_to_float_f16c(const uint16_t* src, float* dst, size_t n) {
  size_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i))));
  for (; i < n; ++i) dst[i] = _cvtsh_ss(src[i]);
}
__attribute__((target("avx,f16c"))) void float_to_half_f16c(const float* src, uint16_t* dst, size_t n) {
  size_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + i), _mm256_cvtps_ph(_mm256_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT));
  for (; i < n; ++i) dst[i] = _cvtss_sh(src[i], _MM_FROUND_TO_NEAREST_INT);
}
// (The maskz forms avoid GCC 12's bogus -Wmaybe-uninitialized on the unmasked ones.)
__attribute__((target("avx512f,f16c"))) void half_to_float_avx512(const uint16_t* src, float* dst, size_t n) {
  size_t i = 0;
  for (; i + 16 <= n; i += 16)
    _mm512_storeu_ps(dst + i, _mm512_maskz_cvtph_ps(0xffff, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + i))));
  half_to_float_f16c(src + i, dst + i, n - i);
}
__attribute__((target("avx512f,f16c"))) void float_to_half_avx512(const float* src, uint16_t* dst, size_t n) {
  size_t i = 0;
  for (; i + 16 <= n; i += 16)
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + i),
                        _mm512_maskz_cvtps_ph(0xffff, _mm512_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
  float_to_half_f16c(src + i, dst + i, n - i);
}
#endif

using HalfToFloat = void (*)(const uint16_t*, float*, size_t);
using FloatToHalf = void (*)(const float*, uint16_t*, size_t);

HalfToFloat pick_half_to_float() {
#if defined(__x86_64__) && defined(__GNUC__)
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("f16c")) return half_to_float_avx512;
  if (__builtin_cpu_supports("avx") && __builtin_cpu_supports("f16c")) return half_to_float_f16c;
#endif
  return half_to_float_scalar;
}
FloatToHalf pick_float_to_half() {
#if defined(__x86_64__) && defined(__GNUC__)
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("f16c")) return float_to_half_avx512;
  if (__builtin_cpu_supports("avx") && __builtin_cpu_supports("f16c")) return float_to_half_f16c;
#endif
  return float_to_half_scalar;
}

}  // namespace

void half_to_float_n(const uint16_t* src, float* dst, size_t n) {
  static const HalfToFloat convert = pick_half_to_float();
  convert(src, dst, n);
}

void float_to_half_n(const float* src, uint16_t* dst, size_t n) {
  static const FloatToHalf convert = pick_float_to_half();
  convert(src, dst, n);
}

}  // namespace ember
