// ops/dispatch.cpp — the kernel-table registry and the geometry helpers.
#include "engine/error.h"
#include "ops/kernel_profile.h"
#include "ops/kernels.h"

namespace ember {
namespace {
const Kernels* g_tables[kNumDeviceTypes] = {};
Stream (*g_stream_getters[kNumDeviceTypes])(int) = {};
}  // namespace

void register_stream_getter(DeviceType type, Stream (*getter)(int)) {
  g_stream_getters[static_cast<int>(type)] = getter;
}

Stream stream_for(Device device) {
  auto getter = g_stream_getters[static_cast<int>(device.type)];
  return getter ? getter(device.index) : nullptr;
}

void register_kernels(DeviceType type, const Kernels* table) { g_tables[static_cast<int>(type)] = table; }

const Kernels& kernels_for(Device device) {
  if (device.is_cpu()) return kernel_profiling() ? profiled_cpu_kernels() : cpu_kernels();
  const Kernels* t = g_tables[static_cast<int>(device.type)];
  EMBER_CHECK(t, "no kernels are registered for ", device.str(), " in this build of ember");
  return *t;
}

Conv2dGeometry make_conv2d_geometry(int64_t N, int64_t C, int64_t H, int64_t W, int64_t K, int64_t R, int64_t S,
                                    int64_t stride_h, int64_t stride_w, int64_t pad_h, int64_t pad_w) {
  EMBER_CHECK(stride_h > 0 && stride_w > 0, "conv2d: stride must be positive, got ", stride_h, "x", stride_w);
  EMBER_CHECK(pad_h >= 0 && pad_w >= 0, "conv2d: padding must be >= 0, got ", pad_h, "x", pad_w);
  Conv2dGeometry g;
  g.N = N, g.C = C, g.H = H, g.W = W, g.K = K, g.R = R, g.S = S;
  g.stride_h = stride_h, g.stride_w = stride_w, g.pad_h = pad_h, g.pad_w = pad_w;
  const int64_t hp = H + 2 * pad_h - R, wp = W + 2 * pad_w - S;
  EMBER_CHECK(hp >= 0 && wp >= 0, "conv2d: kernel ", R, "x", S, " is larger than the padded input ",
              H + 2 * pad_h, "x", W + 2 * pad_w);
  g.P = hp / stride_h + 1;
  g.Q = wp / stride_w + 1;
  return g;
}

Pool2dGeometry make_pool2d_geometry(int64_t N, int64_t C, int64_t H, int64_t W, int64_t R, int64_t S,
                                    int64_t stride_h, int64_t stride_w, int64_t pad_h, int64_t pad_w) {
  EMBER_CHECK(R > 0 && S > 0 && stride_h > 0 && stride_w > 0, "max_pool2d: kernel and stride must be positive");
  EMBER_CHECK(pad_h >= 0 && pad_w >= 0 && 2 * pad_h <= R && 2 * pad_w <= S,
              "max_pool2d: padding must be at most half the kernel (PyTorch's rule), got ", pad_h, "x", pad_w,
              " for kernel ", R, "x", S);
  Pool2dGeometry g;
  g.N = N, g.C = C, g.H = H, g.W = W, g.R = R, g.S = S;
  g.stride_h = stride_h, g.stride_w = stride_w, g.pad_h = pad_h, g.pad_w = pad_w;
  const int64_t hp = H + 2 * pad_h - R, wp = W + 2 * pad_w - S;
  EMBER_CHECK(hp >= 0 && wp >= 0, "max_pool2d: window ", R, "x", S, " is larger than the padded input");
  g.P = hp / stride_h + 1;
  g.Q = wp / stride_w + 1;
  return g;
}

}  // namespace ember
