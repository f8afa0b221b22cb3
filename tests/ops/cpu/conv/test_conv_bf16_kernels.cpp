// tests/ops/cpu/conv/test_conv_bf16_kernels.cpp — the AVX512-BF16 window-row tiles
// (ops/cpu/conv/conv_bf16_kernels.h) against double loops: the forward tile
// over channel-pair rows read through offsets, full and partial tiles; the
// filter-gradient tile for every lane fold (F = 1, 2, 4) with inner lengths
// that leave a partial group; and the transposing packer. Values are small
// multiples of 1/64, exact in bf16, so every product is exact and only the
// f32 accumulation rounds. Skipped on CPUs without AVX512-BF16.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "ops/cpu/conv/conv_bf16_kernels.h"

namespace ember {
namespace {

uint16_t bf16_bits(double v) {  // exact for the test's values
  const float f = float(v);
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return uint16_t(u >> 16);
}

std::vector<double> grid_values(size_t n, uint64_t seed) {
  std::vector<double> v(n);
  uint64_t s = seed * 0x9E3779B97F4A7C15ull + 3;
  for (auto& x : v) {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    x = double(int64_t(s >> 40) % 257 - 128) / 64.0;  // 8 significant bits at most
  }
  return v;
}

const bool kNoBf16 = cpu::bf16_conv_kernels_supported() == nullptr;

TEST_CASE("conv bf16 kernels: forward tile of channel-pair rows" * doctest::skip(kNoBf16)) {
  const cpu::Bf16ConvKernels& k = *cpu::bf16_conv_kernels_supported();
  const int MR = k.mr, NR = k.nr;
  for (int64_t kpairs : {1, 7, 40}) {
    for (int mr : {MR, 3}) {
      for (int nr : {NR, 13}) {
        CAPTURE(kpairs);
        CAPTURE(mr);
        CAPTURE(nr);
        // rows: kpairs runs of pairs somewhere in a buffer (overlapping, as window rows do)
        const int64_t stride = 3;  // pairs between row starts
        const size_t pairs_total = size_t(kpairs * stride + NR + 8);
        const auto vals = grid_values(2 * pairs_total, uint64_t(kpairs * 10 + mr + nr));
        std::vector<uint16_t> buf(vals.size());
        for (size_t i = 0; i < vals.size(); ++i) buf[i] = bf16_bits(vals[i]);
        std::vector<int64_t> offsets(static_cast<size_t>(kpairs));
        for (int64_t kp = 0; kp < kpairs; ++kp) offsets[size_t(kp)] = 2 * (kp * stride + (kp % 2));
        const auto wv = grid_values(size_t(2 * kpairs * MR), 99);
        std::vector<uint32_t> a(size_t(kpairs * MR));
        for (int64_t kp = 0; kp < kpairs; ++kp)
          for (int i = 0; i < MR; ++i)
            a[size_t(kp * MR + i)] = uint32_t(bf16_bits(wv[size_t((kp * MR + i) * 2)])) |
                                     uint32_t(bf16_bits(wv[size_t((kp * MR + i) * 2 + 1)])) << 16;
        const int64_t ldc = NR + 5;
        std::vector<float> C(size_t(MR * ldc), -7.0f);
        k.window_tile(kpairs, a.data(), buf.data(), offsets.data(), C.data(), ldc, mr, nr);
        double worst = 0;
        for (int i = 0; i < MR; ++i)
          for (int j = 0; j < ldc; ++j) {
            if (i >= mr || j >= nr) {  // outside the corner: untouched
              CHECK(C[size_t(i * ldc + j)] == -7.0f);
              continue;
            }
            double want = 0;
            for (int64_t kp = 0; kp < kpairs; ++kp)
              for (int e = 0; e < 2; ++e)
                want += wv[size_t((kp * MR + i) * 2 + e)] * vals[size_t(offsets[size_t(kp)] + 2 * j + e)];
            worst = std::max(worst, std::fabs(double(C[size_t(i * ldc + j)]) - want) / (1 + std::fabs(want)));
          }
        CHECK(worst < 1e-6);
      }
    }
  }
}

TEST_CASE("conv bf16 kernels: filter-gradient tile and packer, every lane fold" * doctest::skip(kNoBf16)) {
  const cpu::Bf16ConvKernels& k = *cpu::bf16_conv_kernels_supported();
  const int MR = k.mr, NR = k.nr;
  for (int fi = 0; fi < 3; ++fi) {
    const int F = 1 << fi, G = 2 * F, per_panel = NR / F;
    for (int64_t kc : {int64_t(2 * G), int64_t(37), int64_t(200)}) {  // 37: a partial last group for every F
      for (int rows : {per_panel, per_panel - 3}) {
        CAPTURE(F);
        CAPTURE(kc);
        CAPTURE(rows);
        const int64_t groups = (kc + G - 1) / G, lds = groups * G;
        // B: `rows` output-channel rows of kc values (zero past kc), packed
        auto bvals = grid_values(size_t(rows * lds), uint64_t(F * 1000 + kc + rows));
        for (int r = 0; r < rows; ++r)
          for (int64_t j = kc; j < lds; ++j) bvals[size_t(r * lds + j)] = 0;
        std::vector<uint16_t> bsrc(bvals.size());
        for (size_t i = 0; i < bvals.size(); ++i) bsrc[i] = bf16_bits(bvals[i]);
        std::vector<uint32_t> bp(size_t(groups * NR), 0xdeadbeefu);
        k.pack_transposed(bsrc.data(), lds, rows, groups, F, bp.data(), NR);
        // A: MR rows of kc values at offsets into one buffer
        const auto avals = grid_values(size_t(MR * 50 + kc + 16), uint64_t(kc + 5));
        std::vector<uint16_t> abuf(avals.size());
        for (size_t i = 0; i < avals.size(); ++i) abuf[i] = bf16_bits(avals[i]);
        std::vector<int64_t> offsets(static_cast<size_t>(MR));
        for (int i = 0; i < MR; ++i) offsets[size_t(i)] = 50 * i + (i % 3);
        const int64_t ldc = NR + 3;
        std::vector<float> C(size_t(MR * ldc), 0.5f);
        k.window_tile_t[fi](kc, abuf.data(), offsets.data(), bp.data(), C.data(), ldc);
        double worst = 0;
        for (int i = 0; i < MR; ++i)
          for (int oc = 0; oc < per_panel; ++oc) {
            double got = 0;  // the F lanes of oc, minus the 0.5 each started at
            for (int e = 0; e < F; ++e) got += double(C[size_t(i * ldc + oc * F + e)]) - 0.5;
            double want = 0;
            if (oc < rows)
              for (int64_t j = 0; j < kc; ++j)
                want += avals[size_t(offsets[size_t(i)] + j)] * bvals[size_t(oc * lds + j)];
            worst = std::max(worst, std::fabs(got - want) / (1 + std::fabs(want)));
          }
        CHECK(worst < 1e-6);
      }
    }
  }
}

}  // namespace
}  // namespace ember

namespace ember {
namespace {

// The choice of conv_bf16_kernels.h: supported kernels run when forced on,
// never when off, and in automatic mode exactly when the measured speedup
// reaches the threshold; the dot peak loop computes what it claims.
TEST_CASE("conv bf16 kernels: the measured choice and the modes" * doctest::skip(kNoBf16)) {
  struct Restore {
    ~Restore() { cpu::set_bf16_conv_kernel_mode(cpu::Bf16KernelMode::automatic); }
  } restore;
  const cpu::Bf16ConvKernels* k = cpu::bf16_conv_kernels_supported();
  REQUIRE(bool(k->dot_peak_loop));
  // 16 chains of acc = acc + 1*1 + 1*1 from c/1000: after n rounds each lane
  // holds c/1000 + 2n; the loop reports 4 operations per lane and round.
  float sink = 0;
  const double flops = k->dot_peak_loop(100, &sink);
  CHECK(flops == doctest::Approx(4.0 * 100 * 16 * 16));
  double expect = 0;
  for (int c = 0; c < 16; ++c) expect += 16 * (float(c) * 1e-3f + 200.0);
  CHECK(sink == doctest::Approx(expect).epsilon(1e-6));

  const double speedup = cpu::bf16_dot_speedup();
  MESSAGE("bf16 pair-dot rate / f32 FMA rate, measured: " << speedup << " ("
          << cpu::bf16_conv_kernels_description() << ")");
  CHECK(speedup > 0.1);
  CHECK(speedup < 8.0);
  cpu::set_bf16_conv_kernel_mode(cpu::Bf16KernelMode::on);
  CHECK(cpu::bf16_conv_kernels() == k);
  CHECK(cpu::bf16_conv_kernels_description().rfind("AVX512-BF16", 0) == 0);
  cpu::set_bf16_conv_kernel_mode(cpu::Bf16KernelMode::off);
  CHECK(cpu::bf16_conv_kernels() == nullptr);
  CHECK(cpu::bf16_conv_kernels_description() == "f32 (EMBER_CPU_BF16=0)");
  cpu::set_bf16_conv_kernel_mode(cpu::Bf16KernelMode::automatic);
  CHECK(cpu::bf16_conv_kernels() == (speedup >= cpu::kBf16MinSpeedup ? k : nullptr));
}

}  // namespace
}  // namespace ember
