// tests/cuda/test_cuda_conv_batch_norm.cpp — the CUDA table's
// conv2d_batch_norm_forward_train (cuda/kernels/conv_batch_norm.cu): on the
// mma.sync path with 16-bit outputs, batch norm's statistics are taken in
// the convolution's epilogue and finalized by its last block. Checked
// against the unfused entries (the convolution, then batch norm's own
// statistics pass): the convolution's output is the same bits, and the
// saved mean and inverse std, the running averages and the normalised
// output agree to the rounding of their types, for batch norm, + ReLU, and
// + residual + ReLU, at both block tiles, in f16 and bf16, with running
// means far from the batch's; and every other convolution (f32, NCHW)
// takes the unfused entries bit for bit. The fused path is also one launch
// fewer (the statistics pass).
// Runs on the emulator (build/test_sim) and on a GPU (build/test_ember).
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "cuda/cuda_kernels.h"
#include "cuda/kernels/conv_mma.h"
#include "engine/device_work.h"
#include "tests/cuda/cuda_test_env.h"
#include "tests/cuda/device_buffer.h"
#include "tests/cuda/mma_operands.h"

using namespace ember;
using ember::testing::cuda_available;
using ember::testing::cuda_stream;
using ember::testing::DeviceBuffer;
using ember::testing::MmaOperand;
using ember::testing::random_mma_operand;
using ember::testing::stored_value;
using ember::testing::Tf32On;

namespace {

enum class After { none, relu, add_relu };

std::vector<float> uniform(size_t n, float lo, float hi, unsigned seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(lo, hi);
  std::vector<float> v(n);
  for (auto& e : v) e = u(rng);
  return v;
}

// Runs the entry and the unfused pair on the same inputs and compares.
// fused: whether the entry must take the statistics in the convolution
// (then within rounding, else bit for bit).
void check_entry(DType dt, bool channels_last, After after, bool fused) {
  CAPTURE(dtype_name(dt));
  CAPTURE(channels_last);
  CAPTURE(int(after));
  // 2 images of 9x7, 24 -> 40 channels, 3x3: 126 output pixels, partial tiles both ways.
  Conv2dGeometry g = make_conv2d_geometry(2, 24, 9, 7, 40, 3, 3, 1, 1, 1, 1);
  g.channels_last = channels_last;
  REQUIRE(cuda::conv_mma_fuses_batch_norm(dt, g) == fused);
  const int64_t M = g.N * g.P * g.Q, K = g.K;
  const size_t nk = size_t(K);
  std::mt19937 rng(7);
  const MmaOperand x = random_mma_operand(size_t(g.N * g.H * g.W * g.C), dt, rng);
  const MmaOperand w = random_mma_operand(size_t(g.K * g.R * g.S * g.C), dt, rng);
  const MmaOperand r = random_mma_operand(size_t(M * K), dt, rng);
  // Parameters and statistics: f32 for every dtype here; running means far from the batch's (about 0).
  const std::vector<float> gamma = uniform(nk, 0.5f, 1.5f, 1), beta = uniform(nk, -0.5f, 0.5f, 2);
  const std::vector<float> running_mean = uniform(nk, -3.0f, 3.0f, 3), running_var = uniform(nk, 0.5f, 2.0f, 4);
  DeviceBuffer<unsigned char> dx(x.bytes), dw(w.bytes), dr(r.bytes);
  DeviceBuffer<float> dgamma(gamma), dbeta(beta);
  const size_t out_bytes = size_t(M * K) * dtype_size(dt);
  const double momentum = 0.1, eps = 1e-5;
  const void* residual = after == After::add_relu ? static_cast<const void*>(dr.p) : nullptr;
  const bool relu = after != After::none;
  const Kernels& k = testing::cuda_table();

  // Unfused: the convolution, then batch norm with its own statistics pass.
  DeviceBuffer<unsigned char> y_conv0(out_bytes), y0(out_bytes);
  DeviceBuffer<float> mean0(nk), invstd0(nk), rm0(running_mean), rv0(running_var);
  REQUIRE(cudaDeviceSynchronize() == cudaSuccess);
  const DeviceWorkCounts before_unfused = device_work_counts();
  ember::compose_conv2d_batch_norm_forward_train(k, dt, g, dx.p, dw.p, y_conv0.p, residual, dgamma.p, dbeta.p, y0.p,
                                                 mean0.p, invstd0.p, rm0.p, rv0.p, momentum, eps, relu, cuda_stream());
  REQUIRE(cudaDeviceSynchronize() == cudaSuccess);
  const int64_t unfused_launches = (device_work_counts() - before_unfused).launches();

  // The entry.
  DeviceBuffer<unsigned char> y_conv1(out_bytes), y1(out_bytes);
  DeviceBuffer<float> mean1(nk), invstd1(nk), rm1(running_mean), rv1(running_var);
  const DeviceWorkCounts before_entry = device_work_counts();
  k.conv2d_batch_norm_forward_train(dt, g, dx.p, dw.p, y_conv1.p, residual, dgamma.p, dbeta.p, y1.p, mean1.p,
                                    invstd1.p, rm1.p, rv1.p, momentum, eps, relu, cuda_stream());
  REQUIRE(cudaDeviceSynchronize() == cudaSuccess);
  const int64_t entry_launches = (device_work_counts() - before_entry).launches();
  CHECK(entry_launches == unfused_launches - (fused ? 1 : 0));  // fused: no statistics pass

  CHECK(y_conv0.host() == y_conv1.host());  // the same convolution, the same bits
  const auto close = [&](const std::vector<float>& u, const std::vector<float>& v) {
    int64_t bad = 0;
    for (size_t i = 0; i < u.size(); ++i) {
      const bool ok = fused ? std::fabs(double(u[i]) - double(v[i])) <= 2e-7 * std::fabs(double(u[i])) + 1e-12
                            : u[i] == v[i];
      if (!ok && bad++ < 3) MESSAGE("[" << i << "] " << v[i] << ", want " << u[i]);
    }
    return bad == 0;
  };
  CHECK(close(mean0.host(), mean1.host()));
  CHECK(close(invstd0.host(), invstd1.host()));
  CHECK(close(rm0.host(), rm1.host()));
  CHECK(close(rv0.host(), rv1.host()));
  // The normalised output: at most one unit of the storage type apart (equal when not fused).
  const std::vector<unsigned char> out0 = y0.host(), out1 = y1.host();
  if (!fused) {
    CHECK(out0 == out1);
    return;
  }
  const double unit = dt == DType::f16 ? 1.0 / 1024 : 1.0 / 128;
  int64_t bad = 0, differ = 0;
  for (size_t i = 0; i < size_t(M * K); ++i) {
    const double u = stored_value(out0, i, dt), v = stored_value(out1, i, dt);
    differ += u != v;
    if (std::fabs(u - v) > unit * std::fabs(u) + 1e-6 && bad++ < 3) MESSAGE("y[" << i << "] = " << v << ", want " << u);
  }
  CHECK(bad == 0);
  CHECK(differ * 100 <= M * K);  // a rounding tie here and there, not a different normalisation
}

}  // namespace

TEST_CASE("cuda conv batch norm: statistics taken in the mma.sync epilogue agree with batch norm's own, f16 and bf16" *
          ember::testing::kNeedsCudaDevice) {
  REQUIRE(cuda_available());
  for (DType dt : {DType::f16, DType::bf16})
    for (After after : {After::none, After::relu, After::add_relu}) check_entry(dt, true, after, true);
}

TEST_CASE("cuda conv batch norm: every other convolution runs the unfused entries, bit for bit" *
          ember::testing::kNeedsCudaDevice) {
  REQUIRE(cuda_available());
  check_entry(DType::f16, false, After::relu, false);  // NCHW
  check_entry(DType::f32, true, After::add_relu, false);  // f32 channels-last, TF32 off
  const Tf32On tf32;
  check_entry(DType::f32, true, After::none, false);  // TF32 mma.sync: stores pairs, no staged tile
}

TEST_CASE("cuda conv batch norm: both block tiles take the statistics" * ember::testing::kNeedsCudaDevice) {
  REQUIRE(cuda_available());
  // Direct calls at a forced tile, against the table's batch norm.
  for (auto tile : {cuda::MmaConvTileChoice::small, cuda::MmaConvTileChoice::large}) {
    CAPTURE(tile == cuda::MmaConvTileChoice::large);
    Conv2dGeometry g = make_conv2d_geometry(3, 16, 10, 9, 24, 3, 3, 2, 2, 1, 1);
    g.channels_last = true;
    const int64_t M = g.N * g.P * g.Q, K = g.K;
    const size_t nk = size_t(K);
    std::mt19937 rng(11);
    const MmaOperand x = random_mma_operand(size_t(g.N * g.H * g.W * g.C), DType::bf16, rng);
    const MmaOperand w = random_mma_operand(size_t(g.K * g.R * g.S * g.C), DType::bf16, rng);
    const std::vector<float> gamma = uniform(nk, 0.5f, 1.5f, 5), beta = uniform(nk, -0.5f, 0.5f, 6);
    const std::vector<float> running_mean = uniform(nk, -1.0f, 1.0f, 7), running_var(nk, 1.0f);
    DeviceBuffer<unsigned char> dx(x.bytes), dw(w.bytes), y_conv(size_t(M * K) * 2);
    DeviceBuffer<float> dgamma(gamma), dbeta(beta), mean0(nk), invstd0(nk), rm0(running_mean), rv0(running_var);
    DeviceBuffer<float> mean1(nk), invstd1(nk), rm1(running_mean), rv1(running_var), coef(3 * nk);
    DeviceBuffer<unsigned char> y0(size_t(M * K) * 2);
    cuda::conv2d_forward_mma_batch_norm(DType::bf16, g, dx.p, dw.p, y_conv.p,
                                        cuda::MmaBatchNormArgs{dgamma.p, dbeta.p, mean1.p, invstd1.p, rm1.p, rv1.p,
                                                               coef.p, 0.1, 1e-5},
                                        cuda_stream(), tile);
    testing::cuda_table().batch_norm_forward_train(DType::bf16, y_conv.p, dgamma.p, dbeta.p, y0.p, mean0.p, invstd0.p,
                                                   rm0.p, rv0.p, M, K, 1, 0.1, 1e-5, cuda_stream());
    for (const auto& [u, v] : {std::pair{mean0.host(), mean1.host()}, std::pair{invstd0.host(), invstd1.host()},
                               std::pair{rm0.host(), rm1.host()}, std::pair{rv0.host(), rv1.host()}})
      for (size_t i = 0; i < u.size(); ++i) CHECK(std::fabs(double(u[i]) - double(v[i])) <= 2e-7 * std::fabs(double(u[i])) + 1e-12);
  }
}
