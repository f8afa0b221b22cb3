// ops/cpu/memory_kernels.cpp — fill, cast, copy_2d and transpose_batched, the CPU kernels that
// only move or convert values (ops::fill_, ops::cast, ops::concat and the
// mixed-precision copies of net/ call them through the kernel table).
//
// fill takes any dtype (a tensor of labels or pixels can be filled too) and
// converts the value once, as cast would (integers truncate, as in C++). cast converts between
// f32, f64, f16 and bf16 (raw 16-bit patterns, converted with the bulk
// routines of engine/half.h and engine/bfloat16.h). Every cast rounds once,
// correctly: a 16-bit type goes through f32 (which holds it exactly), and
// an f64 is first narrowed to float with round-to-odd, which makes the
// following float -> 16-bit rounding give the same result as a direct one.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "engine/bfloat16.h"
#include "engine/half.h"
#include "engine/parallel.h"
#include "ops/cpu/cpu_kernels.h"
#include "ops/cpu/f16_util.h"

namespace ember::cpu {

namespace {

constexpr int64_t kGrain = 1 << 15;  // elements below which a loop runs on one thread
constexpr int64_t kBuf = 512;        // elements per staging buffer in two-step casts

template <typename T>
void fill_typed(T* __restrict y, int64_t n, T v) {
  parallel_for(0, n, kGrain, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) y[i] = v;
  });
}

template <typename S, typename D>
void convert(const S* __restrict x, D* __restrict y, int64_t n) {
  parallel_for(0, n, kGrain, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) y[i] = static_cast<D>(x[i]);
  });
}

}  // namespace

// y[i] = value                                              y: [n]
void fill(DType dt, void* y, int64_t n, double value, Stream) {
  switch (dt) {
    case DType::f32: fill_typed(static_cast<float*>(y), n, static_cast<float>(value)); break;
    case DType::f64: fill_typed(static_cast<double*>(y), n, value); break;
    case DType::f16: fill_typed(static_cast<uint16_t*>(y), n, double_to_f16(value).bits); break;
    case DType::i32: fill_typed(static_cast<int32_t*>(y), n, static_cast<int32_t>(value)); break;
    case DType::i64: fill_typed(static_cast<int64_t*>(y), n, static_cast<int64_t>(value)); break;
    case DType::u8: fill_typed(static_cast<uint8_t*>(y), n, static_cast<uint8_t>(value)); break;
    case DType::bf16: fill_typed(static_cast<uint16_t*>(y), n, double_to_half<bf16>(value).bits); break;
  }
}

// y[i] = (dst_dt) x[i]                                      x, y: [n]
void cast(DType src_dt, const void* x, DType dst_dt, void* y, int64_t n, Stream) {
  EMBER_CHECK(is_floating(src_dt) && is_floating(dst_dt), "cpu cast: unsupported dtypes ", dtype_name(src_dt),
              " -> ", dtype_name(dst_dt), " (f32, f64, f16, bf16 only)");
  if (n <= 0) return;
  if (src_dt == dst_dt) {  // plain copy
    const size_t es = dtype_size(src_dt);
    const char* src = static_cast<const char*>(x);
    char* dst = static_cast<char*>(y);
    if (src == dst) return;
    parallel_for(0, n, kGrain, [&](int64_t b, int64_t e) {
      std::memcpy(dst + size_t(b) * es, src + size_t(b) * es, size_t(e - b) * es);
    });
    return;
  }
  const auto* xf = static_cast<const float*>(x);
  const auto* xd = static_cast<const double*>(x);
  const auto* xh = static_cast<const uint16_t*>(x);
  auto* yf = static_cast<float*>(y);
  auto* yd = static_cast<double*>(y);
  auto* yh = static_cast<uint16_t*>(y);
  if (src_dt == DType::f32 && dst_dt == DType::f64) return convert(xf, yd, n);
  if (src_dt == DType::f64 && dst_dt == DType::f32) return convert(xd, yf, n);
  // One side (or both) is a 16-bit type: through f32, which holds every f16
  // and bf16 value exactly, so only the final rounding rounds. An f64 source
  // is narrowed rounding to odd first (one rounding in all).
  auto widen = [](DType t, const uint16_t* h, float* f, size_t m) {
    if (t == DType::f16)
      half_to_float_n(h, f, m);
    else
      bf16_to_float_n(h, f, m);
  };
  auto narrow = [](DType t, const float* f, uint16_t* h, size_t m) {
    if (t == DType::f16)
      float_to_half_n(f, h, m);
    else
      float_to_bf16_n(f, h, m);
  };
  parallel_for(0, n, kGrain, [&](int64_t b, int64_t e) {
    if (src_dt == DType::f32) {
      narrow(dst_dt, xf + b, yh + b, size_t(e - b));
      return;
    }
    if (dst_dt == DType::f32) {
      widen(src_dt, xh + b, yf + b, size_t(e - b));
      return;
    }
    float buf[kBuf];
    for (int64_t i = b; i < e; i += kBuf) {
      const int64_t m = std::min(kBuf, e - i);
      if (src_dt == DType::f64)
        for (int64_t j = 0; j < m; ++j) buf[j] = double_to_float_odd(xd[i + j]);
      else
        widen(src_dt, xh + i, buf, size_t(m));
      if (dst_dt == DType::f64)
        for (int64_t j = 0; j < m; ++j) yd[i + j] = buf[j];
      else
        narrow(dst_dt, buf, yh + i, size_t(m));
    }
  });
}

// y[r * ldy + c] = x[r * ldx + c], the bits of any dtype     x: [rows, ldx]  y: [rows, ldy]
void copy_2d(DType dt, const void* x, int64_t ldx, void* y, int64_t ldy, int64_t rows, int64_t cols, Stream) {
  EMBER_CHECK(rows >= 0 && cols >= 0 && cols <= ldx && cols <= ldy, "cpu copy_2d: a block of ", rows, "x", cols,
              " does not fit row strides ", ldx, " and ", ldy);
  if (rows == 0 || cols == 0) return;
  const size_t es = dtype_size(dt);
  const char* src = static_cast<const char*>(x);
  char* dst = static_cast<char*>(y);
  parallel_for(0, rows, std::max<int64_t>(1, kGrain / cols), [&](int64_t b, int64_t e) {
    for (int64_t r = b; r < e; ++r)
      std::memcpy(dst + size_t(r * ldy) * es, src + size_t(r * ldx) * es, size_t(cols) * es);
  });
}

// y[b, j, i] = x[b, i, j], the bits of any dtype      x: [batch, rows, cols]  y: [batch, cols, rows]
// In 32x32 tiles, so both sides stay in cache; batches in parallel.
void transpose_batched(DType dt, const void* x, void* y, int64_t batch, int64_t rows, int64_t cols, Stream) {
  EMBER_CHECK(batch >= 0 && rows >= 0 && cols >= 0, "cpu transpose_batched: negative size ", batch, "x", rows, "x",
              cols);
  if (batch == 0 || rows == 0 || cols == 0) return;
  auto run = [&](auto bits) {
    using T = decltype(bits);
    const T* src = static_cast<const T*>(x);
    T* dst = static_cast<T*>(y);
    constexpr int64_t kTile = 32;
    const int64_t plane = rows * cols;
    parallel_for(0, batch, std::max<int64_t>(1, kGrain / plane), [&](int64_t b0, int64_t b1) {
      for (int64_t b = b0; b < b1; ++b) {
        const T* in = src + b * plane;
        T* out = dst + b * plane;
        for (int64_t i0 = 0; i0 < rows; i0 += kTile)
          for (int64_t j0 = 0; j0 < cols; j0 += kTile) {
            const int64_t i1 = std::min(rows, i0 + kTile), j1 = std::min(cols, j0 + kTile);
            for (int64_t i = i0; i < i1; ++i)
              for (int64_t j = j0; j < j1; ++j) out[j * rows + i] = in[i * cols + j];
          }
      }
    });
  };
  switch (dtype_size(dt)) {
    case 1: return run(uint8_t{});
    case 2: return run(uint16_t{});
    case 4: return run(uint32_t{});
    case 8: return run(uint64_t{});
  }
  fail(cat("cpu transpose_batched: unsupported dtype ", dtype_name(dt)));
}

}  // namespace ember::cpu
