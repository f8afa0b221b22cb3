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
//   column_once the tap table, and the column decode hoisted out of the k
//               loop. With the B tile staged column-fastest by 256 threads
//               over 64 columns, a thread's column slot is tid % 64 for
//               every element it ever stages (only its k changes), so it
//               decodes (n, p, q) into a base offset and a window corner
//               once per block; per element it reads a tap, adds, and
//               checks bounds: no division or decode left in the inner loop
//               (the issue's "offsets precomputed per filter tap"). A
//               kernel of its own: ember's tile loop takes stateless loaders.
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

// y = conv(x, w) as C [K, N*P*Q] = w [K, C*R*S] * B [C*R*S, N*P*Q], the tile
// loop of ember's gemm_tiled_kernel (tile Cfg, the one ember would pick: the
// next tile's loads in registers during the products) with B gathered
// through per-thread column state.
//   x: [N, C, H, W]   w: [K, C*R*S]   taps: [C*R*S]   y: [N, K, P, Q]
template <typename Cfg>
__global__ void conv_column_once_kernel(ConvDims<int32_t> d, const float* x, const float* w, const Tap* taps, float* y) {
  constexpr int BM = Cfg::BM, BN = Cfg::BN, BK = Cfg::BK, TM = Cfg::TM, TN = Cfg::TN, NT = Cfg::kThreads;
  static_assert(NT % BN == 0, "a thread's column slot must not change between its loads");
  constexpr int kPad = 32 / BK;  // as gemm_tiled_kernel: conflict-free k-fastest stores of A
  __shared__ float As[BK][BM + kPad];
  __shared__ float Bs[BK][BN + kPad];
  const int32_t M = d.K, crs_total = d.C * d.R * d.S, cols = d.N * d.P * d.Q;
  const int tid = int(threadIdx.x), tx = tid % Cfg::kThreadsN, ty = tid / Cfg::kThreadsN;
  const int32_t row0 = int32_t(blockIdx.y) * BM, col0 = int32_t(blockIdx.x) * BN;

  // This thread's column of B, decoded once: image n's block plus the
  // window corner (h0, w0); every element it stages is x[base + tap.offset]
  // when (h0 + tap.r, w0 + tap.s) is inside the image.
  const int32_t j = col0 + tid % BN, kk0 = tid / BN;
  int32_t base = 0, h0 = -(1 << 30), w0 = 0;  // an out-of-range column: h never passes the check
  if (j < cols) {
    int32_t n, pq, p, q;
    d.by_PQ.divmod(j, n, pq);
    d.by_Q.divmod(pq, p, q);
    h0 = p * d.sh - d.ph, w0 = q * d.sw - d.pw;
    base = n * d.C * d.H * d.W + h0 * d.W + w0;
  }

  float acc[TM][TN] = {};
  float ra[Cfg::kLoadsA], rb[Cfg::kLoadsB];
  auto fetch = [&](int32_t k0) {
    for (int i = 0; i < Cfg::kLoadsA; ++i) {  // w, k fastest: as MatrixA
      const TileSlot s = tile_slot<true, BM, BK>(tid + i * NT);
      const int32_t row = row0 + s.mn, k = k0 + s.kk;
      ra[i] = (row < M && k < crs_total) ? w[row * crs_total + k] : 0.0f;
    }
    for (int i = 0; i < Cfg::kLoadsB; ++i) {  // column fixed, k = k0 + kk0 + i * (NT / BN)
      const int32_t k = k0 + kk0 + i * (NT / BN);
      float v = 0.0f;
      if (k < crs_total) {
        const Tap t = taps[k];
        const int32_t h = h0 + t.r, ww = w0 + t.s;
        if (h >= 0 && h < d.H && ww >= 0 && ww < d.W) v = x[base + t.offset];
      }
      rb[i] = v;
    }
  };

  fetch(0);
  for (int32_t k0 = 0; k0 < crs_total; k0 += BK) {
    for (int i = 0; i < Cfg::kLoadsA; ++i) {
      const TileSlot s = tile_slot<true, BM, BK>(tid + i * NT);
      As[s.kk][s.mn] = ra[i];
    }
    for (int i = 0; i < Cfg::kLoadsB; ++i) Bs[kk0 + i * (NT / BN)][tid % BN] = rb[i];
    __syncthreads();
    if (k0 + BK < crs_total) fetch(k0 + BK);  // in flight during the products
    for (int kk = 0; kk < BK; ++kk) {
      float a[TM], b[TN];
      for (int i = 0; i < TM; ++i) a[i] = As[kk][ty + i * Cfg::kThreadsM];
      for (int jj = 0; jj < TN; ++jj) b[jj] = Bs[kk][tx + jj * Cfg::kThreadsN];
      for (int i = 0; i < TM; ++i)
        for (int jj = 0; jj < TN; ++jj) acc[i][jj] += a[i] * b[jj];
    }
    EMBER_PROFILE_FLOPS(2 * BK * TM * TN);
    __syncthreads();
  }
  const StorePlanes<float, int32_t> store{y, d.K, d.by_PQ};
  for (int i = 0; i < TM; ++i) {
    const int32_t row = row0 + ty + i * Cfg::kThreadsM;
    for (int jj = 0; jj < TN; ++jj) {
      const int32_t col = col0 + tx + jj * Cfg::kThreadsN;
      if (row < M && col < cols) store(0, row, col, acc[i][jj]);
    }
  }
}

}  // namespace

const char* conv_version_name(ConvVersion v) {
  switch (v) {
    case ConvVersion::direct: return "direct";
    case ConvVersion::tap_table: return "tap_table";
    case ConvVersion::column_once: return "column_once";
  }
  return "?";
}

ConvVersion parse_conv_version(const char* name) {
  for (ConvVersion v : {ConvVersion::direct, ConvVersion::tap_table, ConvVersion::column_once})
    if (std::strcmp(name, conv_version_name(v)) == 0) return v;
  fail(cat("unknown convolution version '", name, "' (direct, tap_table, column_once)"));
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
  EMBER_CHECK(g.N * g.C * g.H * g.W < (int64_t(1) << 31) && outputs < (int64_t(1) << 31) &&
                  g.K * g.col_rows() < (int64_t(1) << 31),
              "conv_forward_version ", conv_version_name(v), ": 32-bit indices only (tensors under 2^31 elements)");
  // The table, built on the host and uploaded without a wait; the buffer is
  // released after the launch (stream order keeps it alive for the kernel).
  std::vector<Tap> taps(size_t(g.C * g.R * g.S));
  for (int64_t c = 0; c < g.C; ++c)
    for (int64_t r = 0; r < g.R; ++r)
      for (int64_t t = 0; t < g.S; ++t)
        taps[size_t((c * g.R + r) * g.S + t)] = {int32_t(c * g.H * g.W + r * g.W + t), int32_t(r), int32_t(t), 0};
  const DeviceBuffer table(taps.size() * sizeof(Tap));
  copy_from_host_async(table.get(), taps.data(), taps.size() * sizeof(Tap), s);
  if (v == ConvVersion::column_once) {  // the tile ember's GEMM would take for this shape (no huge tile: f32 conv)
    auto run = [&](auto tile) {
      using Cfg = decltype(tile);
      const int64_t col_tiles = (g.N * g.P * g.Q + Cfg::BN - 1) / Cfg::BN, row_tiles = (g.K + Cfg::BM - 1) / Cfg::BM;
      EMBER_CHECK(row_tiles <= 65535, "conv_forward_version column_once: ", g.K,
                  " output channels need too many row tiles");
      const dim3 grid(static_cast<unsigned>(col_tiles), static_cast<unsigned>(row_tiles));
      launch(conv_column_once_kernel<Cfg>, grid, dim3(Cfg::kThreads), 0, s, dims_of<int32_t>(g), x, w,
             table.as<const Tap>(), y);
    };
    if (g.K >= 64 && g.N * g.P * g.Q >= 64)
      run(GemmTileLarge{});
    else
      run(GemmTileSmall{});
    return;
  }
  launch_gemm_auto<float>(g.K, g.N * g.P * g.Q, g.col_rows(), MatrixA<float, false>{w, g.col_rows()},
                          TapTableB{x, table.as<const Tap>(), dims_of<int32_t>(g)},
                          StorePlanes<float, int32_t>{y, int32_t(g.K), IndexDivisor<int32_t>(g.P * g.Q)}, s);
}

}  // namespace ember::cuda::lab
