// cuda/sim/wmma.h — CUDA's warp matrix API (nvcuda::wmma, <mma.h>) on the
// emulator, so that tensor-core kernels run and are checked on the CPU like
// every other kernel. cuda/wmma.cuh includes this under EMBER_CUDASIM and
// CUDA's <mma.h> under nvcc.
//
// What it models:
// - the shapes with 16-bit inputs: m16n16k16, m32n8k16, m8n32k16, with
//   __half or __nv_bfloat16 A and B fragments (row_major or col_major) and
//   float or __half accumulators;
// - warp-wide calls: every operation is a warp operation of the scheduler
//   (cudasim.h), so all 32 lanes of a full warp must reach it; loads and
//   stores must get the same pointer and ldm on every lane;
// - CUDA's rules on the arguments: the pointer 256-bit (32-byte) aligned,
//   ldm a multiple of 16 bytes (8 halves, 4 floats);
// - mma_sync multiplies in f32 (a product of two 16-bit values is exact in
//   f32) and adds the K products in order to the accumulator, rounding the
//   result to the accumulator's type; satf clamps infinities to the largest
//   finite value and NaN to 0.
// The element-to-lane mapping of a fragment is unspecified in CUDA and
// differs between GPUs; here lane l holds the elements l, l + 32, l + 64,
// ... of the fragment's matrix in row-major order. Code that reads or writes
// `x[i]` must treat every element alike (scale, convert), as on a GPU.
// The profiler counts the loads and stores (as this mapping makes them: a
// real GPU's ldmatrix-style accesses hit different banks) and 2 M N K
// tensor-core FLOPs per mma_sync.
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <limits>
#include <source_location>
#include <type_traits>

namespace nvcuda::wmma {

struct row_major {};
struct col_major {};
struct matrix_a {};
struct matrix_b {};
struct accumulator {};
enum layout_t { mem_row_major, mem_col_major };

namespace detail {

template <typename Use, int M, int N, int K>
struct Dims;  // rows and columns of the fragment's matrix
template <int M, int N, int K>
struct Dims<matrix_a, M, N, K> {
  static constexpr int rows = M, cols = K;
};
template <int M, int N, int K>
struct Dims<matrix_b, M, N, K> {
  static constexpr int rows = K, cols = N;
};
template <int M, int N, int K>
struct Dims<accumulator, M, N, K> {
  static constexpr int rows = M, cols = N;
};

template <int M, int N, int K>
constexpr bool kShapeWith16BitInputs = K == 16 && ((M == 16 && N == 16) || (M == 32 && N == 8) || (M == 8 && N == 32));

inline float to_float(float v) { return v; }
inline float to_float(__half v) { return __half2float(v); }
inline float to_float(__nv_bfloat16 v) { return __bfloat162float(v); }
template <typename T>
T from_float(float v) {
  if constexpr (std::is_same_v<T, float>)
    return v;
  else if constexpr (std::is_same_v<T, __half>)
    return __float2half_rn(v);
  else
    return __float2bfloat16_rn(v);
}

inline unsigned lane_id() {
  return (threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z)) & 31u;
}

// CUDA's argument rules for load_matrix_sync / store_matrix_sync.
inline void check_pointer_and_ldm(const void* p, unsigned ldm, size_t element_bytes, const char* what,
                                  const std::source_location& loc) {
  char msg[160];
  if (reinterpret_cast<uintptr_t>(p) % 32 != 0) {
    std::snprintf(msg, sizeof msg, "%s with a pointer %p that is not 256-bit (32-byte) aligned", what, p);
    ::cudasim::detail::kernel_error(msg, loc.file_name(), loc.line());
  }
  if (ldm * element_bytes % 16 != 0) {
    std::snprintf(msg, sizeof msg, "%s with ldm %u: it must be a multiple of 16 bytes (%zu elements)", what, ldm,
                  16 / element_bytes);
    ::cudasim::detail::kernel_error(msg, loc.file_name(), loc.line());
  }
}

}  // namespace detail

template <typename Use, int M, int N, int K, typename T, typename Layout = void>
class fragment {
  static_assert(detail::kShapeWith16BitInputs<M, N, K>,
                "wmma (emulator): the shapes with 16-bit inputs are m16n16k16, m32n8k16 and m8n32k16");
  static_assert(std::is_same_v<Use, accumulator>
                    ? (std::is_same_v<T, float> || std::is_same_v<T, __half>) && std::is_void_v<Layout>
                    : (std::is_same_v<T, __half> || std::is_same_v<T, __nv_bfloat16>) &&
                          (std::is_same_v<Layout, row_major> || std::is_same_v<Layout, col_major>),
                "wmma (emulator): A and B fragments hold __half or __nv_bfloat16 with a row_major or col_major "
                "layout; accumulators hold float or __half with no layout");

 public:
  static constexpr int kRows = detail::Dims<Use, M, N, K>::rows, kCols = detail::Dims<Use, M, N, K>::cols;
  static constexpr int num_elements = kRows * kCols / 32;
  using element_type = T;
  using storage_element_type = T;
  T x[num_elements];
};

template <typename Use, int M, int N, int K, typename T, typename Layout>
void fill_fragment(fragment<Use, M, N, K, T, Layout>& f,
                   const typename fragment<Use, M, N, K, T, Layout>::element_type& v) {
  for (int e = 0; e < f.num_elements; ++e) f.x[e] = v;
}

// A or B from memory: element (r, c) at p[r * ldm + c] (row_major) or p[c * ldm + r] (col_major).
template <typename Use, int M, int N, int K, typename T, typename Layout>
void load_matrix_sync(fragment<Use, M, N, K, T, Layout>& f, const T* p, unsigned ldm,
                      std::source_location loc = std::source_location::current()) {
  static_assert(!std::is_same_v<Use, accumulator>, "an accumulator load takes a layout_t");
  detail::check_pointer_and_ldm(p, ldm, sizeof(T), "wmma::load_matrix_sync", loc);
  ::cudasim::detail::warp_op(::cudasim::detail::kWmmaLoad, 0xffffffffu, reinterpret_cast<uintptr_t>(p), int(ldm), 32,
                             loc.file_name(), loc.line());
  using F = fragment<Use, M, N, K, T, Layout>;
  const unsigned lane = detail::lane_id();
  for (int e = 0; e < F::num_elements; ++e) {
    const int i = int(lane) + 32 * e, r = i / F::kCols, c = i % F::kCols;
    f.x[e] = std::is_same_v<Layout, row_major> ? p[size_t(r) * ldm + c] : p[size_t(c) * ldm + r];
  }
}

// An accumulator from memory, in the layout given.
template <int M, int N, int K, typename T>
void load_matrix_sync(fragment<accumulator, M, N, K, T>& f, const T* p, unsigned ldm, layout_t layout,
                      std::source_location loc = std::source_location::current()) {
  detail::check_pointer_and_ldm(p, ldm, sizeof(T), "wmma::load_matrix_sync", loc);
  ::cudasim::detail::warp_op(::cudasim::detail::kWmmaLoad, 0xffffffffu, reinterpret_cast<uintptr_t>(p), int(ldm), 32,
                             loc.file_name(), loc.line());
  using F = fragment<accumulator, M, N, K, T>;
  const unsigned lane = detail::lane_id();
  for (int e = 0; e < F::num_elements; ++e) {
    const int i = int(lane) + 32 * e, r = i / F::kCols, c = i % F::kCols;
    f.x[e] = layout == mem_row_major ? p[size_t(r) * ldm + c] : p[size_t(c) * ldm + r];
  }
}

template <int M, int N, int K, typename T>
void store_matrix_sync(T* p, const fragment<accumulator, M, N, K, T>& f, unsigned ldm, layout_t layout,
                       std::source_location loc = std::source_location::current()) {
  detail::check_pointer_and_ldm(p, ldm, sizeof(T), "wmma::store_matrix_sync", loc);
  ::cudasim::detail::warp_op(::cudasim::detail::kWmmaStore, 0xffffffffu, reinterpret_cast<uintptr_t>(p), int(ldm),
                             32, loc.file_name(), loc.line());
  using F = fragment<accumulator, M, N, K, T>;
  const unsigned lane = detail::lane_id();
  for (int e = 0; e < F::num_elements; ++e) {
    const int i = int(lane) + 32 * e, r = i / F::kCols, c = i % F::kCols;
    (layout == mem_row_major ? p[size_t(r) * ldm + c] : p[size_t(c) * ldm + r]) = f.x[e];
  }
}

namespace detail {

struct MmaOperands {
  const void *a, *b, *c;
};

// This lane's elements of D = A B + C, from every lane's operands (the
// addresses exchanged by the warp operation). Not instrumented: reading
// other lanes' registers is not a memory access on a GPU.
template <typename FD, typename FA, typename FB, typename FC, int M, int N, int K>
__attribute__((no_sanitize("thread"))) void mma_lane(const unsigned long long* lanes, unsigned lane, bool satf,
                                                     float* out) {
  float a[M * K], b[K * N];
  for (int j = 0; j < 32; ++j) {
    const MmaOperands* o = reinterpret_cast<const MmaOperands*>(uintptr_t(lanes[j]));
    const FA& fa = *static_cast<const FA*>(o->a);
    const FB& fb = *static_cast<const FB*>(o->b);
    for (int e = 0; e < FA::num_elements; ++e) a[j + 32 * e] = to_float(fa.x[e]);
    for (int e = 0; e < FB::num_elements; ++e) b[j + 32 * e] = to_float(fb.x[e]);
  }
  const FC& fc = *static_cast<const FC*>(reinterpret_cast<const MmaOperands*>(uintptr_t(lanes[lane]))->c);
  for (int e = 0; e < FD::num_elements; ++e) {
    const int i = int(lane) + 32 * e, r = i / N, c = i % N;
    float s = to_float(fc.x[e]);
    for (int k = 0; k < K; ++k) s = std::fma(a[r * K + k], b[k * N + c], s);
    if (satf) {  // the largest finite value of the accumulator's type
      const float big =
          std::is_same_v<typename FD::element_type, __half> ? 65504.0f : std::numeric_limits<float>::max();
      s = std::isnan(s) ? 0.0f : std::fmin(std::fmax(s, -big), big);
    }
    out[e] = s;
  }
}

}  // namespace detail

// D = A B + C over the whole warp (D may be C).
template <int M, int N, int K, typename TA, typename LA, typename TB, typename LB, typename TC>
void mma_sync(fragment<accumulator, M, N, K, TC>& d, const fragment<matrix_a, M, N, K, TA, LA>& a,
              const fragment<matrix_b, M, N, K, TB, LB>& b, const fragment<accumulator, M, N, K, TC>& c,
              bool satf = false, std::source_location loc = std::source_location::current()) {
  static_assert(std::is_same_v<TA, TB>, "wmma::mma_sync: A and B hold the same type");
  using FD = fragment<accumulator, M, N, K, TC>;
  const detail::MmaOperands mine{&a, &b, &c};
  const unsigned lane = detail::lane_id();
  const unsigned long long* lanes =
      ::cudasim::detail::wmma_exchange(reinterpret_cast<uintptr_t>(&mine), loc.file_name(), loc.line());
  float out[FD::num_elements];
  detail::mma_lane<FD, fragment<matrix_a, M, N, K, TA, LA>, fragment<matrix_b, M, N, K, TB, LB>, FD, M, N, K>(
      lanes, lane, satf, out);
  // Every lane has read every lane's operands: now D (which may be C) can change.
  ::cudasim::detail::wmma_exchange(0, loc.file_name(), loc.line());
  for (int e = 0; e < FD::num_elements; ++e) d.x[e] = detail::from_float<TC>(out[e]);
  ::cudasim::detail::count_tensor_flops(uint64_t(2) * M * N * K / 32);
}

}  // namespace nvcuda::wmma
