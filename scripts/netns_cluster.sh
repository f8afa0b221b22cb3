#!/usr/bin/env bash
# scripts/netns_cluster.sh — an emulated cluster of H "hosts" on this one machine,
# built from Linux network namespaces, for testing and benchmarking ember's
# distributed code (net/dist/, build/bench_allreduce) without real machines.
# scripts/cluster_allreduce.sh drives it; run it as root.
#
#   scripts/netns_cluster.sh up H [--rate 1gbit|10gbit|none] [--latency 50ms] [--burst B] [--prefix ember]
#   scripts/netns_cluster.sh down [--prefix ember]
#   scripts/netns_cluster.sh exec [--prefix ember] I CMD [ARGS...]
#   scripts/netns_cluster.sh addr I       # prints host I's address, 10.231.0.(I+1)
#   scripts/netns_cluster.sh ifname       # prints the hosts' interface name (eth0)
#   scripts/netns_cluster.sh check        # exit 0 if namespaces can be made here
#
# Topology: namespaces PREFIX-h0 .. PREFIX-h{H-1} (the hosts) and PREFIX-sw (the
# switch). Each host has `lo` up and one veth, named eth0 in every host, with
# address 10.231.0.(i+1)/24; its peer, named hI, is a port of bridge br0 in the
# switch namespace (a bridge even for H=2: one code path).
#
# --rate R puts a token-bucket filter (tc tbf) on both ends of every host's veth:
# on eth0's egress inside the host (host -> switch) and on hI's egress inside the
# switch (switch -> host), so each host has a full-duplex link of rate R each way,
# like a port on a real switch. --rate none (the default) leaves the veths
# unthrottled (one TCP stream then runs at several GB/s, bounded by the CPU).
# --burst B overrides the bucket size (bytes, or tc units: 256kb = 256 KiB)
# chosen by burst_for below. A full bucket lets B bytes through at veth speed,
# so transfers not much larger than B (per link, per operation) measure above
# the rate (the bucket refills while the ranks sit in a barrier between calls):
# a 1 MiB gloo all-reduce over 4 ranks at 1gbit reads busbw 0.96-1.18x the
# link rate (noisy, with 256 KiB or 500 kB bursts); 4 MiB and up read 0.95-0.98x.
#
# --latency L is tbf's *queueing* latency limit: how long a packet may wait in
# the bucket's queue before it is dropped (it sets the queue length). It is NOT a
# propagation delay. Real delay (and loss) would need the netem qdisc, which this
# kernel lacks, so link latency cannot be emulated here: a veth hop costs only
# the kernel's packet handling (a 1-byte TCP ping-pong between two hosts from
# python: 20-50 us round trip, the same as over loopback), less than a real
# network's switch and NIC latency, and nothing like a WAN's milliseconds.
# Results from this cluster therefore show bandwidth effects, not latency ones.
#
# `up` refuses to build over an existing cluster with the same prefix; if a step
# fails it tears down what it built. `down` kills any processes still running in
# the cluster's namespaces, deletes them (the veths and bridge go with them) and
# succeeds if there is nothing to remove.
set -euo pipefail

me=netns_cluster
die() { echo "$me: $*" >&2; exit 1; }
usage() { sed -n '7,12p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2; }

subnet=10.231.0
host_if=eth0
prefix=ember

need_root() {
  command -v ip >/dev/null 2>&1 || die "the 'ip' command (iproute2) is not installed"
  [[ $(id -u) -eq 0 ]] || die "must run as root (network namespaces need CAP_SYS_ADMIN)"
}

check_index() {  # check_index I [H]: I is a host index (0..252)
  if ! [[ $1 =~ ^[0-9]+$ ]] || (( 10#$1 > 252 )); then die "bad host index '$1' (0..252)"; fi
}

# Token-bucket burst for a rate. The bucket must hold at least one maximal
# (GSO/TSO, 64 KiB) packet plus enough tokens to cover late timer wake-ups of
# the qdisc watchdog; too small a burst caps throughput below the rate, worst
# when the 2 cores are busy. Measured on this machine, one TCP stream, 5 s
# (iperf3 and a python socket loop agree), goodput in MB/s (1e6 B):
#   1gbit : 64kb 109, 128kb..1mb 120 (= 95.7% of 125; the ceiling, as tbf
#           counts Ethernet frames: 1448 payload bytes per 1514)
#   10gbit: 256kb 780-860, 1mb 870-920, 2mb 980-1194 (1194 on an idle machine,
#           ~980 while another job ran), 4mb+ 1141-1196 (= 95.7% of 1250)
#   unthrottled: 2000-3900 (CPU bound, varies with load)
# A full bucket also lets a burst through at veth speed (see --burst above), so
# the burst should be no larger than needed. Rule: 2 ms worth of tokens
# (rate/500 bytes), at least 256 KiB: 1gbit -> 256 KiB (256kb: 120 MB/s),
# 10gbit -> 2.5 MB (1190-1196 MB/s when the machine is otherwise idle).
burst_for() {  # burst_for BITS_PER_SECOND -> bytes
  local b=$(( $1 / 8 / 500 ))
  (( b < 262144 )) && b=262144
  echo "$b"
}

rate_bits() {  # rate_bits 1gbit -> 1000000000 (tc's decimal units)
  local r=$1 num unit mult
  [[ $r =~ ^([0-9]+)(\.[0-9]+)?([kmgt]?)(bit|bps)$ ]] || die "bad rate '$r' (e.g. 100mbit, 1gbit, 10gbit, none)"
  num=${BASH_REMATCH[1]}${BASH_REMATCH[2]}
  unit=${BASH_REMATCH[3]}
  case $unit in '') mult=1 ;; k) mult=1000 ;; m) mult=1000000 ;; g) mult=1000000000 ;; t) mult=1000000000000 ;; esac
  [[ ${BASH_REMATCH[4]} == bps ]] && mult=$(( mult * 8 ))  # tc: bps = bytes per second
  awk -v n="$num" -v m="$mult" 'BEGIN { printf "%.0f\n", n * m }'
}

our_namespaces() {  # the namespaces of cluster $prefix that exist
  ip netns list 2>/dev/null | awk '{print $1}' | grep -E "^${prefix}-(h[0-9]+|sw)\$" || true
}

teardown() {
  local ns pids
  for ns in $(our_namespaces); do
    pids=$(ip netns pids "$ns" 2>/dev/null || true)
    if [[ -n $pids ]]; then
      # shellcheck disable=SC2086
      kill -TERM $pids 2>/dev/null || true
      sleep 0.5
      pids=$(ip netns pids "$ns" 2>/dev/null || true)
      # shellcheck disable=SC2086
      [[ -z $pids ]] || kill -KILL $pids 2>/dev/null || true
    fi
    ip netns delete "$ns" 2>/dev/null || true
  done
}

# must CMD...: run a build step; on failure print one line, undo the half-built
# cluster and exit 1.
must() {
  local err
  if ! err=$("$@" 2>&1); then
    echo "$me: '$*' failed: ${err%%$'\n'*}" >&2
    teardown
    exit 1
  fi
}

cmd_up() {
  local hosts=$1 rate=$2 latency=$3 burst=$4 bits="" sw="$prefix-sw" i h
  if ! [[ $hosts =~ ^[0-9]+$ ]] || (( 10#$hosts < 1 || 10#$hosts > 253 )); then
    die "bad host count '$hosts' (1..253)"
  fi
  hosts=$((10#$hosts))
  [[ $rate == none ]] || bits=$(rate_bits "$rate")
  [[ -n $bits && -z $burst ]] && burst=$(burst_for "$bits")
  [[ -z $burst || $burst =~ ^[0-9]+(\.[0-9]+)?([kmg]b?|b)?$ ]] || die "bad burst '$burst' (bytes, e.g. 262144, 256kb, 4mb)"
  [[ $latency =~ ^[0-9]+(\.[0-9]+)?(s|ms|us)$ ]] || die "bad latency '$latency' (e.g. 50ms)"
  [[ -z $(our_namespaces) ]] || die "a cluster with prefix '$prefix' exists; run '$0 down --prefix $prefix' first"
  (( ${#prefix} <= 40 )) || die "prefix too long"

  must ip netns add "$sw"
  must ip -n "$sw" link set lo up
  must ip -n "$sw" link add br0 type bridge forward_delay 0 stp_state 0
  must ip -n "$sw" link set br0 up
  for (( i = 0; i < hosts; i++ )); do
    h="$prefix-h$i"
    must ip netns add "$h"
    must ip -n "$h" link set lo up
    must ip -n "$h" link add "$host_if" type veth peer name "h$i" netns "$sw"
    must ip -n "$h" addr add "$subnet.$((i + 1))/24" dev "$host_if"
    must ip -n "$sw" link set "h$i" master br0
    must ip -n "$sw" link set "h$i" up
    must ip -n "$h" link set "$host_if" up
    if [[ -n $bits ]]; then
      must ip netns exec "$h" tc qdisc add dev "$host_if" root tbf rate "$bits"bit burst "$burst" latency "$latency"
      must ip netns exec "$sw" tc qdisc add dev "h$i" root tbf rate "$bits"bit burst "$burst" latency "$latency"
    fi
  done
  if [[ $rate == none ]]; then
    echo "$me: up: $hosts hosts $prefix-h0..h$((hosts - 1)), $subnet.1-$((hosts)), unthrottled"
  else
    echo "$me: up: $hosts hosts $prefix-h0..h$((hosts - 1)), $subnet.1-$((hosts)), tbf $rate each way (burst $burst, latency limit $latency)"
  fi
}

cmd_check() {
  local ns="$prefix-check-$$" err
  command -v ip >/dev/null 2>&1 || { echo "$me: the 'ip' command (iproute2) is not installed"; exit 1; }
  [[ $(id -u) -eq 0 ]] || { echo "$me: not root (network namespaces need CAP_SYS_ADMIN)"; exit 1; }
  if ! err=$(ip netns add "$ns" 2>&1); then
    echo "$me: cannot create a network namespace: ${err%%$'\n'*}"; exit 1
  fi
  if ! err=$(ip -n "$ns" link add v0 type veth peer name v1 2>&1); then
    ip netns delete "$ns" 2>/dev/null || true
    echo "$me: cannot create a veth pair: ${err%%$'\n'*}"; exit 1
  fi
  if ! err=$(ip netns exec "$ns" tc qdisc add dev v0 root tbf rate 1gbit burst 256kb latency 50ms 2>&1); then
    ip netns delete "$ns" 2>/dev/null || true
    echo "$me: cannot add a tbf qdisc (tc): ${err%%$'\n'*}"; exit 1
  fi
  ip netns delete "$ns" 2>/dev/null || true
}

(( $# >= 1 )) || usage
cmd=$1; shift
case $cmd in
  up)
    hosts="" rate=none latency=50ms burst=""
    while (( $# )); do
      case $1 in
        --rate) rate=${2:?--rate needs a value}; shift 2 ;;
        --latency) latency=${2:?--latency needs a value}; shift 2 ;;
        --burst) burst=${2:?--burst needs a value}; shift 2 ;;
        --prefix) prefix=${2:?--prefix needs a value}; shift 2 ;;
        -*) die "up: unknown option '$1'" ;;
        *) [[ -z $hosts ]] || die "up: unexpected argument '$1'"; hosts=$1; shift ;;
      esac
    done
    [[ -n $hosts ]] || usage
    need_root
    cmd_up "$hosts" "$rate" "$latency" "$burst"
    ;;
  down)
    while (( $# )); do
      case $1 in
        --prefix) prefix=${2:?--prefix needs a value}; shift 2 ;;
        *) die "down: unexpected argument '$1'" ;;
      esac
    done
    need_root
    teardown
    ;;
  exec)
    [[ ${1:-} == --prefix ]] && { prefix=${2:?--prefix needs a value}; shift 2; }
    (( $# >= 2 )) || usage
    check_index "$1"
    i=$((10#$1)); shift
    need_root
    ip netns list | awk '{print $1}' | grep -qx "$prefix-h$i" || die "no host $prefix-h$i (run '$0 up' first)"
    exec ip netns exec "$prefix-h$i" "$@"
    ;;
  addr)
    (( $# == 1 )) || usage
    check_index "$1"
    echo "$subnet.$((10#$1 + 1))"
    ;;
  ifname)
    echo "$host_if"
    ;;
  check)
    [[ ${1:-} == --prefix ]] && prefix=${2:?--prefix needs a value}
    cmd_check
    ;;
  -h|--help|help) usage ;;
  *) die "unknown command '$cmd' (up, down, exec, addr, ifname, check)" ;;
esac
