// tests/sim/test_wmma.cpp — the emulator's warp matrix API (cuda/sim/wmma.h)
// and the tensor-core GEMM kernel built on it (cuda/kernels/gemm_tensor.cuh).
//
// - mma_sync's results against a double-precision CPU product of the same
//   16-bit inputs, for each shape with 16-bit inputs, f16 and bf16, both
//   layouts of A and B, accumulators loaded and stored in both layouts;
// - the rules CUDA states for the arguments (32-byte aligned pointers, ldm
//   a multiple of 16 bytes, the whole warp, the same pointer on every lane)
//   reported as launch failures naming the call;
// - the profiler's tensor-core FLOPs;
// - gemm_tensor_kernel at each of its three tiles on ragged shapes, every
//   transpose (so every staging layout), and split-K, against the CPU.
//
// Compiled like a .cu file for the emulator (-DEMBER_CUDASIM).
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "cuda/common.cuh"
#include "tests/support/test_helpers.h"
#include "cuda/kernels/gemm.cuh"
#include "cuda/wmma.cuh"

namespace wmma = nvcuda::wmma;
using ember::cuda::launch;

namespace {

template <typename T>
struct Device {
  T* p = nullptr;
  size_t n;
  explicit Device(size_t count) : n(count) { REQUIRE(cudaMalloc(reinterpret_cast<void**>(&p), n * sizeof(T)) == 0); }
  explicit Device(const std::vector<T>& v) : Device(v.size()) {
    REQUIRE(cudaMemcpy(p, v.data(), n * sizeof(T), cudaMemcpyHostToDevice) == 0);
  }
  ~Device() { cudaFree(p); }
  Device(const Device&) = delete;
  Device& operator=(const Device&) = delete;
  std::vector<T> host() const {
    std::vector<T> v(n);
    REQUIRE(cudaMemcpy(v.data(), p, n * sizeof(T), cudaMemcpyDeviceToHost) == 0);
    return v;
  }
};

float to_f(__half v) { return __half2float(v); }
float to_f(__nv_bfloat16 v) { return __bfloat162float(v); }
template <typename H>
H from_f(float v) {
  if constexpr (std::is_same_v<H, __half>)
    return __float2half_rn(v);
  else
    return __float2bfloat16_rn(v);
}

// D = A B + C for one warp. A: [M, K] stored row- or column-major with
// leading dimension lda; B: [K, N] likewise; C and D: [M, N] with ldc, in
// the layout `c_layout`.
template <typename H, int M, int N, int K, typename LA, typename LB>
__global__ void mma_once_kernel(const H* a, unsigned lda, const H* b, unsigned ldb, const float* c, float* d,
                                unsigned ldc, wmma::layout_t c_layout) {
  wmma::fragment<wmma::matrix_a, M, N, K, H, LA> fa;
  wmma::fragment<wmma::matrix_b, M, N, K, H, LB> fb;
  wmma::fragment<wmma::accumulator, M, N, K, float> acc;
  wmma::load_matrix_sync(fa, a, lda);
  wmma::load_matrix_sync(fb, b, ldb);
  wmma::load_matrix_sync(acc, c, ldc, c_layout);
  wmma::mma_sync(acc, fa, fb, acc);  // D aliases C
  wmma::store_matrix_sync(d, acc, ldc, c_layout);
}

template <typename H, int M, int N, int K, typename LA, typename LB>
void check_mma(wmma::layout_t c_layout, std::mt19937& rng) {
  constexpr bool kARow = std::is_same_v<LA, wmma::row_major>, kBRow = std::is_same_v<LB, wmma::row_major>;
  const unsigned lda = (kARow ? K : M) + 8, ldb = (kBRow ? N : K) + 8, ldc = N + 4 + (c_layout == wmma::mem_col_major ? M : 0);
  std::uniform_real_distribution<float> u(-2.0f, 2.0f);
  std::vector<H> a((kARow ? M : K) * size_t(lda)), b((kBRow ? K : N) * size_t(ldb));
  for (auto& v : a) v = from_f<H>(u(rng));
  for (auto& v : b) v = from_f<H>(u(rng));
  const size_t c_rows = c_layout == wmma::mem_row_major ? M : N;
  std::vector<float> c(c_rows * ldc);
  for (auto& v : c) v = u(rng);
  auto at_a = [&](int i, int k) { return double(to_f(kARow ? a[size_t(i) * lda + k] : a[size_t(k) * lda + i])); };
  auto at_b = [&](int k, int j) { return double(to_f(kBRow ? b[size_t(k) * ldb + j] : b[size_t(j) * ldb + k])); };
  auto c_index = [&](int i, int j) { return c_layout == wmma::mem_row_major ? size_t(i) * ldc + j : size_t(j) * ldc + i; };

  Device<H> da(a), db(b);
  Device<float> dc(c), dd(c.size());
  launch(mma_once_kernel<H, M, N, K, LA, LB>, dim3(1), dim3(32), 0, nullptr, da.p, lda, db.p, ldb, dc.p, dd.p, ldc,
         c_layout);
  const std::vector<float> d = dd.host();
  double worst = 0;
  for (int i = 0; i < M; ++i)
    for (int j = 0; j < N; ++j) {
      double want = c[c_index(i, j)], scale = std::fabs(want);
      for (int k = 0; k < K; ++k) {
        want += at_a(i, k) * at_b(k, j);
        scale += std::fabs(at_a(i, k) * at_b(k, j));
      }
      worst = std::max(worst, std::fabs(double(d[c_index(i, j)]) - want) / scale);
    }
  CHECK(worst < 1e-6);  // exact products, 17 f32 additions
}

template <typename H>
void check_all_mma(std::mt19937& rng) {
  for (const wmma::layout_t cl : {wmma::mem_row_major, wmma::mem_col_major}) {
    CAPTURE(int(cl));
    check_mma<H, 16, 16, 16, wmma::row_major, wmma::row_major>(cl, rng);
    check_mma<H, 16, 16, 16, wmma::row_major, wmma::col_major>(cl, rng);
    check_mma<H, 16, 16, 16, wmma::col_major, wmma::row_major>(cl, rng);
    check_mma<H, 16, 16, 16, wmma::col_major, wmma::col_major>(cl, rng);
    check_mma<H, 32, 8, 16, wmma::row_major, wmma::col_major>(cl, rng);
    check_mma<H, 8, 32, 16, wmma::col_major, wmma::row_major>(cl, rng);
  }
}

// ---------------------------------------------------------- bad arguments
__global__ void bad_ldm_kernel(const __half* a) {
  wmma::fragment<wmma::matrix_a, 16, 16, 16, __half, wmma::row_major> f;
  wmma::load_matrix_sync(f, a, 20);  // 40 bytes: not a multiple of 16
}
__global__ void misaligned_kernel(const __half* a) {
  wmma::fragment<wmma::matrix_a, 16, 16, 16, __half, wmma::row_major> f;
  wmma::load_matrix_sync(f, a + 8, 24);  // 16 bytes past a 256-byte aligned allocation
}
__global__ void per_lane_pointer_kernel(const __half* a) {
  wmma::fragment<wmma::matrix_a, 16, 16, 16, __half, wmma::row_major> f;
  wmma::load_matrix_sync(f, a + (threadIdx.x & 1) * 16, 32);  // odd lanes pass another pointer
}
__global__ void half_warp_kernel(float* d) {
  wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc;
  wmma::fill_fragment(acc, 1.0f);
  wmma::store_matrix_sync(d, acc, 16, wmma::mem_row_major);
}

// ------------------------------------------------------- the GEMM kernel
struct StoreC {
  float* c;
  int64_t ldc, slice;
  __device__ void operator()(int z, int64_t i, int64_t j, float v) const { c[z * slice + i * ldc + j] = v; }
};

template <typename H, typename Cfg, bool kTransA, bool kTransB>
void check_tensor_gemm(int64_t M, int64_t N, int64_t K, int splits, std::mt19937& rng) {
  CAPTURE(M);
  CAPTURE(N);
  CAPTURE(K);
  CAPTURE(kTransA);
  CAPTURE(kTransB);
  CAPTURE(splits);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  const int64_t lda = (kTransA ? M : K) + 3, ldb = (kTransB ? K : N) + 5;  // ragged leading dimensions
  std::vector<H> a((kTransA ? K : M) * lda), b((kTransB ? N : K) * ldb);
  for (auto& v : a) v = from_f<H>(u(rng));
  for (auto& v : b) v = from_f<H>(u(rng));
  const int64_t kchunk = ((K + splits - 1) / splits + Cfg::BK - 1) / Cfg::BK * Cfg::BK;
  const int64_t slices = (K + kchunk - 1) / kchunk;
  Device<H> da(a), db(b);
  Device<float> dc(size_t(slices * M * N));
  ember::cuda::launch_gemm_tiled<H, Cfg>(M, N, K, int(slices), kchunk, ember::cuda::MatrixA<H, kTransA>{da.p, lda},
                                          ember::cuda::MatrixB<H, kTransB>{db.p, ldb}, StoreC{dc.p, N, M * N},
                                          nullptr);
  const std::vector<float> c = dc.host();
  double worst = 0;
  for (int64_t i = 0; i < M; ++i)
    for (int64_t j = 0; j < N; ++j) {
      double want = 0, scale = 0, got = 0;
      for (int64_t s = 0; s < slices; ++s) got += c[s * M * N + i * N + j];
      for (int64_t k = 0; k < K; ++k) {
        const double p = double(to_f(kTransA ? a[k * lda + i] : a[i * lda + k])) *
                         double(to_f(kTransB ? b[j * ldb + k] : b[k * ldb + j]));
        want += p;
        scale += std::fabs(p);
      }
      worst = std::max(worst, std::fabs(got - want) / std::max(scale, 1e-30));
    }
  CHECK(worst < 1e-5);  // exact products, f32 sums
}

template <typename H, typename Cfg>
void check_tensor_gemm_tile(std::mt19937& rng) {
  // Shapes that leave partial tiles in M, N and K.
  const int64_t M = Cfg::BM + 7, N = 2 * Cfg::BN - 9, K = 3 * Cfg::BK + 5;
  check_tensor_gemm<H, Cfg, false, false>(M, N, K, 1, rng);
  check_tensor_gemm<H, Cfg, false, true>(M, N, K, 1, rng);
  check_tensor_gemm<H, Cfg, true, false>(M, N, K, 1, rng);
  check_tensor_gemm<H, Cfg, true, true>(M, N, K, 2, rng);
}

}  // namespace

TEST_CASE_TEMPLATE("cudasim wmma: mma_sync matches a CPU product for every 16-bit shape and layout", H, __half,
                   __nv_bfloat16) {
  std::mt19937 rng(7);
  check_all_mma<H>(rng);
}

TEST_CASE("cudasim wmma: CUDA's argument rules are launch failures naming the call") {
  Device<__half> a(16 * 64);
  Device<float> d(16 * 16);
  std::string m = ember::testing::thrown_message([&] { launch(bad_ldm_kernel, dim3(1), dim3(32), 0, nullptr, a.p); });
  CHECK(m.find("wmma::load_matrix_sync with ldm 20: it must be a multiple of 16 bytes") != std::string::npos);
  CHECK(m.find("test_wmma.cpp:") != std::string::npos);
  m = ember::testing::thrown_message([&] { launch(misaligned_kernel, dim3(1), dim3(32), 0, nullptr, a.p); });
  CHECK(m.find("not 256-bit (32-byte) aligned") != std::string::npos);
  m = ember::testing::thrown_message([&] { launch(per_lane_pointer_kernel, dim3(1), dim3(32), 0, nullptr, a.p); });
  CHECK(m.find("pass wmma::load_matrix_sync different arguments") != std::string::npos);
  m = ember::testing::thrown_message([&] { launch(half_warp_kernel, dim3(1), dim3(16), 0, nullptr, d.p); });
  CHECK(m.find("wmma::store_matrix_sync without a full warp") != std::string::npos);
  CHECK(m.find("warp 0 of 16 lanes") != std::string::npos);
  // The same kernel on a whole warp runs.
  CHECK(ember::testing::thrown_message([&] { launch(half_warp_kernel, dim3(1), dim3(32), 0, nullptr, d.p); }).empty());
  for (float v : d.host()) CHECK(v == 1.0f);
}

TEST_CASE("cudasim wmma: the profiler counts 2 M N K tensor-core FLOPs per mma_sync and bounds by them") {
  std::mt19937 rng(3);
  cudasim::reset_profile();
  cudasim::set_profiling(true);
  check_mma<__half, 16, 16, 16, wmma::row_major, wmma::row_major>(wmma::mem_row_major, rng);
  cudasim::set_profiling(false);
  const auto kernels = cudasim::profile();
  cudasim::reset_profile();
  REQUIRE(kernels.size() == 1);
  CHECK(kernels[0].tensor_flops == 2 * 16 * 16 * 16);
  CHECK(kernels[0].flops == 0);
  CHECK(cudasim::kernel_report(kernels[0], 1).find("tensor-core FLOPs 8.19 K") != std::string::npos);
}

TEST_CASE_TEMPLATE("cudasim wmma: the tensor-core GEMM kernel at each tile, every transpose and split-K", H, __half,
                   __nv_bfloat16) {
  std::mt19937 rng(11);
  check_tensor_gemm_tile<H, ember::cuda::TensorTileSmall>(rng);
  check_tensor_gemm_tile<H, ember::cuda::TensorTileMedium>(rng);
  check_tensor_gemm_tile<H, ember::cuda::TensorTileLarge>(rng);
}

TEST_CASE("cudasim wmma: set_native_tensor_cores picks the tensor-core or the FP32-pipe kernel for f16 GEMMs") {
  const int64_t M = 70, N = 40, K = 50;
  std::mt19937 rng(5);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::vector<__half> a(M * K), b(K * N);
  for (auto& v : a) v = __float2half_rn(u(rng));
  for (auto& v : b) v = __float2half_rn(u(rng));
  Device<__half> da(a), db(b), dc(size_t(M * N));
  const bool was = ember::cuda::native_tensor_cores();
  std::vector<std::vector<__half>> results;
  std::vector<std::string> kernels;
  for (const bool on : {true, false}) {
    ember::cuda::set_native_tensor_cores(on);
    cudasim::reset_profile();
    cudasim::set_profiling(true);
    ember::cuda::gemm(ember::DType::f16, false, false, M, N, K, 1.0, da.p, K, db.p, N, 0.0, dc.p, N, nullptr);
    cudasim::set_profiling(false);
    const auto profile = cudasim::profile();
    REQUIRE(profile.size() == 1);
    kernels.push_back(profile[0].name);
    results.push_back(dc.host());
  }
  ember::cuda::set_native_tensor_cores(was);
  cudasim::reset_profile();
  CHECK(kernels[0].find("gemm_tensor_kernel") != std::string::npos);
  CHECK(kernels[1].find("gemm_tiled_kernel") != std::string::npos);
  // Both multiply exactly and add in f32, in different orders: the f16 results agree within a rounding.
  for (size_t i = 0; i < results[0].size(); ++i) {
    const float x = __half2float(results[0][i]), y = __half2float(results[1][i]);
    CHECK(std::fabs(x - y) <= 1e-3f * std::max(1.0f, std::fabs(y)));
  }
}
