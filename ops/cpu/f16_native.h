// ops/cpu/f16_native.h — elementwise f16 kernels in f16 arithmetic
// (AVX512-FP16), for the operations where that gives exactly the bits of the
// f32 path: one f16 add (f32 has 24 >= 2*11 + 2 significand bits, so adding
// in f32 and rounding to f16 is the correctly rounded f16 sum), and relu and
// its gradient (a compare and a select, no arithmetic). These kernels are
// memory-bound; f16 arithmetic removes the conversions and the round trip
// through a chunk buffer.
//
// Compiled in when the compiler targets AVX512-FP16 (-march=native on
// Sapphire Rapids and later); elsewhere native_f16_available() is false and
// the kernels use the conversion path. set_native_f16(false) forces the
// conversion path at run time (the tests compare both on one machine).
// GEMM, convolutions and reductions never use f16 arithmetic: their FMAs
// would accumulate in f16 (ops/kernels.h).
#pragma once
#include <atomic>
#include <cstdint>

#include "engine/half.h"
#if defined(__AVX512FP16__)
#include <immintrin.h>
#endif

namespace ember::cpu {

constexpr bool native_f16_available() {
#if defined(__AVX512FP16__)
  return true;
#else
  return false;
#endif
}

inline std::atomic<bool>& native_f16_switch() {
  static std::atomic<bool> on{native_f16_available()};
  return on;
}
// Whether the elementwise f16 kernels use f16 arithmetic now.
inline bool native_f16() { return native_f16_available() && native_f16_switch().load(std::memory_order_relaxed); }
inline void set_native_f16(bool on) { native_f16_switch().store(on); }

#if defined(__AVX512FP16__)
namespace native {

// 32 lanes, or the first n of them (the rest zero on load, untouched on store).
inline __mmask32 lanes(int64_t n) { return n >= 32 ? __mmask32(~0u) : __mmask32((1u << n) - 1); }
inline __m512h load(const f16* p, __mmask32 m) {
  return _mm512_castsi512_ph(_mm512_maskz_loadu_epi16(m, reinterpret_cast<const void*>(p)));
}
inline void store(f16* p, __m512h v, __mmask32 m) {
  _mm512_mask_storeu_epi16(reinterpret_cast<void*>(p), m, _mm512_castph_si512(v));
}

// y = a + b                        a, b, y: [n]
inline void add(const f16* a, const f16* b, f16* y, int64_t n) {
  for (int64_t i = 0; i < n; i += 32) {
    const __mmask32 m = lanes(n - i);
    store(y + i, _mm512_add_ph(load(a + i, m), load(b + i, m)), m);
  }
}

// y = x < 0 ? 0 : x  (NaN and -0 pass through, as in the f32 path)   x, y: [n]
inline void relu_forward(const f16* x, f16* y, int64_t n) {
  const __m512h zero = _mm512_setzero_ph();
  for (int64_t i = 0; i < n; i += 32) {
    const __mmask32 m = lanes(n - i);
    const __m512h v = load(x + i, m);
    store(y + i, _mm512_mask_blend_ph(_mm512_cmp_ph_mask(v, zero, _CMP_LT_OQ), v, zero), m);
  }
}

// gx = y > 0 ? gy : 0              y, gy, gx: [n]
inline void relu_backward(const f16* y, const f16* gy, f16* gx, int64_t n) {
  const __m512h zero = _mm512_setzero_ph();
  for (int64_t i = 0; i < n; i += 32) {
    const __mmask32 m = lanes(n - i);
    const __mmask32 pos = _mm512_cmp_ph_mask(load(y + i, m), zero, _CMP_GT_OQ);
    store(gx + i, load(gy + i, m & pos), m);  // lanes with y <= 0 load as zeros
  }
}

}  // namespace native
#endif

}  // namespace ember::cpu
