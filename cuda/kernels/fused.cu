// cuda/kernels/fused.cu — add + relu as one elementwise kernel (an entry
// of ops/kernels.h; vector_loop.cuh's loop). Batch norm + relu, the other fused pair, lives with the
// batch-norm kernels it shares (batch_norm.cu).
#include "cuda/common.cuh"
#include "cuda/cuda_kernels.h"
#include "cuda/kernels/vector_loop.cuh"

namespace ember::cuda {

namespace {

// y = max(a + b, 0), NaN stays NaN                            a, b, y: [n]
template <typename T>
struct AddReluOp {
  __device__ T operator()(T a, T b, int64_t) const {
    const compute_t<T> v = to_compute(a) + to_compute(b);
    return to_storage<T>(v < compute_t<T>(0) ? compute_t<T>(0) : v);
  }
};

}  // namespace

// y = max(a + b, 0)                                          a, b, y: [n]
void add_relu(DType dt, const void* a, const void* b, void* y, int64_t n, Stream stream) {
  dispatch_float_half(dt, "add_relu", [&](auto zero) {
    using T = decltype(zero);
    launch_vector_loop<2>(static_cast<const T*>(a), static_cast<const T*>(b), static_cast<T*>(y), n, AddReluOp<T>{},
                          as_cuda_stream(stream));
  });
}

}  // namespace ember::cuda
