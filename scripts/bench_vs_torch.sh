#!/usr/bin/env bash
# scripts/bench_vs_torch.sh — ember's training throughput and peak memory
# against PyTorch's on the same model, in the same sitting.
#
#   scripts/bench_vs_torch.sh [resnet20] [resnet50]     (default: both)
#
# Workloads (synthetic data, SGD with momentum, forward + backward + step):
#   resnet20  ResNet-20, 28x28x1, batch 128: 3 warm-up steps, 20 timed
#             build/train_resnet --benchmark 1 --num-layers 20 --batch-size 128
#                 --num-batches 20 --disp-batches 5 --precision fp32
#             torch_ref.py throughput --model resnet20 --batch 128 --size 28
#   resnet50  ResNet-50, 224x224x3, batch 16: 3 warm-up steps, 6 timed
#             build/train_resnet --benchmark 1 --num-layers 50 --image-shape 3,224,224
#                 --batch-size 16 --num-batches 6 --disp-batches 2 --precision fp32
#             torch_ref.py throughput --model resnet50_224 --batch 16 --size 224
#                 --steps 6 --warmup 3
# ember's figure is its "Median speed" (median over the --disp-batches
# intervals), PyTorch's the rate over all its timed steps; both use 2 threads
# (torch_ref.py sets 2; ember takes every core, 2 on this project's machine).
#
# Each of ROUNDS rounds (default 3) runs ember, then PyTorch (ember A, ember
# B, PyTorch when EMBER_B is set), so that drift in the machine's speed falls
# on both. Prints each run's img/s and peak RSS (MB, the largest resident
# set of the process: GNU time's %M, or getrusage of the child where
# /usr/bin/time is missing), the medians, and the ratios ember / PyTorch of
# the median img/s and of the median RSS (and B / A with EMBER_B). The
# figures are ratios from one sitting: on a shared 2-core machine the
# absolute img/s move from one sitting to the next, the ratios much less.
#
# Environment:
#   ROUNDS       rounds (default 3)
#   BUILD        ember's build directory (default build), relative to the
#                repository root or absolute; $BUILD/train_resnet is timed
#   EMBER_FLAGS  added after ember's flags (the last value of a flag wins),
#                e.g. EMBER_FLAGS="--precision fp16"
#   EMBER_B      a second build directory: its train_resnet runs as "ember B"
#   EMBER_B_FLAGS  ember B's added flags (default: EMBER_FLAGS), so that
#                EMBER_B=build EMBER_B_FLAGS="--precision fp16" compares two
#                settings of one binary
#   TORCH_REF    PyTorch's side (default scripts/torch_ref.py;
#                scripts/torch_ref_bf16.py: the same under bf16 autocast);
#                TORCH_FLAGS is added to its flags
#   PYTHON       default /usr/bin/python3 (Debian's python3-torch)
#   WORK         logs of every run (default /tmp/ember_bench_vs_torch)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
rounds=${ROUNDS:-3}
build=${BUILD:-build}
torch_ref=${TORCH_REF:-$root/scripts/torch_ref.py}
python=${PYTHON:-/usr/bin/python3}
work=${WORK:-/tmp/ember_bench_vs_torch}
ember_flags=${EMBER_FLAGS:-}
ember_b_flags=${EMBER_B_FLAGS-$ember_flags}
torch_flags=${TORCH_FLAGS:-}
say() { echo "bench_vs_torch: $*" >&2; }

abs_dir() { case $1 in /*) echo "$1" ;; *) echo "$root/$1" ;; esac; }
ember_a=$(abs_dir "$build")/train_resnet
[ -x "$ember_a" ] || { say "$ember_a is missing: run make first"; exit 1; }
ember_b=
if [ -n "${EMBER_B:-}" ]; then
  ember_b=$(abs_dir "$EMBER_B")/train_resnet
  [ -x "$ember_b" ] || { say "$ember_b (EMBER_B) is missing: run make BUILD=$EMBER_B first"; exit 1; }
fi
[ -f "$torch_ref" ] || { say "$torch_ref is missing (set TORCH_REF)"; exit 1; }
"$python" -c 'import torch' 2>/dev/null || { say "$python has no torch: make torch-deps"; exit 1; }
[[ "$rounds" =~ ^[1-9][0-9]*$ ]] || { say "ROUNDS=$rounds: a positive count"; exit 1; }

workloads=("$@")
[ ${#workloads[@]} -gt 0 ] || workloads=(resnet20 resnet50)
for w in "${workloads[@]}"; do
  case $w in
    resnet20) ;;
    resnet50) "$python" -c 'import torchvision' 2>/dev/null || { say "$python has no torchvision (resnet50): make torch-deps"; exit 1; } ;;
    *) say "unknown workload '$w' (resnet20, resnet50)"; exit 1 ;;
  esac
done
mkdir -p "$work"

# measured, one_run, median, ratio
# shellcheck source=scripts/bench_common.sh
source "$root/scripts/bench_common.sh"

ember_pat='^Median speed: ([0-9.]+) samples\/sec.*'
torch_pat='.* train img\/s=([0-9.]+).*'
echo "bench_vs_torch: $(date '+%Y-%m-%d %H:%M'), $(nproc) cores, $(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -1), $rounds rounds"
for w in "${workloads[@]}"; do
  case $w in
    resnet20)
      eflags=(--benchmark 1 --num-layers 20 --batch-size 128 --num-batches 20 --disp-batches 5 --precision fp32)
      tflags=(throughput --model resnet20 --batch 128 --size 28) ;;
    resnet50)
      eflags=(--benchmark 1 --num-layers 50 --image-shape '3,224,224' --batch-size 16 --num-batches 6 --disp-batches 2 --precision fp32)
      tflags=(throughput --model resnet50_224 --batch 16 --size 224 --steps 6 --warmup 3) ;;
  esac
  # shellcheck disable=SC2206
  cmd_a=("$ember_a" "${eflags[@]}" $ember_flags)
  # shellcheck disable=SC2206
  cmd_b=("$ember_b" "${eflags[@]}" $ember_b_flags)
  # shellcheck disable=SC2206
  cmd_t=("$python" "$torch_ref" "${tflags[@]}" $torch_flags)
  names=(ember) ; [ -z "$ember_b" ] || names=("ember A" "ember B")
  echo
  echo "== $w"
  echo "   ${names[0]}: ${cmd_a[*]}"
  [ -z "$ember_b" ] || echo "   ember B: ${cmd_b[*]}"
  echo "   PyTorch: ${cmd_t[*]}"
  printf '%-6s %-8s %10s %12s\n' round program img/s "peak RSS MB"
  sa=() ra=() sb=() rb=() st=() rt=()
  for r in $(seq "$rounds"); do
    read -r s m < <(one_run "$w.$r.ember_a" "$ember_pat" "${cmd_a[@]}") || exit 1
    sa+=("$s") ra+=("$m"); printf '%-6s %-8s %10s %12s\n' "$r" "${names[0]}" "$s" "$m"
    if [ -n "$ember_b" ]; then
      read -r s m < <(one_run "$w.$r.ember_b" "$ember_pat" "${cmd_b[@]}") || exit 1
      sb+=("$s") rb+=("$m"); printf '%-6s %-8s %10s %12s\n' "$r" "ember B" "$s" "$m"
    fi
    read -r s m < <(one_run "$w.$r.torch" "$torch_pat" "${cmd_t[@]}") || exit 1
    st+=("$s") rt+=("$m"); printf '%-6s %-8s %10s %12s\n' "$r" PyTorch "$s" "$m"
  done
  msa=$(median "${sa[@]}") mra=$(median "${ra[@]}") mst=$(median "${st[@]}") mrt=$(median "${rt[@]}")
  printf '%-6s %-8s %10s %12s\n' median "${names[0]}" "$msa" "$mra"
  if [ -n "$ember_b" ]; then
    msb=$(median "${sb[@]}") mrb=$(median "${rb[@]}")
    printf '%-6s %-8s %10s %12s\n' median "ember B" "$msb" "$mrb"
  fi
  printf '%-6s %-8s %10s %12s\n' median PyTorch "$mst" "$mrt"
  echo "$w: ${names[0]} / PyTorch: img/s $(ratio "$msa" "$mst"), peak RSS $(ratio "$mra" "$mrt")"
  if [ -n "$ember_b" ]; then
    echo "$w: ember B / PyTorch: img/s $(ratio "$msb" "$mst"), peak RSS $(ratio "$mrb" "$mrt")"
    echo "$w: ember B / ember A: img/s $(ratio "$msb" "$msa"), peak RSS $(ratio "$mrb" "$mra")"
  fi
done
