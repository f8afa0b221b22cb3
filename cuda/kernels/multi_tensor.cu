// cuda/kernels/multi_tensor.cu — the multi-tensor optimizer step on the
// device (ops/kernels.h: unscale_gradients, multi_tensor_sgd,
// loss_scale_update; the CPU reference is ops/cpu/multi_tensor.cpp).
//
// A mixed-precision step over every parameter of a model is three launches,
// none of which the host waits for: the gradients are unscaled into the
// optimizer's flat f32 buffer while any inf or NaN raises a flag in the loss
// scaler's device state; the SGD kernel reads that flag and, unless it is
// set, updates the f32 masters and momentum and writes the 16-bit weights;
// one thread then updates the scale and clears the flag. (PyTorch's
// _amp_foreach_non_finite_check_and_unscale_, its fused SGD and
// _amp_update_scale_ do the same in its AMP loop.)
//
// The work is a list of chunks (at most kMultiTensorChunk elements of one
// parameter each), one block per chunk, as apex's multi_tensor_apply. A chunk
// whose arrays are all 16-byte aligned moves 4 elements per thread and
// instruction (16-byte f32 and 8-byte f16/bf16 accesses); others go one by one.
#include "cuda/common.cuh"
#include "cuda/cuda_kernels.h"

namespace ember::cuda {

namespace {

constexpr unsigned kMultiTensorThreads = 256;

// ------------------------------------------------------------ 4-element packs
template <typename T>
struct alignas(4 * sizeof(T)) Pack4 {
  T v[4];
};

// 4 elements from p (aligned to 4 * sizeof(T)), as f32. On the emulator one
// memcpy, so that the profiler sees one access per lane, as a GPU makes it.
template <typename T>
__device__ __forceinline__ void load4(const T* p, float out[4]) {
  Pack4<T> pack;
#if defined(EMBER_CUDASIM)
  __builtin_memcpy(static_cast<void*>(&pack), static_cast<const void*>(p), sizeof pack);
#else
  pack = *reinterpret_cast<const Pack4<T>*>(p);
#endif
  EMBER_UNROLL
  for (int k = 0; k < 4; ++k) out[k] = to_compute(pack.v[k]);
}

// 4 f32 values to p (aligned to 4 * sizeof(T)), each rounded once to T.
template <typename T>
__device__ __forceinline__ void store4(T* p, const float in[4]) {
  Pack4<T> pack;
  EMBER_UNROLL
  for (int k = 0; k < 4; ++k) pack.v[k] = to_storage<T>(in[k]);
#if defined(EMBER_CUDASIM)
  __builtin_memcpy(static_cast<void*>(p), static_cast<const void*>(&pack), sizeof pack);
#else
  *reinterpret_cast<Pack4<T>*>(p) = pack;
#endif
}

// False for inf and NaN (inf - inf and NaN - NaN are NaN).
__device__ __forceinline__ bool finite(float v) { return v - v == 0.0f; }

__device__ __forceinline__ bool aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15u) == 0; }

// Calls f(T{}) for the storage type of a slice's dtype (f32, f16 or bf16).
template <typename F>
__device__ __forceinline__ void with_storage_type(int32_t dtype, F&& f) {
  if (dtype == int32_t(DType::f16))
    f(__half{});
  else if (dtype == int32_t(DType::bf16))
    f(__nv_bfloat16{});
  else
    f(float{});
}

// ------------------------------------------------------------------ kernels

// grid: one block per chunk.   grad: [n] (the slice's grad_dtype)   grad32: [n]
template <typename G>
__device__ void unscale_chunk(const MultiTensorSlice& s, int64_t begin, int64_t end, float inv_scale, bool& bad) {
  const G* __restrict__ g = static_cast<const G*>(s.grad);
  float* __restrict__ out = s.grad32;
  int64_t i = begin + threadIdx.x * 4;
  if (aligned16(g + begin) && aligned16(out + begin)) {
    EMBER_NO_UNROLL
    for (; i + 4 <= end; i += int64_t(blockDim.x) * 4) {
      float v[4];
      load4(g + i, v);
      EMBER_UNROLL
      for (int k = 0; k < 4; ++k) {
        bad |= !finite(v[k]);
        v[k] *= inv_scale;
      }
      store4(out + i, v);
    }
    i = begin + (end - begin) / 4 * 4 + threadIdx.x;  // the tail (< 4 elements), one by one
  } else {
    i = begin + threadIdx.x;
  }
  EMBER_NO_UNROLL
  for (; i < end; i += blockDim.x) {
    const float v = to_compute(g[i]);
    bad |= !finite(v);
    out[i] = v * inv_scale;
  }
}

//   slices: [*]   chunks: [gridDim.x]   state: [kLossScaleStateSize]
__global__ void unscale_gradients_kernel(const MultiTensorSlice* slices, const MultiTensorChunk* chunks,
                                         float* state) {
  const MultiTensorChunk ch = chunks[blockIdx.x];
  const MultiTensorSlice s = slices[ch.slice];
  const float inv_scale = 1.0f / state[kLossScale];
  bool bad = false;
  with_storage_type(s.grad_dtype, [&](auto zero) { unscale_chunk<decltype(zero)>(s, ch.begin, ch.end, inv_scale, bad); });
  if (bad) state[kFoundNonfinite] = 1.0f;  // every writer writes the same value
}

// One element's SGD update in f32 (ops/kernels.h's formula).
__device__ __forceinline__ float sgd_element(float g, float& w, float* b, float step, float wd, float mom,
                                             bool nesterov) {
  const float gi = g + wd * w;
  if (!b) return w -= step * gi;
  const float bi = mom * *b + gi;
  *b = bi;
  return w -= step * (nesterov ? gi + mom * bi : bi);
}

// grid: one block per chunk.   grad32, weight, momentum: [n] f32   half: [n] H
template <typename H>
__device__ void sgd_chunk(const MultiTensorSlice& s, int64_t begin, int64_t end, float lr, float mom, bool nesterov) {
  const float step = lr * s.lr_mult, wd = s.weight_decay;
  const float* __restrict__ g = s.grad32;
  float* __restrict__ w = s.weight;
  float* __restrict__ b = s.momentum;
  H* __restrict__ h = static_cast<H*>(s.half);
  int64_t i;
  const bool vector = aligned16(g + begin) && aligned16(w + begin) && (!b || aligned16(b + begin)) &&
                      (!h || (reinterpret_cast<uintptr_t>(h + begin) & (4 * sizeof(H) - 1)) == 0);
  if (vector) {
    i = begin + threadIdx.x * 4;
    EMBER_NO_UNROLL
    for (; i + 4 <= end; i += int64_t(blockDim.x) * 4) {
      float gv[4], wv[4], bv[4];
      load4(g + i, gv);
      load4(w + i, wv);
      if (b) load4(b + i, bv);
      EMBER_UNROLL
      for (int k = 0; k < 4; ++k) sgd_element(gv[k], wv[k], b ? &bv[k] : nullptr, step, wd, mom, nesterov);
      store4(w + i, wv);
      if (b) store4(b + i, bv);
      if (h) store4(h + i, wv);
    }
    i = begin + (end - begin) / 4 * 4 + threadIdx.x;  // the tail (< 4 elements), one by one
  } else {
    i = begin + threadIdx.x;
  }
  EMBER_NO_UNROLL
  for (; i < end; i += blockDim.x) {
    const float wi = sgd_element(g[i], w[i], b ? &b[i] : nullptr, step, wd, mom, nesterov);
    if (h) h[i] = to_storage<H>(wi);
  }
}

//   slices: [*]   chunks: [gridDim.x]   state: [kLossScaleStateSize] or nullptr
//   hyper: [2] (lr, momentum) or nullptr: then lr and mom as given
__global__ void multi_tensor_sgd_kernel(const MultiTensorSlice* slices, const MultiTensorChunk* chunks, float lr,
                                        float mom, bool nesterov, const float* state, const float* hyper) {
  if (state && state[kFoundNonfinite] != 0.0f) return;  // a skipped step: nothing changes
  if (hyper) lr = hyper[0], mom = hyper[1];
  const MultiTensorChunk ch = chunks[blockIdx.x];
  const MultiTensorSlice s = slices[ch.slice];
  if (s.half)
    with_storage_type(s.half_dtype, [&](auto zero) { sgd_chunk<decltype(zero)>(s, ch.begin, ch.end, lr, mom, nesterov); });
  else
    sgd_chunk<float>(s, ch.begin, ch.end, lr, mom, nesterov);
}

//   state: [kLossScaleStateSize]; one thread
__global__ void loss_scale_update_kernel(float* state, LossScaleParams p) {
  float scale = state[kLossScale];
  if (state[kFoundNonfinite] == 0.0f) {
    state[kConsecutiveSkips] = 0.0f;
    const float clean = state[kCleanSteps] + 1.0f;
    if (p.dynamic && clean >= float(p.window)) {
      state[kCleanSteps] = 0.0f;
      scale = fminf(scale * 2.0f, fmaxf(float(p.max_scale), scale));
    } else {
      state[kCleanSteps] = p.dynamic ? clean : state[kCleanSteps];
    }
  } else {
    state[kSkippedSteps] += 1.0f;
    state[kConsecutiveSkips] += 1.0f;
    state[kCleanSteps] = 0.0f;
    if (p.dynamic) scale = fmaxf(scale * 0.5f, 1.0f / 16777216.0f);  // floor 2^-24
  }
  state[kLossScale] = scale;
  state[kFoundNonfinite] = 0.0f;
}

}  // namespace

// --------------------------------------------------------------- launchers

void unscale_gradients(const MultiTensorSlice* slices, const MultiTensorChunk* chunks, int64_t num_chunks,
                       float* state, Stream stream) {
  if (num_chunks <= 0) return;
  launch(unscale_gradients_kernel, dim3(unsigned(num_chunks)), dim3(kMultiTensorThreads), 0, as_cuda_stream(stream),
         slices, chunks, state);
}

void multi_tensor_sgd(const MultiTensorSlice* slices, const MultiTensorChunk* chunks, int64_t num_chunks, double lr,
                      double momentum, bool nesterov, const float* state, const float* hyper, Stream stream) {
  if (num_chunks <= 0) return;
  launch(multi_tensor_sgd_kernel, dim3(unsigned(num_chunks)), dim3(kMultiTensorThreads), 0, as_cuda_stream(stream),
         slices, chunks, float(lr), float(momentum), nesterov, state, hyper);
}

void loss_scale_update(float* state, const LossScaleParams& p, Stream stream) {
  launch(loss_scale_update_kernel, dim3(1), dim3(1), 0, as_cuda_stream(stream), state, p);
}

}  // namespace ember::cuda
