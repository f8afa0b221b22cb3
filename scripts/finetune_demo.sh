#!/usr/bin/env bash
# scripts/finetune_demo.sh — what pretraining buys, shown on Fashion-MNIST
# (no ImageNet weights can be downloaded here).
#
#   1. pretrain a ResNet-20 on classes 0-4 (T-shirt, Trouser, Pullover, Dress, Coat);
#   2. on classes 5-9 (Sandal, Shirt, Sneaker, Bag, Ankle boot), with 1%, 10% and
#      100% of their 30,000 training labels, train three ways with the same steps:
#        scratch   train_resnet from random weights
#        finetune  finetune_resnet from the pretrained weights, everything trains
#        frozen    finetune_resnet --freeze-backbone 1: only the new head trains
#   3. print a markdown table of test accuracy (the 5,000 test images of classes
#      5-9) and wall time.
#
# Usage: scripts/finetune_demo.sh [OUT_DIR]   (default /tmp/ember_finetune_demo)
# Env:   BUILD=build   PRETRAIN_EPOCHS=4   SEED=0
# Takes ~10-15 minutes on 2 cores. Logs of every run stay in OUT_DIR.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
OUT=${1:-/tmp/ember_finetune_demo}
PRETRAIN_EPOCHS=${PRETRAIN_EPOCHS:-4}
SEED=${SEED:-0}
mkdir -p "$OUT"
for p in train_resnet finetune_resnet; do
  [ -x "$BUILD/$p" ] || { echo "finetune_demo: $BUILD/$p is missing: run make first" >&2; exit 1; }
done

pre="$OUT/pre-classes0-4"
pretrained="$pre-$(printf %04d "$PRETRAIN_EPOCHS").safetensors"
if [ ! -f "$pretrained" ]; then
  echo "== pretraining ResNet-20 on classes 0-4 ($PRETRAIN_EPOCHS epochs)"
  "$BUILD/train_resnet" --num-layers 20 --classes 0,1,2,3,4 --num-epochs "$PRETRAIN_EPOCHS" --batch-size 128 \
    --lr 0.2 --seed "$SEED" --model-prefix "$pre" --disp-batches 1000 > "$OUT/pretrain.log"
  grep -E "Validation-accuracy|Finished" "$OUT/pretrain.log" | tail -n 2
fi

# fraction label, images, batch size, epochs: about the same number of steps
# per run within a row, more for more data.
runs=("1% 300 32 15" "10% 3000 64 4" "100% 30000 128 2")
common=(--classes 5,6,7,8,9 --seed "$SEED" --disp-batches 1000 --label-smoothing 0)

result() {  # log -> "accuracy seconds"
  sed -nE 's/^Finished [0-9]+ epochs in ([0-9.]+) s: .*Validation-accuracy=([0-9.]+).*/\2 \1/p' "$1" | tail -n 1
}

table="| labels of classes 5-9 | steps | from scratch | fine-tuned | frozen backbone (head only) |
|---|---|---|---|---|"
for r in "${runs[@]}"; do
  read -r label n batch epochs <<< "$r"
  steps=$(( (n / batch) * epochs ))
  echo "== $label of the labels: $n images, batch $batch, $epochs epochs ($steps steps)"
  args=("${common[@]}" --num-examples "$n" --batch-size "$batch" --num-epochs "$epochs")
  "$BUILD/train_resnet" --num-layers 20 --lr 0.2 "${args[@]}" > "$OUT/scratch-$label.log"
  "$BUILD/finetune_resnet" --pretrained-model "$pretrained" --lr 0.05 "${args[@]}" > "$OUT/finetune-$label.log"
  "$BUILD/finetune_resnet" --pretrained-model "$pretrained" --lr 0.05 --freeze-backbone 1 "${args[@]}" \
    > "$OUT/frozen-$label.log"
  row="| $label ($n images) | $steps |"
  for kind in scratch finetune frozen; do
    read -r acc secs <<< "$(result "$OUT/$kind-$label.log")"
    printf '   %-8s test accuracy %s in %s s\n' "$kind" "$acc" "$secs"
    row="$row $(awk -v a="$acc" 'BEGIN{printf "%.2f%%", 100*a}') in ${secs} s |"
  done
  table="$table
$row"
done
echo
echo "pretrained: $pretrained ($(grep -E 'Validation-accuracy' "$OUT/pretrain.log" | tail -n 1 | sed 's/.*=//') on classes 0-4)"
echo "$table"
