#!/usr/bin/env bash
# scripts/bench_predict.sh — how fast build/predict classifies photos with a
# ResNet-50 at 224x224 (decode + resize + crop + forward, the whole program's
# rate as it prints it).
#
#   scripts/bench_predict.sh [PHOTO_DIR] [MODEL.safetensors]
#
# Environment: IMAGES (default 32) photos are taken, RUNS (default 3) runs
# are made, BATCH (default 32) images per forward, THREADS (default 0: all
# cores), WORK (default /tmp/ember_bench_predict) holds what the script makes,
# PREDICT (default build/predict) is the program timed, EXTRA adds flags
# (e.g. EXTRA="--gpus 0").
#
# PHOTO_DIR: a folder (searched recursively) of JPEGs. Without one the script
# makes IMAGES photos in $WORK/photos: with scripts/make_photo_folder.py
# (crops of the installed wallpapers) when that works, else synthetic
# 500x375 JPEGs drawn with Pillow (smooth colour fields plus fine noise, so
# they cost about what a photo costs to decode).
# MODEL: a ResNet safetensors file. Without one the script writes
# $WORK/resnet50.safetensors: torchvision's resnet50 with its random
# initial weights (no download), saved by /usr/bin/python3 with Debian's
# python3-torch and python3-torchvision; the weights do not change the speed.
#
# Prints each run's img/s and the median; when /usr/bin/python3 has torch and
# torchvision, PyTorch classifies the same photos with the same model in the
# same sitting (scripts/bench_predict_torch.py, runs interleaved with ember's)
# and the ratio of the medians is printed.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
images=${IMAGES:-32}
runs=${RUNS:-3}
batch=${BATCH:-32}
threads=${THREADS:-0}
work=${WORK:-/tmp/ember_bench_predict}
predict=${PREDICT:-$here/build/predict}
photo_dir=${1:-}
model=${2:-}
mkdir -p "$work"
[ -x "$predict" ] || { echo "bench_predict: $predict is missing: build it with make" >&2; exit 1; }

if [ -z "$photo_dir" ]; then
  photo_dir=$work/photos
  have=$( (find "$photo_dir" -name '*.jpg' 2>/dev/null || true) | wc -l)
  if [ "$have" -lt "$images" ]; then
    rm -rf "$photo_dir"
    if ! /usr/bin/python3 "$here/scripts/make_photo_folder.py" "$photo_dir" --images "$images" --classes 1 2>/dev/null; then
      echo "bench_predict: no wallpapers to crop; drawing $images synthetic 500x375 JPEGs instead"
      rm -rf "$photo_dir"
      /usr/bin/python3 - "$photo_dir" "$images" <<'EOF'
import os, random, sys
from PIL import Image, ImageChops
out, n = sys.argv[1], int(sys.argv[2])
os.makedirs(out, exist_ok=True)
rng = random.Random(0)
for i in range(n):
    w, h = (375, 500) if i % 4 == 3 else (500, 375)
    small = Image.frombytes("RGB", (8, 6), bytes(rng.randrange(256) for _ in range(8 * 6 * 3)))
    field = small.resize((w, h), Image.BICUBIC)
    noise = Image.effect_noise((w, h), 24).convert("RGB")
    ImageChops.add(field, noise, scale=1.0, offset=-128).save(os.path.join(out, "img%05d.jpg" % i), "JPEG", quality=90)
print("drew %d JPEGs in %s" % (n, out))
EOF
    fi
  fi
fi
mapfile -t files < <(find "$photo_dir" -type f \( -iname '*.jpg' -o -iname '*.jpeg' \) | sort | head -n "$images")
[ "${#files[@]}" -gt 0 ] || { echo "bench_predict: no JPEGs under $photo_dir" >&2; exit 1; }

if [ -z "$model" ]; then
  model=$work/resnet50.safetensors
  if [ ! -s "$model" ]; then
    if ! /usr/bin/python3 -c 'import torch, torchvision' 2>/dev/null; then
      echo "bench_predict: /usr/bin/python3 has no torch/torchvision to write a ResNet-50; pass MODEL.safetensors" >&2
      exit 1
    fi
    /usr/bin/python3 - "$model" <<'EOF'
# torchvision's resnet50 (random initial weights) as safetensors: a u64
# header length, the JSON header, the raw little-endian tensors.
import json, struct, sys
import torch, torchvision
torch.manual_seed(0)
state = torchvision.models.resnet50(weights=None).state_dict()
names = {torch.float32: "F32", torch.int64: "I64"}
header, blobs, offset = {"__metadata__": {"producer": "scripts/bench_predict.sh"}}, [], 0
for key, t in state.items():
    data = t.detach().contiguous().numpy().tobytes()
    header[key] = {"dtype": names[t.dtype], "shape": list(t.shape), "data_offsets": [offset, offset + len(data)]}
    blobs.append(data)
    offset += len(data)
text = json.dumps(header, separators=(",", ":")).encode()
text += b" " * (-len(text) % 8)
with open(sys.argv[1], "wb") as f:
    f.write(struct.pack("<Q", len(text)))
    f.write(text)
    for b in blobs:
        f.write(b)
EOF
  fi
fi

echo "bench_predict: $predict --model $model, ${#files[@]} images from $photo_dir, batch $batch, threads $threads, $runs runs"
torch_ok=0
/usr/bin/python3 -c 'import torch, torchvision, PIL' 2>/dev/null && torch_ok=1
torch_threads=$threads
[ "$torch_threads" -gt 0 ] || torch_threads=$(nproc)
median() { printf '%s\n' "$@" | sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
speeds=()
torch_speeds=()
for r in $(seq "$runs"); do
  # shellcheck disable=SC2086
  line=$("$predict" --model "$model" --batch-size "$batch" --threads "$threads" ${EXTRA:-} "${files[@]}" 2>"$work/stderr.txt" |
         grep '^Predicted ') || { cat "$work/stderr.txt" >&2; exit 1; }
  speed=$(sed -E 's/.* s: ([0-9.]+) img\/s.*/\1/' <<<"$line")
  echo "run $r: ember   $line"
  speeds+=("$speed")
  if [ "$torch_ok" = 1 ]; then
    # PyTorch's own default here is 1 thread (it reads the cgroup quota): give it predict's count.
    line=$(/usr/bin/python3 "$here/scripts/bench_predict_torch.py" "$model" "$batch" "$torch_threads" "${files[@]}")
    echo "run $r: PyTorch $line"
    torch_speeds+=("$(sed -E 's/.* s: ([0-9.]+) img\/s.*/\1/' <<<"$line")")
  fi
done
m=$(median "${speeds[@]}")
echo "median: $m img/s (${speeds[*]})"
if [ "$torch_ok" = 1 ]; then
  t=$(median "${torch_speeds[@]}")
  echo "PyTorch median: $t img/s (${torch_speeds[*]}); ember / PyTorch = $(awk -v a="$m" -v b="$t" 'BEGIN{printf "%.2f", a/b}')"
fi
