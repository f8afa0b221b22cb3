// ops/kernels.h — the one list of compute kernels a backend provides.
//
// Every kernel the engine runs is a member of `Kernels`: a plain function
// taking raw pointers, sizes and a stream. ops/cpu fills one table, cuda/
// fills another (and cuda/sim runs that same table's source on the CPU), and
// the differentiable ops in ops/*.cpp only ever call through a table picked
// by the tensor's device (kernels_for). Tests walk the list with
// EMBER_FOR_EACH_KERNEL to check every kernel on every backend.
//
// Conventions for all kernels:
// - `dt` is the element type of the activations/data pointers: f64, f32,
//   f16 or bf16. Parameters and statistics of batch norm and the loss are
//   f64 when dt is f64, and f32 otherwise (so with f16 or bf16 data: gamma,
//   beta, running and saved statistics, ggamma, gbeta, losses, probs and
//   grad_loss are f32).
// - f16 and bf16 (mixed precision): storage is IEEE binary16 or bfloat16
//   (the top half of an f32: 8 exponent bits, 7 stored mantissa bits);
//   every kernel computes and accumulates in f32 (GEMM and convolutions
//   included) and rounds once, to nearest even, when it stores a 16-bit
//   result. Conv/GEMM weights and their gradients have the data's dtype.
//   sgd_update with a 16-bit dt updates 16-bit w/g/buf through f32
//   arithmetic (the trainer normally keeps f32 masters and calls it with
//   f32). A NaN stays a NaN (on the CPU a bf16 NaN keeps its sign and top
//   payload bits; CUDA stores its canonical NaN).
// - Tensors are dense and row-major; shapes are given in the comments. The
//   convolution and pooling geometries carry a channels_last flag: then every
//   [N, C, H, W] image tensor of that kernel is stored [N, H, W, C] and a
//   filter [K, C, R, S] is stored [K, R, S, C] (engine/tensor.h's memory
//   format). Per-channel kernels (batch norm, bias) take a channels-last
//   tensor as [N*H*W, C, 1].
// - Pointers live on the backend's device; `stream` is a cudaStream_t on
//   CUDA and ignored on the CPU. Kernels never allocate user-visible memory.
// - Output buffers are overwritten unless the comment says "accumulates".
// - A kernel given a dtype it does not support throws ember::Error (host
//   side; nothing is thrown from device code).
// - NaN follows PyTorch: relu and max-pooling propagate it, argmax_rows and
//   max_pool2d pick it as the largest value. Ties in argmax_rows and in a
//   max-pool window go to the first element in scan order.
// - In-place use: elementwise kernels (add, axpby, relu_*) accept outputs that
//   are exactly their inputs (same pointer), never partial overlaps.
#pragma once
#include <cstdint>

#include "engine/device.h"
#include "engine/dtype.h"

namespace ember {

using Stream = void*;

// The ops of ops/pointwise.h, by name only here: adding one recompiles the
// files that run them (ops/pointwise.h's includers), not all that see this table.
enum class PointwiseOp : int;
struct PointwiseArgs;

// Geometry of a 2-D convolution (groups = 1, dilation = 1).
//   x: [N, C, H, W]   w: [K, C, R, S]   y: [N, K, P, Q]
//   channels_last:  x: [N, H, W, C]   w: [K, R, S, C]   y: [N, P, Q, K]
struct Conv2dGeometry {
  int64_t N = 0, C = 0, H = 0, W = 0;
  int64_t K = 0, R = 0, S = 0;
  int64_t stride_h = 1, stride_w = 1, pad_h = 0, pad_w = 0;
  int64_t P = 0, Q = 0;
  bool channels_last = false;
  int64_t col_rows() const { return C * R * S; }  // im2col matrix: [C*R*S, P*Q]
  int64_t col_cols() const { return P * Q; }
};
// Fills P and Q from the rest; errors when the output would be empty.
Conv2dGeometry make_conv2d_geometry(int64_t N, int64_t C, int64_t H, int64_t W, int64_t K, int64_t R, int64_t S,
                                    int64_t stride_h, int64_t stride_w, int64_t pad_h, int64_t pad_w);

// Geometry of 2-D max pooling (padding counts as -inf).
//   x: [N, C, H, W]   y: [N, C, P, Q]   (channels_last: [N, H, W, C], [N, P, Q, C])
struct Pool2dGeometry {
  int64_t N = 0, C = 0, H = 0, W = 0;
  int64_t R = 0, S = 0;
  int64_t stride_h = 1, stride_w = 1, pad_h = 0, pad_w = 0;
  int64_t P = 0, Q = 0;
  bool channels_last = false;
};
Pool2dGeometry make_pool2d_geometry(int64_t N, int64_t C, int64_t H, int64_t W, int64_t R, int64_t S,
                                    int64_t stride_h, int64_t stride_w, int64_t pad_h, int64_t pad_w);

// Per-channel normalisation of uint8 images (at most 8 channels).
struct ChannelNorm {
  int channels = 0;
  float mean[8] = {};     // in units of the [0, 1] scaled pixel
  float inv_std[8] = {};
};

// SGD hyper-parameters of one update.
struct SgdParams {
  double lr = 0.1, momentum = 0.9, weight_decay = 0.0;
  bool nesterov = false;
  bool first_step = false;  // momentum buffer is initialised to the gradient
  double grad_scale = 1.0;  // gradients are multiplied by this first (1 / loss scale)
};

// One parameter of a multi-tensor optimizer step (net/sgd.h): every pointer
// is on the backend's device, and every array holds n elements. The f32
// arrays grad32, weight and momentum are slices of the optimizer's flat
// buffers, or the parameter itself.
struct MultiTensorSlice {
  const void* grad;      // this step's gradient, in grad_dtype
  float* grad32;         // its unscaled f32 copy (== grad for f32 gradients that need no unscaling)
  float* weight;         // the f32 master weights, or the f32 parameter itself
  float* momentum;       // nullptr when momentum is 0
  void* half;            // the 16-bit parameter to round the new weights into, or nullptr
  int64_t n;
  float lr_mult;         // the step's lr is lr * lr_mult
  float weight_decay;    // 0 for parameters without decay
  int32_t grad_dtype;    // DType of grad: f32, f16 or bf16
  int32_t half_dtype;    // DType of half: f16 or bf16 (when half is set)
};
// One block's share of a multi-tensor step: elements [begin, end) of
// slices[slice]. begin is a multiple of kMultiTensorChunk.
struct MultiTensorChunk {
  int64_t slice, begin, end;
};
constexpr int64_t kMultiTensorChunk = 16384;  // elements per chunk (at most)

// The dynamic loss scaler's policy (net/mixed_precision.h), for the device.
struct LossScaleParams {
  bool dynamic = true;   // false: the scale never changes (still counts skips)
  double window = 2000;  // clean steps in a row before the scale doubles
  double max_scale = 16777216.0;
};
// The scaler's state on the device, f32 [kLossScaleStateSize]: the scale,
// then the clean steps in the current window, the skipped steps, the skipped
// steps in a row, and the non-finite flag of this step's gradients.
enum LossScaleState : int { kLossScale, kCleanSteps, kSkippedSteps, kConsecutiveSkips, kFoundNonfinite,
                            kLossScaleStateSize };

struct Kernels {
  const char* name;  // "cpu", "cuda", "cuda-sim"

  // ---------------------------------------------------------------- memory
  // y[i] = value, for every dtype (integers take the truncated value)  y: [n]
  void (*fill)(DType dt, void* y, int64_t n, double value, Stream stream);
  // y[i] = (dst_dt) x[i]; any float type to any float type   x, y: [n]
  void (*cast)(DType src_dt, const void* x, DType dst_dt, void* y, int64_t n, Stream stream);
  // A [rows, cols] block between row-major matrices with row strides, for
  // every dtype (the bits are moved, not converted; x and y must not overlap):
  //   y[r * ldy + c] = x[r * ldx + c]      x: [rows, ldx]  y: [rows, ldy]  (cols <= ldx, ldy)
  // (ops::concat writes each input into its columns of the output with it;
  // its backward reads each gradient back out of the output's gradient.)
  void (*copy_2d)(DType dt, const void* x, int64_t ldx, void* y, int64_t ldy, int64_t rows, int64_t cols,
                  Stream stream);
  // Each matrix of a batch transposed, for every dtype (bits moved; x and y
  // must not overlap):   y[b, j, i] = x[b, i, j]   x: [batch, rows, cols]  y: [batch, cols, rows]
  // (NCHW -> NHWC is rows = C, cols = H*W; back is rows = H*W, cols = C; the
  // memory-format conversion of ops::to_memory_format.)
  void (*transpose_batched)(DType dt, const void* x, void* y, int64_t batch, int64_t rows, int64_t cols,
                            Stream stream);

  // ----------------------------------------------------------- elementwise
  // y = a + b                                                 a, b, y: [n]
  void (*add)(DType dt, const void* a, const void* b, void* y, int64_t n, Stream stream);
  // y = max(a + b, 0) (NaN propagates)                       a, b, y: [n]
  // (the residual add with the relu after it; its gradient is relu_backward
  // of y, the same for a and b)
  void (*add_relu)(DType dt, const void* a, const void* b, void* y, int64_t n, Stream stream);
  // y = alpha * x + beta * y (beta == 0 ignores y's old value) x, y: [n]
  void (*axpby)(DType dt, double alpha, const void* x, double beta, void* y, int64_t n, Stream stream);
  // y = max(x, 0)                                             x, y: [n]
  void (*relu_forward)(DType dt, const void* x, void* y, int64_t n, Stream stream);
  // gx = y > 0 ? gy : 0  (y is relu's output)                 y, gy, gx: [n]
  void (*relu_backward)(DType dt, const void* y, const void* gy, void* gx, int64_t n, Stream stream);
  // The ops of ops/pointwise.h, one kernel pair for all of them (computed in
  // f32, f64 for f64 data):
  //   y[i] = Op::forward(x[i], i, args)                                  x, y: [n]
  //   gx[i] = gy[i] * Op::derivative(x[i], i, args)                      x, gy, gx: [n]
  // (x may be null in the backward of an op whose backward_reads_x is false)
  void (*pointwise_forward)(DType dt, PointwiseOp op, const void* x, void* y, int64_t n, const PointwiseArgs& args,
                            Stream stream);
  void (*pointwise_backward)(DType dt, PointwiseOp op, const void* x, const void* gy, void* gx, int64_t n,
                             const PointwiseArgs& args, Stream stream);

  // ------------------------------------------------ per-channel broadcasts
  // y[o, c, i] += b[c]                         y: [outer, channels, inner]  b: [channels]
  void (*bias_add)(DType dt, void* y, const void* b, int64_t outer, int64_t channels, int64_t inner,
                   Stream stream);
  // gb[c] = sum over o, i of gy[o, c, i]      gy: [outer, channels, inner] gb: [channels]
  void (*bias_backward)(DType dt, const void* gy, void* gb, int64_t outer, int64_t channels, int64_t inner,
                        Stream stream);

  // ------------------------------------------------------------ reductions
  // y[0] = sum of x                                           x: [n]  y: [1]
  void (*sum)(DType dt, const void* x, void* y, int64_t n, Stream stream);
  // idx[r] = first index of the largest x[r, :]               x: [rows, cols]  idx: i64 [rows]
  void (*argmax_rows)(DType dt, const void* x, int64_t* idx, int64_t rows, int64_t cols, Stream stream);
  // acc[0] += number of i with a[i] == b[i]                   a, b: i64 [n]  acc: f64 [1]
  // (training accuracy summed on the device, read by the host only for the log;
  // dt is the index type, i64, as every kernel's first argument is a DType)
  void (*count_equal)(DType dt, const int64_t* a, const int64_t* b, int64_t n, double* acc, Stream stream);

  // ---------------------------------------------------------------- matmul
  // C = alpha * op(A) * op(B) + beta * C, row-major; op(A): [M, K], op(B): [K, N], C: [M, N].
  // A is stored [M, K] (lda >= K), or [K, M] when trans_a (lda >= M); likewise B.
  void (*gemm)(DType dt, bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, double alpha,
               const void* A, int64_t lda, const void* B, int64_t ldb, double beta, void* C, int64_t ldc,
               Stream stream);

  // ----------------------------------------------------------- convolution
  // One image to columns: col[(c*R + r)*S + s, p*Q + q] = x[c, p*sh - ph + r, q*sw - pw + s] (0 outside)
  //   x: [C, H, W]   col: [C*R*S, P*Q]
  void (*im2col)(DType dt, const Conv2dGeometry& g, const void* x, void* col, Stream stream);
  // The adjoint of im2col: x = sum of the columns back at their positions (overwrites x).
  //   col: [C*R*S, P*Q]   x: [C, H, W]
  void (*col2im)(DType dt, const Conv2dGeometry& g, const void* col, void* x, Stream stream);
  // y = conv(x, w)                          x: [N, C, H, W]  w: [K, C, R, S]  y: [N, K, P, Q]
  void (*conv2d_forward)(DType dt, const Conv2dGeometry& g, const void* x, const void* w, void* y,
                         Stream stream);
  // gx = conv_transpose(gy, w)              gy: [N, K, P, Q]  w: [K, C, R, S]  gx: [N, C, H, W]
  void (*conv2d_backward_data)(DType dt, const Conv2dGeometry& g, const void* gy, const void* w, void* gx,
                               Stream stream);
  // gw = sum over n of gy[n] (x) im2col(x[n])   x: [N, C, H, W]  gy: [N, K, P, Q]  gw: [K, C, R, S]
  void (*conv2d_backward_filter)(DType dt, const Conv2dGeometry& g, const void* x, const void* gy, void* gw,
                                 Stream stream);

  // ------------------------------------------------------------ batch norm
  // Training: batch statistics over (N, HW) per channel, biased variance for
  // normalising, unbiased variance into the running average:
  //   running = (1 - momentum) * running + momentum * batch
  // (with a single value per channel the biased variance is used; the op
  // rejects that case before calling).
  // save_mean/save_invstd ([C]) are what backward needs.
  //   x, y: [N, C, HW]   gamma, beta, running_mean, running_var, save_mean, save_invstd: [C]
  void (*batch_norm_forward_train)(DType dt, const void* x, const void* gamma, const void* beta, void* y,
                                   void* save_mean, void* save_invstd, void* running_mean, void* running_var,
                                   int64_t N, int64_t C, int64_t HW, double momentum, double eps,
                                   Stream stream);
  // The training pair fused with the relu after batch norm:
  //   forward   y = max(batch_norm(x), 0), statistics as batch_norm_forward_train
  //   backward  the gradients of that y, i.e. batch_norm_backward_train of
  //             (y > 0 ? gy : 0)          x, y, gy, gx: [N, C, HW]
  void (*batch_norm_relu_forward_train)(DType dt, const void* x, const void* gamma, const void* beta, void* y,
                                        void* save_mean, void* save_invstd, void* running_mean, void* running_var,
                                        int64_t N, int64_t C, int64_t HW, double momentum, double eps,
                                        Stream stream);
  void (*batch_norm_relu_backward_train)(DType dt, const void* x, const void* y, const void* gy, const void* gamma,
                                         const void* save_mean, const void* save_invstd, void* gx, void* ggamma,
                                         void* gbeta, int64_t N, int64_t C, int64_t HW, double eps, Stream stream);
  // The training pair fused with a ResNet block's end, relu(batch_norm(x) + r):
  //   forward   y = max(bn + r, 0), bn = batch norm's value rounded to the
  //             activation type first, so the result has the bits of
  //             batch_norm_forward_train then add_relu; statistics as there
  //   backward  gr = y > 0 ? gy : 0 (the residual's gradient) and the batch-norm
  //             gradients of gr, as batch_norm_backward_train
  //   x, r, y, gy, gx, gr: [N, C, HW]
  void (*batch_norm_add_relu_forward_train)(DType dt, const void* x, const void* r, const void* gamma,
                                            const void* beta, void* y, void* save_mean, void* save_invstd,
                                            void* running_mean, void* running_var, int64_t N, int64_t C, int64_t HW,
                                            double momentum, double eps, Stream stream);
  void (*batch_norm_add_relu_backward_train)(DType dt, const void* x, const void* y, const void* gy,
                                             const void* gamma, const void* save_mean, const void* save_invstd,
                                             void* gx, void* gr, void* ggamma, void* gbeta, int64_t N, int64_t C,
                                             int64_t HW, double eps, Stream stream);
  // A convolution (no bias) and the training batch norm after it, in one
  // call, so that a backend can take batch norm's statistics as the
  // convolution stores its output (ember's CUDA tensor-core path does; the
  // others run the entries below, compose_conv2d_batch_norm_forward_train):
  //   y_conv = conv2d_forward(x, w)
  //   y = batch_norm_forward_train(y_conv)                 r null, !relu
  //       batch_norm_relu_forward_train(y_conv)            r null, relu
  //       batch_norm_add_relu_forward_train(y_conv, r)     r given (relu must be true)
  // The statistics are those of y_conv as stored; a fused backend sums them
  // in another order (around the running mean), so they may differ from the
  // unfused entries' by the rounding of those sums.
  //   x: [N, C, H, W]  w: [K, C, R, S]  y_conv, r, y: [N, K, P, Q]  gamma, beta, save_*, running_*: [K]
  void (*conv2d_batch_norm_forward_train)(DType dt, const Conv2dGeometry& g, const void* x, const void* w,
                                          void* y_conv, const void* r, const void* gamma, const void* beta, void* y,
                                          void* save_mean, void* save_invstd, void* running_mean, void* running_var,
                                          double momentum, double eps, bool relu, Stream stream);
  // Inference: y = (x - running_mean) / sqrt(running_var + eps) * gamma + beta
  void (*batch_norm_forward_eval)(DType dt, const void* x, const void* gamma, const void* beta,
                                  const void* running_mean, const void* running_var, void* y, int64_t N,
                                  int64_t C, int64_t HW, double eps, Stream stream);
  // Gradients of the training forward (statistics depend on x); eps is the
  // forward's (cuDNN wants it; the saved inverse std already holds it):
  //   gx: [N, C, HW]   ggamma, gbeta: [C]
  void (*batch_norm_backward_train)(DType dt, const void* x, const void* gy, const void* gamma,
                                    const void* save_mean, const void* save_invstd, void* gx, void* ggamma,
                                    void* gbeta, int64_t N, int64_t C, int64_t HW, double eps, Stream stream);
  // Gradients of the inference forward (statistics are constants), for
  // fine-tuning with frozen statistics.
  void (*batch_norm_backward_eval)(DType dt, const void* x, const void* gy, const void* gamma,
                                   const void* running_mean, const void* running_var, void* gx, void* ggamma,
                                   void* gbeta, int64_t N, int64_t C, int64_t HW, double eps, Stream stream);

  // --------------------------------------------------------------- pooling
  // y = max over each window; argmax = index h*W + w of the max in its input plane.
  //   x: [N, C, H, W]   y, argmax (i32): [N, C, P, Q]   (channels_last: argmax is
  //   [N, P, Q, C] too, and still holds h*W + w)
  // (cuDNN's pooling does not produce argmax: its backward uses x and y.)
  void (*max_pool2d_forward)(DType dt, const Pool2dGeometry& g, const void* x, void* y, int32_t* argmax,
                             Stream stream);
  // gx = gy routed to the max of each window (overwrites gx); native kernels
  // follow argmax, cuDNN recomputes the maxima from x and y.
  //   x, gx: [N, C, H, W]   y, gy, argmax: [N, C, P, Q]
  void (*max_pool2d_backward)(DType dt, const Pool2dGeometry& g, const void* x, const void* y, const void* gy,
                              const int32_t* argmax, void* gx, Stream stream);
  // Adaptive average pooling, PyTorch's bins: rows [floor(i*H/OH), ceil((i+1)*H/OH)).
  //   x: [planes, H, W]   y: [planes, OH, OW]
  void (*adaptive_avg_pool2d_forward)(DType dt, const void* x, void* y, int64_t planes, int64_t H, int64_t W,
                                      int64_t OH, int64_t OW, Stream stream);
  // gx = the adjoint (overwrites gx).   gy: [planes, OH, OW]   gx: [planes, H, W]
  void (*adaptive_avg_pool2d_backward)(DType dt, const void* gy, void* gx, int64_t planes, int64_t H, int64_t W,
                                       int64_t OH, int64_t OW, Stream stream);

  // ------------------------------------------------------------------ loss
  // Softmax cross-entropy with label smoothing s: the target of row n is
  // (1 - s) * onehot(label[n]) + s / classes.
  //   logits, probs: [N, classes]   labels: i64 [N]   losses: [N]
  // Labels outside [0, classes) are an error (CPU throws naming the row).
  void (*softmax_cross_entropy_forward)(DType dt, const void* logits, const int64_t* labels, void* losses,
                                        void* probs, int64_t N, int64_t classes, double smoothing,
                                        Stream stream);
  // glogits = grad_loss[0] * scale * (probs - target)
  //   grad_loss: [1] (on the device)   glogits: [N, classes]
  void (*softmax_cross_entropy_backward)(DType dt, const void* probs, const int64_t* labels,
                                         const void* grad_loss, double scale, void* glogits, int64_t N,
                                         int64_t classes, double smoothing, Stream stream);

  // ----------------------------------------------------------------- input
  // y[n, c, i] = (x[n, c, i] / 255 - mean[c]) * inv_std[c]   x: u8 [N, C, HW]   y: [N, C, HW]
  void (*normalize_u8)(DType dt, const uint8_t* x, void* y, int64_t N, int64_t HW, const ChannelNorm& norm,
                       Stream stream);

  // ------------------------------------------------------------- optimizer
  // One SGD step (PyTorch's formula):  g' = grad_scale * g + wd * w;
  //   buf = first_step ? g' : momentum * buf + g';
  //   w -= lr * (nesterov ? g' + momentum * buf : buf)
  //   w, g, buf: [n]   (momentum == 0 leaves buf untouched and steps by g')
  void (*sgd_update)(DType dt, void* w, const void* g, void* momentum_buf, int64_t n, const SgdParams& p,
                     Stream stream);

  // The multi-tensor step of mixed-precision training, in three launches
  // whatever the number of parameters, none of which the host waits for.
  // slices: [*]   chunks: [num_chunks]   state: f32 [kLossScaleStateSize]
  // 1. Every chunk: grad32 = grad / state[kLossScale] (grad in its slice's
  //    grad_dtype); any inf or NaN gradient sets state[kFoundNonfinite] to 1
  //    (nothing clears it here).
  void (*unscale_gradients)(const MultiTensorSlice* slices, const MultiTensorChunk* chunks, int64_t num_chunks,
                            float* state, Stream stream);
  // 2. SGD in f32 over every chunk, as sgd_update with the momentum buffer
  //    starting at zero:  g' = grad32 + wd * w;  buf = momentum * buf + g';
  //    w -= lr * lr_mult * (nesterov ? g' + momentum * buf : buf)  (g' when
  //    momentum == 0); then half = w rounded to half_dtype. Nothing changes
  //    when state is given and state[kFoundNonfinite] != 0 (a skipped step).
  //    hyper: f32 [2] = (lr, momentum) on the device, read by the kernel in
  //    place of the lr and momentum arguments (a CUDA graph replays a launch
  //    with the arguments it was captured with); nullptr: the arguments.
  void (*multi_tensor_sgd)(const MultiTensorSlice* slices, const MultiTensorChunk* chunks, int64_t num_chunks,
                           double lr, double momentum, bool nesterov, const float* state, const float* hyper,
                           Stream stream);
  // 3. One thread: a finite step counts a clean step (after `window` in a
  //    row a dynamic scale doubles, up to max_scale) and clears the skips in
  //    a row; a non-finite one counts a skip, restarts the window and halves
  //    a dynamic scale (down to 2^-24). Then clears the flag.
  void (*loss_scale_update)(float* state, const LossScaleParams& p, Stream stream);

  // ---------------------------------------------------------------- random
  // Element i takes Philox (seed, block offset + i/4, stream 0), word i%4:
  //   y = lo + (hi - lo) * u,  u in [0, 1), computed in double and rounded
  //   once (so an f32 y may round up to hi)                  y: [n]
  void (*random_uniform)(DType dt, void* y, int64_t n, uint64_t seed, uint64_t offset, double lo, double hi,
                         Stream stream);
  // Elements 2j, 2j+1 take block offset + j: Box-Muller of words 0 and 1.
  //   y = mean + std * z                                     y: [n]
  // (bit-identical across backends only where their log/sin/cos are; uniform
  // fills are bit-identical everywhere)
  void (*random_normal)(DType dt, void* y, int64_t n, uint64_t seed, uint64_t offset, double mean, double std,
                        Stream stream);
};

// The list of every member above, for tests that must cover all of them.
#define EMBER_FOR_EACH_KERNEL(X)                                                                            \
  X(fill) X(cast) X(copy_2d) X(transpose_batched) X(add) X(add_relu) X(axpby) X(relu_forward) X(relu_backward)                \
  X(pointwise_forward) X(pointwise_backward) X(bias_add)                                                   \
  X(bias_backward) X(sum) X(argmax_rows) X(count_equal) X(gemm) X(im2col) X(col2im) X(conv2d_forward) X(conv2d_backward_data) \
  X(conv2d_backward_filter) X(batch_norm_forward_train) X(batch_norm_backward_train)                      \
  X(batch_norm_relu_forward_train) X(batch_norm_relu_backward_train) X(batch_norm_add_relu_forward_train)   \
  X(batch_norm_add_relu_backward_train) X(conv2d_batch_norm_forward_train) X(batch_norm_forward_eval)       \
  X(batch_norm_backward_eval) X(max_pool2d_forward) X(max_pool2d_backward)                                 \
  X(adaptive_avg_pool2d_forward) X(adaptive_avg_pool2d_backward) X(softmax_cross_entropy_forward)         \
  X(softmax_cross_entropy_backward) X(normalize_u8) X(sgd_update) X(unscale_gradients) X(multi_tensor_sgd) \
  X(loss_scale_update) X(random_uniform) X(random_normal)

#define EMBER_COUNT_KERNEL_(name) +1
constexpr int kNumKernels = 0 EMBER_FOR_EACH_KERNEL(EMBER_COUNT_KERNEL_);
static_assert(sizeof(Kernels) == sizeof(const char*) + kNumKernels * sizeof(void (*)()),
              "EMBER_FOR_EACH_KERNEL must list every member of Kernels");

// conv2d_batch_norm_forward_train by its parts on table k: the convolution,
// then the batch-norm entry (batch norm's channel dims of y_conv: [N, K, P*Q],
// or [N*P*Q, K, 1] channels-last). What every backend without a fused path runs.
inline void compose_conv2d_batch_norm_forward_train(const Kernels& k, DType dt, const Conv2dGeometry& g, const void* x,
                                                    const void* w, void* y_conv, const void* r, const void* gamma,
                                                    const void* beta, void* y, void* save_mean, void* save_invstd,
                                                    void* running_mean, void* running_var, double momentum, double eps,
                                                    bool relu, Stream stream) {
  k.conv2d_forward(dt, g, x, w, y_conv, stream);
  const int64_t N = g.channels_last ? g.N * g.P * g.Q : g.N, HW = g.channels_last ? 1 : g.P * g.Q;
  if (r)
    k.batch_norm_add_relu_forward_train(dt, y_conv, r, gamma, beta, y, save_mean, save_invstd, running_mean,
                                        running_var, N, g.K, HW, momentum, eps, stream);
  else if (relu)
    k.batch_norm_relu_forward_train(dt, y_conv, gamma, beta, y, save_mean, save_invstd, running_mean, running_var, N,
                                    g.K, HW, momentum, eps, stream);
  else
    k.batch_norm_forward_train(dt, y_conv, gamma, beta, y, save_mean, save_invstd, running_mean, running_var, N, g.K,
                               HW, momentum, eps, stream);
}

// The CPU table (ops/cpu), always present.
const Kernels& cpu_kernels();
// Registers the table for a device type (cuda/ does this for CUDA).
void register_kernels(DeviceType type, const Kernels* table);
// The table for a device; errors if that device type has none.
const Kernels& kernels_for(Device device);
// The stream kernels on a device are issued to (nullptr on the CPU); a
// backend registers how to find its current stream.
void register_stream_getter(DeviceType type, Stream (*getter)(int device_index));
Stream stream_for(Device device);

}  // namespace ember
