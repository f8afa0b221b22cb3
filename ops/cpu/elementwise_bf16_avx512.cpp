// ops/cpu/elementwise_bf16_avx512.cpp — the fused bf16 elementwise loops
// (elementwise_bf16.h) in AVX-512; the Makefile compiles this file with
// -march=x86-64-v4, and bf16_binary_kernel() hands it out only on CPUs
// that have AVX-512 F, BW and VL.
#include "ops/cpu/elementwise_bf16.h"

#if defined(__AVX512BW__) && defined(__AVX512VL__)  // (other builds never call this file's function)
#include <immintrin.h>

namespace ember::cpu {
namespace {

// 16 bf16 values (lanes of mask) to f32.
// (The maskz forms, all lanes on, avoid GCC 12's bogus -Wmaybe-uninitialized
// on the unmasked ones, as in ops/cpu/f16_util.h.)
constexpr __mmask16 kAll = 0xffff;

inline __m512 widen(__mmask16 mask, const uint16_t* p) {
  const __m256i h = _mm256_maskz_loadu_epi16(mask, p);
  return _mm512_castsi512_ps(_mm512_maskz_slli_epi32(kAll, _mm512_maskz_cvtepu16_epi32(kAll, h), 16));
}

// 16 f32 values to bf16 as float_to_bf16 (engine/bfloat16.h): NaN ->
// (bits >> 16) | 0x40; else bits + 0x7fff + bit 16, then the top half.
inline void narrow(__mmask16 mask, __m512 v, uint16_t* p) {
  const __m512i x = _mm512_castps_si512(v);
  const __mmask16 nan = _mm512_cmpgt_epu32_mask(_mm512_maskz_and_epi32(kAll, x, _mm512_set1_epi32(0x7fffffff)),
                                                _mm512_set1_epi32(0x7f800000));
  const __m512i odd = _mm512_maskz_and_epi32(kAll, _mm512_maskz_srli_epi32(kAll, x, 16), _mm512_set1_epi32(1));
  const __m512i rounded = _mm512_maskz_add_epi32(kAll, _mm512_maskz_add_epi32(kAll, x, _mm512_set1_epi32(0x7fff)), odd);
  const __m512i bits = _mm512_mask_or_epi32(rounded, nan, x, _mm512_set1_epi32(0x400000));
  _mm256_mask_storeu_epi16(p, mask, _mm512_maskz_cvtepi32_epi16(kAll, _mm512_maskz_srli_epi32(kAll, bits, 16)));
}

template <Bf16Binary Op>
inline __m512 apply(__m512 a, __m512 b) {
  const __m512 zero = _mm512_setzero_ps();
  if constexpr (Op == Bf16Binary::add) return _mm512_maskz_add_ps(kAll, a, b);
  if constexpr (Op == Bf16Binary::add_relu) {
    const __m512 v = _mm512_maskz_add_ps(kAll, a, b);
    return _mm512_mask_mov_ps(v, _mm512_cmp_ps_mask(v, zero, _CMP_LT_OQ), zero);  // (NaN: not < 0, kept)
  }
  return _mm512_maskz_mov_ps(_mm512_cmp_ps_mask(a, zero, _CMP_GT_OQ), b);  // relu_backward
}

template <Bf16Binary Op>
void run(const uint16_t* a, const uint16_t* b, uint16_t* y, int64_t n) {
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) narrow(0xffff, apply<Op>(widen(0xffff, a + i), widen(0xffff, b + i)), y + i);
  if (i < n) {
    const __mmask16 m = __mmask16((1u << (n - i)) - 1);
    narrow(m, apply<Op>(widen(m, a + i), widen(m, b + i)), y + i);
  }
}

}  // namespace

void bf16_binary_avx512(Bf16Binary op, const uint16_t* a, const uint16_t* b, uint16_t* y, int64_t n) {
  switch (op) {
    case Bf16Binary::add: return run<Bf16Binary::add>(a, b, y, n);
    case Bf16Binary::add_relu: return run<Bf16Binary::add_relu>(a, b, y, n);
    case Bf16Binary::relu_backward: return run<Bf16Binary::relu_backward>(a, b, y, n);
  }
}

}  // namespace ember::cpu
#endif
