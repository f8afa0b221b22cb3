#!/usr/bin/env bash
# scripts/bench_vs_refs.sh — ember side by side with current PyTorch and with
# MXNet 1.9.1 on this CPU, in one sitting, alternating, and the table of it.
#
#   scripts/bench_vs_refs.sh [resnet20] [resnet50] [loader] [fashion92]
#       (default: resnet20 resnet50 loader)
#
# The yardsticks run from the reference environments (make refs: .refs/mxnet;
# make refs-torch: .refs/torch; pinned PyPI versions, scripts/refs/refs.mk),
# never from the product.
#
#   resnet20   CPU training img/s, ResNet-20 (CIFAR-style), 28x28x1, batch 128,
#              fp32, synthetic data: build/train_resnet --benchmark 1 (median of
#              its 5-step intervals over 20 steps), scripts/torch_ref.py
#              throughput (eager, 2 threads set with torch.set_num_threads),
#              scripts/refs/mxnet_ref.py throughput (Gluon hybridized with
#              static_alloc/static_shape, MKL-DNN, OMP_NUM_THREADS=2;
#              MXNET_API=module: the Module API)
#   resnet50   the same for ResNet-50 (torchvision's structure in all three),
#              224x224x3, batch 16, 6 timed steps after 3 warm-up steps
#              PRECISION=bf16: both in mixed precision: train_resnet
#              --precision bf16 against PyTorch's CPU autocast to bf16
#              (torch_ref.py --autocast bf16) and MXNet's AMP to bf16
#              (mxnet_ref.py --amp bf16), with PyTorch and MXNet in fp32 in
#              the same rounds (each yardstick's faster mode counts); where
#              MXNet's bf16 cannot run (oneDNN's bf16 convolutions need
#              AVX-512) the table says so and the rest is measured
#   loader     decode + random-resized-crop to SIZE (224) + flip, batches of
#              64, at each of LOADER_THREADS ("1 2") threads, over PHOTOS (a
#              folder of class folders of JPEGs; default: 2000 photo-like
#              500x375 JPEGs made by scripts/refs/make_photos.py): ember's
#              record loader (train_resnet --test-io 1 on im2rec
#              --pass-through 1 records), MXNet's ImageRecordIter (on MXNet's
#              im2rec.py --pass-through RecordIO of the same files) and
#              PyTorch's DataLoader (ImageFolder, scripts/torch_loader.py)
#   fashion92  time to 92% Fashion-MNIST test accuracy with make train's recipe
#              (ResNet-20, one-cycle lr 0.4, momentum 0.95 -> 0.85, flips,
#              4 epochs at most): train_resnet --target-accuracy 0.92 against
#              scripts/torch_recipe.py with the same flags and 2 threads;
#              FASHION_ROUNDS rounds (default 1: some 10 minutes a run)
#
# Each of ROUNDS rounds (default 3) runs every program once in turn, so that
# drift in the machine's speed falls on all of them; the table gives every
# run, the medians and the ratios of ember's median to each yardstick's.
# Peak RSS is GNU time's %M where /usr/bin/time exists. Figures are ratios
# from one sitting: on a shared 2-core machine absolute rates move from day
# to day, the ratios much less.
#
# Environment: ROUNDS, FASHION_ROUNDS, BUILD (default build), REFS (default
# .refs), WORK (logs and data, default /tmp/ember_bench_vs_refs), PHOTOS,
# LOADER_THREADS, SIZE, MXNET_API (gluon|module), PRECISION (fp32|bf16: for
# resnet20 and resnet50; fashion92 runs its recipe in fp32).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
rounds=${ROUNDS:-3}
fashion_rounds=${FASHION_ROUNDS:-1}
abs_dir() { case $1 in /*) echo "$1" ;; *) echo "$root/$1" ;; esac; }
build=$(abs_dir "${BUILD:-build}")
refs=$(abs_dir "${REFS:-.refs}")
work=${WORK:-/tmp/ember_bench_vs_refs}
size=${SIZE:-224}
mxnet_api=${MXNET_API:-gluon}
precision=${PRECISION:-fp32}
torch_py=$refs/torch/bin/python
mxnet_py=$refs/mxnet/bin/python
say() { echo "bench_vs_refs: $*" >&2; }

[ -x "$build/train_resnet" ] || { say "$build/train_resnet is missing: run make first"; exit 1; }
[ -x "$mxnet_py" ] || { say "$mxnet_py is missing: make refs builds it"; exit 1; }
[ -x "$torch_py" ] || { say "$torch_py is missing: make refs-torch builds it"; exit 1; }
case $precision in fp32 | bf16) ;; *) say "PRECISION=$precision: expected fp32 or bf16"; exit 1 ;; esac
[ "$precision" = fp32 ] || [ "$mxnet_api" = gluon ] || { say "PRECISION=bf16 needs MXNET_API=gluon (MXNet's AMP)"; exit 1; }
[[ "$rounds" =~ ^[1-9][0-9]*$ && "$fashion_rounds" =~ ^[1-9][0-9]*$ ]] || { say "ROUNDS and FASHION_ROUNDS are positive counts"; exit 1; }
workloads=("$@")
[ ${#workloads[@]} -gt 0 ] || workloads=(resnet20 resnet50 loader)
for w in "${workloads[@]}"; do
  case $w in resnet20 | resnet50 | loader | fashion92) ;; *) say "unknown workload '$w' (resnet20, resnet50, loader, fashion92)"; exit 1 ;; esac
done
mkdir -p "$work"

# measured, one_run, median, ratio
# shellcheck source=scripts/bench_common.sh
source "$root/scripts/bench_common.sh"

# A comparison: rounds of the commands cmd_<i> named names[i]; pattern[i] finds
# each one's figure. Prints the runs, medians and ember's ratios (figure
# "higher is better" unless LOWER_IS_BETTER=1: then yardstick / ember).
# A yardstick listed in optional[] (indices) that fails is reported as not
# run, with the last line of its log, and skipped in the later rounds (a
# mode this CPU or build cannot run: MXNet's bf16 AMP without AVX-512);
# anything else failing ends the script.
compare() {
  local title=$1 unit=$2 n_rounds=$3
  local -n names_ref=names patterns_ref=patterns
  local count=${#names_ref[@]} i r figure rss
  declare -A unavailable=()
  echo
  echo "== $title"
  for ((i = 0; i < count; i++)); do
    local -n c="cmd_$i"
    echo "   ${names_ref[$i]}: ${c[*]}"
  done
  printf '%-6s %-10s %12s %12s\n' round program "$unit" "peak RSS MB"
  declare -A figures=() memories=()
  for r in $(seq "$n_rounds"); do
    for ((i = 0; i < count; i++)); do
      local -n c="cmd_$i"
      [ -z "${unavailable[$i]:-}" ] || continue
      if ! read -r figure rss < <(one_run "$tag.$r.$i" "${patterns_ref[$i]}" "${c[@]}"); then
        [[ " ${optional[*]:-} " == *" $i "* ]] || exit 1
        unavailable[$i]=$(grep -v '^[[:space:]]*$' "$work/$tag.$r.$i.log" | tail -n 1)
        printf '%-6s %-10s %12s %12s\n' "$r" "${names_ref[$i]}" "not run" -
        continue
      fi
      figures[$i]="${figures[$i]:-} $figure" memories[$i]="${memories[$i]:-} $rss"
      printf '%-6s %-10s %12s %12s\n' "$r" "${names_ref[$i]}" "$figure" "$rss"
    done
  done
  local medians=() rss_medians=()
  for ((i = 0; i < count; i++)); do
    [ -z "${unavailable[$i]:-}" ] || continue
    # shellcheck disable=SC2086
    medians[$i]=$(median ${figures[$i]}) rss_medians[$i]=$(median ${memories[$i]})
    printf '%-6s %-10s %12s %12s\n' median "${names_ref[$i]}" "${medians[$i]}" "${rss_medians[$i]}"
  done
  for ((i = 1; i < count; i++)); do
    if [ -n "${unavailable[$i]:-}" ]; then
      echo "$title: ${names_ref[0]} / ${names_ref[$i]}: not measured (${names_ref[$i]} did not run: ${unavailable[$i]})"
    elif [ "${LOWER_IS_BETTER:-0}" = 1 ]; then
      echo "$title: ${names_ref[0]} / ${names_ref[$i]}: speed $(ratio "${medians[$i]}" "${medians[0]}") (time ${medians[0]} vs ${medians[$i]} $unit)"
    else
      echo "$title: ${names_ref[0]} / ${names_ref[$i]}: $unit $(ratio "${medians[0]}" "${medians[$i]}"), peak RSS $(ratio "${rss_medians[0]}" "${rss_medians[$i]}")"
    fi
  done
}

cpu=$(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -1)
echo "bench_vs_refs: $(date '+%Y-%m-%d %H:%M'), $(nproc) cores, $cpu, $rounds rounds"
echo "  $("$torch_py" -c 'import torch, torchvision; print("PyTorch", torch.__version__, "torchvision", torchvision.__version__)' 2>/dev/null)"
echo "  $("$mxnet_py" -c 'import mxnet as mx; print("MXNet", mx.__version__, "MKL-DNN", mx.runtime.Features().is_enabled("MKLDNN"))' 2>/dev/null)"
ember_pat='^Median speed: ([0-9.]+) samples\/sec.*'
ref_pat='.* train img\/s=([0-9.]+).*'

for w in "${workloads[@]}"; do
  tag=$w
  case $w in
    resnet20 | resnet50)
      if [ "$w" = resnet20 ]; then
        eflags=(--benchmark 1 --num-layers 20 --batch-size 128 --num-batches 20 --disp-batches 5 --precision "$precision")
        rflags=(--model resnet20 --batch 128 --size 28)
      else
        eflags=(--benchmark 1 --num-layers 50 --image-shape "3,224,224" --batch-size 16 --num-batches 6 --disp-batches 2 --precision "$precision")
        rflags=(--model resnet50_224 --batch 16 --size 224 --steps 6 --warmup 3)
      fi
      names=(ember PyTorch MXNet) patterns=("$ember_pat" "$ref_pat" "$ref_pat") optional=()
      cmd_0=("$build/train_resnet" "${eflags[@]}" --threads 2)
      cmd_1=("$torch_py" "$root/scripts/torch_ref.py" throughput "${rflags[@]}" --threads 2)
      cmd_2=("$mxnet_py" "$root/scripts/refs/mxnet_ref.py" throughput "${rflags[@]}" --threads 2 --api "$mxnet_api")
      if [ "$precision" = bf16 ]; then
        tag=$w.bf16
        names=(ember-bf16 PyTorch-bf16 MXNet-bf16 PyTorch MXNet)
        patterns=("$ember_pat" "$ref_pat" "$ref_pat" "$ref_pat" "$ref_pat")
        cmd_3=("${cmd_1[@]}") cmd_4=("${cmd_2[@]}")
        cmd_1+=(--autocast bf16) cmd_2+=(--amp bf16) optional=(2)
      fi
      title="$w training"
      [ "$precision" = fp32 ] || title+=" in $precision"
      compare "$title" img/s "$rounds"
      ;;
    loader)
      photos=${PHOTOS:-$work/photos}
      if [ ! -d "$photos" ]; then
        "$mxnet_py" "$root/scripts/refs/make_photos.py" "$photos" --images 2000 --classes 10 >&2
      fi
      [ -f "$work/photos.erec" ] || "$build/im2rec" --pass-through 1 --shuffle 0 --num-thread 2 "$work/photos" "$photos" >&2
      [ -f "$work/photos_mx.rec" ] || "$mxnet_py" "$root/scripts/refs/mxnet_ref.py" pack --folder "$photos" --prefix "$work/photos_mx" >&2
      for t in ${LOADER_THREADS:-1 2}; do
        tag=loader.t$t
        names=(ember MXNet PyTorch) optional=() patterns=('^Epoch speed: ([0-9.]+).*' '.* img\/s=([0-9.]+).*' '.* img\/s=([0-9.]+).*')
        cmd_0=("$build/train_resnet" --data-train "$work/photos.erec" --test-io 1 --data-nthreads "$t" --num-epochs 3
               --batch-size 64 --disp-batches 5 --image-shape "3,$size,$size")
        cmd_1=("$mxnet_py" "$root/scripts/refs/mxnet_ref.py" loader --rec "$work/photos_mx.rec" --idx "$work/photos_mx.idx"
               --size "$size" --batch 64 --threads "$t")
        cmd_2=("$torch_py" "$root/scripts/torch_loader.py" "$photos" "$t" 2 "$size")
        compare "loader at $size, $t thread(s)" img/s "$rounds"
      done
      ;;
    fashion92)
      recipe=(--num-layers 20 --num-epochs 4 --lr 0.4 --moms 0.95,0.85 --random-crop 0 --target-accuracy 0.92)
      names=(ember PyTorch) optional=() patterns=('^Time to 0\.920: ([0-9.]+) s.*' '^Time to 0\.920: ([0-9.]+) s.*')
      cmd_0=("$build/train_resnet" --network resnet --dataset fashion-mnist "${recipe[@]}" --threads 2)
      cmd_1=("$torch_py" "$root/scripts/torch_recipe.py" "${recipe[@]}" --threads 2)
      LOWER_IS_BETTER=1 compare "Fashion-MNIST time to 92%" s "$fashion_rounds"
      ;;
  esac
done
