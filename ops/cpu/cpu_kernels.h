// ops/cpu/cpu_kernels.h — the CPU implementations of every kernel in
// ops/kernels.h (same names and signatures, namespace ember::cpu), plus the
// helpers the CPU files share. cpu_kernels.cpp puts them in the table.
//
// Every kernel supports f32, f64 (f64 exists for the gradient checks), f16
// and bf16 (storage only: f32 arithmetic, see ops/cpu/f16_util.h and
// ops/kernels.h) and parallelises with engine/parallel.h. Shapes are in
// ops/kernels.h.
#pragma once
#include "engine/error.h"
#include "ops/kernels.h"

namespace ember::cpu {

// Calls f(T{}) with T = float or double for dt; any other dtype is an error
// (the kernels that take 16-bit types use dispatch_storage in f16_util.h instead).
template <typename F>
decltype(auto) dispatch_float(DType dt, const char* kernel, F&& f) {
  switch (dt) {
    case DType::f32: return f(float{});
    case DType::f64: return f(double{});
    default: fail(cat("cpu ", kernel, ": unsupported dtype ", dtype_name(dt)));
  }
}

void fill(DType dt, void* y, int64_t n, double value, Stream stream);
void cast(DType src_dt, const void* x, DType dst_dt, void* y, int64_t n, Stream stream);
void copy_2d(DType dt, const void* x, int64_t ldx, void* y, int64_t ldy, int64_t rows, int64_t cols,
             Stream stream);
void transpose_batched(DType dt, const void* x, void* y, int64_t batch, int64_t rows, int64_t cols, Stream stream);
void add(DType dt, const void* a, const void* b, void* y, int64_t n, Stream stream);
void add_relu(DType dt, const void* a, const void* b, void* y, int64_t n, Stream stream);
void axpby(DType dt, double alpha, const void* x, double beta, void* y, int64_t n, Stream stream);
void relu_forward(DType dt, const void* x, void* y, int64_t n, Stream stream);
void relu_backward(DType dt, const void* y, const void* gy, void* gx, int64_t n, Stream stream);
void pointwise_forward(DType dt, PointwiseOp op, const void* x, void* y, int64_t n, const PointwiseArgs& args,
                       Stream stream);
void pointwise_backward(DType dt, PointwiseOp op, const void* x, const void* gy, void* gx, int64_t n,
                        const PointwiseArgs& args, Stream stream);
void bias_add(DType dt, void* y, const void* b, int64_t outer, int64_t channels, int64_t inner, Stream stream);
void bias_backward(DType dt, const void* gy, void* gb, int64_t outer, int64_t channels, int64_t inner,
                   Stream stream);
void sum(DType dt, const void* x, void* y, int64_t n, Stream stream);
void argmax_rows(DType dt, const void* x, int64_t* idx, int64_t rows, int64_t cols, Stream stream);
void count_equal(DType dt, const int64_t* a, const int64_t* b, int64_t n, double* acc, Stream stream);
void gemm(DType dt, bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, double alpha, const void* A,
          int64_t lda, const void* B, int64_t ldb, double beta, void* C, int64_t ldc, Stream stream);
void im2col(DType dt, const Conv2dGeometry& g, const void* x, void* col, Stream stream);
void col2im(DType dt, const Conv2dGeometry& g, const void* col, void* x, Stream stream);
void conv2d_forward(DType dt, const Conv2dGeometry& g, const void* x, const void* w, void* y, Stream stream);
void conv2d_backward_data(DType dt, const Conv2dGeometry& g, const void* gy, const void* w, void* gx,
                          Stream stream);
void conv2d_backward_filter(DType dt, const Conv2dGeometry& g, const void* x, const void* gy, void* gw,
                            Stream stream);
void batch_norm_forward_train(DType dt, const void* x, const void* gamma, const void* beta, void* y,
                              void* save_mean, void* save_invstd, void* running_mean, void* running_var, int64_t N,
                              int64_t C, int64_t HW, double momentum, double eps, Stream stream);
void batch_norm_relu_forward_train(DType dt, const void* x, const void* gamma, const void* beta, void* y,
                                   void* save_mean, void* save_invstd, void* running_mean, void* running_var,
                                   int64_t N, int64_t C, int64_t HW, double momentum, double eps, Stream stream);
void batch_norm_relu_backward_train(DType dt, const void* x, const void* y, const void* gy, const void* gamma,
                                    const void* save_mean, const void* save_invstd, void* gx, void* ggamma,
                                    void* gbeta, int64_t N, int64_t C, int64_t HW, double eps, Stream stream);
void batch_norm_add_relu_forward_train(DType dt, const void* x, const void* r, const void* gamma, const void* beta,
                                       void* y, void* save_mean, void* save_invstd, void* running_mean,
                                       void* running_var, int64_t N, int64_t C, int64_t HW, double momentum,
                                       double eps, Stream stream);
void conv2d_batch_norm_forward_train(DType dt, const Conv2dGeometry& g, const void* x, const void* w, void* y_conv,
                                     const void* r, const void* gamma, const void* beta, void* y, void* save_mean,
                                     void* save_invstd, void* running_mean, void* running_var, double momentum,
                                     double eps, bool relu, Stream stream);
void batch_norm_add_relu_backward_train(DType dt, const void* x, const void* y, const void* gy, const void* gamma,
                                        const void* save_mean, const void* save_invstd, void* gx, void* gr,
                                        void* ggamma, void* gbeta, int64_t N, int64_t C, int64_t HW, double eps,
                                        Stream stream);
void batch_norm_forward_eval(DType dt, const void* x, const void* gamma, const void* beta,
                             const void* running_mean, const void* running_var, void* y, int64_t N, int64_t C,
                             int64_t HW, double eps, Stream stream);
void batch_norm_backward_train(DType dt, const void* x, const void* gy, const void* gamma, const void* save_mean,
                               const void* save_invstd, void* gx, void* ggamma, void* gbeta, int64_t N, int64_t C,
                               int64_t HW, double eps, Stream stream);
void batch_norm_backward_eval(DType dt, const void* x, const void* gy, const void* gamma,
                              const void* running_mean, const void* running_var, void* gx, void* ggamma,
                              void* gbeta, int64_t N, int64_t C, int64_t HW, double eps, Stream stream);
void max_pool2d_forward(DType dt, const Pool2dGeometry& g, const void* x, void* y, int32_t* argmax, Stream stream);
void max_pool2d_backward(DType dt, const Pool2dGeometry& g, const void* x, const void* y, const void* gy,
                         const int32_t* argmax, void* gx, Stream stream);
void adaptive_avg_pool2d_forward(DType dt, const void* x, void* y, int64_t planes, int64_t H, int64_t W,
                                 int64_t OH, int64_t OW, Stream stream);
void adaptive_avg_pool2d_backward(DType dt, const void* gy, void* gx, int64_t planes, int64_t H, int64_t W,
                                  int64_t OH, int64_t OW, Stream stream);
void softmax_cross_entropy_forward(DType dt, const void* logits, const int64_t* labels, void* losses, void* probs,
                                   int64_t N, int64_t classes, double smoothing, Stream stream);
void softmax_cross_entropy_backward(DType dt, const void* probs, const int64_t* labels, const void* grad_loss,
                                    double scale, void* glogits, int64_t N, int64_t classes, double smoothing,
                                    Stream stream);
void normalize_u8(DType dt, const uint8_t* x, void* y, int64_t N, int64_t HW, const ChannelNorm& norm,
                  Stream stream);
void sgd_update(DType dt, void* w, const void* g, void* momentum_buf, int64_t n, const SgdParams& p, Stream stream);
void unscale_gradients(const MultiTensorSlice* slices, const MultiTensorChunk* chunks, int64_t num_chunks,
                       float* state, Stream stream);
void multi_tensor_sgd(const MultiTensorSlice* slices, const MultiTensorChunk* chunks, int64_t num_chunks, double lr,
                      double momentum, bool nesterov, const float* state, const float* hyper, Stream stream);
void loss_scale_update(float* state, const LossScaleParams& p, Stream stream);
void random_uniform(DType dt, void* y, int64_t n, uint64_t seed, uint64_t offset, double lo, double hi,
                    Stream stream);
void random_normal(DType dt, void* y, int64_t n, uint64_t seed, uint64_t offset, double mean, double std,
                   Stream stream);

// The convolutions and max pooling of channels-last tensors
// (channels_last.cpp): the table's kernels hand a geometry with
// channels_last set to these.
void conv2d_forward_channels_last(DType dt, const Conv2dGeometry& g, const void* x, const void* w, void* y);
void conv2d_backward_data_channels_last(DType dt, const Conv2dGeometry& g, const void* gy, const void* w, void* gx);
void conv2d_backward_filter_channels_last(DType dt, const Conv2dGeometry& g, const void* x, const void* gy,
                                          void* gw);
void max_pool2d_forward_channels_last(DType dt, const Pool2dGeometry& g, const void* x, void* y, int32_t* argmax);
void max_pool2d_backward_channels_last(DType dt, const Pool2dGeometry& g, const void* gy, const int32_t* argmax,
                                       void* gx);

// How the batch-norm training backward splits its work (batch_norm.cpp):
// `automatic` by the size rule there; the others force one order. The
// initial value comes from EMBER_CPU_BN_ORDER=auto|planes|channels (read
// once); setting it is not thread safe against running kernels: for tests
// and benchmarks.
enum class BatchNormOrder { automatic, planes, channels };
void set_batch_norm_order(BatchNormOrder order);
BatchNormOrder batch_norm_order();

}  // namespace ember::cpu
