// tests/engine/test_bf16.cpp — bfloat16 conversions (engine/bfloat16.h) and the
// CPU kernels that only convert (cast, fill): the scalar routines against an
// independent nearest-value reference, every bulk path (AVX512-BF16,
// AVX-512F, AVX2, scalar) against the scalar routine bit for bit over all
// 2^16 bf16 values and millions of float bit patterns (NaN payloads, +-inf,
// subnormals, round-to-even ties, the overflow boundary, odd lengths), and
// the cast kernel between bf16 and f32, f64 and f16 (one correct rounding).
// bf16 kernels' arithmetic is in tests/ops/test_f16.cpp (templated over f16 and
// bf16) and the op harness's bf16 axis.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "engine/bfloat16.h"
#include "engine/error.h"
#include "engine/half.h"
#include "engine/rng.h"
#include "ops/kernels.h"

using namespace ember;

namespace {

const Kernels& K() { return cpu_kernels(); }

float from_bits(uint32_t b) {
  float f;
  std::memcpy(&f, &b, 4);
  return f;
}
uint32_t to_bits(float f) {
  uint32_t b;
  std::memcpy(&b, &f, 4);
  return b;
}

std::string hex(uint32_t v) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "0x%x", unsigned(v));
  return buf;
}

bool bf16_is_nan(uint16_t h) { return (h & 0x7f80) == 0x7f80 && (h & 0x007f) != 0; }

// The value of a bf16 pattern, computed from its fields (not by a shift):
// sign, 8-bit exponent (bias 127), 7-bit fraction; subnormals at 2^-126.
double bf16_value(uint16_t h) {
  const double sign = (h & 0x8000) ? -1.0 : 1.0;
  const int e = (h >> 7) & 0xff, m = h & 0x7f;
  if (e == 0xff) return m ? std::numeric_limits<double>::quiet_NaN() : sign * std::numeric_limits<double>::infinity();
  if (e == 0) return sign * std::ldexp(double(m), -126 - 7);
  return sign * std::ldexp(double(128 + m), e - 127 - 7);
}

// The nearest bf16 of a non-NaN float by comparing distances in double
// (exact for these values): the two bf16 neighbours are the truncation t
// and t + 1 (the next pattern away from zero; past the largest finite value
// it is inf, which rounding treats as 2^128), ties to the even pattern.
uint16_t reference_bf16(float f) {
  const uint16_t t = uint16_t(to_bits(f) >> 16);
  const double lo = bf16_value(t);
  if (lo == double(f)) return t;
  const uint16_t up = uint16_t(t + 1);
  const double hi = (up & 0x7fff) == 0x7f80 ? std::copysign(std::ldexp(1.0, 128), lo) : bf16_value(up);
  const double dlo = std::fabs(double(f) - lo), dhi = std::fabs(hi - double(f));
  if (dlo != dhi) return dlo < dhi ? t : up;
  return (t & 1) ? up : t;
}

// Float bit patterns that stress the rounding: every bf16 value with the
// low halves that matter (0, 1, a tie, just below and above it, all ones),
// a stride through all 2^32 patterns, random patterns, and specials.
std::vector<uint32_t> test_patterns() {
  std::vector<uint32_t> p;
  const uint32_t lows[] = {0x0000, 0x0001, 0x7fff, 0x8000, 0x8001, 0xffff, 0x4000, 0xc000};
  for (uint32_t hi = 0; hi < 65536; ++hi)
    for (uint32_t lo : lows) p.push_back(hi << 16 | lo);
  for (uint64_t b = 0; b < (uint64_t(1) << 32); b += 4093) p.push_back(uint32_t(b));
  PhiloxStream rng(2024, 7);
  for (int i = 0; i < 500000; ++i) p.push_back(rng.next_u32());
  const uint32_t specials[] = {
      0x7f800000, 0xff800000,                          // +-inf
      0x7f800001, 0xff800001, 0x7fc00000, 0xffc00000,  // NaNs: payload only in the low half, quiet ones
      0x7fbfffff, 0x7fffffff, 0xffffffff, 0x7f80ffff,  // signalling NaN with payload, all ones
      0x7f7fffff, 0x7f7f8000, 0x7f7f7fff, 0xff7f8000,  // the overflow boundary: max, tie to inf, below it
      0x00000001, 0x80000001, 0x007fffff, 0x00008000,  // subnormals: smallest, largest, a tie to 0
      0x00018000, 0x00017fff, 0x807f8000, 0x00800000,  // subnormal ties to even, up to the smallest normal
      0x3f808000, 0x3f818000, 0x3f808001, 0xbf808000,  // ties at 1 to even (down, up), above, negative
      0x00000000, 0x80000000, 0x3f800000, 0xbf800000};
  for (uint32_t s : specials) p.push_back(s);
  return p;
}

}  // namespace

TEST_CASE("bf16: the scalar conversion rounds to the nearest bf16, ties to even; NaN stays a quiet NaN") {
  const std::vector<uint32_t> patterns = test_patterns();
  int64_t bad = 0, nans = 0;
  for (uint32_t b : patterns) {
    const float f = from_bits(b);
    const uint16_t got = float_to_bf16(f);
    if (std::isnan(f)) {
      ++nans;
      // A quiet NaN (the quiet bit set) of the same sign, never inf, whatever the payload.
      const bool ok = bf16_is_nan(got) && (got & 0x0040) && (got & 0x8000) == ((b >> 16) & 0x8000);
      if (!ok && bad++ < 5) MESSAGE((std::string("NaN ") + hex(b) + " -> " + hex(got)));
      continue;
    }
    const uint16_t want = reference_bf16(f);
    if (got != want && bad++ < 5) MESSAGE((hex(b) + " -> " + hex(got) + ", nearest is " + hex(want)));
  }
  CHECK(bad == 0);
  CHECK(nans > 1000);
  // Known values.
  CHECK(float_to_bf16(1.0f) == 0x3f80);
  CHECK(float_to_bf16(from_bits(0x3f808000)) == 0x3f80);  // 1 + half an ulp: tie, down to even
  CHECK(float_to_bf16(from_bits(0x3f818000)) == 0x3f82);  // 1 + 1.5 ulp: tie, up to even
  CHECK(float_to_bf16(from_bits(0x7f7f8000)) == 0x7f80);  // max + half an ulp: tie, to even = inf
  CHECK(float_to_bf16(from_bits(0x7f7f7fff)) == 0x7f7f);  // just below: max
  CHECK(float_to_bf16(std::numeric_limits<float>::infinity()) == 0x7f80);
  CHECK(float_to_bf16(-std::numeric_limits<float>::infinity()) == 0xff80);
  CHECK(float_to_bf16(from_bits(0x7f800001)) == 0x7fc0);  // payload below the kept bits: still NaN
  CHECK(float_to_bf16(from_bits(0x00008000)) == 0x0000);  // half the smallest subnormal: to even (0)
  CHECK(float_to_bf16(from_bits(0x00018000)) == 0x0002);  // 1.5 subnormal ulps: to even (2)
  CHECK(float_to_bf16(-0.0f) == 0x8000);
}

TEST_CASE("bf16: widening is exact for all 2^16 values, and narrowing gives every non-NaN value back") {
  int64_t bad = 0;
  for (uint32_t h = 0; h < 65536; ++h) {
    const float f = bf16_to_float(uint16_t(h));
    const double v = bf16_value(uint16_t(h));
    const bool ok = bf16_is_nan(uint16_t(h)) ? std::isnan(f) && to_bits(f) == h << 16
                                              : double(f) == v && to_bits(f) == h << 16;
    if (!ok) ++bad;
    if (!bf16_is_nan(uint16_t(h)) && float_to_bf16(f) != h) ++bad;
  }
  CHECK(bad == 0);
  CHECK(bf16_to_float(0x3f80) == 1.0f);
  CHECK(bf16_to_float(0x7f7f) == 3.3895313892515355e38f);
  CHECK(bf16_to_float(0x0001) == std::ldexp(1.0f, -133));
}

TEST_CASE("bf16: the correctly rounded bf16 of a double (one rounding, not two)") {
  CHECK(double_to_bf16(1.0 + std::ldexp(1.0, -8) + std::ldexp(1.0, -40)) == 0x3f81);  // via float: a tie, 0x3f80
  CHECK(double_to_bf16(-(1.0 + std::ldexp(1.0, -8) + std::ldexp(1.0, -40))) == 0xbf81);
  CHECK(double_to_bf16(1.0 + std::ldexp(1.0, -8)) == 0x3f80);  // an exact tie: to even
  CHECK(double_to_bf16(1e39) == 0x7f80);
  CHECK(double_to_bf16(std::ldexp(1.0, -134) * (1 + 1e-9)) == 0x0001);  // just above half the smallest subnormal
  CHECK(bf16_is_nan(double_to_bf16(std::numeric_limits<double>::quiet_NaN())));
  PhiloxStream rng(99, 1);
  int64_t bad = 0;
  for (int i = 0; i < 200000; ++i) {  // against the reference on doubles that are floats: one rounding either way
    const float f = from_bits(rng.next_u32());
    if (!std::isnan(f) && double_to_bf16(double(f)) != reference_bf16(f)) ++bad;
  }
  CHECK(bad == 0);
}

TEST_CASE("bf16: every bulk conversion path gives the scalar routine's bits (all 2^16 values, millions of floats)") {
  const std::vector<uint32_t> patterns = test_patterns();
  std::vector<float> src(patterns.size());
  for (size_t i = 0; i < src.size(); ++i) src[i] = from_bits(patterns[i]);
  std::vector<uint16_t> want(src.size());
  for (size_t i = 0; i < src.size(); ++i) want[i] = float_to_bf16(src[i]);
  std::vector<uint16_t> all(65536 + 13);  // every pattern, then a tail of 13
  for (size_t i = 0; i < all.size(); ++i) all[i] = uint16_t(i * 40503u);
  for (uint32_t h = 0; h < 65536; ++h) all[h] = uint16_t(h);

  int paths = 0;
  for (Bf16Path p : kBf16Paths) {
    CAPTURE(bf16_path_name(p));
    if (!bf16_path_available(p)) {
      MESSAGE((std::string("bf16 path ") + bf16_path_name(p) + " is not available on this CPU"));
      continue;
    }
    ++paths;
    // Narrowing: the whole array, then odd offsets and lengths (vector bodies and tails).
    std::vector<uint16_t> got(src.size(), 0xdead);
    float_to_bf16_n(p, src.data(), got.data(), src.size());
    int64_t bad = 0;
    for (size_t i = 0; i < src.size(); ++i)
      if (got[i] != want[i] && bad++ < 5)
        MESSAGE((std::string(bf16_path_name(p)) + ": " + hex(patterns[i]) + " -> " + hex(got[i]) + ", scalar " +
                hex(want[i])));
    CHECK(bad == 0);
    for (size_t off : {size_t(1), size_t(3), size_t(17)})
      for (size_t len : {0, 1, 15, 16, 17, 31, 33, 1000}) {
        std::vector<uint16_t> part(len + 1, 0xbeef);
        float_to_bf16_n(p, src.data() + off, part.data(), len);
        for (size_t i = 0; i < len; ++i) CHECK(part[i] == want[off + i]);
        CHECK(part[len] == 0xbeef);  // nothing written past n
      }
    // Widening: every pattern, exact.
    std::vector<float> wide(all.size() + 1, -7.0f);
    bf16_to_float_n(p, all.data(), wide.data(), all.size());
    int64_t wbad = 0;
    for (size_t i = 0; i < all.size(); ++i)
      if (to_bits(wide[i]) != uint32_t(all[i]) << 16) ++wbad;
    CHECK(wbad == 0);
    CHECK(wide[all.size()] == -7.0f);
  }
  CHECK(paths >= 1);
  MESSAGE((std::string("bf16 conversions in use: ") + bf16_path_name(bf16_best_path())));
  // The default converters are the best path.
  std::vector<uint16_t> def(src.size());
  float_to_bf16_n(src.data(), def.data(), src.size());
  CHECK(def == want);
  CHECK_THROWS_AS(float_to_bf16_n(Bf16Path(99), src.data(), def.data(), 1), Error);
}

TEST_CASE("cpu cast: bf16 from f32, f64 and f16 rounds once; to f32, f64 and f16 converts exactly or rounds once") {
  // f32 and f64 -> bf16 over values with ties, subnormals and the overflow boundary.
  const std::vector<uint32_t> patterns = test_patterns();
  const int64_t n = int64_t(patterns.size());
  std::vector<float> f(static_cast<size_t>(n));
  std::vector<double> d(static_cast<size_t>(n));
  for (size_t i = 0; i < f.size(); ++i) f[i] = from_bits(patterns[i]), d[i] = double(f[i]);
  std::vector<uint16_t> from_f(static_cast<size_t>(n)), from_d(static_cast<size_t>(n));
  K().cast(DType::f32, f.data(), DType::bf16, from_f.data(), n, nullptr);
  K().cast(DType::f64, d.data(), DType::bf16, from_d.data(), n, nullptr);
  int64_t bad = 0;
  for (size_t i = 0; i < f.size(); ++i) {
    if (std::isnan(f[i])) {
      bad += !bf16_is_nan(from_f[i]) || !bf16_is_nan(from_d[i]);
      continue;
    }
    const uint16_t want = reference_bf16(f[i]);
    bad += from_f[i] != want;
    bad += from_d[i] != want;
  }
  CHECK(bad == 0);
  // f64 -> bf16 is one rounding: just above a tie in double, exactly a tie in float.
  std::vector<double> tricky(33, 1.0 + std::ldexp(1.0, -8) + std::ldexp(1.0, -40));
  tricky[32] = -tricky[32];
  std::vector<uint16_t> tb(33);
  K().cast(DType::f64, tricky.data(), DType::bf16, tb.data(), 33, nullptr);
  for (int i = 0; i < 32; ++i) CHECK(tb[size_t(i)] == 0x3f81);
  CHECK(tb[32] == 0xbf81);

  // bf16 -> f32 / f64: exact for every pattern; -> f16: one rounding of the exact value.
  const int64_t m = 65536;
  std::vector<uint16_t> all(static_cast<size_t>(m));
  for (int64_t i = 0; i < m; ++i) all[size_t(i)] = uint16_t(i);
  std::vector<float> wf(static_cast<size_t>(m));
  std::vector<double> wd(static_cast<size_t>(m));
  std::vector<uint16_t> wh(static_cast<size_t>(m));
  K().cast(DType::bf16, all.data(), DType::f32, wf.data(), m, nullptr);
  K().cast(DType::bf16, all.data(), DType::f64, wd.data(), m, nullptr);
  K().cast(DType::bf16, all.data(), DType::f16, wh.data(), m, nullptr);
  int64_t wbad = 0;
  for (int64_t i = 0; i < m; ++i) {
    const uint16_t h = all[size_t(i)];
    if (bf16_is_nan(h)) {
      wbad += !std::isnan(wf[size_t(i)]) || !std::isnan(wd[size_t(i)]) || !std::isnan(half_to_float(wh[size_t(i)]));
      continue;
    }
    wbad += to_bits(wf[size_t(i)]) != uint32_t(h) << 16;
    wbad += wd[size_t(i)] != bf16_value(h);
    wbad += wh[size_t(i)] != float_to_half(bf16_to_float(h));  // float -> half is exact-then-round: one rounding
  }
  CHECK(wbad == 0);
  // Known f16 results: 1e5 overflows f16, 2^-26 rounds to f16's smallest subnormal's neighbourhood.
  const std::vector<float> probe = {1e5f, -1e5f, std::ldexp(1.0f, -24), std::ldexp(1.0f, -26), 65504.0f, 1.0f};
  std::vector<uint16_t> pb(probe.size()), ph(probe.size());
  K().cast(DType::f32, probe.data(), DType::bf16, pb.data(), int64_t(probe.size()), nullptr);
  K().cast(DType::bf16, pb.data(), DType::f16, ph.data(), int64_t(probe.size()), nullptr);
  CHECK(ph[0] == 0x7c00);
  CHECK(ph[1] == 0xfc00);
  CHECK(ph[2] == 0x0001);  // 2^-24: f16's smallest subnormal, exactly
  CHECK(ph[3] == 0x0000);  // 2^-26: a quarter of it rounds to zero
  CHECK(ph[4] == 0x7c00);  // 65504 is 65536 in bf16: beyond f16's range
  CHECK(ph[5] == 0x3c00);

  // f16 -> bf16 for every f16 pattern: one rounding of the exact value.
  std::vector<uint16_t> hb(static_cast<size_t>(m));
  K().cast(DType::f16, all.data(), DType::bf16, hb.data(), m, nullptr);
  int64_t hbad = 0;
  for (int64_t i = 0; i < m; ++i) {
    const float v = half_to_float(uint16_t(i));
    if (std::isnan(v))
      hbad += !bf16_is_nan(hb[size_t(i)]);
    else
      hbad += hb[size_t(i)] != reference_bf16(v);
  }
  CHECK(hbad == 0);
}

TEST_CASE("cpu fill: bf16 values are rounded once from the double") {
  for (int64_t n : {int64_t(1), int64_t(33), int64_t(40000)}) {
    CAPTURE(n);
    std::vector<uint16_t> h(size_t(n) + 1, 0xabcd);
    K().fill(DType::bf16, h.data(), n, -2.0, nullptr);
    for (int64_t i = 0; i < n; ++i) REQUIRE(h[size_t(i)] == 0xc000);
    CHECK(h[size_t(n)] == 0xabcd);
    K().fill(DType::bf16, h.data(), n, 1.0 + std::ldexp(1.0, -8) + std::ldexp(1.0, -40), nullptr);
    for (int64_t i = 0; i < n; ++i) REQUIRE(h[size_t(i)] == 0x3f81);
    CHECK(h[size_t(n)] == 0xabcd);
  }
}
