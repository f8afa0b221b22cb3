// apps/bench/bench_conv_cuda.cpp — ember's native CUDA convolutions against
// cuDNN, layer by layer, on the GPU:
//
//   build/bench_conv_cuda --num-layers 50 --batch-size 64 --image-size 224 --dtype f16 --layout nhwc
//
// For each distinct convolution of the ResNet (net/resnet_convs.h, with how
// many times a step uses it) it times forward, backward-data and
// backward-filter with the native kernel table and with cuDNN's, the two
// alternating: --rounds rounds of --reps calls each, the median round's
// milliseconds per call. It prints native / cuDNN per pass (above 1: the
// native kernel is slower), checks that both tables give the same result
// (largest difference over the largest value), and ends with the ratios
// weighted by layer time: sum over layers of uses x native ms over the same
// sum for cuDNN, per pass and for the three together. The stem's data
// gradient is never computed in training and is left out.
//
//   build/bench_conv_cuda --gemm 4096 --dtype f16
//
// times the GEMM instead: C [n, n] = A [n, n] B [n, n], ember's native
// kernel against cuBLAS (the cuDNN table's gemm), alternating, TFLOP/s each
// and the ratio.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <exception>
#include <string>
#include <vector>

#include "apps/training/flags.h"
#include "engine/error.h"
#include "net/resnet_convs.h"
#include "ops/kernels.h"

#if defined(EMBER_CUDA)
#include <cuda_runtime.h>

#include <chrono>

#include "cuda/cuda_device.h"
#include "engine/bfloat16.h"
#include "engine/half.h"
#endif

namespace ember {
namespace {

#if defined(EMBER_CUDA)

void cuda_ok(cudaError_t e, const char* what) { EMBER_CHECK(e == cudaSuccess, what, ": ", cudaGetErrorString(e)); }

// n elements of dt on the device, owned.
struct DeviceArray {
  void* p = nullptr;
  int64_t n = 0;
  DType dt;
  DeviceArray(int64_t count, DType type) : n(count), dt(type) {
    cuda_ok(cudaMalloc(&p, size_t(std::max<int64_t>(n, 1)) * dtype_size(dt)), "cudaMalloc");
  }
  ~DeviceArray() { cudaFree(p); }
  DeviceArray(const DeviceArray&) = delete;
  DeviceArray& operator=(const DeviceArray&) = delete;
  std::vector<double> host() const {
    std::vector<double> out(static_cast<size_t>(n));
    if (dt == DType::f32) {
      std::vector<float> v(static_cast<size_t>(n));
      cuda_ok(cudaMemcpy(v.data(), p, v.size() * 4, cudaMemcpyDeviceToHost), "download");
      for (size_t i = 0; i < v.size(); ++i) out[i] = v[i];
    } else {
      std::vector<uint16_t> v(static_cast<size_t>(n));
      cuda_ok(cudaMemcpy(v.data(), p, v.size() * 2, cudaMemcpyDeviceToHost), "download");
      for (size_t i = 0; i < v.size(); ++i) out[i] = dt == DType::f16 ? half_to_float(v[i]) : bf16_to_float(v[i]);
    }
    return out;
  }
};

// Largest |a - b| over the largest |b|.
double difference(const DeviceArray& a, const DeviceArray& b) {
  const std::vector<double> x = a.host(), y = b.host();
  double diff = 0, scale = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    const double d = std::fabs(x[i] - y[i]);
    diff = std::isnan(d) ? INFINITY : std::max(diff, d);
    scale = std::max(scale, std::fabs(y[i]));
  }
  return diff / std::max(scale, 1e-30);
}

enum Pass { kForward, kData, kFilter, kPasses };
const char* const kPassNames[kPasses] = {"fwd", "bdata", "bfilt"};

struct Layer {
  net::ConvUse use;
  bool has_data = true;        // not the stem
  double ms[2][kPasses] = {};  // [native, cudnn][pass]: the median round
  double diff[kPasses] = {};   // native against cuDNN
};

int run(int argc, char** argv) {
  int num_layers = 50, reps = 20, rounds = 3;
  int64_t batch = 64, size = 224, in_channels = 3;
  std::string dtype_flag = "f16", layout = "nhwc";
  bool tf32 = false;
  int64_t gemm_size = 0;
  apps::Flags f("bench_conv_cuda", "Time ember's native CUDA convolutions against cuDNN on every distinct "
                                   "convolution of a ResNet (native/cuDNN per pass, and weighted by layer time).");
  f.add("num-layers", &num_layers, "ResNet depth: 18, 34, 50, 101, 152 (torchvision) or 6n+2 (CIFAR style)");
  f.add("batch-size", &batch, "images per call");
  f.add("image-size", &size, "input height and width");
  f.add("in-channels", &in_channels, "channels of the input image");
  f.add("dtype", &dtype_flag, "f32, f16 or bf16");
  f.add("layout", &layout, "nhwc (channels-last) or nchw");
  f.add("tf32", &tf32, "f32 on the tensor cores in TF32: cuDNN and cuBLAS, and the native channels-last convolutions "
                       "and aligned GEMMs");
  f.add("gemm", &gemm_size, "time an n x n x n GEMM instead (native against cuBLAS), n this value; 0: the convolutions");
  f.add("reps", &reps, "calls per timed round");
  f.add("rounds", &rounds, "rounds per pass and table, alternating native and cuDNN; the median is printed");
  if (!f.parse(argc, argv)) return 0;
  EMBER_CHECK(reps > 0 && rounds > 0 && batch > 0 && size > 0, "--reps, --rounds, --batch-size and --image-size "
                                                                "must be positive");
  EMBER_CHECK(layout == "nhwc" || layout == "nchw", "--layout must be nhwc or nchw, got ", layout);
  const DType dt = apps::parse_float_dtype(dtype_flag, "--dtype");
  EMBER_CHECK(cuda::device_count() > 0, "bench_conv_cuda: no CUDA device on this machine");
#if defined(EMBER_CUDNN)
  cuda::init(0, cuda::ConvBackend::cudnn);
  cuda::set_tf32(tf32);
  const Kernels* cudnn = cuda::cudnn_kernels();
#else
  const Kernels* cudnn = nullptr;
#endif
  EMBER_CHECK(cudnn, "bench_conv_cuda: this build has no cuDNN (CUDNN=0), nothing to compare with");
  const Kernels* tables[2] = {&cuda::native_kernels(), cudnn};
  Stream stream = stream_for(Device::cuda(0));

  if (gemm_size > 0) {
    const int64_t n = gemm_size;
    DeviceArray a(n * n, dt), b(n * n, dt), c[2] = {DeviceArray(n * n, dt), DeviceArray(n * n, dt)};
    tables[0]->random_normal(dt, a.p, a.n, 1, 0, 0.0, 1.0, stream);
    tables[0]->random_normal(dt, b.p, b.n, 2, 0, 0.0, 1.0, stream);
    std::vector<double> times[2];
    const auto call = [&](int t) {
      tables[t]->gemm(dt, false, false, n, n, n, 1.0, a.p, n, b.p, n, 0.0, c[t].p, n, stream);
    };
    for (int t = 0; t < 2; ++t) call(t);  // warm-up
    for (int round = 0; round < rounds; ++round)
      for (int t = 0; t < 2; ++t) {
        cuda_ok(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
        const auto t0 = std::chrono::steady_clock::now();
        for (int r = 0; r < reps; ++r) call(t);
        cuda_ok(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
        times[t].push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count() / reps);
      }
    double ms[2];
    for (int t = 0; t < 2; ++t) {
      std::sort(times[t].begin(), times[t].end());
      ms[t] = times[t][times[t].size() / 2];
    }
    const double flops = 2.0 * double(n) * double(n) * double(n);
    std::printf("GEMM %lld^3 %s on %s: native %.3f ms (%.1f TFLOP/s), cuBLAS %.3f ms (%.1f TFLOP/s): native/cuBLAS "
                "throughput %.2f (diff %.1e; median of %d rounds of %d)\n",
                (long long)n, dtype_name(dt), cuda::device_name(0).c_str(), ms[0], flops / ms[0] * 1e-9, ms[1],
                flops / ms[1] * 1e-9, ms[1] / ms[0], difference(c[0], c[1]), rounds, reps);
    return 0;
  }
  std::vector<Layer> layers;
  for (net::ConvUse u : net::resnet_convs(num_layers, batch, size, in_channels)) {
    u.g.channels_last = layout == "nhwc";
    layers.push_back(Layer{u, u.g.C != in_channels});
  }
  std::printf("ResNet-%d convolutions on %s, batch %lld, %lldx%lldx%lld, %s %s%s; %d rounds of %d calls, "
              "native and cuDNN alternating\n",
              num_layers, cuda::device_name(0).c_str(), (long long)batch, (long long)in_channels, (long long)size,
              (long long)size, dtype_name(dt), layout.c_str(), tf32 ? " TF32" : "", rounds, reps);
  for (Layer& L : layers) {
    const Conv2dGeometry& g = L.use.g;
    DeviceArray x(g.N * g.C * g.H * g.W, dt), w(g.K * g.C * g.R * g.S, dt), gy(g.N * g.K * g.P * g.Q, dt);
    DeviceArray out[2][kPasses] = {{DeviceArray(gy.n, dt), DeviceArray(x.n, dt), DeviceArray(w.n, dt)},
                                   {DeviceArray(gy.n, dt), DeviceArray(x.n, dt), DeviceArray(w.n, dt)}};
    const Kernels& any = *tables[0];
    any.random_normal(dt, x.p, x.n, 1, 0, 0.0, 1.0, stream);
    any.random_normal(dt, w.p, w.n, 2, 0, 0.0, 0.05, stream);
    any.random_normal(dt, gy.p, gy.n, 3, 0, 0.0, 1.0, stream);
    const auto call = [&](int table, int pass) {
      const Kernels& k = *tables[table];
      if (pass == kForward) k.conv2d_forward(dt, g, x.p, w.p, out[table][pass].p, stream);
      if (pass == kData) k.conv2d_backward_data(dt, g, gy.p, w.p, out[table][pass].p, stream);
      if (pass == kFilter) k.conv2d_backward_filter(dt, g, x.p, gy.p, out[table][pass].p, stream);
    };
    for (int pass = 0; pass < kPasses; ++pass) {
      if (pass == kData && !L.has_data) continue;
      std::vector<double> times[2];
      for (int table = 0; table < 2; ++table) call(table, pass);  // warm-up (cuDNN's algorithm search)
      for (int round = 0; round < rounds; ++round)
        for (int table = 0; table < 2; ++table) {
          cuda_ok(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
          const auto t0 = std::chrono::steady_clock::now();
          for (int r = 0; r < reps; ++r) call(table, pass);
          cuda_ok(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
          times[table].push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count() /
                                 reps);
        }
      for (int table = 0; table < 2; ++table) {
        std::sort(times[table].begin(), times[table].end());
        L.ms[table][pass] = times[table][times[table].size() / 2];
      }
      L.diff[pass] = difference(out[0][pass], out[1][pass]);
    }
    char name[64];
    std::snprintf(name, sizeof name, "%lld,%lldx%lld->%lld %lldx%lld/%lld", (long long)g.C, (long long)g.H,
                  (long long)g.W, (long long)g.K, (long long)g.R, (long long)g.S, (long long)g.stride_h);
    std::printf("%-28s x%-3d", name, L.use.count);
    for (int pass = 0; pass < kPasses; ++pass) {
      if (pass == kData && !L.has_data) {
        std::printf(" | %5s      -", kPassNames[pass]);
        continue;
      }
      std::printf(" | %5s %7.3f/%7.3f ms %5.2fx (diff %.1e)", kPassNames[pass], L.ms[0][pass], L.ms[1][pass],
                  L.ms[0][pass] / L.ms[1][pass], L.diff[pass]);
    }
    std::printf("\n");
    std::fflush(stdout);
  }
  double total[2][kPasses] = {};
  for (const Layer& L : layers)
    for (int t = 0; t < 2; ++t)
      for (int pass = 0; pass < kPasses; ++pass) total[t][pass] += L.use.count * L.ms[t][pass];
  std::printf("weighted by layer time (native ms / cuDNN ms per step):");
  double all[2] = {};
  for (int pass = 0; pass < kPasses; ++pass) {
    std::printf(" %s %.2f/%.2f = %.2fx,", kPassNames[pass], total[0][pass], total[1][pass], total[0][pass] / total[1][pass]);
    all[0] += total[0][pass], all[1] += total[1][pass];
  }
  std::printf(" all %.2f/%.2f = %.2fx\n", all[0], all[1], all[0] / all[1]);
  return 0;
}

#else

int run(int, char**) {
  std::fprintf(stderr, "bench_conv_cuda: this build has no CUDA (it times the GPU; build with CUDA=1 where nvcc is)\n");
  return 1;
}

#endif

}  // namespace
}  // namespace ember

int main(int argc, char** argv) {
  try {
    return ember::run(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_conv_cuda: error: %s\n", e.what());
    return 1;
  }
}
