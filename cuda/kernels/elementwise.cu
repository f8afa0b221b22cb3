// cuda/kernels/elementwise.cu — the elementwise and per-channel broadcast
// CUDA kernels: add, axpby, relu forward/backward, the pointwise ops of
// ops/pointwise.h, bias add and its gradient
// (the counterparts of ops/cpu/elementwise.cpp).
//
// The elementwise ops are functors run by vector_loop.cuh's one loop (16-byte
// accesses where the operands are aligned, 32-bit indices where n allows),
// in the element type (f32 or f64; f16/bf16 is loaded to f32, computed in
// f32 and rounded once on the store: compute_t in cuda/common.cuh). An
// output may be exactly one of the inputs (in-place add, relu, gradient
// accumulation): every element is read and written by the same thread, so
// that needs no care; partial overlaps are not supported. axpby with
// beta == 0 never reads y, so NaN or garbage there does not leak into the
// result.
//
// bias_backward reduces each channel in double, deterministically: for
// gy: [outer, channels] (inner == 1) with many channels, one thread per
// channel adds its column top to bottom (the CPU's order, so the same bits);
// otherwise one block per channel (32 to 256 threads, fixed by the shape),
// each thread adds a fixed strided subset of the channel's elements and
// block_sum (cuda/kernels/reduce.cuh) combines the threads in a fixed tree.
// No atomics, so every run gives the same bits.
#include <algorithm>

#include "cuda/common.cuh"
#include "cuda/cuda_kernels.h"
#include "cuda/kernels/fast_divmod.cuh"
#include "cuda/kernels/reduce.cuh"
#include "cuda/kernels/vector_loop.cuh"
#include "ops/pointwise.h"

namespace ember::cuda {

namespace {

constexpr unsigned kElementwiseThreads = 256;    // threads per block of bias_add
constexpr int64_t kBiasReduceMaxThreads = 256;   // threads per block (= per channel) of bias_backward, at most
constexpr unsigned kBiasColumnThreads = 128;     // threads per block of the column-per-thread bias_backward
constexpr int64_t kBiasColumnMinChannels = 128;  // inner == 1 and at least this many channels: column kernel
constexpr unsigned kMaxReduceBlocks = 8192;      // grid cap of the block-per-channel kernel (it loops beyond)

// ----------------------------------------------------------------- kernels
// The elementwise ops are functors of vector_loop.cuh's loop: each maps the
// storage values of one element (and its index) to the value stored.

// y = a + b                                                   a, b, y: [n]
template <typename T>
struct AddOp {
  __device__ T operator()(T a, T b, int64_t) const { return to_storage<T>(to_compute(a) + to_compute(b)); }
};

// y = alpha * x (the scale form: y is never read)             x, y: [n]
template <typename T>
struct ScaleOp {
  compute_t<T> alpha;
  __device__ T operator()(T x, int64_t) const { return to_storage<T>(alpha * to_compute(x)); }
};

// y = alpha * x + beta * y (alpha == beta == 1: y + x)        x, y: [n]
template <typename T>
struct AxpbyOp {
  compute_t<T> alpha, beta;
  bool accumulate;
  __device__ T operator()(T x, T y, int64_t) const {
    if (accumulate) return to_storage<T>(to_compute(y) + to_compute(x));
    return to_storage<T>(alpha * to_compute(x) + beta * to_compute(y));
  }
};

// y = max(x, 0), NaN stays NaN (x's own bits otherwise)        x, y: [n]
template <typename T>
struct ReluOp {
  __device__ T operator()(T x, int64_t) const {
    return to_compute(x) < compute_t<T>(0) ? to_storage<T>(0.0f) : x;
  }
};

// gx = y > 0 ? gy : 0                                         y, gy, gx: [n]
template <typename T>
struct ReluBackwardOp {
  __device__ T operator()(T y, T gy, int64_t) const {
    return keep_or_zero(to_compute(y) > compute_t<T>(0), gy);
  }
};

// The ops of ops/pointwise.h, computed in compute_t<T>:
//   y[i] = Op::forward(x[i], i, args)                           x, y: [n]
template <typename Op, typename T>
struct PointwiseForwardOp {
  PointwiseArgs args;
  __device__ T operator()(T x, int64_t i) const {
    using C = compute_t<T>;
    return to_storage<T>(Op::forward(C(to_compute(x)), i, args));
  }
};

//   gx[i] = gy[i] * Op::derivative(x[i], i, args)               x, gy, gx: [n]
// (x is not read when Op::backward_reads_x is false: the one-input form over gy)
template <typename Op, typename T>
struct PointwiseBackwardOp {
  PointwiseArgs args;
  __device__ T operator()(T x, T gy, int64_t i) const {
    using C = compute_t<T>;
    return to_storage<T>(C(to_compute(gy)) * Op::derivative(C(to_compute(x)), i, args));
  }
  __device__ T operator()(T gy, int64_t i) const {
    using C = compute_t<T>;
    return to_storage<T>(C(to_compute(gy)) * Op::derivative(C(0), i, args));
  }
};

// y[o, c, i] += b[c]                           y: [outer, channels, inner]  b: [channels]
template <typename T, typename I>
__global__ void bias_add_kernel(T* __restrict__ y, const T* __restrict__ b, int64_t total, IndexDivisor<I> by_channels,
                                IndexDivisor<I> by_inner) {
  for (int64_t j = grid_thread_index(); j < total; j += grid_thread_count()) {
    I oc, i, o, c;
    by_inner.divmod(I(j), oc, i);
    by_channels.divmod(oc, o, c);
    y[j] = to_storage<T>(to_compute(y[j]) + to_compute(b[c]));
  }
}

// gb[c] = sum over o of gy[o, c], one thread per channel, rows in order
//   gy: [outer, channels]   gb: [channels]
template <typename T>
__global__ void bias_backward_column_kernel(const T* __restrict__ gy, T* __restrict__ gb, int64_t outer,
                                            int64_t channels) {
  for (int64_t c = grid_thread_index(); c < channels; c += grid_thread_count()) {
    double s = 0.0;
    for (int64_t o = 0; o < outer; ++o) s += double(to_compute(gy[o * channels + c]));
    gb[c] = to_storage<T>(s);
  }
}

// gb[c] = sum over o, i of gy[o, c, i], one block per channel (blocks loop
// over channels; the loop bound is the same for every thread of a block, so
// all of them reach block_sum's barriers)
//   gy: [outer, channels, inner]   gb: [channels]
template <typename T, typename I>
__global__ void bias_backward_block_kernel(const T* __restrict__ gy, T* __restrict__ gb, int64_t outer,
                                           int64_t channels, IndexDivisor<I> by_inner) {
  const int64_t inner = by_inner.value();
  const int64_t per_channel = outer * inner;
  for (int64_t c = blockIdx.x; c < channels; c += gridDim.x) {
    double s = 0.0;
    for (int64_t j = threadIdx.x; j < per_channel; j += blockDim.x) {
      I o, i;
      by_inner.divmod(I(j), o, i);
      s += double(to_compute(gy[(o * channels + c) * inner + i]));
    }
    s = block_sum(s);
    if (threadIdx.x == 0) gb[c] = to_storage<T>(s);
  }
}

}  // namespace

// --------------------------------------------------------------- launchers

// y = a + b                                                 a, b, y: [n]
void add(DType dt, const void* a, const void* b, void* y, int64_t n, Stream stream) {
  dispatch_float_half(dt, "add", [&](auto zero) {
    using T = decltype(zero);
    launch_vector_loop<2>(static_cast<const T*>(a), static_cast<const T*>(b), static_cast<T*>(y), n, AddOp<T>{},
                          as_cuda_stream(stream));
  });
}

// y = alpha * x + beta * y; beta == 0 never reads y        x, y: [n]
void axpby(DType dt, double alpha, const void* x, double beta, void* y, int64_t n, Stream stream) {
  dispatch_float_half(dt, "axpby", [&](auto zero) {
    using T = decltype(zero);
    using C = compute_t<T>;
    const T* px = static_cast<const T*>(x);
    T* py = static_cast<T*>(y);
    if (beta == 0.0)
      launch_vector_loop<1>(px, static_cast<const T*>(nullptr), py, n, ScaleOp<T>{C(alpha)}, as_cuda_stream(stream));
    else
      launch_vector_loop<2>(px, static_cast<const T*>(py), py, n,
                            AxpbyOp<T>{C(alpha), C(beta), alpha == 1.0 && beta == 1.0}, as_cuda_stream(stream));
  });
}

// y = max(x, 0)                                             x, y: [n]
void relu_forward(DType dt, const void* x, void* y, int64_t n, Stream stream) {
  dispatch_float_half(dt, "relu_forward", [&](auto zero) {
    using T = decltype(zero);
    launch_vector_loop<1>(static_cast<const T*>(x), static_cast<const T*>(nullptr), static_cast<T*>(y), n,
                          ReluOp<T>{}, as_cuda_stream(stream));
  });
}

// gx = y > 0 ? gy : 0                                       y, gy, gx: [n]
void relu_backward(DType dt, const void* y, const void* gy, void* gx, int64_t n, Stream stream) {
  dispatch_float_half(dt, "relu_backward", [&](auto zero) {
    using T = decltype(zero);
    launch_vector_loop<2>(static_cast<const T*>(y), static_cast<const T*>(gy), static_cast<T*>(gx), n,
                          ReluBackwardOp<T>{}, as_cuda_stream(stream));
  });
}

// y[i] = Op::forward(x[i], i, args)                        x, y: [n]
void pointwise_forward(DType dt, PointwiseOp op, const void* x, void* y, int64_t n, const PointwiseArgs& args,
                       Stream stream) {
  with_pointwise_fn(op, [&](auto fn) {
    using Op = decltype(fn);
    dispatch_float_half(dt, pointwise_name(op), [&](auto zero) {
      using T = decltype(zero);
      launch_vector_loop<1>(static_cast<const T*>(x), static_cast<const T*>(nullptr), static_cast<T*>(y), n,
                            PointwiseForwardOp<Op, T>{args}, as_cuda_stream(stream));
    });
  });
}

// gx[i] = gy[i] * Op::derivative(x[i], i, args)             x, gy, gx: [n]
void pointwise_backward(DType dt, PointwiseOp op, const void* x, const void* gy, void* gx, int64_t n,
                        const PointwiseArgs& args, Stream stream) {
  with_pointwise_fn(op, [&](auto fn) {
    using Op = decltype(fn);
    EMBER_CHECK(x != nullptr || !Op::backward_reads_x, "cuda pointwise_backward: ", pointwise_name(op), " needs x");
    dispatch_float_half(dt, pointwise_name(op), [&](auto zero) {
      using T = decltype(zero);
      const PointwiseBackwardOp<Op, T> f{args};
      if constexpr (Op::backward_reads_x)
        launch_vector_loop<2>(static_cast<const T*>(x), static_cast<const T*>(gy), static_cast<T*>(gx), n, f,
                              as_cuda_stream(stream));
      else
        launch_vector_loop<1>(static_cast<const T*>(gy), static_cast<const T*>(nullptr), static_cast<T*>(gx), n, f,
                              as_cuda_stream(stream));
    });
  });
}

// y[o, c, i] += b[c]                         y: [outer, channels, inner]  b: [channels]
void bias_add(DType dt, void* y, const void* b, int64_t outer, int64_t channels, int64_t inner, Stream stream) {
  dispatch_float_half(dt, "bias_add", [&](auto zero) {
    using T = decltype(zero);
    const int64_t total = outer * channels * inner;
    if (total <= 0) return;
    with_index_type(total, [&](auto index) {
      using I = decltype(index);
      launch(bias_add_kernel<T, I>, dim3(blocks_for(total, kElementwiseThreads)), dim3(kElementwiseThreads), 0,
             as_cuda_stream(stream), static_cast<T*>(y), static_cast<const T*>(b), total, IndexDivisor<I>(channels),
             IndexDivisor<I>(inner));
    });
  });
}

// gb[c] = sum over o, i of gy[o, c, i]      gy: [outer, channels, inner] gb: [channels]
void bias_backward(DType dt, const void* gy, void* gb, int64_t outer, int64_t channels, int64_t inner, Stream stream) {
  dispatch_float_half(dt, "bias_backward", [&](auto zero) {
    using T = decltype(zero);
    if (channels <= 0) return;
    const cudaStream_t s = as_cuda_stream(stream);
    const T* pgy = static_cast<const T*>(gy);
    T* pgb = static_cast<T*>(gb);
    const int64_t o = outer < 0 ? 0 : outer, i = inner < 0 ? 0 : inner;
    if (i == 1 && channels >= kBiasColumnMinChannels) {
      launch(bias_backward_column_kernel<T>, dim3(blocks_for(channels, kBiasColumnThreads)), dim3(kBiasColumnThreads),
             0, s, pgy, pgb, o, channels);
    } else {
      // a warp per 32 values of a channel, up to kBiasReduceMaxThreads (a function of the shape only)
      const int64_t threads =
          std::clamp<int64_t>((o * i + kWarpSize - 1) / kWarpSize * kWarpSize, kWarpSize, kBiasReduceMaxThreads);
      const unsigned blocks = unsigned(channels < int64_t(kMaxReduceBlocks) ? channels : kMaxReduceBlocks);
      with_index_type(o * i, [&](auto index) {
        using I = decltype(index);
        launch(bias_backward_block_kernel<T, I>, dim3(blocks), dim3(unsigned(threads)), 0, s, pgy, pgb, o, channels,
               IndexDivisor<I>(i));
      });
    }
  });
}

}  // namespace ember::cuda
