#!/usr/bin/env bash
# scripts/gpu_pack.sh — fill .gpu/ (git-ignored) with what a bare GPU machine needs to run
# scripts/gpu_check.sh from a copy of this repository: the binaries built here (stripped and
# xz-compressed: their CUDA fatbins shrink ~6x), the shared libraries that machine's image may
# lack (stb, libjpeg 6.2, libgomp), and the Fashion-MNIST files. cuDNN, cuBLAS and NCCL are not
# packed: gpu_check.sh finds them on that machine (its CUDA install or PyTorch's wheels).
# usage: make all && scripts/gpu_pack.sh        (prints the size of .gpu/)
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
DATA=${DATA:-/usr/share/datasets/fashion-mnist}
rm -rf .gpu && mkdir -p .gpu/bin .gpu/lib .gpu/fashion-mnist
for b in test_ember train_resnet kernel_lab bench_conv_cuda; do
  [ -x "$BUILD/$b" ] || { echo "gpu_pack: $BUILD/$b is missing: run make all first" >&2; exit 1; }
  strip -o ".gpu/bin/$b" "$BUILD/$b"
done
xz -T0 -6 .gpu/bin/*
for l in libstb.so.0 libjpeg.so.62 libgomp.so.1; do
  cp -L "$(ldconfig -p | awk -v l="$l" '$1 == l && /x86-64/ {print $NF; exit}')" .gpu/lib/
done
cp "$DATA"/*.gz .gpu/fashion-mnist/
git rev-parse --short HEAD > .gpu/commit
du -sh .gpu
