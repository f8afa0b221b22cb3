// tests/cuda/test_cuda_gemm_mma.cpp — the f16/bf16 GEMM on mma.sync
// (cuda/kernels/gemm_mma.cu), and the f32 one on TF32, against a double
// reference on the values the tensor cores multiply (tests/cuda/mma_operands.h):
// every transpose, both block tiles, sizes that are no multiple of
// anything (odd N: the last column is stored alone; K past a chunk: the
// copy is zero-filled), padded leading dimensions, alpha and beta (beta 0
// never reads C, which holds NaN); that the kernel table's gemm takes it
// for aligned operands (f32 only while TF32 is allowed) and keeps the wmma
// or FMA path for the rest; and every rung
// of the kernel lab's mma.sync ladder (cuda/lab/gemm_mma_versions.cu).
// Runs on the emulator (build/test_sim) and on a GPU (build/test_ember).
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "cuda/kernels/gemm_mma.h"
#include "cuda/lab/gemm_mma_versions.h"
#include "engine/bfloat16.h"
#include "engine/half.h"
#include "tests/cuda/cuda_test_env.h"
#include "tests/cuda/device_buffer.h"
#include "tests/cuda/mma_operands.h"

using namespace ember;
using ember::testing::cuda_available;
using ember::testing::cuda_stream;
using ember::testing::DeviceBuffer;
using ember::testing::MmaOperand;
using ember::testing::random_mma_operand;
using ember::testing::result_unit;
using ember::testing::stored_value;
using ember::testing::sum_tolerance;
using ember::testing::Tf32On;

namespace {

struct Problem {
  int64_t M, N, K;
  bool ta, tb;
  double alpha, beta;
};

// Runs `gemm` (ops/kernels.h's signature) on random operands of `p` stored
// with leading dimensions padded to a multiple of 8 (+8), and checks C.
template <typename Gemm>
void check(const Problem& p, DType dt, Gemm&& gemm) {
  CAPTURE(p.M);
  CAPTURE(p.N);
  CAPTURE(p.K);
  CAPTURE(p.ta);
  CAPTURE(p.tb);
  CAPTURE(p.beta);
  const auto pad = [](int64_t n) { return (n + 7) / 8 * 8 + 8; };
  const int64_t lda = pad(p.ta ? p.M : p.K), ldb = pad(p.tb ? p.K : p.N), ldc = p.N + 3;
  const int64_t a_rows = p.ta ? p.K : p.M, b_rows = p.tb ? p.N : p.K;
  std::mt19937 rng(unsigned(p.M * 7 + p.N * 3 + p.K + p.ta * 2 + p.tb));
  const MmaOperand a = random_mma_operand(size_t(a_rows * lda), dt, rng),
                   b = random_mma_operand(size_t(b_rows * ldb), dt, rng);
  MmaOperand c = random_mma_operand(size_t(p.M * ldc), dt, rng);
  if (p.beta == 0)
    for (size_t i = 0; i < c.size(); ++i) c.set(i, std::numeric_limits<float>::quiet_NaN());
  DeviceBuffer<unsigned char> da(a.bytes), db(b.bytes), dc(c.bytes);
  gemm(p.ta, p.tb, p.M, p.N, p.K, p.alpha, da.p, lda, db.p, ldb, p.beta, dc.p, ldc);
  const std::vector<unsigned char> got = dc.host();
  const double unit = result_unit(dt);
  const size_t value_bytes = dtype_size(dt);
  int64_t bad = 0;
  for (int64_t i = 0; i < p.M; ++i)
    for (int64_t j = 0; j < ldc; ++j) {
      const size_t at = size_t(i * ldc + j);
      const double old = c.stored[at], v = stored_value(got, at, dt);
      if (j >= p.N) {  // past N: untouched
        if (std::memcmp(got.data() + at * value_bytes, c.bytes.data() + at * value_bytes, value_bytes) != 0 &&
            bad++ < 5)
          MESSAGE("C[" << i << ", " << j << "] was written");
        continue;
      }
      double sum = 0, scale = 0;
      for (int64_t k = 0; k < p.K; ++k) {
        const double x = a.multiplied[size_t(p.ta ? k * lda + i : i * lda + k)];
        const double y = b.multiplied[size_t(p.tb ? j * ldb + k : k * ldb + j)];
        sum += x * y;
        scale += std::fabs(x * y);
      }
      const double want = p.alpha * sum + (p.beta == 0 ? 0.0 : p.beta * old);
      if (!(std::fabs(v - want) <= unit * std::fabs(want) + sum_tolerance(dt) * scale * std::fabs(p.alpha) + 1e-6) &&
          bad++ < 5)
        MESSAGE("C[" << i << ", " << j << "] = " << v << ", want " << want);
    }
  CHECK(bad == 0);
}

}  // namespace

TEST_CASE("cuda gemm mma: every transpose, both tiles, ragged sizes, alpha and beta, f16 and bf16" *
          ember::testing::kNeedsCudaDevice) {
  REQUIRE(cuda_available());
  for (DType dt : {DType::f16, DType::bf16})
    for (auto tile : {cuda::MmaGemmTileChoice::small, cuda::MmaGemmTileChoice::large})
      for (bool ta : {false, true})
        for (bool tb : {false, true})
          for (const Problem& shape : {Problem{37, 45, 70, ta, tb, 1.0, 0.0}, Problem{130, 72, 32, ta, tb, -0.5, 0.5},
                                       Problem{8, 9, 5, ta, tb, 2.0, 0.0}}) {
            CAPTURE(dtype_name(dt));
            CAPTURE(tile == cuda::MmaGemmTileChoice::large);
            check(shape, dt, [&](bool a_t, bool b_t, int64_t M, int64_t N, int64_t K, double alpha, const void* A,
                                 int64_t lda, const void* B, int64_t ldb, double beta, void* C, int64_t ldc) {
              REQUIRE(cuda::gemm_mma_supports(dt, M, N, K, A, lda, B, ldb, C, ldc));
              cuda::gemm_mma(dt, a_t, b_t, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc, cuda_stream(), tile);
            });
          }
}

TEST_CASE("cuda gemm mma: f32 on TF32 (mma.sync m16n8k8, inputs rounded to nearest), every transpose, both tiles" *
          ember::testing::kNeedsCudaDevice) {
  REQUIRE(cuda_available());
  const Tf32On tf32;
  const DType dt = DType::f32;
  for (auto tile : {cuda::MmaGemmTileChoice::small, cuda::MmaGemmTileChoice::large})
    for (bool ta : {false, true})
      for (bool tb : {false, true})
        for (const Problem& shape : {Problem{37, 45, 70, ta, tb, 1.0, 0.0}, Problem{130, 72, 19, ta, tb, -0.5, 0.5},
                                     Problem{8, 9, 3, ta, tb, 2.0, 0.0}}) {
          CAPTURE(tile == cuda::MmaGemmTileChoice::large);
          check(shape, dt, [&](bool a_t, bool b_t, int64_t M, int64_t N, int64_t K, double alpha, const void* A,
                               int64_t lda, const void* B, int64_t ldb, double beta, void* C, int64_t ldc) {
            REQUIRE(cuda::gemm_mma_supports(dt, M, N, K, A, lda, B, ldb, C, ldc));
            cuda::gemm_mma(dt, a_t, b_t, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc, cuda_stream(), tile);
          });
        }
}

TEST_CASE("cuda gemm mma: the kernel table's gemm takes aligned 16-bit operands (f32 with TF32 allowed), the wmma "
          "path the rest" *
          ember::testing::kNeedsCudaDevice) {
  REQUIRE(cuda_available());
  DeviceBuffer<uint16_t> buf(1024);
  const uint16_t* p = buf.p;
  CHECK(cuda::gemm_mma_supports(DType::f16, 16, 16, 16, p, 16, p, 16, p, 16));
  cuda::set_tf32(false);
  CHECK_FALSE(cuda::gemm_mma_supports(DType::f32, 16, 16, 16, p, 16, p, 16, p, 16));  // f32 stays f32 without TF32
  {
    const Tf32On tf32;
    CHECK(cuda::gemm_mma_supports(DType::f32, 16, 16, 16, p, 16, p, 16, p, 16));
    CHECK(cuda::gemm_mma_supports(DType::f32, 16, 16, 16, p, 4, p, 4, p, 16));          // 4 f32 = 16 bytes
    CHECK_FALSE(cuda::gemm_mma_supports(DType::f32, 16, 16, 16, p, 6, p, 16, p, 16));   // lda: 24 bytes
    CHECK_FALSE(cuda::gemm_mma_supports(DType::f32, 16, 16, 16, p, 16, p, 16, p + 2, 16));  // C off 8 bytes
    CHECK_FALSE(cuda::gemm_mma_supports(DType::f64, 16, 16, 16, p, 16, p, 16, p, 16));
  }
  CHECK_FALSE(cuda::gemm_mma_supports(DType::f16, 16, 16, 16, p, 20, p, 16, p, 16));      // lda not a multiple of 8
  CHECK_FALSE(cuda::gemm_mma_supports(DType::f16, 16, 16, 16, p + 1, 16, p, 16, p, 16));  // A off 16-byte alignment
  const Kernels& table = testing::cuda_table();
  for (const Problem& shape : {Problem{33, 40, 48, false, true, 1.0, 0.0}, Problem{24, 17, 40, true, false, 1.0, 1.0}})
    check(shape, DType::bf16, [&](bool a_t, bool b_t, int64_t M, int64_t N, int64_t K, double alpha, const void* A,
                                  int64_t lda, const void* B, int64_t ldb, double beta, void* C, int64_t ldc) {
      table.gemm(DType::bf16, a_t, b_t, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc, cuda_stream());
    });
  // f32 with TF32 allowed: the table's results are the TF32 products (its
  // FMA path would miss the TF32 reference by ~2^-12 of each product).
  const Tf32On tf32;
  check(Problem{33, 40, 48, false, false, 1.0, 0.0}, DType::f32,
        [&](bool a_t, bool b_t, int64_t M, int64_t N, int64_t K, double alpha, const void* A, int64_t lda,
            const void* B, int64_t ldb, double beta, void* C, int64_t ldc) {
          table.gemm(DType::f32, a_t, b_t, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc, cuda_stream());
        });
}

TEST_CASE("cuda gemm mma: every rung of the lab's mma.sync ladder matches a double reference" *
          ember::testing::kNeedsCudaDevice) {
  REQUIRE(cuda_available());
  // Ragged in M, N past one 128-wide tile, K past a 32-value step (K and N
  // multiples of 8, as the rungs need).
  const int64_t M = 150, N = 136, K = 104;
  std::mt19937 rng(9);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::vector<uint16_t> a(size_t(M * K)), b(size_t(K * N));
  for (auto& v : a) v = float_to_half(u(rng));
  for (auto& v : b) v = float_to_half(u(rng));
  std::vector<double> want(size_t(M * N), 0.0), scale(size_t(M * N), 0.0);
  for (int64_t i = 0; i < M; ++i)
    for (int64_t k = 0; k < K; ++k)
      for (int64_t j = 0; j < N; ++j) {
        const double p = double(half_to_float(a[size_t(i * K + k)])) * half_to_float(b[size_t(k * N + j)]);
        want[size_t(i * N + j)] += p;
        scale[size_t(i * N + j)] += std::fabs(p);
      }
  DeviceBuffer<uint16_t> da(a), db(b);
  const std::vector<std::string> rungs = cuda::lab::gemm_mma_versions();
  CHECK(rungs.size() == 6);
  for (const std::string& rung : rungs) {
    CAPTURE(rung);
    DeviceBuffer<uint16_t> dc(size_t(M * N));
    REQUIRE(cuda::lab::gemm_mma_version(rung, M, N, K, da.p, db.p, dc.p, cuda_stream()));
    const std::vector<uint16_t> c = dc.host();
    int64_t bad = 0;
    for (size_t i = 0; i < c.size(); ++i)
      if (!(std::fabs(half_to_float(c[i]) - want[i]) <= std::fabs(want[i]) / 1024 + 1e-5 * scale[i] + 1e-6) && bad++ < 3)
        MESSAGE("C[" << i / size_t(N) << ", " << i % size_t(N) << "] = " << half_to_float(c[i]) << ", want " << want[i]);
    CHECK(bad == 0);
  }
  CHECK_FALSE(cuda::lab::gemm_mma_version("mma_no_such_rung", M, N, K, da.p, db.p, nullptr, cuda_stream()));
}
