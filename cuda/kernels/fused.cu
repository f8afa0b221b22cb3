// cuda/kernels/fused.cu — the fused entries of ops/kernels.h on the GPU:
// add + relu as one elementwise kernel, and batch norm + relu (training
// forward and backward) as the batch-norm kernels of batch_norm.cu followed
// (forward: relu in place on the output) or preceded (backward: gy masked by
// the output into a scratch buffer) by the relu kernels of elementwise.cu.
// The batch-norm pair is thus one launch more than a single fused kernel;
// the CPU, where the passes over memory are what costs, has the single-pass
// versions (ops/cpu/batch_norm.cpp).
#include "cuda/allocator.h"
#include "cuda/common.cuh"
#include "cuda/cuda_kernels.h"

namespace ember::cuda {

namespace {

constexpr unsigned kThreads = 256;

// y = max(a + b, 0), NaN stays NaN                            a, b, y: [n]
template <typename T>
__global__ void add_relu_kernel(const T* a, const T* b, T* y, int64_t n) {
  for (int64_t i = grid_thread_index(); i < n; i += grid_thread_count()) {
    const compute_t<T> v = to_compute(a[i]) + to_compute(b[i]);
    y[i] = to_storage<T>(v < compute_t<T>(0) ? compute_t<T>(0) : v);
  }
}

}  // namespace

// y = max(a + b, 0)                                          a, b, y: [n]
void add_relu(DType dt, const void* a, const void* b, void* y, int64_t n, Stream stream) {
  dispatch_float_half(dt, "add_relu", [&](auto zero) {
    using T = decltype(zero);
    if (n <= 0) return;
    launch(add_relu_kernel<T>, dim3(blocks_for(n, kThreads)), dim3(kThreads), 0, as_cuda_stream(stream),
           static_cast<const T*>(a), static_cast<const T*>(b), static_cast<T*>(y), n);
  });
}

// y = relu(batch norm of x)                  x, y: [N, C, HW]   the rest: [C]
void batch_norm_relu_forward_train(DType dt, const void* x, const void* gamma, const void* beta, void* y,
                                   void* save_mean, void* save_invstd, void* running_mean, void* running_var,
                                   int64_t N, int64_t C, int64_t HW, double momentum, double eps, Stream stream) {
  batch_norm_forward_train(dt, x, gamma, beta, y, save_mean, save_invstd, running_mean, running_var, N, C, HW,
                           momentum, eps, stream);
  relu_forward(dt, y, y, N * C * HW, stream);
}

// The gradients of y = relu(batch norm of x): batch norm's of (y > 0 ? gy : 0).
void batch_norm_relu_backward_train(DType dt, const void* x, const void* y, const void* gy, const void* gamma,
                                    const void* save_mean, const void* save_invstd, void* gx, void* ggamma,
                                    void* gbeta, int64_t N, int64_t C, int64_t HW, double eps, Stream stream) {
  const int64_t n = N * C * HW;
  DeviceBuffer masked(size_t(n) * dtype_size(dt));  // (stream-ordered reuse: the allocator's contract)
  relu_backward(dt, y, gy, masked.get(), n, stream);
  batch_norm_backward_train(dt, x, masked.get(), gamma, save_mean, save_invstd, gx, ggamma, gbeta, N, C, HW, eps,
                            stream);
}

}  // namespace ember::cuda
