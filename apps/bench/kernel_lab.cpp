// apps/bench/kernel_lab.cpp — ember's CUDA kernels one op at a time, in the
// spirit of llm.c's dev/cuda: each op runs on a chosen shape, is checked
// against the CPU kernel, and then
//   build/kernel_lab       (nvcc, a GPU)      is timed: median of --reps
//                                             launches, GFLOP/s and GB/s;
//   build/kernel_lab_sim   (the emulator,     is profiled: per kernel it
//                           no GPU needed)    launches, sectors per global
//                                             request, shared-memory bank
//                                             conflicts, active lanes,
//                                             barriers, and a roofline
//                                             estimate on named GPUs.
// Same source; build/kernel_lab_sim links the profiler's instrumented copy
// of the kernels (libember_cudasim_profile.a). See cuda/sim/README.md,
// "Profiling".
//
//   build/kernel_lab_sim --op conv2d_forward --n 8 --c 16 --hw 28 --k 16
//   build/kernel_lab_sim --op all --lines 4
//   build/kernel_lab_sim --op gemm-ladder --m 128 --ncols 128 --kdim 64 --lines 2
//   build/kernel_lab --op gemm --m 4096 --ncols 4096 --kdim 4096 --reps 20
//   build/kernel_lab --op all --dtype f16 --tensor-cores 0     (f16 on the FP32 pipes)
//   build/kernel_lab_sim --op conv2d_forward --layout nhwc --tf32 1   (f32 on TF32 mma.sync)
//   build/kernel_lab_sim --op bn-stats-ladder --lines 1         (two passes -> Welford -> ember's)
//   build/kernel_lab_sim --op conv-ladder --lines 1             (direct -> implicit GEMM -> tap table)
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "apps/training/flags.h"
#include "engine/bfloat16.h"
#include "engine/error.h"
#include "engine/half.h"
#include "ops/kernels.h"

#if defined(EMBER_CUDA) || defined(EMBER_CUDASIM)
#include <cuda_runtime.h>

#include "cuda/cuda_device.h"
#include "cuda/cuda_kernels.h"
#include "cuda/lab/batch_norm_versions.h"
#include "cuda/lab/conv_versions.h"
#include "cuda/lab/gemm_tensor_versions.h"
#include "cuda/lab/gemm_versions.h"
#if defined(EMBER_CUDASIM)
#include "cuda/sim/cudasim.h"
#endif
#endif

namespace ember {
namespace {

#if defined(EMBER_CUDA) || defined(EMBER_CUDASIM)

void cuda_ok(cudaError_t e, const char* what) {
  EMBER_CHECK(e == cudaSuccess, what, ": ", cudaGetErrorString(e));
}

// A buffer of floats on the host and its copy on the device in `dt` (f32,
// f16 or bf16). A 16-bit upload first rounds the host values to dt, so the
// CPU reference computes on the very numbers the GPU sees. With shift = 1
// the device copy starts one element into its allocation (dev points
// there), off the 16-byte alignment of cudaMalloc.
struct Buffer {
  std::vector<float> host;
  void* base = nullptr;
  void* dev = nullptr;
  DType dt;
  explicit Buffer(size_t n, std::mt19937* rng = nullptr, DType type = DType::f32, size_t shift = 0)
      : host(n, 0.0f), dt(type) {
    if (rng) {
      std::uniform_real_distribution<float> u(-1.0f, 1.0f);
      for (float& v : host) v = u(*rng);
    }
    cuda_ok(cudaMalloc(&base, (std::max<size_t>(1, n) + shift) * dtype_size(dt)), "cudaMalloc");
    dev = static_cast<char*>(base) + shift * dtype_size(dt);
    upload();
  }
  ~Buffer() { cudaFree(base); }
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
  void upload() {
    if (dt == DType::f32) {
      cuda_ok(cudaMemcpy(dev, host.data(), host.size() * sizeof(float), cudaMemcpyHostToDevice), "upload");
      return;
    }
    std::vector<uint16_t> bits(host.size());
    for (size_t i = 0; i < host.size(); ++i) {
      bits[i] = dt == DType::f16 ? float_to_half(host[i]) : float_to_bf16(host[i]);
      host[i] = dt == DType::f16 ? half_to_float(bits[i]) : bf16_to_float(bits[i]);
    }
    cuda_ok(cudaMemcpy(dev, bits.data(), bits.size() * 2, cudaMemcpyHostToDevice), "upload");
  }
  std::vector<float> download() const {
    std::vector<float> out(host.size());
    if (dt == DType::f32) {
      cuda_ok(cudaMemcpy(out.data(), dev, out.size() * sizeof(float), cudaMemcpyDeviceToHost), "download");
      return out;
    }
    std::vector<uint16_t> bits(host.size());
    cuda_ok(cudaMemcpy(bits.data(), dev, bits.size() * 2, cudaMemcpyDeviceToHost), "download");
    for (size_t i = 0; i < out.size(); ++i) out[i] = dt == DType::f16 ? half_to_float(bits[i]) : bf16_to_float(bits[i]);
    return out;
  }
};

struct Shape {
  int64_t m = 256, n_gemm = 256, kdim = 256;           // gemm
  int64_t n = 8, c = 16, hw = 28, k = 16, r = 3, stride = 1, pad = 1;  // convolution, batch norm, elementwise
  DType dt = DType::f32;  // gemm, the convolutions and the memory-bound ops: f32, f16 or bf16
  bool misalign = false;  // memory-bound ops: operands one element off 16-byte alignment
  bool channels_last = false;  // convolutions: NHWC images, KRSC filters
  double bn_offset = 100;  // batch-norm statistics ladder: added to x, so that |mean| >> std
};

// One op of the lab: what it computes, how to run it on each backend, and
// what to compare.
struct LabOp {
  std::string name, shape;
  double flops = 0, bytes = 0;       // per call, for GFLOP/s and GB/s
  std::function<void()> run_cuda;    // one call of the CUDA kernel(s)
  std::function<void()> run_cpu;     // the CPU reference, into `expected`
  std::function<std::vector<float>()> result;
  std::vector<float>* expected = nullptr;
  // Non-empty for a version that exists to show a failure: failing the
  // check is then reported with this reason and does not fail the run.
  std::string known_failure;
};

Conv2dGeometry conv_geometry(const Shape& s) {
  Conv2dGeometry g = make_conv2d_geometry(s.n, s.c, s.hw, s.hw, s.k, s.r, s.r, s.stride, s.stride, s.pad, s.pad);
  g.channels_last = s.channels_last;
  return g;
}

std::string conv_text(const Conv2dGeometry& g) {
  return cat("x [", g.N, ",", g.C, ",", g.H, ",", g.W, "] w [", g.K, ",", g.C, ",", g.R, ",", g.S, "] stride ",
             g.stride_h, " pad ", g.pad_h, " -> y [", g.N, ",", g.K, ",", g.P, ",", g.Q, "]",
             g.channels_last ? " (NCHW sizes, stored channels-last)" : "");
}

// Builds the op `name` on `shape`; the buffers live in `keep`.
LabOp make_op(const std::string& name, const Shape& s, std::vector<std::unique_ptr<Buffer>>& keep,
              std::vector<std::vector<float>>& refs, std::mt19937& rng) {
  const Kernels& cpu = cpu_kernels();
  auto buffer = [&](size_t n, bool random) {
    keep.push_back(std::make_unique<Buffer>(n, random ? &rng : nullptr, s.dt));
    return keep.back().get();
  };
  // an operand of the memory-bound ops (shifted off alignment with --misalign 1), and an f32 parameter
  auto operand = [&](size_t n, bool random) {
    keep.push_back(std::make_unique<Buffer>(n, random ? &rng : nullptr, s.dt, s.misalign ? 1 : 0));
    return keep.back().get();
  };
  auto param = [&](size_t n, bool random) {
    keep.push_back(std::make_unique<Buffer>(n, random ? &rng : nullptr, DType::f32));
    return keep.back().get();
  };
  refs.emplace_back();
  std::vector<float>* expected = &refs.back();
  LabOp op;
  op.name = name;
  op.expected = expected;
  const DType f32 = DType::f32, dt = s.dt;
  const double elem = double(dtype_size(dt));
  const bool ladder = name.rfind("gemm/", 0) == 0;
  const bool tensor_rung = name.rfind("gemm/tensor/", 0) == 0;
  const bool conv_rung = name.rfind("conv2d_forward/", 0) == 0;
  const bool memory_bound = name == "add" || name == "add_relu" || name == "relu_backward" ||
                            name.rfind("batch_norm_add_relu_", 0) == 0;
  const bool typed = name == "gemm" || (name.rfind("conv2d_", 0) == 0 && !conv_rung) || memory_bound;
  EMBER_CHECK(!tensor_rung || dt == DType::f16, "--op ", name, " needs --dtype f16");
  EMBER_CHECK(dt == f32 || tensor_rung || (typed && !ladder), "--op ", name, " runs in f32 only (--dtype ",
              dtype_name(dt), " is for gemm, gemm/tensor/..., the convolutions and the memory-bound ops)");
  EMBER_CHECK(!s.misalign || memory_bound, "--misalign 1 is for the memory-bound ops, not ", name);
  if (name == "gemm" || ladder) {
    const int64_t M = s.m, N = s.n_gemm, K = s.kdim;
    Buffer *a = buffer(size_t(M * K), true), *b = buffer(size_t(K * N), true), *c = buffer(size_t(M * N), false);
    op.shape = cat("C [", M, ",", N, "] = A [", M, ",", K, "] B [", K, ",", N, "]");
    op.flops = 2.0 * double(M) * double(N) * double(K);
    op.bytes = elem * double(M * K + K * N + M * N);
    if (name == "gemm") {
      op.run_cuda = [=] { cuda::gemm(dt, false, false, M, N, K, 1.0, a->dev, K, b->dev, N, 0.0, c->dev, N, nullptr); };
    } else if (tensor_rung) {  // "gemm/tensor/<variant>" (cuda/lab/gemm_tensor_versions.cu)
      const std::string variant = name.substr(12);
      op.run_cuda = [=] { cuda::lab::gemm_tensor_version(variant, M, N, K, a->dev, b->dev, c->dev, nullptr); };
    } else {  // "gemm/<version>/<bx>x<by>": a rung of the lab's ladder (cuda/lab/gemm_versions.cu)
      const std::string rest = name.substr(5);
      const size_t slash = rest.find('/'), x = rest.find('x', slash == std::string::npos ? 0 : slash);
      EMBER_CHECK(slash != std::string::npos && x != std::string::npos, "--op ", name,
                  ": expected gemm/<version>/<block x>x<block y>");
      const std::string version = rest.substr(0, slash);
      const int bx = std::atoi(rest.substr(slash + 1, x - slash - 1).c_str()), by = std::atoi(rest.substr(x + 1).c_str());
      cuda::lab::GemmVersion v{};
      if (version == "naive_rows")
        v = cuda::lab::GemmVersion::naive_rows;
      else if (version == "naive_cols")
        v = cuda::lab::GemmVersion::naive_cols;
      else if (version == "shared_tiles")
        v = cuda::lab::GemmVersion::shared_tiles;
      else if (version == "vector_tiles")
        v = cuda::lab::GemmVersion::vector_tiles;
      else if (version == "vector_double")
        v = cuda::lab::GemmVersion::vector_double;
      else
        fail(cat("--op ", name, ": unknown GEMM version ", version,
                 " (naive_rows, naive_cols, shared_tiles, vector_tiles, vector_double)"));
      op.run_cuda = [=] {
        cuda::lab::gemm_version(v, bx, by, M, N, K, static_cast<const float*>(a->dev), static_cast<const float*>(b->dev),
                                static_cast<float*>(c->dev), nullptr);
      };
    }
    op.run_cpu = [=] {
      expected->assign(size_t(M * N), 0.0f);
      cpu.gemm(f32, false, false, M, N, K, 1.0, a->host.data(), K, b->host.data(), N, 0.0, expected->data(), N,
               nullptr);
    };
    op.result = [=] { return c->download(); };
    return op;
  }
  const Conv2dGeometry g = conv_geometry(s);
  const size_t xs = size_t(g.N * g.C * g.H * g.W), ws = size_t(g.K * g.C * g.R * g.S), ys = size_t(g.N * g.K * g.P * g.Q);
  const double conv_flops = 2.0 * double(g.N * g.K * g.P * g.Q) * double(g.C * g.R * g.S);
  if (conv_rung) {  // "conv2d_forward/<version>" (cuda/lab/conv_versions.cu)
    EMBER_CHECK(!g.channels_last, "--op ", name, ": the convolution ladder's rungs are NCHW (--layout nchw)");
    const cuda::lab::ConvVersion v = cuda::lab::parse_conv_version(name.substr(15).c_str());
    Buffer *x = buffer(xs, true), *w = buffer(ws, true), *y = buffer(ys, false);
    op.shape = conv_text(g);
    op.flops = conv_flops;
    op.bytes = 4.0 * double(xs + ws + ys);
    op.run_cuda = [=] {
      cuda::lab::conv_forward_version(v, g, static_cast<const float*>(x->dev), static_cast<const float*>(w->dev),
                                      static_cast<float*>(y->dev), nullptr);
    };
    op.run_cpu = [=] {
      expected->assign(ys, 0.0f);
      cpu.conv2d_forward(f32, g, x->host.data(), w->host.data(), expected->data(), nullptr);
    };
    op.result = [=] { return y->download(); };
    return op;
  }
  if (name == "conv2d_forward" || name == "conv2d_backward_data" || name == "conv2d_backward_filter") {
    Buffer *x = buffer(xs, true), *w = buffer(ws, true), *y = buffer(ys, true);
    op.shape = conv_text(g);
    op.flops = conv_flops;
    op.bytes = elem * double(xs + ws + ys);
    if (name == "conv2d_forward") {
      op.run_cuda = [=] { cuda::conv2d_forward(dt, g, x->dev, w->dev, y->dev, nullptr); };
      op.run_cpu = [=] {
        expected->assign(ys, 0.0f);
        cpu.conv2d_forward(f32, g, x->host.data(), w->host.data(), expected->data(), nullptr);
      };
      op.result = [=] { return y->download(); };
    } else if (name == "conv2d_backward_data") {
      op.run_cuda = [=] { cuda::conv2d_backward_data(dt, g, y->dev, w->dev, x->dev, nullptr); };
      op.run_cpu = [=] {
        expected->assign(xs, 0.0f);
        cpu.conv2d_backward_data(f32, g, y->host.data(), w->host.data(), expected->data(), nullptr);
      };
      op.result = [=] { return x->download(); };
    } else {
      op.run_cuda = [=] { cuda::conv2d_backward_filter(dt, g, x->dev, y->dev, w->dev, nullptr); };
      op.run_cpu = [=] {
        expected->assign(ws, 0.0f);
        cpu.conv2d_backward_filter(f32, g, x->host.data(), y->host.data(), expected->data(), nullptr);
      };
      op.result = [=] { return w->download(); };
    }
    return op;
  }
  const int64_t N = s.n, C = s.c, HW = s.hw * s.hw;
  const size_t n = size_t(N * C * HW);
  if (name.rfind("bn_stats/", 0) == 0) {
    // "bn_stats/<version>/<threads>" (cuda/lab/batch_norm_versions.cu) or
    // "bn_stats/ember" (the statistics of ember's batch_norm_forward_train).
    // Compared: mean - offset and the biased variance, per channel, against
    // the CPU in double.
    Buffer* x = buffer(n, true);
    for (float& v : x->host) v = float(double(v) + s.bn_offset);
    x->upload();
    Buffer *mean = buffer(size_t(C), false), *var = buffer(size_t(C), false);
    op.shape = cat("x [", N, ",", C, ",", s.hw, ",", s.hw, "] + ", s.bn_offset);
    op.flops = 3.0 * double(n);
    op.bytes = 4.0 * double(n);
    const std::string rest = name.substr(9);
    if (rest == "ember") {
      Buffer *gamma = buffer(size_t(C), false), *beta = buffer(size_t(C), false), *y = buffer(n, false);
      Buffer *invstd = buffer(size_t(C), false), *rmean = buffer(size_t(C), false), *rvar = buffer(size_t(C), false);
      op.bytes = 4.0 * 3 * double(n);  // and the normalised output: read x twice, write y
      op.run_cuda = [=] {
        cuda::batch_norm_forward_train(f32, x->dev, gamma->dev, beta->dev, y->dev, mean->dev, invstd->dev, rmean->dev,
                                       rvar->dev, N, C, HW, 0.1, 0.0, nullptr);
      };
      op.result = [=, offset = s.bn_offset] {
        std::vector<float> m = mean->download(), is = invstd->download(), out;
        for (float v : m) out.push_back(float(double(v) - offset));
        for (float v : is) out.push_back(float(1.0 / (double(v) * double(v))));  // eps 0: var = 1 / invstd^2
        return out;
      };
    } else {
      const size_t slash = rest.find('/');
      EMBER_CHECK(slash != std::string::npos, "--op ", name, ": expected bn_stats/<version>/<threads> or bn_stats/ember");
      const cuda::lab::BnStatsVersion v = cuda::lab::parse_bn_stats_version(rest.substr(0, slash).c_str());
      const int threads = std::atoi(rest.substr(slash + 1).c_str());
      if (v == cuda::lab::BnStatsVersion::two_pass) op.bytes = 8.0 * double(n);
      if (v == cuda::lab::BnStatsVersion::naive_one_pass)
        op.known_failure = "E[x^2] - E[x]^2 in f32 cancels when |mean| >> std (see --bn-offset)";
      op.run_cuda = [=] {
        cuda::lab::bn_stats_version(v, threads, N, C, HW, static_cast<const float*>(x->dev), static_cast<float*>(mean->dev),
                                    static_cast<float*>(var->dev), nullptr);
      };
      op.result = [=, offset = s.bn_offset] {
        std::vector<float> out;
        for (float m : mean->download()) out.push_back(float(double(m) - offset));
        for (float v2 : var->download()) out.push_back(v2);
        return out;
      };
    }
    op.run_cpu = [=, offset = s.bn_offset] {
      expected->assign(size_t(2 * C), 0.0f);
      for (int64_t c = 0; c < C; ++c) {
        double sum = 0, sq = 0;
        for (int64_t i = 0; i < N; ++i)
          for (int64_t j = 0; j < HW; ++j) sum += double(x->host[size_t((i * C + c) * HW + j)]);
        const double m = sum / double(N * HW);
        for (int64_t i = 0; i < N; ++i)
          for (int64_t j = 0; j < HW; ++j) {
            const double d = double(x->host[size_t((i * C + c) * HW + j)]) - m;
            sq += d * d;
          }
        (*expected)[size_t(c)] = float(m - offset);
        (*expected)[size_t(C + c)] = float(sq / double(N * HW));
      }
    };
    return op;
  }
  if (name == "batch_norm_forward_train" || name == "batch_norm_backward_train") {
    Buffer *x = buffer(n, true), *gy = buffer(n, true), *out = buffer(n, false);
    Buffer *gamma = buffer(size_t(C), true), *beta = buffer(size_t(C), true);
    Buffer *mean = buffer(size_t(C), false), *invstd = buffer(size_t(C), false);
    Buffer *rmean = buffer(size_t(C), false), *rvar = buffer(size_t(C), false);
    Buffer *gg = buffer(size_t(C), false), *gb = buffer(size_t(C), false);
    op.shape = cat("x [", N, ",", C, ",", s.hw, ",", s.hw, "]");
    // statistics for the backward pass, from the CPU kernel
    const size_t channels = static_cast<size_t>(C);
    std::vector<float> m(channels), is(channels), rm(channels, 0.0f), rv(channels, 1.0f), y(n);
    cpu.batch_norm_forward_train(f32, x->host.data(), gamma->host.data(), beta->host.data(), y.data(), m.data(),
                                 is.data(), rm.data(), rv.data(), N, C, HW, 0.1, 1e-5, nullptr);
    mean->host = m;
    invstd->host = is;
    mean->upload();
    invstd->upload();
    if (name == "batch_norm_forward_train") {
      op.flops = 8.0 * double(n);
      op.bytes = 4.0 * 2 * double(n);  // read x (twice in two passes would be 3n), write y
      op.run_cuda = [=] {
        cuda::batch_norm_forward_train(f32, x->dev, gamma->dev, beta->dev, out->dev, mean->dev, invstd->dev,
                                       rmean->dev, rvar->dev, N, C, HW, 0.1, 1e-5, nullptr);
      };
      op.run_cpu = [=] { *expected = y; };
    } else {
      op.flops = 10.0 * double(n);
      op.bytes = 4.0 * 3 * double(n);  // read x and gy, write gx
      op.run_cuda = [=] {
        cuda::batch_norm_backward_train(f32, x->dev, gy->dev, gamma->dev, mean->dev, invstd->dev, out->dev, gg->dev,
                                        gb->dev, N, C, HW, 1e-5, nullptr);
      };
      op.run_cpu = [=] {
        expected->assign(n, 0.0f);
        std::vector<float> g1(static_cast<size_t>(C)), g2(static_cast<size_t>(C));
        cpu.batch_norm_backward_train(f32, x->host.data(), gy->host.data(), gamma->host.data(), mean->host.data(),
                                      invstd->host.data(), expected->data(), g1.data(), g2.data(), N, C, HW, 1e-5,
                                      nullptr);
      };
    }
    op.result = [=] { return out->download(); };
    return op;
  }
  // The memory-bound ops (16-byte packs where aligned: cuda/kernels/vector_loop.cuh); the CPU
  // reference runs in f32 on the values the device sees.
  if (name == "add" || name == "add_relu" || name == "relu_backward") {
    Buffer *a = operand(n, true), *b = operand(n, true), *y = operand(n, false);
    op.shape = cat("[", n, "]", s.misalign ? ", operands one element off 16-byte alignment" : "");
    op.flops = double(n);
    op.bytes = 3.0 * elem * double(n);
    using Binary = void (*)(DType, const void*, const void*, void*, int64_t, Stream);
    const Binary device = name == "add" ? cuda::add : name == "add_relu" ? cuda::add_relu : cuda::relu_backward;
    const Binary reference = name == "add" ? cpu.add : name == "add_relu" ? cpu.add_relu : cpu.relu_backward;
    op.run_cuda = [=] { device(dt, a->dev, b->dev, y->dev, int64_t(n), nullptr); };
    op.run_cpu = [=] {
      expected->assign(n, 0.0f);
      reference(f32, a->host.data(), b->host.data(), expected->data(), int64_t(n), nullptr);
    };
    op.result = [=] { return y->download(); };
    return op;
  }
  if (name == "batch_norm_add_relu_forward_train" || name == "batch_norm_add_relu_backward_train") {
    Buffer *x = operand(n, true), *r = operand(n, true), *y = operand(n, false);
    Buffer *gy = operand(n, true), *gx = operand(n, false), *gr = operand(n, false);
    Buffer *gamma = param(size_t(C), true), *beta = param(size_t(C), true), *mean = param(size_t(C), false);
    Buffer *invstd = param(size_t(C), false), *rmean = param(size_t(C), false), *rvar = param(size_t(C), false);
    Buffer *gg = param(size_t(C), false), *gb = param(size_t(C), false);
    op.shape = cat("x, r [", N, ",", C, ",", s.hw, ",", s.hw, "]", s.misalign ? ", operands one element off 16-byte alignment" : "");
    // the CPU's forward gives y and the statistics the backward starts from
    const size_t channels = static_cast<size_t>(C);
    std::vector<float> m(channels), is(channels), rm(channels, 0.0f), rv(channels, 1.0f), yv(n);
    cpu.batch_norm_add_relu_forward_train(f32, x->host.data(), r->host.data(), gamma->host.data(), beta->host.data(),
                                          yv.data(), m.data(), is.data(), rm.data(), rv.data(), N, C, HW, 0.1, 1e-5,
                                          nullptr);
    mean->host = m, invstd->host = is, y->host = yv;
    mean->upload(), invstd->upload(), y->upload();  // y: rounded to dt, as the device's own output would be
    if (name == "batch_norm_add_relu_forward_train") {
      op.flops = 10.0 * double(n);
      op.bytes = elem * 4.0 * double(n);  // x twice (statistics, output), r, y
      op.run_cuda = [=] {
        cuda::batch_norm_add_relu_forward_train(dt, x->dev, r->dev, gamma->dev, beta->dev, y->dev, mean->dev,
                                                invstd->dev, rmean->dev, rvar->dev, N, C, HW, 0.1, 1e-5, nullptr);
      };
      op.run_cpu = [=] { *expected = yv; };
      op.result = [=] { return y->download(); };
    } else {
      op.flops = 12.0 * double(n);
      op.bytes = elem * 7.0 * double(n);  // x, gy, y -> gr; x, gr -> gx
      op.run_cuda = [=] {
        cuda::batch_norm_add_relu_backward_train(dt, x->dev, y->dev, gy->dev, gamma->dev, mean->dev, invstd->dev,
                                                 gx->dev, gr->dev, gg->dev, gb->dev, N, C, HW, 1e-5, nullptr);
      };
      op.run_cpu = [=] {
        expected->assign(n, 0.0f);
        std::vector<float> g1(channels), g2(channels), masked(n);
        cpu.batch_norm_add_relu_backward_train(f32, x->host.data(), y->host.data(), gy->host.data(),
                                               gamma->host.data(), mean->host.data(), invstd->host.data(),
                                               expected->data(), masked.data(), g1.data(), g2.data(), N, C, HW, 1e-5,
                                               nullptr);
      };
      op.result = [=] { return gx->download(); };
    }
    return op;
  }
  fail(cat("--op ", name, ": unknown (see --help)"));
}

const char* const kOps[] = {"gemm",
                            "conv2d_forward",
                            "conv2d_backward_data",
                            "conv2d_backward_filter",
                            "batch_norm_forward_train",
                            "batch_norm_backward_train",
                            "add",
                            "add_relu",
                            "relu_backward",
                            "batch_norm_add_relu_forward_train",
                            "batch_norm_add_relu_backward_train"};

#if !defined(EMBER_CUDASIM)
// The GPU's memory bandwidth in GB/s and where the figure comes from: the
// datasheet for GPUs named here (what kernels are held to), else what the
// device reports (2 x memory clock x bus width; HBM parts report a clock
// that gives less than their datasheet figure).
std::pair<double, std::string> device_peak_bandwidth() {
  cudaDeviceProp prop{};
  cuda_ok(cudaGetDeviceProperties(&prop, 0), "cudaGetDeviceProperties");
  const std::string name = prop.name;
  const struct {
    const char* part;
    double gbs;
  } datasheet[] = {{"H200", 4800}, {"H100 SXM", 3350}, {"H100 80GB HBM3", 3350}, {"H100 PCIe", 2000},
                   {"A100-SXM4-80GB", 2039}, {"A100-SXM4-40GB", 1555}, {"A100 80GB PCIe", 1935}, {"L4", 300}};
  for (const auto& d : datasheet)
    if (name.find(d.part) != std::string::npos) return {d.gbs, cat("datasheet, ", name)};
  int clock_khz = 0, bus_bits = 0;
  cuda_ok(cudaDeviceGetAttribute(&clock_khz, cudaDevAttrMemoryClockRate, 0), "cudaDeviceGetAttribute");
  cuda_ok(cudaDeviceGetAttribute(&bus_bits, cudaDevAttrGlobalMemoryBusWidth, 0), "cudaDeviceGetAttribute");
  return {2.0 * double(clock_khz) * 1e3 * double(bus_bits) / 8.0 / 1e9, cat("2 x memory clock x bus width, ", name)};
}
#endif

// Largest |got - want| over the largest |want|: the check a launch passes
// when it is at most `tolerance`.
double relative_error(const std::vector<float>& got, const std::vector<float>& want) {
  EMBER_CHECK(got.size() == want.size(), "result sizes differ: ", got.size(), " vs ", want.size());
  double diff = 0, scale = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const double d = std::fabs(double(got[i]) - double(want[i]));
    diff = std::isnan(d) ? INFINITY : std::max(diff, d);
    scale = std::max(scale, std::fabs(double(want[i])));
  }
  return diff / std::max(scale, 1e-30);
}

int run(int argc, char** argv) {
  std::string op_flag = "all";
  Shape s;
  int reps = 10, lines = 6;
  double peak_gbs = 0;
  double tolerance = 0;
  std::string dtype_flag = "f32", layout_flag = "nchw";
  bool tensor_cores = true, tf32 = false;
  apps::Flags f("kernel_lab", "ember's CUDA kernels one op at a time: checked against the CPU kernel, then timed "
                              "(a GPU) or profiled (the emulator build, kernel_lab_sim).");
  f.add("op", &op_flag, "gemm, conv2d_forward, conv2d_backward_data, conv2d_backward_filter, "
                        "batch_norm_forward_train, batch_norm_backward_train, add, add_relu, relu_backward, "
                        "batch_norm_add_relu_forward_train, batch_norm_add_relu_backward_train, or all; "
                        "gemm/<version>/<bx>x<by> for a rung of the GEMM ladder (naive_cols, naive_rows, "
                        "shared_tiles, vector_tiles, vector_double: cuda/lab/gemm_versions.cu), gemm-ladder for every "
                        "rung at three block sizes; "
                        "gemm/tensor/<variant> (--dtype f16) for a tensor-core variant "
                        "(cuda/lab/gemm_tensor_versions.cu), gemm-tensor-ladder for all of them; "
                        "bn_stats/<version>/<threads> for a rung of the batch-norm statistics ladder (two_pass, "
                        "naive_one_pass, welford: cuda/lab/batch_norm_versions.cu), bn_stats/ember for ember's "
                        "kernel, bn-stats-ladder for all of them; conv2d_forward/<version> for a rung of the "
                        "convolution ladder (direct, tap_table, column_once: cuda/lab/conv_versions.cu), conv-ladder "
                        "for all of them with ember's conv2d_forward");
  f.group("gemm shape");
  f.add("m", &s.m, "rows of A and C");
  f.add("ncols", &s.n_gemm, "columns of B and C");
  f.add("kdim", &s.kdim, "columns of A, rows of B");
  f.group("convolution, batch norm and memory-bound op shape (x: [n, c, hw, hw])");
  f.add("n", &s.n, "batch");
  f.add("c", &s.c, "input channels");
  f.add("hw", &s.hw, "height and width");
  f.add("k", &s.k, "output channels");
  f.add("r", &s.r, "filter height and width");
  f.add("stride", &s.stride, "convolution stride");
  f.add("pad", &s.pad, "convolution padding");
  f.add("bn-offset", &s.bn_offset, "batch-norm statistics ladder: added to every value of x (a large mean)");
  f.add("dtype", &dtype_flag, "f32, f16 or bf16 storage for gemm, the convolutions and the memory-bound ops "
                              "(16-bit: f32 accumulation)");
  f.add("layout", &layout_flag, "the convolutions' memory order: nchw, or nhwc (channels-last images, KRSC "
                                "filters; on mma.sync in f16/bf16 with channels in multiples of 8, "
                                "or f32 with --tf32 1 and multiples of 4)");
  f.add("misalign", &s.misalign, "memory-bound ops: every operand one element past 16-byte alignment (the "
                                 "element-by-element path instead of 16-byte packs)");
  f.group("what to do");
  f.add("tensor-cores", &tensor_cores, "f16/bf16 gemm and convolutions on the tensor cores (0: on the FP32 pipes)");
  f.add("tf32", &tf32, "f32 gemm and channels-last convolutions on the tensor cores in TF32 (mma.sync m16n8k8, "
                       "inputs rounded to a 10-bit mantissa)");
  f.add("tolerance", &tolerance, "largest |CUDA - CPU| over the largest |CPU| value that passes "
                                 "(0: by dtype, 1e-4 f32 (2e-3 with --tf32 1), 2e-3 f16, 1.6e-2 bf16: one rounding "
                                 "of the result or of the inputs)");
  f.add("reps", &reps, "timed launches per op on a GPU (the median is printed)");
  f.add("peak-gbs", &peak_gbs, "GPU: the memory bandwidth GB/s are compared with (0: the datasheet figure of a "
                                "known GPU, else 2 x memory clock x bus width from the device)");
  f.add("lines", &lines, "emulator: source lines shown per kernel (the most memory traffic first)");
  if (!f.parse(argc, argv)) return 0;
  EMBER_CHECK(reps > 0, "--reps must be positive, got ", reps);
  s.dt = apps::parse_float_dtype(dtype_flag, "--dtype");
  EMBER_CHECK(layout_flag == "nchw" || layout_flag == "nhwc", "--layout must be nchw or nhwc, got ", layout_flag);
  s.channels_last = layout_flag == "nhwc";
  if (tolerance == 0)
    tolerance = s.dt == DType::f32 ? (tf32 ? 2e-3 : 1e-4) : s.dt == DType::f16 ? 2e-3 : 1.6e-2;
  cuda::set_native_tensor_cores(tensor_cores);
  cuda::set_tf32(tf32);
  std::string peak_source = "from --peak-gbs";
#if !defined(EMBER_CUDASIM)
  if (peak_gbs <= 0) std::tie(peak_gbs, peak_source) = device_peak_bandwidth();
#endif
  std::vector<std::string> names;
  if (op_flag == "all") {
    names.assign(std::begin(kOps), std::end(kOps));
    if (s.dt != DType::f32)  // the ops with 16-bit versions
      names.assign({"gemm", "conv2d_forward", "conv2d_backward_data", "conv2d_backward_filter", "add", "add_relu",
                    "relu_backward", "batch_norm_add_relu_forward_train", "batch_norm_add_relu_backward_train"});
    if (s.misalign)
      names.assign({"add", "add_relu", "relu_backward", "batch_norm_add_relu_forward_train",
                    "batch_norm_add_relu_backward_train"});
  } else if (op_flag == "gemm-ladder") {
    // every rung at several block sizes, then ember's GEMM
    for (const char* b : {"32x8", "16x16", "8x32"}) names.push_back(cat("gemm/naive_cols/", b));
    for (const char* b : {"32x8", "16x16", "8x32"}) names.push_back(cat("gemm/naive_rows/", b));
    for (const char* b : {"8x8", "16x16", "32x32"}) names.push_back(cat("gemm/shared_tiles/", b));
    names.push_back("gemm");  // ember's: register tiles, the next tile prefetched into registers
    for (const char* v : {"vector_tiles", "vector_double"})
      for (const char* b : {"16x16", "32x8", "8x32"}) names.push_back(cat("gemm/", v, "/", b));
  } else if (op_flag == "conv-ladder") {  // the direct loop, ember's implicit GEMM, the tap table
    names.assign({"conv2d_forward/direct", "conv2d_forward", "conv2d_forward/tap_table", "conv2d_forward/column_once"});
  } else if (op_flag == "bn-stats-ladder") {  // every version at three block sizes, then ember's kernel
    for (const char* v : {"two_pass", "naive_one_pass", "welford"})
      for (const char* t : {"64", "256", "1024"}) names.push_back(cat("bn_stats/", v, "/", t));
    names.push_back("bn_stats/ember");
  } else if (op_flag == "gemm-tensor-ladder") {  // every tensor-core variant, then ember's f16 GEMM
    EMBER_CHECK(s.dt == DType::f16, "--op gemm-tensor-ladder needs --dtype f16");
    for (const std::string& v : cuda::lab::gemm_tensor_versions()) names.push_back("gemm/tensor/" + v);
    names.push_back("gemm");
  } else {
    names.push_back(op_flag);
  }
  std::mt19937 rng(1);
  int failed = 0;
  for (const std::string& name : names) {
    std::vector<std::unique_ptr<Buffer>> keep;
    std::vector<std::vector<float>> refs;
    refs.reserve(1);
    LabOp op = make_op(name, s, keep, refs, rng);
    const std::string precision =
        s.dt == DType::f32 ? ""
        : name.rfind("gemm", 0) == 0 || name.rfind("conv2d_", 0) == 0
            ? cat("  ", dtype_name(s.dt), tensor_cores ? " on the tensor cores" : " on the FP32 pipes")
            : cat("  ", dtype_name(s.dt));
    std::printf("== %s  %s%s\n", op.name.c_str(), op.shape.c_str(), precision.c_str());
#if defined(EMBER_CUDASIM)
    cudasim::set_profiling(true);
    cudasim::reset_profile();
#endif
    op.run_cuda();
    cuda_ok(cudaDeviceSynchronize(), "the launch");
#if defined(EMBER_CUDASIM)
    cudasim::set_profiling(false);
#endif
    op.run_cpu();
    const double err = relative_error(op.result(), *op.expected);
    const bool ok = err <= tolerance;
    failed += !ok && op.known_failure.empty();
    std::printf("   check against the CPU kernel: max |diff| / max |cpu| = %.2e (tolerance %.0e): %s%s\n", err, tolerance,
                ok ? "ok" : "FAILED", ok || op.known_failure.empty() ? "" : cat(", as this version must: ", op.known_failure).c_str());
#if defined(EMBER_CUDASIM)
    double declared = 0;
    for (const cudasim::KernelProfile& k : cudasim::profile()) declared += double(k.flops + k.tensor_flops);
    if (declared > 0 && op.flops > 0)
      std::printf("   FLOPs: %.3g the op needs, %.3g its kernels declare (%.2fx: padding, zeros multiplied)\n", op.flops,
                  declared, declared / op.flops);
    if (!cudasim::profiler_instrumented())
      std::printf("   (the kernels are not instrumented: link build/libember_cudasim_profile.a to count memory)\n");
    for (const cudasim::KernelProfile& k : cudasim::profile())
      std::printf("   kernel %s\n%s", k.name.c_str(), cudasim::kernel_report(k, lines).c_str());
#else
    cudaEvent_t start, stop;
    cuda_ok(cudaEventCreate(&start), "cudaEventCreate");
    cuda_ok(cudaEventCreate(&stop), "cudaEventCreate");
    std::vector<float> ms;
    for (int i = 0; i < reps; ++i) {
      cuda_ok(cudaEventRecord(start), "cudaEventRecord");
      op.run_cuda();
      cuda_ok(cudaEventRecord(stop), "cudaEventRecord");
      cuda_ok(cudaEventSynchronize(stop), "cudaEventSynchronize");
      float t = 0;
      cuda_ok(cudaEventElapsedTime(&t, start, stop), "cudaEventElapsedTime");
      ms.push_back(t);
    }
    cudaEventDestroy(start);
    cudaEventDestroy(stop);
    std::sort(ms.begin(), ms.end());
    const double med = double(ms[ms.size() / 2]) * 1e-3;
    const double gbs = op.bytes / med / 1e9;
    std::printf("   %.4g us (median of %d), %.1f GFLOP/s, %.1f GB/s (%.0f%% of %.0f GB/s %s)\n", med * 1e6, reps,
                op.flops / med / 1e9, gbs, 100.0 * gbs / peak_gbs, peak_gbs, peak_source.c_str());
#endif
  }
  if (failed) std::printf("kernel_lab: %d op(s) FAILED the check against the CPU\n", failed);
  return failed ? 1 : 0;
}

#else

int run(int argc, char** argv) {
  apps::Flags f("kernel_lab", "ember's CUDA kernels one op at a time (needs a CUDA build, or kernel_lab_sim).");
  if (!f.parse(argc, argv)) return 0;
  fail("this build has no CUDA (nvcc was not found): build/kernel_lab_sim runs the kernels on the emulator");
  return 2;
}

#endif

}  // namespace
}  // namespace ember

int main(int argc, char** argv) {
  try {
    return ember::run(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "kernel_lab: error: %s\n", e.what());
    return 2;
  }
}
