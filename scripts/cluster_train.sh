#!/usr/bin/env bash
# scripts/cluster_train.sh — data-parallel training throughput across an
# emulated cluster (scripts/netns_cluster.sh: one network namespace per
# host, tbf-limited links): build/train_resnet --benchmark 1 with one rank per
# host, against one rank alone, and how much of the all-reduce was hidden
# behind backward. Run as root.
#
#   scripts/cluster_train.sh [--ranks 1,2,4] [--rate 1gbit] [--runs 3] [--out FILE] -- TRAIN_ARGS...
#   scripts/cluster_train.sh --ranks 1,2 --rate 1gbit -- --num-layers 50 --image-shape 3,112,112 --batch-size 8 --threads 1
#
# For each rank count P (1 = a single process, no cluster) and run:
#  * compute only: P independent single processes at once (no communication,
#    the same share of the CPU each as a rank gets), their img/s per process;
#  * data-parallel: rank 0's "Median speed" (img/s, all ranks together), its
#    per-rank share, the all-reduce time per step as the communication thread
#    saw it (including waits for slower ranks), the part the optimizer waited
#    for (exposed) and the hidden share, from the lines train_resnet prints;
#  * the step time of each, per rank (batch / img/s per rank), and their
#    difference: what communication added to the step.
# A markdown table goes to stdout (and is appended to --out). TRAIN_ARGS are
# train_resnet's benchmark flags and must include --batch-size (the script
# adds --benchmark 1).
# EMBER_TRAIN=path overrides build/train_resnet.
set -euo pipefail

here=$(cd "$(dirname "$0")/.." && pwd)
ncl=$here/scripts/netns_cluster.sh
train=${EMBER_TRAIN:-$here/build/train_resnet}
prefix=ember-tr
ranks=1,2,4 rate=1gbit runs=3 out=""

die() { echo "cluster_train: $*" >&2; exit 1; }
while (( $# )); do
  case $1 in
    --ranks) ranks=${2:?}; shift 2 ;;
    --rate) rate=${2:?}; shift 2 ;;
    --runs) runs=${2:?}; shift 2 ;;
    --out) out=${2:?}; shift 2 ;;
    --) shift; break ;;
    *) die "unknown argument '$1' (train_resnet's flags go after --)" ;;
  esac
done
args=("$@")
[[ -x $train ]] || die "$train is not built (make)"
[[ $(id -u) == 0 ]] || die "needs root (network namespaces)"

logs=$(mktemp -d /tmp/cluster_train.XXXXXX)
cleanup() { bash "$ncl" down --prefix "$prefix" >/dev/null 2>&1 || true; }
trap cleanup EXIT

# Prints "speed exposed_ms comm_ms hidden%" from a rank-0 log.
summarise() {
  local log=$1 speed comm exposed hidden
  speed=$(sed -n 's/^Median speed: \([0-9.]*\) samples\/sec.*/\1/p' "$log")
  comm=$(sed -n 's/^All-reduce: \([0-9.]*\) ms per step.*/\1/p' "$log")
  exposed=$(sed -n 's/^All-reduce: .* ms per step, \([0-9.]*\) ms of it exposed.*/\1/p' "$log")
  hidden=$(sed -n 's/^All-reduce: .*(\([0-9]*\)% hidden.*/\1/p' "$log")
  echo "${speed:-?} ${comm:--} ${exposed:--} ${hidden:--}"
}

batch=""
for (( i = 0; i < ${#args[@]}; ++i )); do [[ ${args[$i]} == --batch-size ]] && batch=${args[$((i + 1))]}; done
[[ -n $batch ]] || die "give --batch-size among train_resnet's flags"

table="| rate | ranks | run | compute-only img/s per process | data-parallel img/s (all ranks) | img/s per rank | step ms compute-only | step ms data-parallel | added ms | all-reduce ms/step | exposed ms/step | hidden |
| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"
IFS=, read -r -a rank_list <<<"$ranks"
for P in "${rank_list[@]}"; do
  if (( P > 1 )); then
    cleanup
    bash "$ncl" up "$P" --rate "$rate" --prefix "$prefix" >/dev/null || die "netns_cluster.sh up $P failed"
  fi
  for (( run = 1; run <= runs; ++run )); do
    # Compute only: P single processes side by side.
    pids=()
    for (( r = 0; r < P; ++r )); do
      timeout 1800 "$train" --benchmark 1 "${args[@]}" >"$logs/c$P-$run-r$r.log" 2>&1 &
      pids+=($!)
    done
    for pid in "${pids[@]}"; do wait "$pid" || die "a compute-only run failed: see $logs/c$P-$run-r*.log"; done
    compute=$(for (( r = 0; r < P; ++r )); do summarise "$logs/c$P-$run-r$r.log" | cut -d' ' -f1; done | sort -g |
              awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }')
    pids=()
    if (( P == 1 )); then
      timeout 1800 "$train" --benchmark 1 "${args[@]}" >"$logs/p1-$run-r0.log" 2>&1 || die "single run failed: $logs/p1-$run-r0.log"
    else
      master=$(bash "$ncl" addr 0)
      for (( r = 0; r < P; ++r )); do
        bash "$ncl" exec --prefix "$prefix" "$r" env RANK=$r WORLD_SIZE="$P" LOCAL_RANK=0 MASTER_ADDR="$master" \
          MASTER_PORT=29500 EMBER_RUN_ID="cluster-train-$P-$run" EMBER_SOCKET_IFNAME=eth0 \
          timeout 1800 "$train" --benchmark 1 "${args[@]}" >"$logs/p$P-$run-r$r.log" 2>&1 &
        pids+=($!)
      done
      for pid in "${pids[@]}"; do wait "$pid" || die "a rank failed: see $logs/p$P-$run-r*.log"; done
    fi
    read -r speed comm exposed hidden < <(summarise "$logs/p$P-$run-r0.log")
    per_rank=$(awk -v s="$speed" -v p="$P" 'BEGIN { printf "%.2f", s / p }')
    read -r step_c step_dp added < <(awk -v c="$compute" -v s="$per_rank" -v b="$batch" \
      'BEGIN { printf "%.0f %.0f %.0f\n", 1e3 * b / c, 1e3 * b / s, 1e3 * b / s - 1e3 * b / c }')
    row="| $( ((P > 1)) && echo "$rate" || echo "-") | $P | $run | $compute | $speed | $per_rank | $step_c | $step_dp | $added | $comm | $exposed | ${hidden}$([[ $hidden == - ]] || echo %) |"
    echo "$row" >&2
    table+=$'\n'"$row"
  done
done
echo "$table"
[[ -z $out ]] || echo "$table" >>"$out"
rm -rf "$logs"
