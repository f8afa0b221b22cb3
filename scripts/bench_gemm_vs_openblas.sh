#!/usr/bin/env bash
# scripts/bench_gemm_vs_openblas.sh — ember's f32 GEMM against OpenBLAS's
# sgemm in one sitting, alternating, with medians and ratios.
#
#   scripts/bench_gemm_vs_openblas.sh [N ...]        (default: 1024 2048)
#
# Each of ROUNDS rounds (default 5) runs build/bench_gemm on the square
# problems N x N x N (median of 5 calls each), then OpenBLAS on the same
# problems (the program scripts/bench_gemm_openblas.sh builds: median of
# its repetitions), so that drift in a shared machine's speed falls on both.
# OpenBLAS runs its AVX-512 kernels (OPENBLAS_CORETYPE=SkylakeX) on CPUs with
# avx512f: Debian's 0.3.21 does not recognise Zen 4/5 or every Sapphire
# Rapids guest and would otherwise fall back to older kernels (CORETYPE
# overrides; "auto" leaves the choice to OpenBLAS). Both use THREADS threads
# (default 2). Prints every run, the medians and ember / OpenBLAS per size.
# The first run of bench_gemm_openblas.sh installs libopenblas-dev if it is
# missing; OpenBLAS is never linked into ember.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
rounds=${ROUNDS:-5}
threads=${THREADS:-2}
sizes=("$@")
[ ${#sizes[@]} -gt 0 ] || sizes=(1024 2048)
if [ -n "${CORETYPE:-}" ]; then
  core=$CORETYPE
elif grep -qw avx512f /proc/cpuinfo; then
  core=SkylakeX
else
  core=auto
fi
say() { echo "bench_gemm_vs_openblas: $*" >&2; }

ember=$root/build/bench_gemm
[ -x "$ember" ] || { say "$ember is missing: run make first"; exit 1; }
openblas=/tmp/bench_gemm_openblas
# Builds (and on a fresh machine installs) the OpenBLAS side; its own run is a warm-up.
CORETYPES=$core THREADS=$threads "$root/scripts/bench_gemm_openblas.sh" "${sizes[0]}" >/dev/null
[ -x "$openblas" ] || { say "$openblas was not built"; exit 1; }

shapes=$(printf '%sx%sx%s,' $(for n in "${sizes[@]}"; do echo "$n $n $n"; done))
shapes=${shapes%,}
say "$(date '+%Y-%m-%d %H:%M'), $(nproc) cores, $(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -1), $threads threads, $rounds rounds, OpenBLAS core $core"

declare -A runs=()
printf '%-6s %-9s' round program
for n in "${sizes[@]}"; do printf ' %9s' "n=$n"; done
echo "   (GFLOP/s)"
for r in $(seq "$rounds"); do
  # ember: "M x N x K  ms  GFLOP/s  of-peak  what" per problem
  mapfile -t e < <("$ember" --threads "$threads" --shapes "$shapes" --reps 5 | awk '$1 ~ /^[0-9]+$/ && $2 == "x" {print $7}')
  if [ "$core" = auto ]; then
    mapfile -t o < <(OPENBLAS_NUM_THREADS=$threads "$openblas" "${sizes[@]}" 2>/dev/null | awk '/^sgemm/ {print $NF}')
  else
    mapfile -t o < <(OPENBLAS_NUM_THREADS=$threads OPENBLAS_CORETYPE=$core "$openblas" "${sizes[@]}" 2>/dev/null |
                     awk '/^sgemm/ {print $NF}')
  fi
  [ ${#e[@]} -eq ${#sizes[@]} ] && [ ${#o[@]} -eq ${#sizes[@]} ] || { say "round $r: a run printed no figures"; exit 1; }
  printf '%-6s %-9s' "$r" ember; printf ' %9s' "${e[@]}"; echo
  printf '%-6s %-9s' "$r" OpenBLAS; printf ' %9s' "${o[@]}"; echo
  for i in "${!sizes[@]}"; do
    runs[e$i]+="${e[$i]} "
    runs[o$i]+="${o[$i]} "
  done
done

median() { tr ' ' '\n' | sed '/^$/d' | sort -g | awk '{v[NR] = $1} END {print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2}'; }
for i in "${!sizes[@]}"; do
  me=$(echo "${runs[e$i]}" | median) mo=$(echo "${runs[o$i]}" | median)
  echo "n=${sizes[$i]}: median ember $me, OpenBLAS $mo GFLOP/s: ember / OpenBLAS $(awk -v a="$me" -v b="$mo" 'BEGIN {printf "%.2fx", a / b}')"
done
