// cuda/kernels/fused.cu — add + relu as one elementwise kernel (an entry
// of ops/kernels.h). Batch norm + relu, the other fused pair, lives with the
// batch-norm kernels it shares (batch_norm.cu).
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

}  // namespace ember::cuda
