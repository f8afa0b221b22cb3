// tests/ops/cpu/test_batch_norm_bf16.cpp — the fused AVX-512 bf16 batch-norm loops
// (ops/cpu/batch_norm_bf16.h): each loop against its scalar definition
// (widen, the f32 arithmetic with the f32 loops' fused multiply-adds,
// float_to_bf16), outputs bit for bit and sums to f32 rounding, at every
// tail length and across the kBatchNormChunk runs, the values past the end
// neither read into a sum nor written; and the four training kernels on
// bf16 with the fused loops against the generic path (f32 buffers), in
// both orders of work. Skipped on CPUs without AVX-512 F, BW, DQ and VL.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <vector>

#include "engine/bfloat16.h"
#include "ops/cpu/batch_norm_bf16.h"
#include "ops/cpu/cpu_kernels.h"
#include "tests/support/skip.h"

namespace ember {
namespace {

// Values in [lo, hi) as bf16 bits, from a fixed seed.
std::vector<uint16_t> values(size_t n, uint32_t seed, float lo = -2.0f, float hi = 2.0f) {
  std::vector<uint16_t> v(n);
  uint32_t s = seed;
  for (uint16_t& h : v) {
    s = s * 1664525u + 1013904223u;
    h = float_to_bf16(lo + (hi - lo) * float(s >> 8) / float(1 << 24));
  }
  return v;
}
float f(uint16_t h) { return bf16_to_float(h); }

bool have_fused_loops() { return cpu::bf16_batch_norm_loops() != nullptr; }
const testing::needs kFusedLoops{"no AVX-512 F/BW/DQ/VL on this CPU (the fused bf16 batch-norm loops)", have_fused_loops};

struct Restore {
  ~Restore() {
    cpu::set_bf16_batch_norm_vector(true);
    cpu::set_batch_norm_order(cpu::BatchNormOrder::automatic);
  }
};

// relu's gradient mask as the loops apply it.
float masked(const uint16_t* y, const uint16_t* g, size_t i) { return !y || f(y[i]) > 0.0f ? f(g[i]) : 0.0f; }

TEST_CASE("batch norm bf16: the fused loops give the scalar definition (outputs' bits, sums, tails, chunks, in place)" *
          kFusedLoops) {
  const cpu::Bf16BatchNormLoops* k = cpu::bf16_batch_norm_loops();
  REQUIRE(k != nullptr);
  // (Full f32 mantissas, so that products round and the order of the
  // fused multiply-adds shows in the bits.)
  const float m = 0.37219477f, a = 1.71832191f, b = -0.40627313f, d = 0.03906171f;
  // Every tail length up to 40, then lengths around the chunk boundaries.
  std::vector<int64_t> lengths;
  for (int64_t n = 0; n <= 40; ++n) lengths.push_back(n);
  for (int64_t n : {1023, 1024, 1025, 2048, 2067, 3100}) lengths.push_back(n);
  for (int64_t n : lengths) {
    CAPTURE(n);
    const size_t un = size_t(n);
    // Past the end: values that would show in any sum or output.
    auto padded = [&](uint32_t seed) {
      std::vector<uint16_t> v = values(un, seed);
      v.resize(un + 16, float_to_bf16(1e30f));
      return v;
    };
    const std::vector<uint16_t> x = padded(uint32_t(n) + 1), g = padded(uint32_t(n) + 2), y = padded(uint32_t(n) + 3);
    // Sums: against double sums of the same terms, to f32 rounding of their magnitudes.
    for (const uint16_t* mask : {static_cast<const uint16_t*>(nullptr), y.data()}) {
      double s = 0.25, ss = -0.5, s1 = 1.0, s2 = 2.0;  // (the loops add to what is there)
      k->shifted_sums(x.data(), n, m, s, ss);
      k->gradient_sums(x.data(), mask, g.data(), n, m, s1, s2);
      double ws = 0.25, wss = -0.5, ws1 = 1.0, ws2 = 2.0, scale = 1.0;
      for (size_t i = 0; i < un; ++i) {
        const double dx = double(f(x[i]) - m), gi = masked(mask, g.data(), i);
        ws += dx, wss += dx * dx, ws1 += gi, ws2 += gi * dx, scale += std::abs(dx) + dx * dx + std::abs(gi);
      }
      const double tol = 1e-6 * scale;
      CHECK(std::abs(s - ws) <= tol);
      CHECK(std::abs(ss - wss) <= tol);
      CHECK(std::abs(s1 - ws1) <= tol);
      CHECK(std::abs(s2 - ws2) <= tol);
    }
    // Outputs: the definition's bits, nothing written past the end.
    for (bool relu : {false, true}) {
      std::vector<uint16_t> out(un + 16, 0xabcd);
      k->affine(x.data(), out.data(), n, m, a, b, relu);
      bool ok = true;
      for (size_t i = 0; i < un; ++i) {
        float v = std::fma(f(x[i]) - m, a, b);
        if (relu && v < 0.0f) v = 0.0f;
        ok = ok && out[i] == float_to_bf16(v);
      }
      for (size_t i = un; i < out.size(); ++i) ok = ok && out[i] == 0xabcd;
      CHECK_MESSAGE(ok, "affine relu=" << relu);
    }
    for (const uint16_t* mask : {static_cast<const uint16_t*>(nullptr), y.data()}) {
      std::vector<uint16_t> out(un + 16, 0xabcd);
      k->gradient_apply(x.data(), mask, g.data(), out.data(), n, m, a, b, d);
      bool ok = true;
      for (size_t i = 0; i < un; ++i)
        ok = ok && out[i] == float_to_bf16(std::fma(a, masked(mask, g.data(), i), std::fma(f(x[i]) - m, b, d)));
      for (size_t i = un; i < out.size(); ++i) ok = ok && out[i] == 0xabcd;
      CHECK_MESSAGE(ok, "gradient_apply masked=" << bool(mask));
    }
  }
  // Many values: an f32 result a few ulps off rounds to other bf16 bits
  // only near a rounding boundary (~1 value in 2^15), so the order of the
  // multiply-adds shows only over a long run.
  {
    const int64_t n = int64_t(1) << 20;
    const std::vector<uint16_t> x = values(size_t(n), 31), g = values(size_t(n), 32);
    std::vector<uint16_t> out(static_cast<size_t>(n));
    // (affine's output depends on x alone, which has ~2000 bf16 values in
    // [-2, 2): 256 sets of coefficients over runs of 4096.)
    size_t wrong = 0;
    uint32_t seed = 77;
    auto coefficient = [&](float lo, float hi) {
      seed = seed * 1664525u + 1013904223u;
      return lo + (hi - lo) * float(seed >> 8) / float(1 << 24);
    };
    for (int64_t i0 = 0; i0 < n; i0 += 4096) {
      const float cm = coefficient(-1.0f, 1.0f), ca = coefficient(0.1f, 4.0f), cb = coefficient(-1.0f, 1.0f);
      k->affine(x.data() + i0, out.data() + i0, 4096, cm, ca, cb, false);
      for (int64_t i = i0; i < i0 + 4096; ++i)
        wrong += out[size_t(i)] != float_to_bf16(std::fma(f(x[size_t(i)]) - cm, ca, cb));
    }
    CHECK(wrong == 0);
    k->gradient_apply(x.data(), nullptr, g.data(), out.data(), n, m, a, b, d);
    wrong = 0;
    for (size_t i = 0; i < size_t(n); ++i)
      wrong += out[i] != float_to_bf16(std::fma(a, f(g[i]), std::fma(f(x[i]) - m, b, d)));
    CHECK(wrong == 0);
  }
  // Specials through the output loops: NaN stays NaN (relu keeps it), infinities, subnormal results.
  const std::vector<uint16_t> special = {0x7fc0, 0xffc1, 0x7f80, 0xff80, 0x0001, 0x8001, 0x0000, 0x8000, 0x3f80};
  const int64_t ns = int64_t(special.size());
  std::vector<uint16_t> out(special.size());
  for (bool relu : {false, true}) {
    k->affine(special.data(), out.data(), ns, 0.0f, 1.0f, 0.0f, relu);
    for (size_t i = 0; i < special.size(); ++i) {
      float v = std::fma(f(special[i]) - 0.0f, 1.0f, 0.0f);
      if (relu && v < 0.0f) v = 0.0f;
      CHECK_MESSAGE(out[i] == float_to_bf16(v), "special " << i << " relu=" << relu);
    }
  }
  // In place: the output over the input.
  std::vector<uint16_t> x = values(37, 9);
  const std::vector<uint16_t> x0 = x, g = values(37, 10);
  k->gradient_apply(x.data(), nullptr, g.data(), x.data(), 37, m, a, b, d);
  bool ok = true;
  for (size_t i = 0; i < x.size(); ++i)
    ok = ok && x[i] == float_to_bf16(std::fma(a, f(g[i]), std::fma(f(x0[i]) - m, b, d)));
  CHECK(ok);
}

// The training kernels on bf16, fused loops on or off: statistics and
// parameter gradients to f32 rounding, outputs at most one bf16 step apart
// or within rounding of their terms where they cancel (the coefficients come
// from sums added in another order) and nearly all equal.
struct Outputs {
  std::vector<uint16_t> y, gx;
  std::vector<float> stats;  // save_mean, save_invstd, running_mean, running_var, ggamma, gbeta
};

Outputs run_kernels(bool fused, bool relu, int64_t N, int64_t C, int64_t HW) {
  cpu::set_bf16_batch_norm_vector(fused);
  const size_t n = size_t(N * C * HW), c = size_t(C);
  // A mean far from 0 in channel 1 (the shifted sums), the rest near it.
  std::vector<uint16_t> x = values(n, 21, -1.5f, 2.5f);
  for (int64_t i = 0; i < N; ++i)
    for (int64_t j = 0; j < HW; ++j) {
      uint16_t& v = x[size_t((i * C + 1) * HW + j)];
      v = float_to_bf16(f(v) + 40.0f);
    }
  const std::vector<uint16_t> gy = values(n, 22);
  std::vector<float> gamma(c), beta(c);
  for (size_t i = 0; i < c; ++i) gamma[i] = 0.5f + 0.25f * float(i), beta[i] = 0.125f * float(i) - 0.25f;
  Outputs o;
  o.y.resize(n), o.gx.resize(n);
  std::vector<float> sm(c), si(c), rm(c, 0.1f), rv(c, 0.9f), gg(c), gb(c);
  if (relu)
    cpu::batch_norm_relu_forward_train(DType::bf16, x.data(), gamma.data(), beta.data(), o.y.data(), sm.data(),
                                       si.data(), rm.data(), rv.data(), N, C, HW, 0.1, 1e-5, nullptr);
  else
    cpu::batch_norm_forward_train(DType::bf16, x.data(), gamma.data(), beta.data(), o.y.data(), sm.data(), si.data(),
                                  rm.data(), rv.data(), N, C, HW, 0.1, 1e-5, nullptr);
  if (relu)
    cpu::batch_norm_relu_backward_train(DType::bf16, x.data(), o.y.data(), gy.data(), gamma.data(), sm.data(),
                                        si.data(), o.gx.data(), gg.data(), gb.data(), N, C, HW, 1e-5, nullptr);
  else
    cpu::batch_norm_backward_train(DType::bf16, x.data(), gy.data(), gamma.data(), sm.data(), si.data(), o.gx.data(),
                                   gg.data(), gb.data(), N, C, HW, 1e-5, nullptr);
  for (const std::vector<float>* v : {&sm, &si, &rm, &rv, &gg, &gb}) o.stats.insert(o.stats.end(), v->begin(), v->end());
  return o;
}

// How far apart two bf16 values are, in steps of the larger one's ulp (0: equal bits).
double bf16_steps(uint16_t p, uint16_t q) {
  if (p == q) return 0.0;
  const float a = f(p), b = f(q);
  const float big = std::max(std::abs(a), std::abs(b));
  int e = 0;
  std::frexp(big, &e);
  return double(std::abs(a - b)) / std::ldexp(1.0, e - 8);
}

TEST_CASE("batch norm bf16: the training kernels with the fused loops match the generic path (both orders of work)" *
          kFusedLoops) {
  REQUIRE(cpu::bf16_batch_norm_loops() != nullptr);
  Restore restore;
  struct Shape {
    int64_t N, C, HW;
  };
  for (const Shape s : {Shape{4, 3, 49}, Shape{3, 2, 1037}, Shape{5, 4, 7}, Shape{2, 3, 2100}})
    for (cpu::BatchNormOrder order : {cpu::BatchNormOrder::planes, cpu::BatchNormOrder::channels})
      for (bool relu : {false, true}) {
        INFO("N=" << s.N << " C=" << s.C << " HW=" << s.HW << " order=" << int(order) << " relu=" << relu);
        cpu::set_batch_norm_order(order);
        const Outputs generic = run_kernels(false, relu, s.N, s.C, s.HW);
        CHECK_FALSE(bool(cpu::bf16_batch_norm_loops()));
        const Outputs fused = run_kernels(true, relu, s.N, s.C, s.HW);
        // The statistics to f32 rounding; ggamma and gbeta, sums of M = N * HW
        // terms of up to ~4, to f32 rounding of the f32 partial sums.
        const size_t c = size_t(s.C);
        for (size_t i = 0; i < generic.stats.size(); ++i) {
          const double slack = i < 4 * c ? 0.0 : 4e-8 * double(s.N * s.HW);
          CHECK(std::abs(fused.stats[i] - generic.stats[i]) <= 2e-6 * (1.0 + std::abs(generic.stats[i])) + slack);
        }
        const std::vector<uint16_t>* pairs[2][2] = {{&fused.y, &generic.y}, {&fused.gx, &generic.gx}};
        for (const auto& pair : pairs) {
          const std::vector<uint16_t>* a = pair[0];
          const std::vector<uint16_t>* b = pair[1];
          // An output is a sum of terms (gx: a * g + b * (x - mean) + d) that
          // can cancel to far below them, so a difference in a coefficient's
          // last f32 bits can be many bf16 steps of such an output: each may
          // be off by one step of itself or by 2^-16 of the tensor's
          // root-mean-square, whichever is more (a wrong mask or tail is off
          // by the order of the terms).
          double sum_squares = 0.0;
          for (uint16_t v : *b) sum_squares += double(f(v)) * double(f(v));
          const double floor = std::sqrt(sum_squares / double(b->size())) * std::ldexp(1.0, -16);
          size_t beyond = 0, differ = 0;
          double worst = 0.0;
          for (size_t i = 0; i < a->size(); ++i) {
            const double gap = std::abs(double(f((*a)[i])) - double(f((*b)[i])));
            const double steps = bf16_steps((*a)[i], (*b)[i]);
            worst = std::max(worst, steps);
            beyond += steps > 1.0 && gap > floor;
            differ += steps > 0.0;
          }
          CAPTURE(worst);
          CHECK(beyond == 0);
          CHECK(double(differ) <= 0.02 * double(a->size()));
        }
      }
}

}  // namespace
}  // namespace ember
