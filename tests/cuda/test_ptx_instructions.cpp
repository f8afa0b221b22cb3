// tests/cuda/test_ptx_instructions.cpp — mma.sync, ldmatrix and cp.async
// (cuda/ptx_instructions.cuh) through the probe kernels of
// cuda/lab/ptx_instruction_probes.cu, against scalar references built from
// the fragment layouts of the PTX ISA:
// - mma.sync m16n8k16 (f16, bf16) and m16n8k8 (tf32): small integers, whose
//   products and sums are exact on any hardware, so a lane or register out
//   of place shows as a wrong element; then random values within rounding;
// - ldmatrix x1, x2, x4, with and without .trans, from rows in a shuffled
//   order and padded shared rows: every lane's registers, bit for bit;
// - ldmatrix x4 and x2.trans feeding mma.sync (the composition a tensor-core
//   kernel relies on);
// - a cp.async pipeline of 2 to 4 stages with 4-, 8- and 16-byte copies,
//   whole and zero-filled.
// Built into build/test_sim (the emulator) and build/test_ember (a GPU,
// where the hardware decides whether the emulator's layouts are right).
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <algorithm>
#include <cstring>
#include <random>
#include <vector>

#include "cuda/lab/ptx_instruction_probes.h"
#include "engine/bfloat16.h"
#include "engine/half.h"
#include "tests/cuda/cuda_test_env.h"
#include "tests/cuda/device_buffer.h"

using namespace ember;
using ember::cuda::lab::MmaInput;
using ember::testing::cuda_available;
using ember::testing::cuda_stream;
using ember::testing::DeviceBuffer;

namespace {

DType dtype_of(MmaInput in) { return in == MmaInput::f16 ? DType::f16 : DType::bf16; }
uint16_t to_bits16(float v, MmaInput in) { return ember::testing::to_bits16(v, dtype_of(in)); }
double from_bits16(uint16_t b, MmaInput in) { return ember::testing::from_bits16(b, dtype_of(in)); }

// f32 -> TF32 as cvt.rna.tf32.f32 rounds: to nearest, ties away from zero.
float round_tf32(float x) {
  uint32_t bits;
  std::memcpy(&bits, &x, 4);
  bits = (bits + 0x1000u) & 0xffffe000u;  // finite inputs only
  std::memcpy(&x, &bits, 4);
  return x;
}

const char* name_of(MmaInput in) { return in == MmaInput::f16 ? "f16" : in == MmaInput::bf16 ? "bf16" : "tf32"; }

// D = A B + C on the host in double, from the values the device sees.
std::vector<double> reference(const std::vector<double>& a, const std::vector<double>& b, const std::vector<float>& c,
                              int K) {
  std::vector<double> d(16 * 8);
  for (int i = 0; i < 16; ++i)
    for (int j = 0; j < 8; ++j) {
      double s = c[size_t(i * 8 + j)];
      for (int k = 0; k < K; ++k) s += a[size_t(i * K + k)] * b[size_t(k * 8 + j)];
      d[size_t(i * 8 + j)] = s;
    }
  return d;
}

// Runs one mma.sync on values drawn by `draw` and returns the device's D
// with the double reference and the sum of |products| per element (the scale
// of rounding).
struct MmaRun {
  std::vector<float> d;
  std::vector<double> want, scale;
};
template <typename Draw>
MmaRun run_mma(MmaInput in, Draw&& draw) {
  const int K = in == MmaInput::tf32 ? 8 : 16;
  std::vector<double> a(size_t(16 * K)), b(size_t(K * 8));
  std::vector<float> c(16 * 8);
  MmaRun r;
  r.scale.assign(16 * 8, 0.0);
  if (in == MmaInput::tf32) {
    std::vector<float> af(a.size()), bf(b.size());
    // The device rounds each input to TF32 (round_tf32) or drops its low
    // bits; the reference takes the rounded values, exact for the integers.
    for (size_t i = 0; i < af.size(); ++i) a[i] = round_tf32(af[i] = float(draw()));
    for (size_t i = 0; i < bf.size(); ++i) b[i] = round_tf32(bf[i] = float(draw()));
    for (auto& x : c) x = float(draw());
    DeviceBuffer<float> da(af), db(bf), dc(c), dd(16 * 8);
    cuda::lab::mma_probe(in, da.p, db.p, dc.p, dd.p, true, cuda_stream());
    r.d = dd.host();
  } else {
    std::vector<uint16_t> ah(a.size()), bh(b.size());
    for (size_t i = 0; i < ah.size(); ++i) a[i] = from_bits16(ah[i] = to_bits16(float(draw()), in), in);
    for (size_t i = 0; i < bh.size(); ++i) b[i] = from_bits16(bh[i] = to_bits16(float(draw()), in), in);
    for (auto& x : c) x = float(draw());
    DeviceBuffer<uint16_t> da(ah), db(bh);
    DeviceBuffer<float> dc(c), dd(16 * 8);
    cuda::lab::mma_probe(in, da.p, db.p, dc.p, dd.p, false, cuda_stream());
    r.d = dd.host();
  }
  r.want = reference(a, b, c, K);
  for (int i = 0; i < 16; ++i)
    for (int j = 0; j < 8; ++j)
      for (int k = 0; k < K; ++k) r.scale[size_t(i * 8 + j)] += std::fabs(a[size_t(i * K + k)] * b[size_t(k * 8 + j)]);
  return r;
}

}  // namespace

TEST_CASE("ptx mma.sync: m16n8k16 f16/bf16 and m16n8k8 tf32, each lane's fragment as the PTX ISA lays it out" *
          ember::testing::kNeedsCudaDevice) {
  REQUIRE(cuda_available());
  std::mt19937 rng(41);
  for (MmaInput in : {MmaInput::f16, MmaInput::bf16, MmaInput::tf32}) {
    CAPTURE(name_of(in));
    // Small integers: every product and sum is exact, so D must be exact.
    std::uniform_int_distribution<int> small(-4, 4);
    const MmaRun exact = run_mma(in, [&] { return double(small(rng)); });
    for (size_t i = 0; i < exact.d.size(); ++i) {
      CAPTURE(i);
      REQUIRE(double(exact.d[i]) == exact.want[i]);
    }
    // Random values: within f32 rounding of the sum of the K products.
    std::uniform_real_distribution<double> uni(-2.0, 2.0);
    const MmaRun noisy = run_mma(in, [&] { return uni(rng); });
    for (size_t i = 0; i < noisy.d.size(); ++i) {
      CAPTURE(i);
      CHECK(std::fabs(double(noisy.d[i]) - noisy.want[i]) <= 1e-5 * (noisy.scale[i] + 1.0));
    }
  }
}

TEST_CASE("ptx mma.sync tf32: inputs rounded by cvt.rna.tf32.f32 (to nearest, ties away) before the product" *
          ember::testing::kNeedsCudaDevice) {
  REQUIRE(cuda_available());
  // A = 1 + i/1024 + 3/4096: 3/4 of a TF32 step above a TF32 value, so
  // rounding goes up to 1 + (i + 1)/1024; B holds small integers. Products
  // and sums are then exact, and D tells rounding from truncation.
  std::mt19937 rng(7);
  std::uniform_int_distribution<int> step(0, 1000), small(-3, 3);
  std::vector<double> a(16 * 8), b(8 * 8), a_rounded(16 * 8);
  std::vector<float> af(16 * 8), bf(8 * 8), c(16 * 8, 0.5f);
  for (size_t i = 0; i < af.size(); ++i) {
    const int s = step(rng);
    af[i] = float(1.0 + s / 1024.0 + 3.0 / 4096.0);
    a_rounded[i] = 1.0 + (s + 1) / 1024.0;
  }
  for (size_t i = 0; i < bf.size(); ++i) b[i] = bf[i] = float(small(rng));
  DeviceBuffer<float> da(af), db(bf), dc(c), dd(16 * 8);
  cuda::lab::mma_probe(MmaInput::tf32, da.p, db.p, dc.p, dd.p, true, cuda_stream());
  const std::vector<float> d = dd.host();
  const std::vector<double> want = reference(a_rounded, b, c, 8);
  for (size_t i = 0; i < d.size(); ++i) {
    CAPTURE(i);
    REQUIRE(double(d[i]) == want[i]);
  }
}

TEST_CASE("ptx ldmatrix: x1, x2, x4, with and without .trans, rows in any order and padded" *
          ember::testing::kNeedsCudaDevice) {
  REQUIRE(cuda_available());
  // 32 rows of 8 distinct 16-bit values: value = row * 8 + column + 1.
  std::vector<uint16_t> rows(32 * 8);
  for (size_t i = 0; i < rows.size(); ++i) rows[i] = uint16_t(i + 1);
  std::mt19937 rng(3);
  for (int stride : {8, 16, 24}) {
    std::vector<int> row_of_lane(32);
    for (int l = 0; l < 32; ++l) row_of_lane[size_t(l)] = l;
    std::shuffle(row_of_lane.begin(), row_of_lane.end(), rng);
    DeviceBuffer<uint16_t> drows(rows);
    DeviceBuffer<int> dorder(row_of_lane);
    for (int count : {1, 2, 4})
      for (bool trans : {false, true}) {
        CAPTURE(stride);
        CAPTURE(count);
        CAPTURE(trans);
        DeviceBuffer<uint32_t> out(size_t(32 * count));
        cuda::lab::ldmatrix_probe(count, trans, drows.p, stride, dorder.p, out.p, cuda_stream());
        const std::vector<uint32_t> got = out.host();
        // Element (r, c) of matrix i is column c of the row lane 8i + r addressed.
        const auto element = [&](int i, int r, int c) { return uint32_t(rows[size_t(row_of_lane[size_t(8 * i + r)] * 8 + c)]); };
        for (int lane = 0; lane < 32; ++lane)
          for (int i = 0; i < count; ++i) {
            const int g = lane / 4, t = lane % 4;
            const uint32_t want = trans ? element(i, 2 * t, g) | element(i, 2 * t + 1, g) << 16
                                        : element(i, g, 2 * t) | element(i, g, 2 * t + 1) << 16;
            CAPTURE(lane);
            CAPTURE(i);
            REQUIRE(got[size_t(lane * count + i)] == want);
          }
      }
  }
}

TEST_CASE("ptx ldmatrix x4 and x2.trans feed mma.sync: A [16, 16] times B [16, 8] from shared memory" *
          ember::testing::kNeedsCudaDevice) {
  REQUIRE(cuda_available());
  std::mt19937 rng(5);
  std::uniform_int_distribution<int> small(-5, 5);
  for (MmaInput in : {MmaInput::f16, MmaInput::bf16}) {
    CAPTURE(name_of(in));
    std::vector<uint16_t> ah(16 * 16), bh(16 * 8);
    std::vector<double> a(ah.size()), b(bh.size());
    for (size_t i = 0; i < ah.size(); ++i) a[i] = from_bits16(ah[i] = to_bits16(float(small(rng)), in), in);
    for (size_t i = 0; i < bh.size(); ++i) b[i] = from_bits16(bh[i] = to_bits16(float(small(rng)), in), in);
    DeviceBuffer<uint16_t> da(ah), db(bh);
    DeviceBuffer<float> dd(16 * 8);
    cuda::lab::mma_from_shared_probe(in, da.p, db.p, dd.p, cuda_stream());
    const std::vector<float> d = dd.host();
    const std::vector<double> want = reference(a, b, std::vector<float>(16 * 8, 0.0f), 16);
    for (size_t i = 0; i < d.size(); ++i) {
      CAPTURE(i);
      REQUIRE(double(d[i]) == want[i]);
    }
  }
}

TEST_CASE("ptx cp.async: pipelines of 2 to 4 stages, 4/8/16-byte copies, whole and zero-filled" *
          ember::testing::kNeedsCudaDevice) {
  REQUIRE(cuda_available());
  const int64_t tiles = 7;
  for (int bytes : {4, 8, 16})
    for (int stages : {2, 3, 4})
      for (int src_bytes : {bytes, bytes / 2, 0}) {
        CAPTURE(bytes);
        CAPTURE(stages);
        CAPTURE(src_bytes);
        const size_t n = size_t(tiles) * 128 * size_t(bytes);
        std::vector<unsigned char> src(n);
        for (size_t i = 0; i < n; ++i) src[i] = static_cast<unsigned char>(i * 7 + 1 + i / 251);
        DeviceBuffer<unsigned char> dsrc(src), ddst(n);
        cuda::lab::cp_async_pipeline_probe(bytes, src_bytes, stages, dsrc.p, tiles, ddst.p, cuda_stream());
        const std::vector<unsigned char> got = ddst.host();
        size_t wrong = 0, first = n;
        for (size_t i = 0; i < n; ++i) {
          const unsigned char want = int(i % size_t(bytes)) < src_bytes ? src[i] : 0;
          if (got[i] != want && wrong++ == 0) first = i;
        }
        CAPTURE(first);
        CHECK(wrong == 0);
      }
}
