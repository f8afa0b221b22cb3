// ops/cpu/bf16_avx512.h — 16 bf16 values to f32 and back in one AVX-512
// register, for the fused bf16 loops (elementwise_bf16_avx512.cpp,
// batch_norm_bf16_avx512.cpp). Include it only from files the Makefile
// compiles with -march=x86-64-v4 (AVX-512 F, BW, DQ and VL).
//
// The rounding is engine/bfloat16.h's float_to_bf16 in integer form
// (nearest-even, NaN kept quiet, subnormals kept), so a fused loop stores
// the bits the generic path (f32 buffers, float_to_bf16_n) would.
// vcvtneps2bf16 is not used: it flushes subnormals.
#pragma once
#include <cstdint>
#include <immintrin.h>

namespace ember::cpu::bf16_avx512 {

// (The maskz forms, all lanes on, avoid GCC 12's bogus
// -Wmaybe-uninitialized on the unmasked ones, as in ops/cpu/f16_util.h.)
constexpr __mmask16 kAll = 0xffff;

// The first n (< 16) lanes.
inline __mmask16 first_lanes(int64_t n) { return __mmask16((1u << n) - 1); }

// 16 bf16 values at p (the lanes of mask; 0 in the others) as f32.
inline __m512 widen(__mmask16 mask, const uint16_t* p) {
  const __m256i h = _mm256_maskz_loadu_epi16(mask, p);
  return _mm512_castsi512_ps(_mm512_maskz_slli_epi32(kAll, _mm512_maskz_cvtepu16_epi32(kAll, h), 16));
}

// 16 f32 values to bf16 at p (the lanes of mask), as float_to_bf16: NaN ->
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

}  // namespace ember::cpu::bf16_avx512
