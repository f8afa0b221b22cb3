#!/usr/bin/env bash
# scripts/bench_gemm_openblas.sh — OpenBLAS single-precision GEMM speed on
# this machine, the yardstick for ember's own GEMM (ops/cpu/gemm*).
#
#   scripts/bench_gemm_openblas.sh [--reps R] [--min-ms T] [-v] [N | MxNxK]...
#
# Arguments go to scripts/bench_gemm_openblas.c (see its header): N is the
# square problem N x N x N, MxNxK is row-major C[MxN] = A[MxK] * B[KxN];
# default 1024 2048. ResNet-shaped problems in the im2col layout (not checked
# against ops/cpu/conv/conv.cpp: output channels x pixels x input channels * kernel
# area), e.g. for ResNet-50 at 224, batch 16:  64x50176x576 (3x3, 64 channels, 56x56),
# 256x50176x64 (1x1 expansion, 56x56), 512x784x4608 (3x3, 512, 7x7 x 16).
#
# Installs Debian's libopenblas-dev when its pthread variant is missing
# (apt-get update only if the plain install fails), compiles the C program
# to /tmp with gcc -O2 against that libopenblas (never into ember: the
# Makefile does not know this file), and runs it twice with
# OPENBLAS_NUM_THREADS=$THREADS (default 2): once with OpenBLAS's own choice
# of kernels, once with OPENBLAS_CORETYPE=SkylakeX (its AVX-512 kernels;
# skipped where the CPU has no avx512f), so that a CPU OpenBLAS misjudges
# (an unknown one falls back to Haswell, AVX2) is measured both ways; the
# first line of each run names the core OpenBLAS took. On this project's
# AMD EPYC (Zen 4, avx512_bf16) Debian's 0.3.21 takes Cooperlake, whose
# sgemm is SkylakeX's: the two runs should agree there.
# CORETYPES (default "auto SkylakeX") changes the list.
#
# Each output line is "sgemm M N K  GFLOP/s X", X the median of R
# repetitions after a warm-up; figures from one sitting on a shared machine.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
threads=${THREADS:-2}
coretypes=${CORETYPES:-auto SkylakeX}
exe=/tmp/bench_gemm_openblas
arch=$(gcc -print-multiarch 2>/dev/null || echo x86_64-linux-gnu)

find_openblas() {
  libdir='' incdir=''
  local v
  for v in openblas-pthread openblas-openmp openblas-serial; do
    if [ -e "/usr/lib/$arch/$v/libopenblas.so" ] && [ -e "/usr/include/$arch/$v/cblas.h" ]; then
      libdir=/usr/lib/$arch/$v incdir=/usr/include/$arch/$v
      [ "$v" = openblas-pthread ] || echo "bench_gemm_openblas: note: using $v (no pthread variant)" >&2
      return 0
    fi
  done
  return 1
}

if ! find_openblas; then
  sudo=
  [ "$(id -u)" = 0 ] || sudo=sudo
  # Installing OpenBLAS re-points the system's libblas.so.3 and liblapack.so.3
  # (update-alternatives, priority 100) at it, and Debian's PyTorch loads
  # those: note where they point now and put them back afterwards, so that
  # PyTorch's figures do not change under the other benchmarks.
  declare -A was=()
  for alt in libblas.so.3 liblapack.so.3; do
    was[$alt]=$(update-alternatives --query "$alt-$arch" 2>/dev/null | sed -n 's/^Value: //p' || true)
  done
  echo "bench_gemm_openblas: installing libopenblas-dev" >&2
  if ! $sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -q libopenblas-dev >/tmp/bench_gemm_openblas.apt.log 2>&1; then
    $sudo apt-get update -q >>/tmp/bench_gemm_openblas.apt.log 2>&1 || true
    $sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -q libopenblas-dev >>/tmp/bench_gemm_openblas.apt.log 2>&1 ||
      { echo "bench_gemm_openblas: apt-get install libopenblas-dev failed (see /tmp/bench_gemm_openblas.apt.log)" >&2; exit 1; }
  fi
  for alt in "${!was[@]}"; do
    if [ -n "${was[$alt]}" ] && [ "$(update-alternatives --query "$alt-$arch" | sed -n 's/^Value: //p')" != "${was[$alt]}" ]; then
      $sudo update-alternatives --set "$alt-$arch" "${was[$alt]}" >/dev/null
      echo "bench_gemm_openblas: $alt left at ${was[$alt]} (as before the install)" >&2
    fi
  done
  find_openblas || { echo "bench_gemm_openblas: libopenblas-dev installed but no libopenblas.so/cblas.h under /usr/lib/$arch/openblas-*" >&2; exit 1; }
fi

gcc -O2 -std=c11 -D_POSIX_C_SOURCE=200112L -I"$incdir" "$here/bench_gemm_openblas.c" -o "$exe" \
    -L"$libdir" -Wl,-rpath,"$libdir" -lopenblas
echo "bench_gemm_openblas: $exe against $libdir/libopenblas.so ($(dpkg-query -W -f='${Version}' libopenblas0-pthread 2>/dev/null || echo '?')), OPENBLAS_NUM_THREADS=$threads, CPU: $(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -1)"

export OPENBLAS_NUM_THREADS=$threads
for core in $coretypes; do
  if [ "$core" = auto ]; then
    echo "--- OpenBLAS's own core choice"
    env -u OPENBLAS_CORETYPE "$exe" "$@"
  else
    if [ "$core" = SkylakeX ] && ! grep -qw avx512f /proc/cpuinfo; then
      echo "--- OPENBLAS_CORETYPE=SkylakeX skipped: this CPU has no avx512f"
      continue
    fi
    echo "--- OPENBLAS_CORETYPE=$core"
    OPENBLAS_CORETYPE=$core "$exe" "$@"
  fi
done
