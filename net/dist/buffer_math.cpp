// net/dist/buffer_math.cpp — sums and scaling of collective buffers (net/dist/buffer_math.h).
#include "net/dist/buffer_math.h"

#include <algorithm>

#include "engine/error.h"
#include "ops/cpu/f16_util.h"

namespace ember::net::dist {
namespace {

constexpr uint64_t kChunk = 1024;  // 16-bit values converted at a time (stays in L1)

template <typename T>
void add_plain(T* __restrict d, const T* __restrict s, uint64_t n) {
  for (uint64_t i = 0; i < n; ++i) d[i] += s[i];
}

template <typename T>
void scale_plain(T* x, uint64_t n, T f) {
  for (uint64_t i = 0; i < n; ++i) x[i] *= f;
}

// The 16-bit types (f16, bf16): converted to f32 a chunk at a time, summed
// or scaled, rounded back once.
template <typename H>
void add_half(H* d, const H* s, uint64_t n) {
  float a[kChunk], b[kChunk];
  for (uint64_t i = 0; i < n; i += kChunk) {
    const int64_t m = int64_t(std::min(kChunk, n - i));
    cpu::h2f(d + i, a, m);
    cpu::h2f(s + i, b, m);
    add_plain(a, b, uint64_t(m));
    cpu::f2h(a, d + i, m);
  }
}

template <typename H>
void scale_half(H* p, uint64_t n, float factor) {
  float a[kChunk];
  for (uint64_t i = 0; i < n; i += kChunk) {
    const int64_t m = int64_t(std::min(kChunk, n - i));
    cpu::h2f(p + i, a, m);
    scale_plain(a, uint64_t(m), factor);
    cpu::f2h(a, p + i, m);
  }
}

}  // namespace

void add_into(DType dt, void* dst, const void* src, uint64_t n) {
  switch (dt) {
    case DType::f32: return add_plain(static_cast<float*>(dst), static_cast<const float*>(src), n);
    case DType::f64: return add_plain(static_cast<double*>(dst), static_cast<const double*>(src), n);
    case DType::f16: return add_half(static_cast<f16*>(dst), static_cast<const f16*>(src), n);
    case DType::bf16: return add_half(static_cast<bf16*>(dst), static_cast<const bf16*>(src), n);
    default: fail(cat("collectives sum f32, f64, f16 and bf16 buffers, not ", dtype_name(dt)));
  }
}

void scale_in_place(DType dt, void* x, uint64_t n, double factor) {
  switch (dt) {
    case DType::f32: return scale_plain(static_cast<float*>(x), n, float(factor));
    case DType::f64: return scale_plain(static_cast<double*>(x), n, factor);
    case DType::f16: return scale_half(static_cast<f16*>(x), n, float(factor));
    case DType::bf16: return scale_half(static_cast<bf16*>(x), n, float(factor));
    default: fail(cat("collectives scale f32, f64, f16 and bf16 buffers, not ", dtype_name(dt)));
  }
}

}  // namespace ember::net::dist
