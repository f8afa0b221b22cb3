// tests/cuda/test_cudnn.cpp — the cuDNN/cuBLAS table against the hand-written
// CUDA kernels on the same device and inputs: convolution (three passes),
// batch norm (train forward/backward, inference forward), max pooling and
// GEMM, in f32 and f64, and in f16 and bf16 (16-bit tensors with f32
// compute, f32 batch-norm parameters). Runs on a GPU with cuDNN; skipped (with the reason) on the emulator and
// without a GPU. Both tables are also checked against the CPU by the op
// harness (tests/ops/test_ops.cpp). Then the math the cuDNN table may use and
// how it picks algorithms: TF32 on and off (cuda::set_tf32, --tf32) against
// f64 on the CPU, benchmark mode (cudnnFind*AlgorithmEx) against the
// heuristics' picks, and the algorithm cache file a later run reads.
#include <algorithm>
#include <cmath>
#include <initializer_list>
#include <string>
#include <utility>
#include <vector>

#include "cuda/allocator.h"
#include "cuda/cudnn/algorithm_cache_file.h"
#include "engine/file_io.h"
#include "engine/rng.h"
#include "tests/cuda/cuda_test_env.h"
#include "tests/support/test_helpers.h"

namespace {

using namespace ember;
using testing::to_cuda;
using testing::to_host;

std::vector<double> random_values(size_t n, uint64_t seed) {
  PhiloxStream rng(seed, 77);
  std::vector<double> v(n);
  for (double& x : v) x = 2.0 * rng.uniform() - 1.0;
  return v;
}

double max_rel_diff(const std::vector<double>& a, const std::vector<double>& b) {
  REQUIRE(a.size() == b.size());
  double worst = 0;
  for (size_t i = 0; i < a.size(); ++i) worst = std::max(worst, std::abs(a[i] - b[i]) / (1.0 + std::abs(b[i])));
  return worst;
}

// This build's cuDNN/cuBLAS table is there (a tests/support/skip.h predicate).
bool cudnn_in_build() { return cuda::cudnn_kernels() != nullptr; }
constexpr testing::needs kNeedsCudnn{
#if defined(EMBER_CUDASIM)
    "the CUDA emulator has no cuDNN",
#else
    "this build has no cuDNN (CUDNN=0)",
#endif
    cudnn_in_build};

// TF32 exists on sm 80 and newer.
bool tf32_gpu() { return testing::cuda_device_present() && cuda::compute_capability(0) >= 80; }
constexpr testing::needs kNeedsTf32{"TF32 needs an sm 80+ GPU", tf32_gpu};

// Runs f with the native table, then with the cuDNN table, and returns both results.
template <typename F>
std::pair<std::vector<double>, std::vector<double>> both(F&& f) {
  testing::select_native_kernels();
  auto native = f(cuda::native_kernels());
  testing::select_cudnn_kernels();
  auto cudnn = f(*cuda::cudnn_kernels());
  testing::select_native_kernels();
  return {native, cudnn};
}

// The tensors' values, one after another, on the host.
std::vector<double> concat_host(std::initializer_list<const Tensor*> tensors) {
  std::vector<double> all;
  for (const Tensor* t : tensors) {
    const auto v = to_host(*t);
    all.insert(all.end(), v.begin(), v.end());
  }
  return all;
}

// Batch norm of [8, 5, 49] activations of type dt, with parameters and
// statistics of type pdt: training forward and backward, then the inference
// forward; every output, from both tables. Inputs from seeds seed..seed+3.
std::pair<std::vector<double>, std::vector<double>> batch_norm_both(DType dt, DType pdt, uint64_t seed) {
  const int64_t N = 8, C = 5, HW = 49;
  const Tensor x = to_cuda(random_values(size_t(N * C * HW), seed), {N, C, HW}, dt);
  const Tensor gy = to_cuda(random_values(size_t(N * C * HW), seed + 1), {N, C, HW}, dt);
  const Tensor gamma = to_cuda(random_values(size_t(C), seed + 2), {C}, pdt);
  const Tensor beta = to_cuda(random_values(size_t(C), seed + 3), {C}, pdt);
  return both([&](const Kernels& k) {
    Tensor y = Tensor::empty({N, C, HW}, dt, Device::cuda(0)), mean = Tensor::empty({C}, pdt, Device::cuda(0));
    Tensor invstd = Tensor::empty({C}, pdt, Device::cuda(0)), rm = Tensor::zeros({C}, pdt, Device::cuda(0));
    Tensor rv = Tensor::full({C}, 1.0, pdt, Device::cuda(0));
    Tensor gx = Tensor::empty({N, C, HW}, dt, Device::cuda(0)), gg = Tensor::empty({C}, pdt, Device::cuda(0));
    Tensor gb = Tensor::empty({C}, pdt, Device::cuda(0)), ye = Tensor::empty({N, C, HW}, dt, Device::cuda(0));
    const Stream s = testing::cuda_stream();
    k.batch_norm_forward_train(dt, x.raw_data(), gamma.raw_data(), beta.raw_data(), y.raw_data(), mean.raw_data(),
                               invstd.raw_data(), rm.raw_data(), rv.raw_data(), N, C, HW, 0.1, 1e-5, s);
    k.batch_norm_backward_train(dt, x.raw_data(), gy.raw_data(), gamma.raw_data(), mean.raw_data(), invstd.raw_data(),
                                gx.raw_data(), gg.raw_data(), gb.raw_data(), N, C, HW, 1e-5, s);
    k.batch_norm_forward_eval(dt, x.raw_data(), gamma.raw_data(), beta.raw_data(), rm.raw_data(), rv.raw_data(),
                              ye.raw_data(), N, C, HW, 1e-5, s);
    return concat_host({&y, &mean, &invstd, &rm, &rv, &gx, &gg, &gb, &ye});
  });
}

// 3x3 max pooling, stride 2, pad 1, of [2, 3, 13, 11]: forward values and
// backward gradient, from both tables. Inputs from seeds seed, seed+1.
std::pair<std::vector<double>, std::vector<double>> max_pool_both(DType dt, uint64_t seed) {
  const Pool2dGeometry pg = make_pool2d_geometry(2, 3, 13, 11, 3, 3, 2, 2, 1, 1);
  const Tensor px = to_cuda(random_values(size_t(2 * 3 * 13 * 11), seed), {2, 3, 13, 11}, dt);
  const Tensor pgy = to_cuda(random_values(size_t(2 * 3 * pg.P * pg.Q), seed + 1), {2, 3, pg.P, pg.Q}, dt);
  return both([&](const Kernels& k) {
    Tensor y = Tensor::empty({2, 3, pg.P, pg.Q}, dt, Device::cuda(0));
    Tensor arg = Tensor::empty({2, 3, pg.P, pg.Q}, DType::i32, Device::cuda(0));
    Tensor gx = Tensor::empty(px.shape(), dt, Device::cuda(0));
    k.max_pool2d_forward(dt, pg, px.raw_data(), y.raw_data(), arg.data<int32_t>(), testing::cuda_stream());
    k.max_pool2d_backward(dt, pg, px.raw_data(), y.raw_data(), pgy.raw_data(), arg.data<int32_t>(), gx.raw_data(),
                          testing::cuda_stream());
    return concat_host({&y, &gx});
  });
}

// C = 0.7 op(A) op(B) + 0.3 C for [37, 71] x [71, 53], every transpose pair:
// the tables agree within tol. Inputs from seeds seed..seed+2.
void check_gemm(DType dt, uint64_t seed, double tol) {
  for (bool ta : {false, true})
    for (bool tb : {false, true}) {
      CAPTURE(ta);
      CAPTURE(tb);
      const int64_t M = 37, N = 53, K = 71;
      const Tensor A = to_cuda(random_values(size_t(M * K), seed), {M * K}, dt);
      const Tensor B = to_cuda(random_values(size_t(K * N), seed + 1), {K * N}, dt);
      const Tensor C0 = to_cuda(random_values(size_t(M * N), seed + 2), {M * N}, dt);
      auto mm = both([&](const Kernels& k) {
        Tensor C = C0.clone();
        k.gemm(dt, ta, tb, M, N, K, 0.7, A.raw_data(), ta ? M : K, B.raw_data(), tb ? K : N, 0.3, C.raw_data(), N,
               testing::cuda_stream());
        return to_host(C);
      });
      CHECK(max_rel_diff(mm.second, mm.first) < tol);
    }
}

}  // namespace

TEST_CASE("cudnn vs native: convolution forward, backward data, backward filter" *
          ember::testing::kNeedsCudaDevice * kNeedsCudnn) {
  REQUIRE(testing::cuda_available());
  REQUIRE(cudnn_in_build());
  const Conv2dGeometry geos[] = {make_conv2d_geometry(4, 16, 28, 28, 16, 3, 3, 1, 1, 1, 1),
                                 make_conv2d_geometry(2, 3, 31, 29, 8, 7, 7, 2, 2, 3, 3),
                                 make_conv2d_geometry(3, 32, 14, 14, 64, 1, 1, 2, 2, 0, 0)};
  for (DType dt : {DType::f32, DType::f64}) {
    for (const auto& g : geos) {
      CAPTURE(dtype_name(dt));
      CAPTURE(g.C);
      const Tensor x = to_cuda(random_values(size_t(g.N * g.C * g.H * g.W), 1), {g.N, g.C, g.H, g.W}, dt);
      const Tensor w = to_cuda(random_values(size_t(g.K * g.C * g.R * g.S), 2), {g.K, g.C, g.R, g.S}, dt);
      const Tensor gy = to_cuda(random_values(size_t(g.N * g.K * g.P * g.Q), 3), {g.N, g.K, g.P, g.Q}, dt);
      const double tol = dt == DType::f32 ? 1e-4 : 1e-10;
      auto fwd = both([&](const Kernels& k) {
        Tensor y = Tensor::empty({g.N, g.K, g.P, g.Q}, dt, Device::cuda(0));
        k.conv2d_forward(dt, g, x.raw_data(), w.raw_data(), y.raw_data(), testing::cuda_stream());
        return to_host(y);
      });
      CHECK(max_rel_diff(fwd.second, fwd.first) < tol);
      auto bwd_data = both([&](const Kernels& k) {
        Tensor gx = Tensor::empty(x.shape(), dt, Device::cuda(0));
        k.conv2d_backward_data(dt, g, gy.raw_data(), w.raw_data(), gx.raw_data(), testing::cuda_stream());
        return to_host(gx);
      });
      CHECK(max_rel_diff(bwd_data.second, bwd_data.first) < tol);
      auto bwd_filter = both([&](const Kernels& k) {
        Tensor gw = Tensor::empty(w.shape(), dt, Device::cuda(0));
        k.conv2d_backward_filter(dt, g, x.raw_data(), gy.raw_data(), gw.raw_data(), testing::cuda_stream());
        return to_host(gw);
      });
      CHECK(max_rel_diff(bwd_filter.second, bwd_filter.first) < tol * 10);  // long reductions
    }
  }
}

TEST_CASE("cudnn vs native: batch norm, max pooling, GEMM" * ember::testing::kNeedsCudaDevice * kNeedsCudnn) {
  REQUIRE(testing::cuda_available());
  REQUIRE(cudnn_in_build());
  for (DType dt : {DType::f32, DType::f64}) {
    CAPTURE(dtype_name(dt));
    const double tol = dt == DType::f32 ? 1e-4 : 1e-10;
    const auto bn = batch_norm_both(dt, dt, 4);
    CHECK(max_rel_diff(bn.second, bn.first) < tol * 10);
    const auto pool = max_pool_both(dt, 8);
    CHECK(max_rel_diff(pool.second, pool.first) < tol);
    check_gemm(dt, 10, tol);
  }
}

TEST_CASE("cudnn vs native in f16 and bf16: 16-bit tensors, f32 compute and f32 batch-norm parameters" *
          ember::testing::kNeedsCudaDevice * kNeedsCudnn) {
  REQUIRE(testing::cuda_available());
  REQUIRE(cudnn_in_build());
  for (const DType h : {DType::f16, DType::bf16}) {
    CAPTURE(dtype_name(h));
    const DType f = DType::f32;
    // Both round f32 results once to the 16-bit type: a few ulps of (1 + |value|),
    // 8x wider for bf16 (unit roundoff 2^-8 against f16's 2^-11).
    const double tol = h == DType::f16 ? 5e-3 : 4e-2;
    const Stream s = testing::cuda_stream();
    const Conv2dGeometry g = make_conv2d_geometry(4, 16, 14, 14, 16, 3, 3, 1, 1, 1, 1);
    const Tensor x = to_cuda(random_values(size_t(g.N * g.C * g.H * g.W), 21), {g.N, g.C, g.H, g.W}, h);
    const Tensor w = to_cuda(random_values(size_t(g.K * g.C * g.R * g.S), 22), {g.K, g.C, g.R, g.S}, h);
    const Tensor gy = to_cuda(random_values(size_t(g.N * g.K * g.P * g.Q), 23), {g.N, g.K, g.P, g.Q}, h);
    auto conv = both([&](const Kernels& k) {
      Tensor y = Tensor::empty({g.N, g.K, g.P, g.Q}, h, Device::cuda(0));
      Tensor gx = Tensor::empty(x.shape(), h, Device::cuda(0)), gw = Tensor::empty(w.shape(), h, Device::cuda(0));
      k.conv2d_forward(h, g, x.raw_data(), w.raw_data(), y.raw_data(), s);
      k.conv2d_backward_data(h, g, gy.raw_data(), w.raw_data(), gx.raw_data(), s);
      k.conv2d_backward_filter(h, g, x.raw_data(), gy.raw_data(), gw.raw_data(), s);
      return concat_host({&y, &gx, &gw});
    });
    CHECK(max_rel_diff(conv.second, conv.first) < tol * 4);  // filter-gradient sums over N*P*Q = 784 terms

    const auto bn = batch_norm_both(h, f, 24);
    CHECK(max_rel_diff(bn.second, bn.first) < tol);
    const auto pool = max_pool_both(h, 28);
    CHECK(max_rel_diff(pool.second, pool.first) < tol);
    check_gemm(h, 30, tol);
  }
}

namespace {

// Host values -> a CPU tensor of f64 (the references below).
Tensor cpu_f64(const std::vector<double>& values, const Shape& shape) {
  return Tensor::from_vector(values, shape, DType::f64, Device::cpu());
}
std::vector<double> absolute(std::vector<double> v) {
  for (double& x : v) x = std::abs(x);
  return v;
}

// The largest |got - ref| relative to the sum of |terms| of each output (the
// scale of its rounding error): about 2^-11 per product for TF32 inputs, about
// 2^-24 times a few for f32 (worst over ~10^5 outputs: ~1e-4 vs ~1e-8).
double max_error_per_term(const std::vector<double>& got, const std::vector<double>& ref,
                          const std::vector<double>& sum_abs) {
  REQUIRE(got.size() == ref.size());
  REQUIRE(got.size() == sum_abs.size());
  double worst = 0;
  for (size_t i = 0; i < got.size(); ++i) worst = std::max(worst, std::abs(got[i] - ref[i]) / (sum_abs[i] + 1e-30));
  return worst;
}

}  // namespace

TEST_CASE("cudnn: TF32 on runs f32 convolutions and GEMMs with TF32 inputs, off keeps f32 precision" *
          ember::testing::kNeedsCudaDevice * kNeedsCudnn * kNeedsTf32) {
  REQUIRE(testing::cuda_available());
  testing::select_cudnn_kernels();
  const Kernels& k = *cuda::cudnn_kernels();
  const Stream s = testing::cuda_stream();
  const Kernels& cpu = testing::cpu_table();

  // A 3x3 convolution of 64 channels: 576 products per output.
  const Conv2dGeometry g = make_conv2d_geometry(8, 64, 14, 14, 64, 3, 3, 1, 1, 1, 1);
  const Tensor x = to_cuda(random_values(size_t(g.N * g.C * g.H * g.W), 41), {g.N, g.C, g.H, g.W}, DType::f32);
  const Tensor w = to_cuda(random_values(size_t(g.K * g.C * g.R * g.S), 42), {g.K, g.C, g.R, g.S}, DType::f32);
  const std::vector<double> xv = to_host(x), wv = to_host(w);  // the f32 values, exactly
  const Shape yshape{g.N, g.K, g.P, g.Q};
  auto cpu_conv = [&](const std::vector<double>& a, const std::vector<double>& b) {
    const Tensor ca = cpu_f64(a, x.shape()), cb = cpu_f64(b, w.shape());
    Tensor y = Tensor::empty(yshape, DType::f64, Device::cpu());
    cpu.conv2d_forward(DType::f64, g, ca.raw_data(), cb.raw_data(), y.raw_data(), nullptr);
    return y.to_double_vector();
  };
  const std::vector<double> conv_ref = cpu_conv(xv, wv), conv_scale = cpu_conv(absolute(xv), absolute(wv));
  auto conv_error = [&](bool tf32) {
    cuda::set_tf32(tf32);
    Tensor y = Tensor::empty(yshape, DType::f32, Device::cuda(0));
    k.conv2d_forward(DType::f32, g, x.raw_data(), w.raw_data(), y.raw_data(), s);
    return max_error_per_term(to_host(y), conv_ref, conv_scale);
  };

  // C = A B, [256, 576] x [576, 256].
  const int64_t M = 256, N = 256, K = 576;
  const Tensor A = to_cuda(random_values(size_t(M * K), 43), {M, K}, DType::f32);
  const Tensor B = to_cuda(random_values(size_t(K * N), 44), {K, N}, DType::f32);
  auto cpu_gemm = [&](const std::vector<double>& a, const std::vector<double>& b) {
    const Tensor ca = cpu_f64(a, A.shape()), cb = cpu_f64(b, B.shape());
    Tensor c = Tensor::zeros({M, N}, DType::f64, Device::cpu());
    cpu.gemm(DType::f64, false, false, M, N, K, 1.0, ca.raw_data(), K, cb.raw_data(), N, 0.0, c.raw_data(), N, nullptr);
    return c.to_double_vector();
  };
  const std::vector<double> gemm_ref = cpu_gemm(to_host(A), to_host(B));
  const std::vector<double> gemm_scale = cpu_gemm(absolute(to_host(A)), absolute(to_host(B)));
  auto gemm_error = [&](bool tf32) {
    cuda::set_tf32(tf32);
    Tensor c = Tensor::zeros({M, N}, DType::f32, Device::cuda(0));
    k.gemm(DType::f32, false, false, M, N, K, 1.0, A.raw_data(), K, B.raw_data(), N, 0.0, c.raw_data(), N, s);
    return max_error_per_term(to_host(c), gemm_ref, gemm_scale);
  };

  for (const char* what : {"conv2d_forward", "gemm"}) {
    CAPTURE(what);
    const bool conv = std::string(what) == "conv2d_forward";
    const double off = conv ? conv_error(false) : gemm_error(false);
    const double on = conv ? conv_error(true) : gemm_error(true);
    const double off_again = conv ? conv_error(false) : gemm_error(false);  // the choice is cached per math mode
    MESSAGE(what << ": worst error per unit of sum |terms|: f32 " << off << ", TF32 " << on);
    CHECK(off < 1e-6);
    CHECK(off_again < 1e-6);
    CHECK(on < 2.5e-3);       // within TF32: 10 mantissa bits per input, either rounding
    CHECK(on > 1e-6);         // and TF32 was used: far beyond f32's rounding
    CHECK(on > 20 * off);
  }
  cuda::set_tf32(false);
  testing::select_native_kernels();
}

TEST_CASE("cudnn: benchmark mode times the algorithms on the caller's buffers and agrees with the heuristics' picks" *
          ember::testing::kNeedsCudaDevice * kNeedsCudnn) {
  REQUIRE(testing::cuda_available());
  testing::select_cudnn_kernels();
  cuda::set_cudnn_deterministic(true);  // so that a second run of the cached choice gives the same bits
  const Kernels& k = *cuda::cudnn_kernels();
  const Stream s = testing::cuda_stream();
  const Conv2dGeometry geos[] = {make_conv2d_geometry(8, 32, 28, 28, 64, 3, 3, 2, 2, 1, 1),
                                 make_conv2d_geometry(4, 64, 14, 14, 64, 3, 3, 1, 1, 1, 1),
                                 make_conv2d_geometry(4, 64, 14, 14, 256, 1, 1, 1, 1, 0, 0)};
  for (const DType dt : {DType::f32, DType::f16}) {
    for (const auto& g : geos) {
      CAPTURE(dtype_name(dt));
      CAPTURE(g.K);
      const Tensor x = to_cuda(random_values(size_t(g.N * g.C * g.H * g.W), 51), {g.N, g.C, g.H, g.W}, dt);
      const Tensor w = to_cuda(random_values(size_t(g.K * g.C * g.R * g.S), 52), {g.K, g.C, g.R, g.S}, dt);
      const Tensor gy = to_cuda(random_values(size_t(g.N * g.K * g.P * g.Q), 53), {g.N, g.K, g.P, g.Q}, dt);
      auto passes = [&](bool benchmark) {
        cuda::set_cudnn_benchmark(benchmark);
        Tensor y = Tensor::empty(gy.shape(), dt, Device::cuda(0));
        Tensor gx = Tensor::empty(x.shape(), dt, Device::cuda(0)), gw = Tensor::empty(w.shape(), dt, Device::cuda(0));
        k.conv2d_forward(dt, g, x.raw_data(), w.raw_data(), y.raw_data(), s);
        k.conv2d_backward_data(dt, g, gy.raw_data(), w.raw_data(), gx.raw_data(), s);
        k.conv2d_backward_filter(dt, g, x.raw_data(), gy.raw_data(), gw.raw_data(), s);
        return concat_host({&y, &gx, &gw});
      };
      const std::vector<double> heuristic = passes(false);
      const size_t in_use = cuda::device_allocator_stats().bytes_in_use;
      const std::vector<double> timed = passes(true);  // first use of the shape in this mode: timed
      const std::vector<double> again = passes(true);  // cached
      CHECK(cuda::device_allocator_stats().bytes_in_use == in_use);  // Find's workspace went back to the cache
      // Different algorithms round differently. Timing may pick FFT or Winograd algorithms, whose f32 results
      // are further from exact than direct summation (the H200 gave 1.1e-4 on the stride-2 filter gradient, a
      // sum of 1568 products per output); f16 within a few of its ulps. A wrong buffer is off by O(1).
      const double tol = dt == DType::f32 ? 1e-3 : 2e-2;
      CHECK(max_rel_diff(timed, heuristic) < tol);
      CHECK(max_rel_diff(again, timed) == 0.0);  // deterministic algorithms are preferred
    }
  }
  cuda::set_cudnn_benchmark(false);
  cuda::set_cudnn_deterministic(false);
  testing::select_native_kernels();
}

TEST_CASE("cudnn: --cudnn-algo-cache keeps the timed choices in a file a later run reads; another GPU's file is "
          "replaced, a malformed one is an error naming its line" * ember::testing::kNeedsCudaDevice * kNeedsCudnn) {
  REQUIRE(testing::cuda_available());
  testing::select_cudnn_kernels();
  const Kernels& k = *cuda::cudnn_kernels();
  const Stream s = testing::cuda_stream();
  const testing::TempDir dir;
  const std::string path = (dir.path / "algos.txt").string();
  auto read_back = [&] {
    const std::vector<uint8_t> bytes = read_file(path);
    return cuda::parse_algorithm_cache(std::string(bytes.begin(), bytes.end()), path);
  };
  auto run_all = [&](const Conv2dGeometry& g) {  // the three passes of g in f32
    const Tensor x = to_cuda(random_values(size_t(g.N * g.C * g.H * g.W), 61), {g.N, g.C, g.H, g.W}, DType::f32);
    const Tensor w = to_cuda(random_values(size_t(g.K * g.C * g.R * g.S), 62), {g.K, g.C, g.R, g.S}, DType::f32);
    Tensor y = Tensor::empty({g.N, g.K, g.P, g.Q}, DType::f32, Device::cuda(0));
    Tensor gx = Tensor::empty(x.shape(), DType::f32, Device::cuda(0)), gw = Tensor::empty(w.shape(), DType::f32, Device::cuda(0));
    k.conv2d_forward(DType::f32, g, x.raw_data(), w.raw_data(), y.raw_data(), s);
    k.conv2d_backward_data(DType::f32, g, y.raw_data(), w.raw_data(), gx.raw_data(), s);
    k.conv2d_backward_filter(DType::f32, g, x.raw_data(), y.raw_data(), gw.raw_data(), s);
    REQUIRE(cudaStreamSynchronize(static_cast<cudaStream_t>(s)) == cudaSuccess);
  };
  // shapes no other test uses, so the choices are new to this process
  const Conv2dGeometry first = make_conv2d_geometry(3, 24, 19, 19, 40, 3, 3, 1, 1, 1, 1);
  const Conv2dGeometry second = make_conv2d_geometry(3, 40, 19, 19, 24, 1, 1, 1, 1, 0, 0);
  cuda::set_cudnn_benchmark(true);
  cuda::set_cudnn_algorithm_cache(path);  // no file yet: nothing to read
  run_all(first);
  const cuda::AlgorithmCacheFile written = read_back();
  CHECK(written.device.find(" | cuDNN ") != std::string::npos);
  int timed_first = 0;
  for (const auto& r : written.records)
    timed_first += r.key[3] == 1 && r.key[5] == 3 && r.key[6] == 24 && r.key[9] == 40;  // benchmark mode, N, C, K
  CHECK(timed_first == 3);  // one per direction

  // A later run: the file's choices are taken as they are. A forward choice planted for `second`
  // (algorithm 0, implicit GEMM, no workspace) is used and written back unchanged with the new ones.
  cuda::AlgorithmCacheFile planted = written;
  cuda::AlgorithmRecord forward = planted.records.front();
  forward.key = {0, int64_t(DType::f32), forward.key[2], 1, forward.key[4], 3, 40, 19, 19, 24, 1, 1, 1, 1, 0, 0};
  forward.algo = 0, forward.workspace = 0;
  planted.records.push_back(forward);
  const std::string planted_text = cuda::format_algorithm_cache(planted);
  write_file_atomic(path, planted_text.data(), planted_text.size());
  cuda::set_cudnn_algorithm_cache(path);
  run_all(second);
  const cuda::AlgorithmCacheFile after = read_back();
  bool kept = false;
  for (const auto& r : after.records) kept = kept || (r.key == forward.key && r.algo == 0 && r.workspace == 0);
  CHECK(kept);
  CHECK(after.records.size() == written.records.size() + 3);

  // Made on another GPU: ignored, then replaced by this GPU's choices.
  const std::string other = "ember cudnn algorithm cache 2\ndevice: Some Other GPU | cuDNN 1\n"
                            "0 2 1 1 0 64 3 224 224 64 7 7 2 2 3 3 0 -> 1 1605632 1\n";
  write_file_atomic(path, other.data(), other.size());
  cuda::set_cudnn_algorithm_cache(path);
  run_all(make_conv2d_geometry(2, 24, 11, 11, 40, 3, 3, 2, 2, 1, 1));
  CHECK(read_back().device == written.device);

  // Malformed: the error names the file and the line.
  const std::string bad = "ember cudnn algorithm cache 2\ndevice: " + written.device + "\n0 1 2 -> 3\n";
  write_file_atomic(path, bad.data(), bad.size());
  CHECK(testing::thrown_message([&] { cuda::set_cudnn_algorithm_cache(path); }).find(path + ":3: expected 17 numbers") ==
        0);
  cuda::set_cudnn_algorithm_cache("");
  cuda::set_cudnn_benchmark(false);
  testing::select_native_kernels();
}
