#!/usr/bin/env bash
# scripts/tta_vs_torch.sh — time to a test accuracy (DAWNBench style): ember's
# train_resnet against PyTorch running the same Fashion-MNIST recipe
# (scripts/torch_recipe.py), in the same sitting.
#
#   RECIPE="--num-layers 20 --num-epochs 8 --lr 0.4 --moms 0.95,0.85" TARGET=0.93 \
#     ROUNDS=3 scripts/tta_vs_torch.sh
#
# Both programs get the same flags, in this order:
#   ember:   $EMBER --network resnet --dataset fashion-mnist --threads $THREADS
#              $RECIPE --target-accuracy $TARGET $EMBER_FLAGS
#   PyTorch: $PYTHON scripts/torch_recipe.py --network resnet --dataset fashion-mnist
#              --threads $THREADS $RECIPE --target-accuracy $TARGET $TORCH_FLAGS
# (the last value of a flag wins in both), so RECIPE may use only flags that
# both take: torch_recipe.py --help lists them (ember's names and defaults).
# Each stops at the first epoch whose validation accuracy reaches TARGET and
# prints "Time to TARGET: T s (E epochs)": wall time from the start of
# training through that epoch's evaluation, evaluations included. A run that
# ends without that line (it never reached the target, or it failed) is
# reported and counted as missing; the medians are over the runs that
# reached it. The script exits with status 1 when a run failed (not for a
# run that only missed the target).
#
# Each of ROUNDS rounds runs ember, then PyTorch, so that drift in the
# machine's speed falls on both. Prints each run's time to target, epochs and
# last validation accuracy, the median times and the ratio PyTorch / ember
# (ember's speed-up: above 1, ember reaches the target sooner). The runs are
# not bit-identical (different random numbers, see torch_recipe.py's header),
# so the epochs to target can differ between the two. With one --seed each
# program repeats its own accuracy curve every round (both did, exactly, on
# this project's CPU), so rounds then measure the spread of the times only;
# SEED_PER_ROUND=1 gives round r --seed r-1 in both, so that the medians also
# cover the seed's effect on the epochs to target.
#
# Environment:
#   RECIPE       flags for both (default: ember's defaults written out:
#                --num-layers 20 --batch-size 128 --num-epochs 10 --lr 0.2)
#   TARGET       test accuracy to reach (default 0.93; ember's defaults passed
#                it after 9 of 10 epochs in docs/runs/make_train.log)
#   ROUNDS       rounds (default 1)
#   SEED_PER_ROUND  1: round r adds --seed r-1 after RECIPE (default 0)
#   THREADS      --threads for both (default: every core, nproc; ember's
#                default 0 is every core, torch_recipe.py's is 2)
#   BUILD        ember's build directory (default build), relative to the
#                repository root or absolute
#   EMBER        ember's command instead of $BUILD/train_resnet (split into
#                words, e.g. EMBER="bash /tmp/fake_ember.sh" to test this
#                script)
#   EMBER_FLAGS  added after ember's flags only; TORCH_FLAGS after PyTorch's
#   TORCH_RECIPE PyTorch's side (default scripts/torch_recipe.py)
#   PYTHON       default /usr/bin/python3 (Debian's python3-torch)
#   WORK         logs of every run (default /tmp/ember_tta_vs_torch)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
recipe=${RECIPE:---num-layers 20 --batch-size 128 --num-epochs 10 --lr 0.2}
target=${TARGET:-0.93}
rounds=${ROUNDS:-1}
threads=${THREADS:-$(nproc)}
build=${BUILD:-build}
torch_recipe=${TORCH_RECIPE:-$root/scripts/torch_recipe.py}
python=${PYTHON:-/usr/bin/python3}
work=${WORK:-/tmp/ember_tta_vs_torch}
ember_flags=${EMBER_FLAGS:-}
torch_flags=${TORCH_FLAGS:-}
say() { echo "tta_vs_torch: $*" >&2; }

abs_dir() { case $1 in /*) echo "$1" ;; *) echo "$root/$1" ;; esac; }
if [ -n "${EMBER:-}" ]; then
  # shellcheck disable=SC2206
  ember=($EMBER)
else
  ember=("$(abs_dir "$build")/train_resnet")
  [ -x "${ember[0]}" ] || { say "${ember[0]} is missing: run make first (or set BUILD or EMBER)"; exit 1; }
fi
[ -f "$torch_recipe" ] || { say "$torch_recipe is missing (set TORCH_RECIPE)"; exit 1; }
"$python" -c 'import torch' 2>/dev/null || { say "$python has no torch: make torch-deps"; exit 1; }
[[ "$rounds" =~ ^[1-9][0-9]*$ ]] || { say "ROUNDS=$rounds: a positive count"; exit 1; }
seed_per_round=${SEED_PER_ROUND:-0}
[[ "$seed_per_round" =~ ^[01]$ ]] || { say "SEED_PER_ROUND=$seed_per_round: 0 or 1"; exit 1; }
[[ "$threads" =~ ^[0-9]+$ ]] || { say "THREADS=$threads: a count (0: every core)"; exit 1; }
awk -v t="$target" 'BEGIN {exit !(t + 0 > 0 && t + 0 <= 1)}' </dev/null || { say "TARGET=$target: an accuracy in (0, 1]"; exit 1; }
case " $recipe " in
  *" --target-accuracy"*) say "RECIPE has --target-accuracy: give it as TARGET"; exit 1 ;;
esac
mkdir -p "$work"

median() { printf '%s\n' "$@" | sort -g | awk '{a[NR]=$1} END {if (NR % 2) print a[(NR+1)/2]; else printf "%.1f\n", (a[NR/2]+a[NR/2+1])/2}'; }

# One run: "$@" with its output in $work/$1.log; prints "SECONDS EPOCHS ACCURACY",
# with "-" for the time and epochs when there is no "Time to" line, "failed" for
# the time when the program exited with an error.
one_run() {
  local name=$1; shift
  local log=$work/$name.log rc=0 line secs=- epochs=- acc
  "$@" >"$log" 2>&1 || rc=$?
  # "Time to 0.930: 812.5 s (8 epochs)"
  line=$(sed -nE 's/^Time to [0-9.]+: ([0-9.]+) s \(([0-9]+) epochs?\).*/\1 \2/p' "$log" | tail -n 1)
  [ -z "$line" ] || read -r secs epochs <<<"$line"
  acc=$(sed -nE 's/.*Validation-accuracy=([0-9.]+).*/\1/p' "$log" | tail -n 1)
  if [ "$rc" -ne 0 ]; then
    say "$name failed (exit $rc), counted as missing: $*"; tail -n 5 "$log" >&2
    secs=failed epochs=-
  elif [ "$secs" = - ]; then
    say "$name did not reach $target (last Validation-accuracy=${acc:-none}), counted as missing; log $log"
  fi
  echo "$secs $epochs ${acc:--}"
}

# shellcheck disable=SC2206
common=(--network resnet --dataset fashion-mnist --threads "$threads" $recipe --target-accuracy "$target")
# shellcheck disable=SC2206
cmd_e=("${ember[@]}" "${common[@]}" $ember_flags)
# shellcheck disable=SC2206
cmd_t=("$python" "$torch_recipe" "${common[@]}" $torch_flags)
echo "tta_vs_torch: $(date '+%Y-%m-%d %H:%M'), $(nproc) cores, $(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -1), $rounds rounds, target $target"
echo "   ember:   ${cmd_e[*]}"
echo "   PyTorch: ${cmd_t[*]}"
[ "$seed_per_round" = 0 ] || echo "   round r: --seed r-1 added to both"
printf '%-6s %-8s %16s %7s %10s\n' round program "time to target" epochs "last acc"
# "12.5 s", or "missing" / "failed" as they are
shown() { case $1 in -) echo missing ;; failed) echo failed ;; *) echo "$1 s" ;; esac; }
te=() tt=() missing_e=0 missing_t=0 failed=0
for r in $(seq "$rounds"); do
  seed=(); [ "$seed_per_round" = 0 ] || seed=(--seed $((r - 1)))
  read -r s e a < <(one_run "$r.ember" "${cmd_e[@]}" "${seed[@]}")
  printf '%-6s %-8s %16s %7s %10s\n' "$r" ember "$(shown "$s")" "$e" "$a"
  [ "$s" != failed ] || failed=$((failed + 1))
  case $s in -|failed) missing_e=$((missing_e + 1)) ;; *) te+=("$s") ;; esac
  read -r s e a < <(one_run "$r.torch" "${cmd_t[@]}" "${seed[@]}")
  printf '%-6s %-8s %16s %7s %10s\n' "$r" PyTorch "$(shown "$s")" "$e" "$a"
  [ "$s" != failed ] || failed=$((failed + 1))
  case $s in -|failed) missing_t=$((missing_t + 1)) ;; *) tt+=("$s") ;; esac
done
me=- mt=-
[ ${#te[@]} -eq 0 ] || me=$(median "${te[@]}")
[ ${#tt[@]} -eq 0 ] || mt=$(median "${tt[@]}")
printf '%-6s %-8s %16s   (%d of %d runs reached %s)\n' median ember "$([ "$me" = - ] && echo none || echo "$me s")" \
  "${#te[@]}" "$rounds" "$target"
printf '%-6s %-8s %16s   (%d of %d runs reached %s)\n' median PyTorch "$([ "$mt" = - ] && echo none || echo "$mt s")" \
  "${#tt[@]}" "$rounds" "$target"
if [ "$me" = - ] || [ "$mt" = - ]; then
  echo "time to $target: PyTorch / ember: no ratio ($([ "$me" = - ] && echo "ember" || echo "PyTorch") never reached the target)"
else
  echo "time to $target: PyTorch / ember = $(awk -v a="$mt" -v b="$me" 'BEGIN {printf "%.2fx", a/b}') (ember's speed-up; missing runs: ember $missing_e, PyTorch $missing_t)"
fi
if [ "$failed" -gt 0 ]; then
  say "$failed run(s) failed: see their logs in $work"; exit 1
fi
