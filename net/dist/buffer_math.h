// net/dist/buffer_math.h — the arithmetic of the collectives on host
// buffers: one thread, no OpenMP (it runs on the communication thread while
// the compute threads work), vectorised by the compiler; f16 and bf16 are
// converted to f32, summed and rounded back once (F16C / AVX-512 / AVX512-BF16
// conversions).
#pragma once
#include <cstdint>

#include "engine/dtype.h"

namespace ember::net::dist {

// dst[i] += src[i]                 dst, src: [n] of dt (f32, f64, f16, bf16)
void add_into(DType dt, void* dst, const void* src, uint64_t n);
// x[i] *= factor                   x: [n] of dt
void scale_in_place(DType dt, void* x, uint64_t n, double factor);

}  // namespace ember::net::dist
