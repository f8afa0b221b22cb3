// engine/bfloat16.cpp — bulk bf16 conversions: scalar, AVX2, AVX-512F and
// AVX512-BF16 paths (GCC target attributes, so each body may use its
// instructions whatever -march says), the best one chosen once at run time.
//
// The vector integer paths are the scalar routine lane by lane:
//   NaN (|x| > inf bits):  (x >> 16) | 0x40          (quiet, never inf)
//   otherwise:             (x + 0x7fff + ((x >> 16) & 1)) >> 16
// vcvtneps2bf16 computes the same for normal numbers, zeros, infinities and
// NaNs, but flushes subnormal inputs to signed zero (it behaves as if DAZ
// were set); lanes holding a subnormal take the integer result instead, so
// every path gives the same bits. (The maskz forms of the AVX-512
// intrinsics avoid GCC 12's bogus -Wmaybe-uninitialized on the unmasked ones.)
#include "engine/bfloat16.h"

#include <cmath>
#include <cstring>

#include "engine/error.h"
#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace ember {
namespace {

void to_float_scalar(const uint16_t* src, float* dst, size_t n) {
  for (size_t i = 0; i < n; ++i) dst[i] = bf16_to_float(src[i]);
}
void from_float_scalar(const float* src, uint16_t* dst, size_t n) {
  for (size_t i = 0; i < n; ++i) dst[i] = float_to_bf16(src[i]);
}

#if defined(__x86_64__) && defined(__GNUC__)
#define EMBER_HAVE_BF16_VECTOR_PATHS 1

// ------------------------------------------------------------------ AVX2
// 8 floats (as bits) -> 8 bf16 in the low halves of the 32-bit lanes.
__attribute__((target("avx2"))) inline __m256i round8_avx2(__m256i x) {
  const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(x, 16), _mm256_set1_epi32(1));
  const __m256i rounded = _mm256_add_epi32(x, _mm256_add_epi32(_mm256_set1_epi32(0x7fff), lsb));
  const __m256i quiet = _mm256_or_si256(x, _mm256_set1_epi32(0x400000));
  const __m256i is_nan =  // |x| as a non-negative int32 above inf's bits
      _mm256_cmpgt_epi32(_mm256_and_si256(x, _mm256_set1_epi32(0x7fffffff)), _mm256_set1_epi32(0x7f800000));
  return _mm256_srli_epi32(_mm256_blendv_epi8(rounded, quiet, is_nan), 16);
}
__attribute__((target("avx2"))) void from_float_avx2(const float* src, uint16_t* dst, size_t n) {
  size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m256i lo = round8_avx2(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + i)));
    const __m256i hi = round8_avx2(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + i + 8)));
    // packus works within 128-bit lanes: [lo0-3 hi0-3 lo4-7 hi4-7] -> reorder the 64-bit quarters.
    const __m256i packed = _mm256_permute4x64_epi64(_mm256_packus_epi32(lo, hi), 0xd8);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + i), packed);
  }
  from_float_scalar(src + i, dst + i, n - i);
}
__attribute__((target("avx2"))) void to_float_avx2(const uint16_t* src, float* dst, size_t n) {
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256i w = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i)));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + i), _mm256_slli_epi32(w, 16));
  }
  to_float_scalar(src + i, dst + i, n - i);
}

// --------------------------------------------------------------- AVX-512F
// 16 floats (as bits) -> 16 bf16.
__attribute__((target("avx512f"))) inline __m256i round16_avx512(__m512i x) {
  const __m512i lsb = _mm512_and_si512(_mm512_maskz_srli_epi32(0xffff, x, 16), _mm512_set1_epi32(1));
  const __m512i rounded = _mm512_add_epi32(x, _mm512_add_epi32(_mm512_set1_epi32(0x7fff), lsb));
  const __m512i quiet = _mm512_or_si512(x, _mm512_set1_epi32(0x400000));
  const __mmask16 is_nan =
      _mm512_cmpgt_epu32_mask(_mm512_and_si512(x, _mm512_set1_epi32(0x7fffffff)), _mm512_set1_epi32(0x7f800000));
  const __m512i picked = _mm512_mask_blend_epi32(is_nan, rounded, quiet);
  return _mm512_maskz_cvtepi32_epi16(0xffff, _mm512_maskz_srli_epi32(0xffff, picked, 16));
}
__attribute__((target("avx512f"))) void from_float_avx512(const float* src, uint16_t* dst, size_t n) {
  size_t i = 0;
  for (; i + 16 <= n; i += 16)
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + i), round16_avx512(_mm512_loadu_si512(src + i)));
  from_float_scalar(src + i, dst + i, n - i);
}
__attribute__((target("avx512f"))) void to_float_avx512(const uint16_t* src, float* dst, size_t n) {
  size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + i));
    const __m512i w = _mm512_maskz_cvtepu16_epi32(0xffff, h);
    _mm512_storeu_si512(dst + i, _mm512_maskz_slli_epi32(0xffff, w, 16));
  }
  to_float_scalar(src + i, dst + i, n - i);
}

// ------------------------------------------------------------ AVX512-BF16
__attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16"))) void from_float_avx512bf16(const float* src,
                                                                                           uint16_t* dst, size_t n) {
  const __m512i exponent = _mm512_set1_epi32(0x7f800000), mantissa = _mm512_set1_epi32(0x007fffff);
  size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m512i x = _mm512_loadu_si512(src + i);
    __m256i r = reinterpret_cast<__m256i>(_mm512_cvtneps_pbh(_mm512_castsi512_ps(x)));
    const __mmask16 subnormal = _mm512_testn_epi32_mask(x, exponent) & _mm512_test_epi32_mask(x, mantissa);
    if (subnormal) r = _mm256_mask_mov_epi16(r, subnormal, round16_avx512(x));  // rare: gradients near 1e-38
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + i), r);
  }
  from_float_scalar(src + i, dst + i, n - i);
}
#endif

using ToFloat = void (*)(const uint16_t*, float*, size_t);
using FromFloat = void (*)(const float*, uint16_t*, size_t);

struct PathFns {
  ToFloat to_float;
  FromFloat from_float;
};

PathFns path_fns(Bf16Path p) {
  switch (p) {
    case Bf16Path::scalar: return {to_float_scalar, from_float_scalar};
#if defined(EMBER_HAVE_BF16_VECTOR_PATHS)
    case Bf16Path::avx2: return {to_float_avx2, from_float_avx2};
    case Bf16Path::avx512f: return {to_float_avx512, from_float_avx512};
    case Bf16Path::avx512bf16: return {to_float_avx512, from_float_avx512bf16};  // widening is a shift either way
#else
    default: break;
#endif
  }
  return {to_float_scalar, from_float_scalar};
}

const PathFns& best() {
  static const PathFns fns = path_fns(bf16_best_path());
  return fns;
}

}  // namespace

uint16_t double_to_bf16(double d) {
  float f = static_cast<float>(d);
  if (std::isfinite(f) && static_cast<double>(f) != d) {  // inexact: truncate toward zero, set the sticky bit
    if (std::fabs(static_cast<double>(f)) > std::fabs(d)) f = std::nextafter(f, 0.0f);
    uint32_t bits;
    std::memcpy(&bits, &f, 4);
    bits |= 1u;
    std::memcpy(&f, &bits, 4);
  }
  return float_to_bf16(f);
}

const char* bf16_path_name(Bf16Path p) {
  switch (p) {
    case Bf16Path::scalar: return "scalar";
    case Bf16Path::avx2: return "avx2";
    case Bf16Path::avx512f: return "avx512f";
    case Bf16Path::avx512bf16: return "avx512bf16";
  }
  return "?";
}

bool bf16_path_available(Bf16Path p) {
  if (p == Bf16Path::scalar) return true;
#if defined(EMBER_HAVE_BF16_VECTOR_PATHS)
  switch (p) {
    case Bf16Path::avx2: return __builtin_cpu_supports("avx2");
    case Bf16Path::avx512f: return __builtin_cpu_supports("avx512f");
    case Bf16Path::avx512bf16:
      return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
             __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512bf16");
    case Bf16Path::scalar: break;
  }
#endif
  return false;
}

Bf16Path bf16_best_path() {
  for (Bf16Path p : {Bf16Path::avx512bf16, Bf16Path::avx512f, Bf16Path::avx2})
    if (bf16_path_available(p)) return p;
  return Bf16Path::scalar;
}

void bf16_to_float_n(const uint16_t* src, float* dst, size_t n) { best().to_float(src, dst, n); }
void float_to_bf16_n(const float* src, uint16_t* dst, size_t n) { best().from_float(src, dst, n); }

void bf16_to_float_n(Bf16Path p, const uint16_t* src, float* dst, size_t n) {
  EMBER_CHECK(bf16_path_available(p), "bf16: the ", bf16_path_name(p), " path is not available on this CPU");
  path_fns(p).to_float(src, dst, n);
}
void float_to_bf16_n(Bf16Path p, const float* src, uint16_t* dst, size_t n) {
  EMBER_CHECK(bf16_path_available(p), "bf16: the ", bf16_path_name(p), " path is not available on this CPU");
  path_fns(p).from_float(src, dst, n);
}

}  // namespace ember
