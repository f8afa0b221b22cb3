// ops/cpu/vector_clones.h — EMBER_VECTOR_CLONES: compile a hot loop once per
// vector width and let the dynamic loader pick the copy for this CPU.
//
// The build's baseline (ARCH, default x86-64-v2) has 16-byte vectors; the
// GEMM has its own per-ISA kernels (gemm_isa.h), and the few memory-bound
// loops where wider vectors measurably pay (batch-norm statistics and
// apply: ~25% faster with AVX2 on a Zen 4) are plain float functions marked
// with this attribute: GCC's target_clones builds an x86-64-v4 (AVX-512), an
// x86-64-v3 (AVX2 + FMA) and a baseline copy behind one ifunc. Builds whose
// baseline already has AVX2 (ARCH=native, x86-64-v3) and non-x86 builds get
// the plain function.
#pragma once

#if defined(__x86_64__) && !defined(__AVX2__) && defined(__GNUC__) && !defined(__clang__)
#define EMBER_VECTOR_CLONES __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define EMBER_VECTOR_CLONES
#endif
