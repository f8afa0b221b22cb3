#!/usr/bin/env bash
# scripts/bench_loader.sh — the record loader against torchvision's, side by side.
#
#   scripts/bench_loader.sh PHOTO_DIR RECORDS [RUNS]
#
# PHOTO_DIR: a folder tree of JPEGs (scripts/make_photo_folder.py makes one);
# RECORDS: the same images packed by im2rec (e.g. --pass-through 1).
# For 1 and 2 threads / workers it runs, RUNS times each (default 3):
#   build/train_resnet --data-train RECORDS --test-io 1 --data-nthreads T --num-epochs 3
#     (random-resized-crop 224 + flip, uint8 NCHW batches of 64; the rate of
#     whole epochs 1-2, after a warm-up epoch: "Epoch speed")
#   ../shared/bench/torch_loader.py PHOTO_DIR T 2
#     (ImageFolder + RandomResizedCrop(224) + RandomHorizontalFlip + PILToTensor,
#     batches of 64; 2 timed passes after a warm-up pass)
# and prints every figure and the medians (img/s) and their ratio.
set -euo pipefail
dir=${1:?usage: bench_loader.sh PHOTO_DIR RECORDS [RUNS]}
records=${2:?usage: bench_loader.sh PHOTO_DIR RECORDS [RUNS]}
runs=${3:-3}
here=$(cd "$(dirname "$0")/.." && pwd)
torch_script=${TORCH_LOADER:-$here/../shared/bench/torch_loader.py}
median() { sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }

for t in 1 2; do
  ember=()
  for _ in $(seq "$runs"); do
    v=$("$here/build/train_resnet" --data-train "$records" --test-io 1 --data-nthreads "$t" --num-epochs 3 \
          --batch-size 64 --disp-batches 5 | awk '/^Epoch speed:/ {print $3}')
    ember+=("$v")
  done
  torch=()
  for _ in $(seq "$runs"); do
    v=$(/usr/bin/python3 "$torch_script" "$dir" "$t" 2 2>/dev/null | sed -E 's/.*img\/s=([0-9.]+).*/\1/')
    torch+=("$v")
  done
  me=$(printf '%s\n' "${ember[@]}" | median)
  mt=$(printf '%s\n' "${torch[@]}" | median)
  echo "threads=$t ember img/s: ${ember[*]} (median $me) | torchvision img/s: ${torch[*]} (median $mt) | ratio $(awk -v a="$me" -v b="$mt" 'BEGIN {printf "%.2f", a / b}')x"
done
