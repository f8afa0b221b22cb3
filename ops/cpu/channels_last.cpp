// ops/cpu/channels_last.cpp — the CPU convolutions and max pooling of
// channels-last tensors: the CPU backend computes in NCHW (its direct,
// Winograd and GEMM convolutions are laid out for it), so a channels-last
// call reorders its operands into NCHW buffers, runs the NCHW kernel, and
// reorders the result back. This makes every op correct in both memory formats on the CPU (the
// reference the CUDA kernels are checked against); speed in channels-last is
// the GPU's business (docs/channels_last.md).
//   x: [N, H, W, C] <-> [N, C, H, W]   w: [K, R, S, C] <-> [K, C, R, S]   y: [N, P, Q, K] <-> [N, K, P, Q]
#include <cstddef>
#include <vector>

#include "ops/cpu/cpu_kernels.h"

namespace ember::cpu {
namespace {

// A scratch buffer of n elements of dt.
std::vector<std::byte> scratch(DType dt, int64_t n) { return std::vector<std::byte>(size_t(n) * dtype_size(dt)); }

// [batch, inner, C] -> [batch, C, inner] and back.
void to_planes(DType dt, const void* x, void* y, int64_t batch, int64_t C, int64_t inner) {
  transpose_batched(dt, x, y, batch, inner, C, nullptr);
}
void from_planes(DType dt, const void* x, void* y, int64_t batch, int64_t C, int64_t inner) {
  transpose_batched(dt, x, y, batch, C, inner, nullptr);
}

template <typename Geometry>
Geometry planar(const Geometry& g) {
  Geometry p = g;
  p.channels_last = false;
  return p;
}

}  // namespace

void conv2d_forward_channels_last(DType dt, const Conv2dGeometry& g, const void* x, const void* w, void* y) {
  auto xp = scratch(dt, g.N * g.C * g.H * g.W), wp = scratch(dt, g.K * g.C * g.R * g.S),
       yp = scratch(dt, g.N * g.K * g.P * g.Q);
  to_planes(dt, x, xp.data(), g.N, g.C, g.H * g.W);
  to_planes(dt, w, wp.data(), g.K, g.C, g.R * g.S);
  conv2d_forward(dt, planar(g), xp.data(), wp.data(), yp.data(), nullptr);
  from_planes(dt, yp.data(), y, g.N, g.K, g.P * g.Q);
}

void conv2d_backward_data_channels_last(DType dt, const Conv2dGeometry& g, const void* gy, const void* w, void* gx) {
  auto gyp = scratch(dt, g.N * g.K * g.P * g.Q), wp = scratch(dt, g.K * g.C * g.R * g.S),
       gxp = scratch(dt, g.N * g.C * g.H * g.W);
  to_planes(dt, gy, gyp.data(), g.N, g.K, g.P * g.Q);
  to_planes(dt, w, wp.data(), g.K, g.C, g.R * g.S);
  conv2d_backward_data(dt, planar(g), gyp.data(), wp.data(), gxp.data(), nullptr);
  from_planes(dt, gxp.data(), gx, g.N, g.C, g.H * g.W);
}

void conv2d_backward_filter_channels_last(DType dt, const Conv2dGeometry& g, const void* x, const void* gy,
                                          void* gw) {
  auto xp = scratch(dt, g.N * g.C * g.H * g.W), gyp = scratch(dt, g.N * g.K * g.P * g.Q),
       gwp = scratch(dt, g.K * g.C * g.R * g.S);
  to_planes(dt, x, xp.data(), g.N, g.C, g.H * g.W);
  to_planes(dt, gy, gyp.data(), g.N, g.K, g.P * g.Q);
  conv2d_backward_filter(dt, planar(g), xp.data(), gyp.data(), gwp.data(), nullptr);
  from_planes(dt, gwp.data(), gw, g.K, g.C, g.R * g.S);
}

// argmax keeps its meaning (h*W + w inside the plane); only its order changes.
void max_pool2d_forward_channels_last(DType dt, const Pool2dGeometry& g, const void* x, void* y, int32_t* argmax) {
  auto xp = scratch(dt, g.N * g.C * g.H * g.W), yp = scratch(dt, g.N * g.C * g.P * g.Q),
       ap = scratch(DType::i32, g.N * g.C * g.P * g.Q);
  to_planes(dt, x, xp.data(), g.N, g.C, g.H * g.W);
  max_pool2d_forward(dt, planar(g), xp.data(), yp.data(), reinterpret_cast<int32_t*>(ap.data()), nullptr);
  from_planes(dt, yp.data(), y, g.N, g.C, g.P * g.Q);
  from_planes(DType::i32, ap.data(), argmax, g.N, g.C, g.P * g.Q);
}

void max_pool2d_backward_channels_last(DType dt, const Pool2dGeometry& g, const void* gy, const int32_t* argmax,
                                       void* gx) {
  auto gyp = scratch(dt, g.N * g.C * g.P * g.Q), ap = scratch(DType::i32, g.N * g.C * g.P * g.Q),
       gxp = scratch(dt, g.N * g.C * g.H * g.W);
  to_planes(dt, gy, gyp.data(), g.N, g.C, g.P * g.Q);
  to_planes(DType::i32, argmax, ap.data(), g.N, g.C, g.P * g.Q);
  max_pool2d_backward(dt, planar(g), nullptr, nullptr, gyp.data(), reinterpret_cast<const int32_t*>(ap.data()),
                      gxp.data(), nullptr);
  from_planes(dt, gxp.data(), gx, g.N, g.C, g.H * g.W);
}

}  // namespace ember::cpu
