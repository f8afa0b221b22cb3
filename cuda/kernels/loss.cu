// cuda/kernels/loss.cu — softmax cross-entropy with label smoothing on CUDA,
// forward (per-row losses and the softmax probabilities) and backward; the
// counterparts of ops/cpu/loss.cpp, with the same formulas and types:
//
// Per row, with m = max logit and lse = m + log sum_c exp(x_c - m):
//   p_c = exp(x_c - m) / se,  target_c = (1 - s) * [c == label] + s / C,
//   loss = lse - (1 - s) * x_label - (s / C) * sum_c x_c
// exp in the element type, the row sums se and sum_c x_c in double.
// f16/bf16 logits (and glogits) are converted to f32 and everything is computed
// in f32 as for f32 data; losses, probs and grad_loss are then f32
// (P = compute_t<T>, ops/kernels.h).
//
// The forward gives each row to one warp (rows narrower than
// kLossBlockMinClasses) or one block; the row's max and sums are warp_max /
// warp_sum or block_max / block_sum of cuda/kernels/reduce.cuh, so they are
// deterministic. The backward is elementwise.
//
// Labels outside [0, classes): the kernels record the first such row with an
// atomicMin on a device word (the smallest row wins whatever the schedule)
// and skip reading through the bad label; a one-thread kernel then copies
// that row and its label into the kernel's record (cuda/host_sync.h), and
// the host throws the CPU kernel's message at its next wait for the stream
// (a loss read for the log, a synchronize). The launcher itself never waits.
#include <algorithm>
#include <cmath>
#include <limits>

#include "cuda/allocator.h"
#include "cuda/common.cuh"
#include "cuda/cuda_kernels.h"
#include "cuda/host_sync.h"
#include "cuda/kernels/fast_divmod.cuh"
#include "cuda/kernels/reduce.cuh"

namespace ember::cuda {

namespace {

constexpr unsigned kLossRowThreads = 256;          // threads per block of the forward (8 warp rows, or 1 block row)
constexpr int64_t kLossBlockMinClasses = 1024;     // rows at least this wide get a block each
constexpr unsigned kLossElementwiseThreads = 256;  // threads per block of the backward
constexpr int64_t kMaxRowBlocks = 65535;           // grid cap of the forward (blocks loop beyond)
constexpr unsigned long long kNoBadRow = ~0ull;    // the flag's value when every label is in range

// Who reduces a row: a warp (rows step by the grid's warp count) ...
struct WarpPerRow {
  __device__ static int64_t first_row() { return grid_thread_index() / kWarpSize; }
  __device__ static int64_t row_step() { return grid_thread_count() / kWarpSize; }
  __device__ static int rank() { return int(threadIdx.x) % kWarpSize; }
  __device__ static int size() { return kWarpSize; }
  template <typename V>
  __device__ static V sum(V v) {
    return warp_sum(v);
  }
  template <typename V>
  __device__ static V max(V v) {
    return warp_max(v);
  }
};
// ... or a block (rows step by the grid size; uniform across the block, so
// every thread reaches every barrier of block_sum / block_max).
struct BlockPerRow {
  __device__ static int64_t first_row() { return blockIdx.x; }
  __device__ static int64_t row_step() { return gridDim.x; }
  __device__ static int rank() { return int(threadIdx.x); }
  __device__ static int size() { return int(blockDim.x); }
  template <typename V>
  __device__ static V sum(V v) {
    return block_sum(v);
  }
  template <typename V>
  __device__ static V max(V v) {
    return block_max(v);
  }
};

// ----------------------------------------------------------------- kernels

// Forward of every row; on = 1 - s, off = s / classes.
//   logits, probs: [N, classes]   labels: [N]   losses: [N]   bad_row: [1]
template <typename T, typename Row, typename P = compute_t<T>>
__global__ void softmax_xent_forward_kernel(const T* __restrict__ logits, const int64_t* __restrict__ labels,
                                            P* __restrict__ losses, P* __restrict__ probs, int64_t N, int64_t classes,
                                            double on, double off, unsigned long long* __restrict__ bad_row) {
  for (int64_t n = Row::first_row(); n < N; n += Row::row_step()) {
    const T* x = logits + n * classes;
    P* p = probs + n * classes;
    P m = -std::numeric_limits<P>::infinity();
    for (int64_t c = Row::rank(); c < classes; c += Row::size()) m = max_nan(m, to_compute(x[c]));
    m = Row::max(m);
    double se = 0.0, sx = 0.0;
    for (int64_t c = Row::rank(); c < classes; c += Row::size()) {
      const P xc = to_compute(x[c]);
      const P e = std::exp(xc - m);
      p[c] = e;
      se += double(e);
      sx += double(xc);
    }
    se = Row::sum(se);
    sx = Row::sum(sx);
    const double lse = double(m) + std::log(se);
    const P inv = P(1.0 / se);
    for (int64_t c = Row::rank(); c < classes; c += Row::size()) p[c] *= inv;  // this thread's own entries
    if (Row::rank() == 0) {
      const int64_t label = labels[n];
      if (label >= 0 && label < classes) {
        losses[n] = P(lse - on * double(to_compute(x[label])) - off * sx);
      } else {
        atomicMin(bad_row, static_cast<unsigned long long>(n));
        losses[n] = std::numeric_limits<P>::quiet_NaN();
      }
    }
  }
}

// glogits = grad_loss[0] * scale * (probs - target); off = s / classes, hit = 1 - s + s / classes
//   probs, glogits: [N, classes]   labels: [N]   grad_loss: [1]   bad_row: [1]
template <typename T, typename I, typename P = compute_t<T>>
__global__ void softmax_xent_backward_kernel(const P* __restrict__ probs, const int64_t* __restrict__ labels,
                                             const P* __restrict__ grad_loss, double scale, T* __restrict__ glogits,
                                             int64_t N, IndexDivisor<I> by_classes, P off, P hit,
                                             unsigned long long* __restrict__ bad_row) {
  const P k = P(double(grad_loss[0]) * scale);
  const int64_t classes = by_classes.value();
  const int64_t total = N * classes;
  for (int64_t j = grid_thread_index(); j < total; j += grid_thread_count()) {
    I n, c;
    by_classes.divmod(I(j), n, c);
    const int64_t label = labels[n];
    if (c == 0 && (label < 0 || label >= classes)) atomicMin(bad_row, static_cast<unsigned long long>(n));
    glogits[j] = to_storage<T>(k * (probs[j] - (c == label ? hit : off)));
  }
}

// A launch's first bad row (bad_row, kNoBadRow if none) and its label into
// the kernel's record, unless an earlier launch has set the record already.
//   bad_row: [1]   labels: [N]   record: [1]   (one thread)
__global__ void record_bad_label_kernel(const unsigned long long* __restrict__ bad_row,
                                        const int64_t* __restrict__ labels, long long classes,
                                        BadLabelRecord* __restrict__ record) {
  const unsigned long long row = *bad_row;
  if (row == kNoBadRow || record->found) return;
  record->row = row;
  record->label = labels[row];
  record->classes = classes;
  record->found = 1;
}

// --------------------------------------------------------------- helpers

// A device word for the kernels' first bad row, set to kNoBadRow.
unsigned long long* reset_bad_row(const DeviceBuffer& flag, cudaStream_t s) {
  CUDA_CHECK(cudaMemsetAsync(flag.get(), 0xff, sizeof(unsigned long long), s));
  return flag.as<unsigned long long>();
}

// Throws the CPU kernel's message for the label of `row` (for classes <= 0,
// where no label can be in range: found on the host, before any launch).
[[noreturn]] void fail_bad_label(const int64_t* labels, int64_t row, int64_t classes, const char* kernel,
                                 cudaStream_t s) {
  int64_t label = 0;
  CUDA_CHECK(cudaMemcpyAsync(&label, labels + row, sizeof label, cudaMemcpyDeviceToHost, s));
  wait_for_stream(s);
  fail(cat(kernel, ": label ", label, " of row ", row, " is outside [0, ", classes, ") for ", classes, " classes"));
}

// Queues the copy of a launch's first bad row, if any, and its label into
// the kernel's record (cuda/host_sync.h), which the host reads at its next
// wait for the stream; no wait here.
void defer_bad_label_check(const DeviceBuffer& flag, const int64_t* labels, int64_t classes, const char* kernel,
                           cudaStream_t s) {
  launch(record_bad_label_kernel, dim3(1), dim3(1), 0, s, flag.as<const unsigned long long>(), labels,
         static_cast<long long>(classes), bad_label_record(kernel));
}

}  // namespace

// --------------------------------------------------------------- launchers

//   logits, probs: [N, classes]   labels: i64 [N]   losses: [N]
void softmax_cross_entropy_forward(DType dt, const void* logits, const int64_t* labels, void* losses, void* probs,
                                   int64_t N, int64_t classes, double smoothing, Stream stream) {
  dispatch_float_half(dt, "softmax_cross_entropy_forward", [&](auto zero) {
    using T = decltype(zero);
    if (N <= 0) return;
    const cudaStream_t s = as_cuda_stream(stream);
    if (classes <= 0) fail_bad_label(labels, 0, classes, "softmax_cross_entropy_forward", s);  // no label is in range
    const DeviceBuffer flag(sizeof(unsigned long long));
    unsigned long long* bad_row = reset_bad_row(flag, s);
    const double on = 1.0 - smoothing, off = smoothing / double(classes);
    using P = compute_t<T>;
    const T* x = static_cast<const T*>(logits);
    P* pl = static_cast<P*>(losses);
    P* pp = static_cast<P*>(probs);
    const bool block_rows = classes >= kLossBlockMinClasses;
    const int64_t rows_per_block = block_rows ? 1 : kLossRowThreads / kWarpSize;
    const int64_t blocks = std::min((N + rows_per_block - 1) / rows_per_block, kMaxRowBlocks);
    launch(block_rows ? softmax_xent_forward_kernel<T, BlockPerRow> : softmax_xent_forward_kernel<T, WarpPerRow>,
           dim3(unsigned(blocks)), dim3(kLossRowThreads), 0, s, x, labels, pl, pp, N, classes, on, off, bad_row);
    defer_bad_label_check(flag, labels, classes, "softmax_cross_entropy_forward", s);
  });
}

// glogits = grad_loss[0] * scale * (probs - target)
//   probs, glogits: [N, classes]   labels: i64 [N]   grad_loss: [1]
void softmax_cross_entropy_backward(DType dt, const void* probs, const int64_t* labels, const void* grad_loss,
                                    double scale, void* glogits, int64_t N, int64_t classes, double smoothing,
                                    Stream stream) {
  dispatch_float_half(dt, "softmax_cross_entropy_backward", [&](auto zero) {
    using T = decltype(zero);
    if (N <= 0) return;
    const cudaStream_t s = as_cuda_stream(stream);
    if (classes <= 0) fail_bad_label(labels, 0, classes, "softmax_cross_entropy_backward", s);  // no label is in range
    const DeviceBuffer flag(sizeof(unsigned long long));
    unsigned long long* bad_row = reset_bad_row(flag, s);
    using P = compute_t<T>;
    const P off = P(smoothing / double(classes));
    const P hit = P(1.0 - smoothing + smoothing / double(classes));  // target of the label's class
    const int64_t total = N * classes;
    with_index_type(total, [&](auto index) {
      using I = decltype(index);
      launch(softmax_xent_backward_kernel<T, I>, dim3(blocks_for(total, kLossElementwiseThreads)),
             dim3(kLossElementwiseThreads), 0, s, static_cast<const P*>(probs), labels,
             static_cast<const P*>(grad_loss), scale, static_cast<T*>(glogits), N, IndexDivisor<I>(classes), off, hit,
             bad_row);
    });
    defer_bad_label_check(flag, labels, classes, "softmax_cross_entropy_backward", s);
  });
}

}  // namespace ember::cuda
