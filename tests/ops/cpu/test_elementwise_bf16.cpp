// tests/ops/cpu/test_elementwise_bf16.cpp — the fused AVX-512 bf16 loops of add,
// add + relu and relu's gradient (ops/cpu/elementwise_bf16.h) against the
// scalar definition (widen, compute in f32, engine/bfloat16.h's
// float_to_bf16), bit for bit (but any NaN for the sum of two NaNs: which
// payload it keeps depends on the operand order the compiler picked): NaN
// payloads (a signalling NaN passed through comes out quiet), infinities,
// signed zeros,
// subnormals, sums that round to infinity, every tail length, in place;
// and the CPU kernels with the fused loop against the generic chunked path
// on a large array split across the threads. Skipped on CPUs without
// AVX-512 F, BW, DQ and VL.
#include <doctest/doctest.h>

#include <cstdint>
#include <vector>

#include "engine/bfloat16.h"
#include "ops/cpu/cpu_kernels.h"
#include "ops/cpu/elementwise_bf16.h"
#include "tests/support/skip.h"

namespace ember {
namespace {

uint16_t reference(cpu::Bf16Binary op, uint16_t a, uint16_t b) {
  const float x = bf16_to_float(a), z = bf16_to_float(b);
  switch (op) {
    case cpu::Bf16Binary::add: return float_to_bf16(x + z);
    case cpu::Bf16Binary::add_relu: {
      const float v = x + z;
      return float_to_bf16(v < 0.0f ? 0.0f : v);
    }
    case cpu::Bf16Binary::relu_backward: return float_to_bf16(x > 0.0f ? z : 0.0f);
  }
  return 0;
}

// bf16 bit patterns: the special ones first, then a spread of exponents and mantissas.
std::vector<uint16_t> patterns(size_t n, uint32_t seed) {
  std::vector<uint16_t> v = {0x0000, 0x8000, 0x7f80, 0xff80, 0x7fc0, 0xffc1, 0x7f81, 0x0001, 0x8001, 0x007f,
                             0x0080, 0x7f7f, 0xff7f, 0x3f80, 0xbf80, 0x3f81, 0x4000, 0x0040};
  uint32_t s = seed;
  while (v.size() < n) {
    s = s * 1664525u + 1013904223u;
    v.push_back(uint16_t(s >> 16));
  }
  v.resize(n);
  return v;
}

bool is_nan(uint16_t h) { return (h & 0x7fff) > 0x7f80; }
// The same bits; for a sum of two NaNs, any NaN.
bool same(cpu::Bf16Binary op, uint16_t a, uint16_t b, uint16_t got, uint16_t want) {
  if (got == want) return true;
  return op != cpu::Bf16Binary::relu_backward && is_nan(a) && is_nan(b) && is_nan(got) && is_nan(want);
}

bool have_fused_loop() { return cpu::bf16_binary_kernel() != nullptr; }
const testing::needs kFusedLoop{"no AVX-512 F/BW/DQ/VL on this CPU (the fused bf16 elementwise loop)", have_fused_loop};

const cpu::Bf16Binary kOps[] = {cpu::Bf16Binary::add, cpu::Bf16Binary::add_relu, cpu::Bf16Binary::relu_backward};

TEST_CASE("elementwise bf16: the fused AVX-512 loops give the scalar definition's bits (specials, tails, in place)" *
          kFusedLoop) {
  const cpu::Bf16BinaryFn fn = cpu::bf16_binary_kernel();
  REQUIRE(bool(fn));
  for (cpu::Bf16Binary op : kOps) {
    CAPTURE(int(op));
    // Every pair of the special patterns (and more) through one call.
    const std::vector<uint16_t> base = patterns(64, 1);
    std::vector<uint16_t> a, b;
    for (uint16_t x : base)
      for (uint16_t z : base) a.push_back(x), b.push_back(z);
    std::vector<uint16_t> y(a.size(), 0x1234);
    fn(op, a.data(), b.data(), y.data(), int64_t(a.size()));
    int wrong = 0;
    for (size_t i = 0; i < a.size(); ++i) wrong += !same(op, a[i], b[i], y[i], reference(op, a[i], b[i]));
    CHECK(wrong == 0);
    // Every length up to 40 (the masked tail), with sentinels after the end.
    for (int64_t n = 0; n <= 40; ++n) {
      const std::vector<uint16_t> x = patterns(size_t(n), uint32_t(n) + 7), z = patterns(size_t(n), uint32_t(n) + 99);
      std::vector<uint16_t> out(size_t(n) + 8, 0xabcd);
      fn(op, x.data(), z.data(), out.data(), n);
      bool ok = true;
      for (int64_t i = 0; i < n; ++i) {
        const uint16_t p = x[size_t(i)], q = z[size_t(i)];
        ok = ok && same(op, p, q, out[size_t(i)], reference(op, p, q));
      }
      for (size_t i = size_t(n); i < out.size(); ++i) ok = ok && out[i] == 0xabcd;
      CHECK_MESSAGE(ok, "n=" << n);
    }
    // In place: y is a.
    std::vector<uint16_t> x = patterns(37, 5);
    const std::vector<uint16_t> x0 = x, z = patterns(37, 6);
    fn(op, x.data(), z.data(), x.data(), 37);
    bool ok = true;
    for (size_t i = 0; i < x.size(); ++i) ok = ok && same(op, x0[i], z[i], x[i], reference(op, x0[i], z[i]));
    CHECK(ok);
  }
}

// (Two paths compared: only where the fused one exists.)
TEST_CASE("elementwise bf16: add, add_relu and relu_backward give the generic path's bits, fused or not" * kFusedLoop) {
  struct Restore {
    ~Restore() { cpu::set_bf16_binary_vector(true); }
  } restore;
  const size_t n = (1 << 17) + 13;  // above the threading grain, an odd tail
  const std::vector<uint16_t> a = patterns(n, 11), b = patterns(n, 12);
  auto run = [&](bool fused) {
    cpu::set_bf16_binary_vector(fused);
    std::vector<std::vector<uint16_t>> out(3, std::vector<uint16_t>(n));
    cpu::add(DType::bf16, a.data(), b.data(), out[0].data(), int64_t(n), nullptr);
    cpu::add_relu(DType::bf16, a.data(), b.data(), out[1].data(), int64_t(n), nullptr);
    cpu::relu_backward(DType::bf16, a.data(), b.data(), out[2].data(), int64_t(n), nullptr);
    return out;
  };
  const auto generic = run(false);
  CHECK_FALSE(bool(cpu::bf16_binary_kernel()));
  const auto fused = run(true);
  for (size_t k = 0; k < 3; ++k) {
    CAPTURE(k);
    const cpu::Bf16Binary op = kOps[k];
    bool ok = true;
    for (size_t i = 0; i < n; ++i) ok = ok && same(op, a[i], b[i], fused[k][i], generic[k][i]);
    CHECK(ok);
  }
}

}  // namespace
}  // namespace ember
