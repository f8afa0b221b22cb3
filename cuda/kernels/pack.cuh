// cuda/kernels/pack.cuh — one 16-byte access of a thread: a Pack of T (4
// floats, 8 halves or bf16s, 2 doubles) loaded or stored as one
// ld/st.v4. The elementwise loop (vector_loop.cuh) and batch norm's passes
// move their data in packs; the tensor-core convolutions' staged epilogue
// (mma_tile.cuh) stores its results in them.
#pragma once
#include "cuda/common.cuh"

namespace ember::cuda {

// Elements of T in one 16-byte access.
template <typename T>
inline constexpr int kPackElements = int(16 / sizeof(T));

template <typename T>
struct alignas(16) Pack {
  T v[kPackElements<T>];
};

// One 16-byte load or store; p must be 16-byte aligned. On the emulator one
// memcpy, so that its profiler sees one 16-byte access per lane, as a GPU
// makes it, and a misaligned p traps there as it faults on a GPU
// ("misaligned address"), where a memcpy would quietly work.
template <typename T>
__device__ __forceinline__ Pack<T> load_pack(const T* p) {
#if defined(EMBER_CUDASIM)
  if (reinterpret_cast<uintptr_t>(p) & 15u) __trap();
  Pack<T> v;
  __builtin_memcpy(static_cast<void*>(&v), static_cast<const void*>(p), sizeof v);
  return v;
#else
  return *reinterpret_cast<const Pack<T>*>(p);
#endif
}
template <typename T>
__device__ __forceinline__ void store_pack(T* p, const Pack<T>& v) {
#if defined(EMBER_CUDASIM)
  if (reinterpret_cast<uintptr_t>(p) & 15u) __trap();
  __builtin_memcpy(static_cast<void*>(p), static_cast<const void*>(&v), sizeof v);
#else
  *reinterpret_cast<Pack<T>*>(p) = v;
#endif
}

}  // namespace ember::cuda
