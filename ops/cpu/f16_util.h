// ops/cpu/f16_util.h — 16-bit float storage (f16 and bf16: mixed precision)
// support shared by the CPU kernels: the storage -> compute type map, bulk
// conversions, and load/store helpers that let one kernel body serve f16,
// bf16, f32 and f64.
//
// A kernel on a 16-bit type ("half": f16 or bf16, is_half_v) reads its
// operands into thread-local f32 buffers, runs the f32 arithmetic on them,
// and rounds once when it stores (ops/kernels.h). For f32 and f64 the
// helpers are no-ops: load returns the source pointer and out_ptr the
// destination, so those paths are unchanged.
//
// bf16 converts with engine/bfloat16.h's bulk routines (AVX512-BF16,
// AVX-512F, AVX2 or scalar, chosen at run time, all giving the same bits)
// and its exact inline scalar routines.
//
// Bulk conversions use AVX-512 (16 lanes) or F16C (8 lanes) inline when the
// compiler targets them, and otherwise engine/half.h's bulk routines, which
// choose the same instructions at run time; single values use F16C or the
// exact scalar routines. (The
// maskz forms of the AVX-512 conversions avoid GCC 12's bogus
// -Wmaybe-uninitialized on the unmasked ones.)
#pragma once
#include <cmath>
#include <cstdint>
#include <cstring>
#include <type_traits>
#include <vector>

#include "engine/bfloat16.h"
#include "engine/half.h"
#include "ops/cpu/cpu_kernels.h"
#if defined(__F16C__) || defined(__AVX512F__)
#include <immintrin.h>
#endif

namespace ember::cpu {

// The arithmetic type for a storage type: f32 for f16 and bf16, else itself.
template <typename S> struct ComputeOf { using type = S; };
template <> struct ComputeOf<f16> { using type = float; };
template <> struct ComputeOf<bf16> { using type = float; };
template <typename S> using compute_t = typename ComputeOf<S>::type;
template <typename S> constexpr bool is_f16_v = std::is_same_v<S, f16>;
template <typename S> constexpr bool is_bf16_v = std::is_same_v<S, bf16>;
// A 16-bit float storage type (f16 or bf16): stored in 16 bits, computed in f32.
template <typename S> constexpr bool is_half_v = is_f16_v<S> || is_bf16_v<S>;

// One value each way (scalar paths, tails of the bulk converters): the F16C
// instruction when there is one, engine/half.h's software routine otherwise.
// f2h<H> rounds to the 16-bit type H (f16 unless told).
inline float h2f(f16 h) {
#if defined(__F16C__)
  return _cvtsh_ss(h.bits);
#else
  return half_to_float(h.bits);
#endif
}
inline float h2f(bf16 h) { return bf16_to_float(h.bits); }
template <typename H = f16>
inline H f2h(float f) {
  if constexpr (is_bf16_v<H>) {
    return bf16{float_to_bf16(f)};
  } else {
    static_assert(is_f16_v<H>, "f2h: f16 or bf16");
#if defined(__F16C__)
    return f16{uint16_t(_cvtss_sh(f, _MM_FROUND_TO_NEAREST_INT))};
#else
    return f16{float_to_half(f)};
#endif
  }
}

// n f16 values -> f32.   src: [n]   dst: [n]
// Inline vector code when the build targets F16C (ARCH=native, x86-64-v3);
// else engine/half.h's bulk routine, which picks F16C or AVX-512 at run time.
inline void h2f(const f16* src, float* dst, int64_t n) {
  const uint16_t* s = reinterpret_cast<const uint16_t*>(src);
#if defined(__F16C__)
  int64_t i = 0;
#if defined(__AVX512F__)
  for (; i + 16 <= n; i += 16)
    _mm512_storeu_ps(dst + i, _mm512_maskz_cvtph_ps(0xffff, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(s + i))));
#endif
  for (; i + 8 <= n; i += 8)
    _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(s + i))));
  for (; i < n; ++i) dst[i] = h2f(f16{s[i]});
#else
  half_to_float_n(s, dst, size_t(n));
#endif
}

// n f32 values -> f16, round to nearest even.   src: [n]   dst: [n]
inline void f2h(const float* src, f16* dst, int64_t n) {
  uint16_t* d = reinterpret_cast<uint16_t*>(dst);
#if defined(__F16C__)
  int64_t i = 0;
#if defined(__AVX512F__)
  for (; i + 16 <= n; i += 16)
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(d + i),
                        _mm512_maskz_cvtps_ph(0xffff, _mm512_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
#endif
  for (; i + 8 <= n; i += 8)
    _mm_storeu_si128(reinterpret_cast<__m128i*>(d + i), _mm256_cvtps_ph(_mm256_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT));
  for (; i < n; ++i) d[i] = f2h(src[i]).bits;
#else
  float_to_half_n(src, d, size_t(n));
#endif
}

// n bf16 values -> f32 (exact), and f32 -> bf16 (round to nearest even).
//   src: [n]   dst: [n]
inline void h2f(const bf16* src, float* dst, int64_t n) {
  bf16_to_float_n(reinterpret_cast<const uint16_t*>(src), dst, size_t(n));
}
inline void f2h(const float* src, bf16* dst, int64_t n) {
  float_to_bf16_n(src, reinterpret_cast<uint16_t*>(dst), size_t(n));
}


// double -> float rounding to odd: narrowing this and then rounding to f16
// or bf16 gives the correctly rounded value of the double (one rounding).
inline float double_to_float_odd(double d) {
  float f = static_cast<float>(d);
  if (std::isfinite(f) && static_cast<double>(f) != d) {
    if (std::fabs(static_cast<double>(f)) > std::fabs(d)) f = std::nextafter(f, 0.0f);
    uint32_t bits;
    std::memcpy(&bits, &f, 4);
    bits |= 1u;
    std::memcpy(&f, &bits, 4);
  }
  return f;
}

// The correctly rounded 16-bit H (f16 unless told) of a double (one
// rounding, through round-to-odd).
template <typename H = f16>
inline H double_to_half(double d) { return f2h<H>(double_to_float_odd(d)); }
inline f16 double_to_f16(double d) { return double_to_half<f16>(d); }

// One value as type T: a plain conversion, or a 16-bit type's <-> f32.
// (Between two 16-bit types: through f32, exact, then one rounding.)
template <typename T, typename S>
inline T convert_value(S v) {
  if constexpr (is_half_v<S> && is_half_v<T> && !std::is_same_v<S, T>) {
    return f2h<T>(h2f(v));
  } else if constexpr (is_half_v<S> && !is_half_v<T>) {
    return T(h2f(v));
  } else if constexpr (is_half_v<T> && !is_half_v<S>) {
    return f2h<T>(float(v));
  } else {
    return T(v);
  }
}

// n values from src to dst, converting between a 16-bit type and f32 where the types differ.
template <typename T>
inline void copy_values(const T* src, T* dst, int64_t n) {
  std::memcpy(static_cast<void*>(dst), src, sizeof(T) * size_t(n));
}
inline void copy_values(const f16* src, float* dst, int64_t n) { h2f(src, dst, n); }
inline void copy_values(const float* src, f16* dst, int64_t n) { f2h(src, dst, n); }
inline void copy_values(const bf16* src, float* dst, int64_t n) { h2f(src, dst, n); }
inline void copy_values(const float* src, bf16* dst, int64_t n) { f2h(src, dst, n); }

// Thread-local scratch of n elements; Slot tells apart buffers live at once.
template <typename T, int Slot>
T* local_buffer(int64_t n) {
  static thread_local std::vector<T> buf;
  if (buf.size() < size_t(n)) buf.resize(size_t(n));
  return buf.data();
}

// src [n] as compute values: src itself, or (f16, bf16) converted into buffer Slot.
template <int Slot, typename S>
const compute_t<S>* load(const S* src, int64_t n) {
  if constexpr (is_half_v<S>) {
    float* b = local_buffer<float, Slot>(n);
    h2f(src, b, n);
    return b;
  } else {
    return src;
  }
}

// Where to compute n values destined for dst: dst itself, or (f16, bf16)
// buffer Slot; store() then rounds the buffer into dst.
template <int Slot, typename S>
compute_t<S>* out_ptr(S* dst, int64_t n) {
  if constexpr (is_half_v<S>) {
    return local_buffer<float, Slot>(n);
  } else {
    (void)n;
    return dst;
  }
}
template <typename S>
void store(const compute_t<S>* src, S* dst, int64_t n) {
  if constexpr (is_half_v<S>) {
    f2h(src, dst, n);
  } else {
    (void)src, (void)dst, (void)n;
  }
}

// Elements per conversion chunk in streaming kernels (16-bit types only;
// f32/f64 run their whole range at once).
template <typename S>
constexpr int64_t chunk_for(int64_t range) {
  return is_half_v<S> ? 2048 : (range > 0 ? range : 1);
}

// Calls f(S{}) with S = float, double, f16 or bf16 for dt; any other dtype is an error.
template <typename F>
decltype(auto) dispatch_storage(DType dt, const char* kernel, F&& f) {
  switch (dt) {
    case DType::f32: return f(float{});
    case DType::f64: return f(double{});
    case DType::f16: return f(f16{});
    case DType::bf16: return f(bf16{});
    default: fail(cat("cpu ", kernel, ": unsupported dtype ", dtype_name(dt)));
  }
}

}  // namespace ember::cpu
