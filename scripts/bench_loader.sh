#!/usr/bin/env bash
# scripts/bench_loader.sh — the record loader against torchvision's, side by side.
#
#   scripts/bench_loader.sh PHOTO_DIR RECORDS [RUNS]
#   SIZE=128 THREADS="1 2" scripts/bench_loader.sh PHOTO_DIR RECORDS [RUNS]
#
# PHOTO_DIR: a folder tree of JPEGs (scripts/make_photo_folder.py makes one);
# RECORDS: the same images packed by im2rec (e.g. --pass-through 1).
# For each thread / worker count (THREADS, default "1 2") it runs, RUNS times
# each (default 3), alternating:
#   build/train_resnet --data-train RECORDS --test-io 1 --data-nthreads T --num-epochs 3
#     --image-shape 3,SIZE,SIZE (random-resized-crop SIZE + flip, uint8 NCHW
#     batches of 64; the rate of whole epochs 1-2, after a warm-up epoch:
#     "Epoch speed"), with the default JPEG decoder (libjpeg-turbo where
#     built) and again with EMBER_JPEG=stb (stb_image, the decoder before it)
#   scripts/torch_loader.py PHOTO_DIR T 2 SIZE
#     (ImageFolder + RandomResizedCrop(SIZE) + RandomHorizontalFlip + PILToTensor,
#     batches of 64; 2 timed passes after a warm-up pass)
# and prints every figure, the medians (img/s) and the ratios against torchvision.
# SIZE defaults to 224. STB=0 leaves out the stb_image runs.
set -euo pipefail
dir=${1:?usage: bench_loader.sh PHOTO_DIR RECORDS [RUNS]}
records=${2:?usage: bench_loader.sh PHOTO_DIR RECORDS [RUNS]}
runs=${3:-3}
size=${SIZE:-224}
here=$(cd "$(dirname "$0")/.." && pwd)
torch_script=${TORCH_LOADER:-$here/scripts/torch_loader.py}
median() { sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN {printf "%.2f", a / b}'; }
ember_rate() {  # threads, then environment assignments
  local t=$1
  shift
  env "$@" "$here/build/train_resnet" --data-train "$records" --test-io 1 --data-nthreads "$t" --num-epochs 3 \
    --batch-size 64 --disp-batches 5 --image-shape "3,$size,$size" | awk '/^Epoch speed:/ {print $3}'
}

for t in ${THREADS:-1 2}; do
  ember=() stb=() torch=()
  for _ in $(seq "$runs"); do
    ember+=("$(ember_rate "$t")")
    [ "${STB:-1}" = 1 ] && stb+=("$(ember_rate "$t" EMBER_JPEG=stb)")
    torch+=("$(/usr/bin/python3 "$torch_script" "$dir" "$t" 2 "$size" 2>/dev/null | sed -E 's/.*img\/s=([0-9.]+).*/\1/')")
  done
  me=$(printf '%s\n' "${ember[@]}" | median)
  mt=$(printf '%s\n' "${torch[@]}" | median)
  line="size=$size threads=$t ember img/s: ${ember[*]} (median $me)"
  if [ "${STB:-1}" = 1 ]; then
    ms=$(printf '%s\n' "${stb[@]}" | median)
    line="$line | ember stb_image: ${stb[*]} (median $ms)"
  fi
  line="$line | torchvision: ${torch[*]} (median $mt) | ember/torchvision $(ratio "$me" "$mt")x"
  [ "${STB:-1}" = 1 ] && line="$line, stb/torchvision $(ratio "$ms" "$mt")x, ember/stb $(ratio "$me" "$ms")x"
  echo "$line"
done
