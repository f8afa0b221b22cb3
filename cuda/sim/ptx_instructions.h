// cuda/sim/ptx_instructions.h — the emulator's twins of the PTX instructions
// of cuda/ptx_instructions.cuh (mma.sync, ldmatrix, cp.async), with the
// same signatures, so tensor-core kernels built from them run and are
// checked on the CPU. cuda/ptx_instructions.cuh includes this under
// EMBER_CUDASIM; its top comment gives the fragment layouts, which these
// functions follow exactly (so code that builds fragments by hand is
// checked too).
//
// - mma.sync and ldmatrix are warp operations (kinds kMmaSync, kLdmatrix):
//   every lane of a full warp must reach the same one. Each lane hands the
//   warp its operands (an exchange), computes its own results from all
//   lanes' operands, and a second exchange keeps every lane's operands alive
//   until all have read them.
// - mma.sync multiplies in f32 (a product of two f16, bf16 or tf32 values is
//   exact in f32) and adds the K products in order to C. A GPU adds them in
//   its own order and precision, so results agree to rounding, not bits.
//   TF32 inputs use the upper 19 bits of each f32 (the rest is ignored, as
//   by the hardware); to_tf32 rounds as cvt.rna.tf32.f32.
// - ldmatrix: each lane that gives a row address (8 per matrix) reads its
//   16-byte row itself, so the profiler counts the load as a quarter-warp's
//   16-byte accesses per phase, as the hardware serves it: 8 rows that map
//   to the same banks conflict. Row addresses must be 16-byte aligned and in
//   shared memory.
// - cp.async reads the source now and queues the copy (cuda/sim/async_copy.cpp);
//   the destination reads as 0xFF bytes until a cp.async.wait_group lets the
//   copy's group complete.
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <source_location>

namespace ember::cuda::ptx {
namespace sim_detail {

inline unsigned lane_id() {
  return (threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z)) & 31u;
}

enum class InputType { f16, bf16, tf32 };

inline float input_to_float(uint32_t bits, InputType type) {
  if (type == InputType::tf32) {
    bits &= 0xffffe000u;  // the 19 bits a TF32 value has
    float f;
    std::memcpy(&f, &bits, 4);
    return f;
  }
  if (type == InputType::f16) {
    __half_raw raw;
    raw.x = uint16_t(bits);
    return __half2float(__half(raw));
  }
  const uint32_t widened = (bits & 0xffffu) << 16;  // bf16 is the upper half of an f32
  float f;
  std::memcpy(&f, &widened, 4);
  return f;
}

struct MmaOperands {
  uint32_t a[4], b[2];
};

// A[row][col] of the warp's m16n8k16 (16-bit) or m16n8k8 (tf32) operands.
inline float mma_a(const MmaOperands* const* lanes, int row, int col, InputType type) {
  if (type == InputType::tf32) {
    const MmaOperands* o = lanes[(row % 8) * 4 + col % 4];
    return input_to_float(o->a[(row >= 8 ? 1 : 0) + (col >= 4 ? 2 : 0)], type);
  }
  const MmaOperands* o = lanes[(row % 8) * 4 + (col % 8) / 2];
  const uint32_t pair = o->a[(row >= 8 ? 1 : 0) + (col >= 8 ? 2 : 0)];
  return input_to_float(col % 2 ? pair >> 16 : pair & 0xffffu, type);
}
// B[k][n].
inline float mma_b(const MmaOperands* const* lanes, int k, int n, InputType type) {
  if (type == InputType::tf32) return input_to_float(lanes[n * 4 + k % 4]->b[k >= 4 ? 1 : 0], type);
  const uint32_t pair = lanes[n * 4 + (k % 8) / 2]->b[k >= 8 ? 1 : 0];
  return input_to_float(k % 2 ? pair >> 16 : pair & 0xffffu, type);
}

// This lane's 4 elements of D = A B + C. Not instrumented: reading other
// lanes' registers is not a memory access on a GPU.
__attribute__((no_sanitize("thread"))) inline void mma_lane(const unsigned long long* exchanged, unsigned lane,
                                                            InputType type, const float (&c)[4], float (&out)[4]) {
  const MmaOperands* lanes[32];
  for (int j = 0; j < 32; ++j) lanes[j] = reinterpret_cast<const MmaOperands*>(uintptr_t(exchanged[j]));
  const int K = type == InputType::tf32 ? 8 : 16;
  const int g = int(lane / 4), t = int(lane % 4);
  for (int i = 0; i < 4; ++i) {
    const int row = g + (i >= 2 ? 8 : 0), col = 2 * t + (i & 1);
    float s = c[i];
    for (int k = 0; k < K; ++k) s = std::fma(mma_a(lanes, row, k, type), mma_b(lanes, k, col, type), s);
    out[i] = s;
  }
}

inline void mma(float (&d)[4], const uint32_t (&a)[4], const uint32_t (&b)[2], const float (&c)[4], InputType type,
                const std::source_location& loc) {
  const MmaOperands mine{{a[0], a[1], a[2], a[3]}, {b[0], b[1]}};
  const unsigned lane = lane_id();
  const unsigned long long* exchanged = ::cudasim::detail::lane_exchange(
      ::cudasim::detail::kMmaSync, reinterpret_cast<uintptr_t>(&mine), loc.file_name(), loc.line());
  float out[4];
  mma_lane(exchanged, lane, type, c, out);
  // Every lane has read every lane's operands: now they may change.
  ::cudasim::detail::lane_exchange(::cudasim::detail::kMmaSync, 0, loc.file_name(), loc.line());
  for (int i = 0; i < 4; ++i) d[i] = out[i];
  if (lane == 0) ::cudasim::detail::count_mma_sync(uint64_t(2) * 16 * 8 * (type == InputType::tf32 ? 8 : 16));
}

// Gathers this lane's registers of N matrices from the rows the lanes read.
template <int N, bool Trans>
__attribute__((no_sanitize("thread"))) inline void ldmatrix_lane(const unsigned long long* exchanged, unsigned lane,
                                                                 uint32_t (&r)[N]) {
  const unsigned g = lane / 4, t = lane % 4;
  for (int i = 0; i < N; ++i) {
    const auto row = [&](unsigned k) { return reinterpret_cast<const unsigned char*>(uintptr_t(exchanged[8 * i + k])); };
    if (!Trans) {
      std::memcpy(&r[i], row(g) + 4 * t, 4);  // row g, columns 2t and 2t + 1
    } else {
      uint16_t lo, hi;  // column g of rows 2t and 2t + 1
      std::memcpy(&lo, row(2 * t) + 2 * g, 2);
      std::memcpy(&hi, row(2 * t + 1) + 2 * g, 2);
      r[i] = uint32_t(lo) | uint32_t(hi) << 16;
    }
  }
}

template <int N, bool Trans>
inline void ldmatrix(uint32_t (&r)[N], const void* row, const std::source_location& loc) {
  static_assert(N == 1 || N == 2 || N == 4, "ldmatrix loads 1, 2 or 4 matrices");
  const unsigned lane = lane_id();
  alignas(16) unsigned char mine[16];
  if (lane < 8 * N) {  // lanes 8i..8i+7 address matrix i; the others' addresses are not used
    char what[160];
    if (reinterpret_cast<uintptr_t>(row) % 16 != 0) {
      std::snprintf(what, sizeof what, "ldmatrix with a row address %p that is not 16-byte aligned", row);
      ::cudasim::detail::kernel_error(what, loc.file_name(), loc.line());
    }
    if (!::cudasim::detail::is_shared_memory(row, 16)) {
      std::snprintf(what, sizeof what, "ldmatrix with a row address %p outside shared memory", row);
      ::cudasim::detail::kernel_error(what, loc.file_name(), loc.line());
    }
    __uint128_t v;  // one 16-byte load, as the hardware reads a row
    std::memcpy(&v, row, 16);
    std::memcpy(mine, &v, 16);
  }
  const unsigned long long* exchanged = ::cudasim::detail::lane_exchange(
      ::cudasim::detail::kLdmatrix, reinterpret_cast<uintptr_t>(mine), loc.file_name(), loc.line());
  uint32_t out[N];
  ldmatrix_lane<N, Trans>(exchanged, lane, out);
  ::cudasim::detail::lane_exchange(::cudasim::detail::kLdmatrix, 0, loc.file_name(), loc.line());
  for (int i = 0; i < N; ++i) r[i] = out[i];
  if (lane == 0) ::cudasim::detail::count_ldmatrix(N);
}

}  // namespace sim_detail

inline void mma_m16n8k16_f16(float (&d)[4], const uint32_t (&a)[4], const uint32_t (&b)[2], const float (&c)[4],
                             std::source_location loc = std::source_location::current()) {
  sim_detail::mma(d, a, b, c, sim_detail::InputType::f16, loc);
}
inline void mma_m16n8k16_bf16(float (&d)[4], const uint32_t (&a)[4], const uint32_t (&b)[2], const float (&c)[4],
                              std::source_location loc = std::source_location::current()) {
  sim_detail::mma(d, a, b, c, sim_detail::InputType::bf16, loc);
}
inline void mma_m16n8k8_tf32(float (&d)[4], const uint32_t (&a)[4], const uint32_t (&b)[2], const float (&c)[4],
                             std::source_location loc = std::source_location::current()) {
  sim_detail::mma(d, a, b, c, sim_detail::InputType::tf32, loc);
}

// cvt.rna.tf32.f32: to nearest, ties away from zero, in the upper 19 bits.
inline uint32_t to_tf32(float x) {
  uint32_t bits;
  std::memcpy(&bits, &x, 4);
  if ((bits & 0x7f800000u) != 0x7f800000u) bits += 0x1000u;  // not Inf or NaN: round the magnitude
  return bits & 0xffffe000u;
}

template <int N>
inline void ldmatrix(uint32_t (&r)[N], const void* row, std::source_location loc = std::source_location::current()) {
  sim_detail::ldmatrix<N, false>(r, row, loc);
}
template <int N>
inline void ldmatrix_trans(uint32_t (&r)[N], const void* row,
                           std::source_location loc = std::source_location::current()) {
  sim_detail::ldmatrix<N, true>(r, row, loc);
}

template <int Bytes>
inline void cp_async(void* dst, const void* src, int src_bytes = Bytes,
                     std::source_location loc = std::source_location::current()) {
  static_assert(Bytes == 4 || Bytes == 8 || Bytes == 16, "cp.async copies 4, 8 or 16 bytes");
  ::cudasim::detail::async_copy_check(dst, src, Bytes, src_bytes, loc.file_name(), loc.line());
  alignas(16) unsigned char data[16] = {};
  // The source read, here in the kernel's code so the profiler counts it.
  if (src_bytes == Bytes) {
    if constexpr (Bytes == 4) {
      const uint32_t v = *static_cast<const uint32_t*>(src);
      std::memcpy(data, &v, 4);
    } else if constexpr (Bytes == 8) {
      const uint64_t v = *static_cast<const uint64_t*>(src);
      std::memcpy(data, &v, 8);
    } else {
      const __uint128_t v = *static_cast<const __uint128_t*>(src);
      std::memcpy(data, &v, 16);
    }
  } else if (src_bytes > 0) {
    std::memcpy(data, src, size_t(src_bytes));
  }
  ::cudasim::detail::async_copy_queue(dst, data, Bytes);
}

inline void cp_async_commit() { ::cudasim::detail::async_copy_commit(); }

template <int Pending>
inline void cp_async_wait() {
  static_assert(Pending >= 0, "cp.async.wait_group takes a count of groups");
  ::cudasim::detail::async_copy_wait(unsigned(Pending));
}

}  // namespace ember::cuda::ptx
