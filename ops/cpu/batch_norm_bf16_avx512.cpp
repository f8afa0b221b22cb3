// ops/cpu/batch_norm_bf16_avx512.cpp — the fused bf16 batch-norm loops
// (batch_norm_bf16.h) in AVX-512; the Makefile compiles this file with
// -march=x86-64-v4, and bf16_batch_norm_loops() hands them out only on
// CPUs that have the AVX-512 set x86-64-v4 assumes (F, BW, DQ, VL).
//
// Each loop takes 16 values a step and the last n % 16 under a mask (the
// masked-off lanes load as 0 and are not stored). The arithmetic is the f32
// loops' in ops/cpu/batch_norm.cpp as GCC vectorises them: (x - m) * a + b
// as one FMA after the subtraction, a * g + (b * (x - mean) + d) as two.
#include "ops/cpu/batch_norm_bf16.h"

#include <algorithm>

#if defined(__AVX512BW__) && defined(__AVX512VL__)  // (other builds never call this file's functions)
#include "ops/cpu/bf16_avx512.h"

namespace ember::cpu {
namespace {

using bf16_avx512::first_lanes;
using bf16_avx512::kAll;
using bf16_avx512::narrow;
using bf16_avx512::widen;

// Runs step(mask, i) over [i0, i1) 16 lanes at a time, the tail masked.
template <typename Step>
inline void for_each_vector(int64_t i0, int64_t i1, Step&& step) {
  int64_t i = i0;
  for (; i + 16 <= i1; i += 16) step(kAll, i);
  if (i < i1) step(first_lanes(i1 - i), i);
}

// g where relu's output y > 0, else 0 (y == nullptr: g).
inline __m512 masked_gradient(__mmask16 mask, const uint16_t* y, const uint16_t* g, int64_t i) {
  const __m512 gv = widen(mask, g + i);
  if (!y) return gv;
  return _mm512_maskz_mov_ps(_mm512_cmp_ps_mask(widen(mask, y + i), _mm512_setzero_ps(), _CMP_GT_OQ), gv);
}

// The sum of v's lanes, as a tree of pairs. (Not _mm512_reduce_add_ps:
// GCC 12 warns on the undefined upper halves of its extracts.)
inline float lane_sum(__m512 v) {
  alignas(64) float t[16];
  _mm512_store_ps(t, v);
  for (int width = 8; width >= 1; width /= 2)
    for (int i = 0; i < width; ++i) t[i] += t[i + width];
  return t[0];
}

// x: [n]
void shifted_sums(const uint16_t* x, int64_t n, float shift, double& s, double& ss) {
  const __m512 sh = _mm512_set1_ps(shift);
  for (int64_t i0 = 0; i0 < n; i0 += kBatchNormChunk) {
    __m512 cs = _mm512_setzero_ps(), css = _mm512_setzero_ps();
    for_each_vector(i0, std::min(n, i0 + kBatchNormChunk), [&](__mmask16 mask, int64_t i) {
      const __m512 d = _mm512_maskz_sub_ps(mask, widen(mask, x + i), sh);
      cs = _mm512_add_ps(cs, d);
      css = _mm512_fmadd_ps(d, d, css);
    });
    s += double(lane_sum(cs));
    ss += double(lane_sum(css));
  }
}

// x, y: [n]
void affine(const uint16_t* x, uint16_t* y, int64_t n, float m, float a, float b, bool relu) {
  const __m512 vm = _mm512_set1_ps(m), va = _mm512_set1_ps(a), vb = _mm512_set1_ps(b), zero = _mm512_setzero_ps();
  for_each_vector(0, n, [&](__mmask16 mask, int64_t i) {
    __m512 v = _mm512_fmadd_ps(_mm512_sub_ps(widen(mask, x + i), vm), va, vb);
    if (relu) v = _mm512_mask_mov_ps(v, _mm512_cmp_ps_mask(v, zero, _CMP_LT_OQ), zero);  // (NaN: not < 0, kept)
    narrow(mask, v, y + i);
  });
}

// x, relu_y (or nullptr), g: [n]
void gradient_sums(const uint16_t* x, const uint16_t* relu_y, const uint16_t* g, int64_t n, float mean, double& s1,
                   double& s2) {
  const __m512 vmean = _mm512_set1_ps(mean);
  for (int64_t i0 = 0; i0 < n; i0 += kBatchNormChunk) {
    __m512 c1 = _mm512_setzero_ps(), c2 = _mm512_setzero_ps();
    for_each_vector(i0, std::min(n, i0 + kBatchNormChunk), [&](__mmask16 mask, int64_t i) {
      const __m512 gi = masked_gradient(mask, relu_y, g, i);
      c1 = _mm512_add_ps(c1, gi);
      c2 = _mm512_fmadd_ps(gi, _mm512_maskz_sub_ps(mask, widen(mask, x + i), vmean), c2);
    });
    s1 += double(lane_sum(c1));
    s2 += double(lane_sum(c2));
  }
}

// x, relu_y (or nullptr), g, out: [n]
void gradient_apply(const uint16_t* x, const uint16_t* relu_y, const uint16_t* g, uint16_t* out, int64_t n, float mean,
                    float a, float b, float d) {
  const __m512 vmean = _mm512_set1_ps(mean), va = _mm512_set1_ps(a), vb = _mm512_set1_ps(b), vd = _mm512_set1_ps(d);
  for_each_vector(0, n, [&](__mmask16 mask, int64_t i) {
    const __m512 gi = masked_gradient(mask, relu_y, g, i);
    const __m512 rest = _mm512_fmadd_ps(_mm512_sub_ps(widen(mask, x + i), vmean), vb, vd);
    narrow(mask, _mm512_fmadd_ps(va, gi, rest), out + i);
  });
}

}  // namespace

extern const Bf16BatchNormLoops kBf16BatchNormLoopsAvx512;  // (handed out by batch_norm.cpp)
const Bf16BatchNormLoops kBf16BatchNormLoopsAvx512 = {&shifted_sums, &affine, &gradient_sums, &gradient_apply};

}  // namespace ember::cpu
#endif
