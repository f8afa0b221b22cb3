// ops/cpu/elementwise_bf16_avx512.cpp — the fused bf16 elementwise loops
// (elementwise_bf16.h) in AVX-512; the Makefile compiles this file with
// -march=x86-64-v4, and bf16_binary_kernel() hands it out only on CPUs
// that have the AVX-512 set x86-64-v4 assumes (F, BW, DQ, VL).
#include "ops/cpu/elementwise_bf16.h"

#if defined(__AVX512BW__) && defined(__AVX512VL__)  // (other builds never call this file's function)
#include "ops/cpu/bf16_avx512.h"

namespace ember::cpu {
namespace {

using bf16_avx512::kAll;
using bf16_avx512::narrow;
using bf16_avx512::widen;

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
    const __mmask16 m = bf16_avx512::first_lanes(n - i);
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
