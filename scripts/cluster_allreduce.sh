#!/usr/bin/env bash
# scripts/cluster_allreduce.sh — all-reduce bandwidth across an emulated cluster:
# ember's build/bench_allreduce and/or torch.distributed's gloo
# (scripts/bench_allreduce_gloo.py), one rank per "host" of
# scripts/netns_cluster.sh (network namespaces, tbf-limited links). Run as root.
#
#   scripts/cluster_allreduce.sh [--ranks 2,4,8] [--rates 1gbit,10gbit] [--sizes 1,4,16,64,256]
#       [--impl ember|gloo|both] [--iters 10] [--dtype f32] [--timeout 600] [--burst B]
#       [--ember-args "--comm-segment-kb 256"] [--out results.md]
#   EMBER_BENCH=path/to/bench_allreduce overrides build/bench_allreduce.
#
# For each rate (1gbit, 10gbit, ... or none = unthrottled veths) and rank count P:
# `netns_cluster.sh up P --rate R`, rank i started in host i with RANK=i
# WORLD_SIZE=P MASTER_ADDR=10.231.0.1 MASTER_PORT=29500 and EMBER_SOCKET_IFNAME /
# GLOO_SOCKET_IFNAME = the host's interface (eth0), each under `timeout`; when a
# rank fails the others are killed at once. Rank 0's table (bytes, ms(med),
# algbw, busbw; both programs print the same format) becomes rows of a markdown
# table: rate, P, size MiB, impl, busbw GB/s, busbw as a fraction of the link
# rate (1gbit = 0.125e9 B/s, 10gbit = 1.25e9 B/s; a bandwidth-optimal all-reduce
# reaches ~0.96, TCP/IP's payload share; a few-MiB size can read above 1.0
# through tbf's burst, see netns_cluster.sh). Printed at the end, and appended to --out FILE if given. Per-rank logs go
# to a temporary folder that is kept (and named) when a run fails.
# The cluster is always torn down (trap EXIT). Exit status 1 if any run failed.
#
# Caveats: every rank shares this machine's cores (2 here), so at high rates or
# many ranks the CPU, not the emulated link, can be the limit (gloo, 2 ranks,
# 16 MiB: 1.07 GB/s busbw at 10gbit, 0.99 unthrottled); and veths add
# no propagation delay (see netns_cluster.sh), so small sizes look better than
# on a real network.
set -euo pipefail

here=$(cd "$(dirname "$0")/.." && pwd)
ncl=$here/scripts/netns_cluster.sh
prefix=ember-ar          # netns_cluster prefix: namespaces ember-ar-h0.., ember-ar-sw
master_port=29500

ranks=2,4,8 rates=1gbit,10gbit sizes=1,4,16,64,256 impl=both iters=10 dtype=f32
run_timeout=600 out="" burst_opt=() ember_args=

die() { echo "cluster_allreduce: $*" >&2; exit 1; }
usage() { sed -n '7,9p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2; }

while (( $# )); do
  case $1 in
    --ranks) ranks=${2:?}; shift 2 ;;
    --rates) rates=${2:?}; shift 2 ;;
    --sizes) sizes=${2:?}; shift 2 ;;
    --impl) impl=${2:?}; shift 2 ;;
    --iters) iters=${2:?}; shift 2 ;;
    --dtype) dtype=${2:?}; shift 2 ;;
    --timeout) run_timeout=${2:?}; shift 2 ;;
    --out) out=${2:?}; shift 2 ;;
    --burst) burst_opt=(--burst "${2:?}"); shift 2 ;;
    --ember-args) ember_args=${2:?}; shift 2 ;;
    -h|--help) usage ;;
    *) echo "cluster_allreduce: unknown argument '$1'" >&2; usage ;;
  esac
done

# ---- the two benchmark command lines (run from the repository root) ----------
# EMBER_CMD: ember's all-reduce benchmark. It reads RANK WORLD_SIZE MASTER_ADDR
# MASTER_PORT and EMBER_SOCKET_IFNAME and prints the table with a first line
# "# ember all-reduce: ...". Edit here if its flags change.
# shellcheck disable=SC2206  # --ember-args is split into words on purpose
EMBER_CMD=("${EMBER_BENCH:-$here/build/bench_allreduce}" --sizes "$sizes" --iters "$iters" --dtype "$dtype" $ember_args)
# (--dtype is passed to gloo only; add it here once ember's benchmark takes it.)
# GLOO_CMD: the torch.distributed/gloo reference (Debian's python3-torch).
GLOO_CMD=(/usr/bin/python3 "$here/scripts/bench_allreduce_gloo.py" --sizes "$sizes" --iters "$iters" --dtype "$dtype")
# -------------------------------------------------------------------------------

case $impl in
  ember) impls=(ember) ;;
  gloo) impls=(gloo) ;;
  both) impls=(ember gloo) ;;
  *) die "--impl must be ember, gloo or both" ;;
esac
[[ $ranks =~ ^[0-9]+(,[0-9]+)*$ ]] || die "bad --ranks '$ranks'"
[[ $sizes =~ ^[0-9.]+(,[0-9.]+)*$ ]] || die "bad --sizes '$sizes'"
[[ $iters =~ ^[1-9][0-9]*$ ]] || die "bad --iters '$iters'"
[[ $run_timeout =~ ^[1-9][0-9]*$ ]] || die "bad --timeout '$run_timeout'"
IFS=, read -ra rank_list <<<"$ranks"
IFS=, read -ra rate_list <<<"$rates"
for p in "${rank_list[@]}"; do (( 10#$p >= 1 && 10#$p <= 253 )) || die "bad rank count '$p' (1..253)"; done

for im in "${impls[@]}"; do
  case $im in
    ember) [[ -x ${EMBER_CMD[0]} ]] || die "${EMBER_CMD[0]} is not built (make), or use --impl gloo" ;;
    gloo) /usr/bin/python3 -c 'import torch.distributed as d; assert d.is_gloo_available()' 2>/dev/null \
            || die "/usr/bin/python3 cannot import torch.distributed with gloo (apt-get install python3-torch)" ;;
  esac
done
"$ncl" check >&2 || exit 1
host_if=$("$ncl" ifname)
master_addr=$("$ncl" addr 0)

link_bytes() {  # link_bytes RATE -> bytes/s, or "" for none
  local r=$1 num unit mult
  [[ $r == none ]] && { echo ""; return; }
  [[ $r =~ ^([0-9]+(\.[0-9]+)?)([kmgt]?)bit$ ]] || die "bad rate '$r' (e.g. 1gbit, 10gbit, none)"
  num=${BASH_REMATCH[1]} unit=${BASH_REMATCH[3]}
  case $unit in '') mult=1 ;; k) mult=1e3 ;; m) mult=1e6 ;; g) mult=1e9 ;; t) mult=1e12 ;; esac
  awk -v n="$num" -v m="$mult" 'BEGIN { printf "%.6g\n", n * m / 8 }'
}
for r in "${rate_list[@]}"; do link_bytes "$r" >/dev/null; done

logdir=$(mktemp -d /tmp/cluster_allreduce.XXXXXX)
keep_logs=0
rank_pids=()

# shellcheck disable=SC2317  # (called from the EXIT trap)
cleanup() {
  local pid
  for pid in "${rank_pids[@]}"; do kill -TERM "$pid" 2>/dev/null || true; done
  "$ncl" down --prefix "$prefix" 2>/dev/null || true   # kills what still runs in there
  for pid in "${rank_pids[@]}"; do wait "$pid" 2>/dev/null || true; done
  if (( keep_logs )); then
    echo "cluster_allreduce: logs kept in $logdir" >&2
  else
    rm -rf "$logdir"
  fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# run_one RATE P IMPL: one cluster, P ranks; appends rows to $logdir/rows.
# Returns 1 if a rank failed.
run_one() {
  local rate=$1 P=$2 im=$3 i rc failed=0 done_pid t0 link cmd=() tag="$1-P$2-$3"
  local -A rank_of=()
  echo "== rate $rate, $P ranks, $im" >&2
  # (set -e does not apply here: run_one is called as `run_one || status=1`)
  "$ncl" down --prefix "$prefix" || return 1
  "$ncl" up "$P" --rate "$rate" "${burst_opt[@]}" --prefix "$prefix" >&2 || return 1
  if [[ $im == ember ]]; then cmd=("${EMBER_CMD[@]}"); else cmd=("${GLOO_CMD[@]}"); fi
  t0=$SECONDS
  rank_pids=()
  for (( i = 0; i < P; i++ )); do
    timeout -k 10 "$run_timeout" "$ncl" exec --prefix "$prefix" "$i" \
      env RANK="$i" WORLD_SIZE="$P" MASTER_ADDR="$master_addr" MASTER_PORT="$master_port" \
          EMBER_SOCKET_IFNAME="$host_if" GLOO_SOCKET_IFNAME="$host_if" \
          "${cmd[@]}" >"$logdir/$tag.rank$i.log" 2>&1 &
    rank_pids+=($!)
    rank_of[$!]=$i
  done
  local pending=("${rank_pids[@]}")
  while (( ${#pending[@]} )); do
    rc=0
    wait -n -p done_pid "${pending[@]}" || rc=$?
    local rest=()
    for i in "${pending[@]}"; do [[ $i == "$done_pid" ]] || rest+=("$i"); done
    pending=("${rest[@]}")
    if (( rc != 0 )); then
      if (( rc == 124 || rc == 137 )); then
        echo "cluster_allreduce: rank ${rank_of[$done_pid]} timed out after ${run_timeout}s" >&2
      else
        echo "cluster_allreduce: rank ${rank_of[$done_pid]} failed (exit status $rc):" >&2
      fi
      tail -n 5 "$logdir/$tag.rank${rank_of[$done_pid]}.log" | sed 's/^/    /' >&2
      failed=1
      for i in "${pending[@]}"; do kill -TERM "$i" 2>/dev/null || true; done
      sleep 1
      for i in "${pending[@]}"; do kill -KILL "$i" 2>/dev/null || true; wait "$i" 2>/dev/null || true; done
      pending=()
    fi
  done
  rank_pids=()
  "$ncl" down --prefix "$prefix" || failed=1
  if (( failed )); then
    keep_logs=1
    # shellcheck disable=SC2016  # the backticks are markdown
    printf '| %s | %s | - | %s | FAILED (logs: `%s`) | - |\n' "$rate" "$P" "$im" "$logdir/$tag.rank*.log" >>"$logdir/rows"
    return 1
  fi
  sed 's/^/    /' "$logdir/$tag.rank0.log" >&2
  echo "   ($((SECONDS - t0)) s)" >&2
  link=$(link_bytes "$rate")
  awk -v rate="$rate" -v P="$P" -v im="$im" -v link="$link" '
    /^#/ || NF < 4 { next }
    $1 ~ /^[0-9]+$/ {
      frac = (link == "") ? "-" : sprintf("%.2f", $4 * 1e9 / link)
      printf "| %s | %d | %g | %s | %.3f | %s |\n", rate, P, $1 / 1048576, im, $4, frac
    }' "$logdir/$tag.rank0.log" >>"$logdir/rows"
  return 0
}

status=0
: >"$logdir/rows"
for rate in "${rate_list[@]}"; do
  for P in "${rank_list[@]}"; do
    for im in "${impls[@]}"; do
      run_one "$rate" "$((10#$P))" "$im" || status=1
    done
  done
done

{
  echo ""
  echo "All-reduce on an emulated cluster (netns + tbf, $(nproc) cores shared by all ranks), $dtype, $iters iterations (median), $(date -u '+%Y-%m-%d %H:%M UTC')"
  echo ""
  echo "| rate | P | size MiB | impl | busbw GB/s | fraction of link |"
  echo "| --- | --- | --- | --- | --- | --- |"
  cat "$logdir/rows"
} >"$logdir/table.md"
cat "$logdir/table.md"
[[ -z $out ]] || cat "$logdir/table.md" >>"$out"
exit "$status"
