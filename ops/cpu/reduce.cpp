// ops/cpu/reduce.cpp — the reductions: sum of a whole array (ops::sum, the
// loss mean) and the row-wise argmax (accuracy).
//
// sum accumulates in double over fixed blocks of kBlock elements and then adds
// the block sums in order, so the result does not depend on the number of
// threads. f16 and bf16 input is converted to f32 a block at a time; the
// 16-bit result is rounded once from the double total, so an inf or NaN
// anywhere in x gives inf/NaN (the loss scaler's overflow check relies on
// it), and a finite f16 sum beyond 65504 also becomes inf (callers wanting
// the exact total of 16-bit values should cast to f32 first).
#include <algorithm>
#include <cmath>
#include <vector>

#include "engine/parallel.h"
#include "ops/cpu/cpu_kernels.h"
#include "ops/cpu/f16_util.h"

namespace ember::cpu {

namespace {
constexpr int64_t kBlock = 1 << 14;  // elements per partial sum
}

// y[0] = sum of x                                           x: [n]  y: [1]
void sum(DType dt, const void* x, void* y, int64_t n, Stream) {
  dispatch_storage(dt, "sum", [&](auto zero) {
    using S = decltype(zero);
    using T = compute_t<S>;
    const S* sx = static_cast<const S*>(x);
    const int64_t blocks = (std::max<int64_t>(n, 0) + kBlock - 1) / kBlock;
    std::vector<double> partial(size_t(blocks), 0.0);
    parallel_for(0, blocks, 1, [&](int64_t lo, int64_t hi) {
      for (int64_t blk = lo; blk < hi; ++blk) {
        const int64_t b = blk * kBlock, e = std::min(n, b + kBlock);
        const T* __restrict px = load<0>(sx + b, e - b);
        double s = 0.0;
#pragma omp simd reduction(+ : s)
        for (int64_t i = 0; i < e - b; ++i) s += px[i];
        partial[size_t(blk)] = s;
      }
    });
    double total = 0.0;
    for (double p : partial) total += p;
    if constexpr (is_half_v<S>) {
      static_cast<S*>(y)[0] = double_to_half<S>(total);
    } else {
      static_cast<S*>(y)[0] = static_cast<S>(total);
    }
  });
}

// idx[r] = first index of the largest x[r, :]; a NaN counts as the largest
// (as in PyTorch), so a row with NaN points at its first NaN.
//   x: [rows, cols]   idx: i64 [rows]
void argmax_rows(DType dt, const void* x, int64_t* idx, int64_t rows, int64_t cols, Stream) {
  dispatch_storage(dt, "argmax_rows", [&](auto zero) {
    using S = decltype(zero);
    using T = compute_t<S>;
    const S* sx = static_cast<const S*>(x);
    parallel_for(0, rows, std::max<int64_t>(1, 8192 / std::max<int64_t>(1, cols)), [&](int64_t lo, int64_t hi) {
      for (int64_t r = lo; r < hi; ++r) {
        const T* row = load<0>(sx + r * cols, cols);
        int64_t best = 0;
        T bv = cols > 0 ? row[0] : T(0);
        if (!std::isnan(bv)) {
          for (int64_t c = 1; c < cols; ++c) {
            const T v = row[c];
            if (v > bv) {
              bv = v;
              best = c;
            } else if (std::isnan(v)) {
              best = c;
              break;
            }
          }
        }
        idx[r] = best;
      }
    });
  });
}

// acc[0] += number of i with a[i] == b[i]
//   a, b: i64 [n]   acc: f64 [1]
void count_equal(DType dt, const int64_t* a, const int64_t* b, int64_t n, double* acc, Stream) {
  EMBER_CHECK(dt == DType::i64, "count_equal: indices must be i64, got ", dtype_name(dt));
  int64_t equal = 0;
  for (int64_t i = 0; i < n; ++i) equal += a[i] == b[i];
  acc[0] += double(equal);
}

}  // namespace ember::cpu
