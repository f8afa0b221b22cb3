// cuda/lab/conv_versions.cu — the convolution ladder (see conv_versions.h):
//   direct      one thread per output y[n, k, p, q], looping over c, r, s:
//               no reuse between threads (each weight is read P*Q*N times
//               from global memory: the profiler's requests), and the
//               output index decoded by division
//   (ember's)   implicit GEMM (cuda/kernels/conv.cu): the tiled GEMM of
//               gemm.cuh with a loader that gathers x; per gathered element
//               it decodes the row crs into (c, r, s) and the column into
//               (n, p, q): four divisions by multiplication
//   tap_table   the same GEMM and tiles, but row crs is looked up in a table
//               of (offset c*H*W + r*W + s, r, s) built once on the host:
//               two of the four decodes go, for one load that a warp shares
//               (a warp's lanes read the same tap: the B tile is staged
//               column-fastest)
#include "cuda/lab/conv_versions.h"

#include <cstring>
#include <vector>

#include "cuda/allocator.h"
#include "cuda/common.cuh"
#include "cuda/host_staging.h"
#include "cuda/kernels/conv_operands.cuh"
#include "cuda/kernels/gemm.cuh"
#include "engine/error.h"

namespace ember::cuda::lab {
namespace {

constexpr unsigned kDirectThreads = 256;

//   x: [N, C, H, W]   w: [K, C, R, S]   y: [N, K, P, Q]; one thread per y element
__global__ void conv_direct_kernel(Conv2dGeometry g, const float* x, const float* w, float* y) {
  const int64_t total = g.N * g.K * g.P * g.Q;
  for (int64_t i = grid_thread_index(); i < total; i += grid_thread_count()) {
    const int64_t q = i % g.Q, p = (i / g.Q) % g.P, k = (i / (g.Q * g.P)) % g.K, n = i / (g.Q * g.P * g.K);
    float acc = 0.0f;
    for (int64_t c = 0; c < g.C; ++c)
      for (int64_t r = 0; r < g.R; ++r) {
        const int64_t h = p * g.stride_h - g.pad_h + r;
        if (h < 0 || h >= g.H) continue;
        for (int64_t s = 0; s < g.S; ++s) {
          const int64_t ww = q * g.stride_w - g.pad_w + s;
          if (ww < 0 || ww >= g.W) continue;
          acc += w[((k * g.C + c) * g.R + r) * g.S + s] * x[((n * g.C + c) * g.H + h) * g.W + ww];
        }
      }
    EMBER_PROFILE_FLOPS(2 * g.C * g.R * g.S);
    y[i] = acc;
  }
}

// One filter tap: row crs of the im2col matrix starts `offset` values into
// image n's [C, H, W] block, shifted by (r, s) from an output's window corner.
struct Tap {
  int32_t offset, r, s, unused;
};

// B(crs, n*PQ + pq) = x[n, c, p*sh - ph + r, q*sw - pw + s] (0 outside), the
// (c, r, s) of row crs read from the tap table.   x: [N, C, H, W]   taps: [C*R*S]
struct TapTableB {
  const float* x;
  const Tap* taps;
  ConvDims<int32_t> d;
  static constexpr bool kKFastest = false;  // consecutive columns = consecutive q
  __device__ __forceinline__ float operator()(int64_t crs, int64_t npq) const {
    int32_t n, pq, p, q;
    d.by_PQ.divmod(int32_t(npq), n, pq);
    d.by_Q.divmod(pq, p, q);
    const Tap t = taps[crs];
    const int32_t h0 = p * d.sh - d.ph, w0 = q * d.sw - d.pw;
    const int32_t h = h0 + t.r, w = w0 + t.s;
    return (h >= 0 && h < d.H && w >= 0 && w < d.W) ? x[n * d.C * d.H * d.W + t.offset + h0 * d.W + w0] : 0.0f;
  }
};

}  // namespace

const char* conv_version_name(ConvVersion v) {
  switch (v) {
    case ConvVersion::direct: return "direct";
    case ConvVersion::tap_table: return "tap_table";
  }
  return "?";
}

ConvVersion parse_conv_version(const char* name) {
  for (ConvVersion v : {ConvVersion::direct, ConvVersion::tap_table})
    if (std::strcmp(name, conv_version_name(v)) == 0) return v;
  fail(cat("unknown convolution version '", name, "' (direct, tap_table)"));
}

void conv_forward_version(ConvVersion v, const Conv2dGeometry& g, const float* x, const float* w, float* y,
                          Stream stream) {
  const cudaStream_t s = as_cuda_stream(stream);
  const int64_t outputs = g.N * g.K * g.P * g.Q;
  if (outputs <= 0) return;
  if (v == ConvVersion::direct) {
    launch(conv_direct_kernel, dim3(blocks_for(outputs, kDirectThreads)), dim3(kDirectThreads), 0, s, g, x, w, y);
    return;
  }
  EMBER_CHECK(g.N * g.C * g.H * g.W < (int64_t(1) << 31) && outputs < (int64_t(1) << 31),
              "conv_forward_version tap_table: 32-bit indices only (tensors under 2^31 elements)");
  // The table, built on the host and uploaded without a wait; the buffer is
  // released after the launch (stream order keeps it alive for the kernel).
  std::vector<Tap> taps(size_t(g.C * g.R * g.S));
  for (int64_t c = 0; c < g.C; ++c)
    for (int64_t r = 0; r < g.R; ++r)
      for (int64_t t = 0; t < g.S; ++t)
        taps[size_t((c * g.R + r) * g.S + t)] = {int32_t(c * g.H * g.W + r * g.W + t), int32_t(r), int32_t(t), 0};
  const DeviceBuffer table(taps.size() * sizeof(Tap));
  copy_from_host_async(table.get(), taps.data(), taps.size() * sizeof(Tap), s);
  launch_gemm_auto<float>(g.K, g.N * g.P * g.Q, g.col_rows(), MatrixA<float, false>{w, g.col_rows()},
                          TapTableB{x, table.as<const Tap>(), dims_of<int32_t>(g)},
                          StorePlanes<float, int32_t>{y, int32_t(g.K), IndexDivisor<int32_t>(g.P * g.Q)}, s);
}

}  // namespace ember::cuda::lab
