# scripts/bench_common.sh — the helpers the side-by-side benchmark scripts
# share (scripts/bench_vs_torch.sh, scripts/bench_vs_refs.sh); sourced, not
# run. The sourcing script sets $work (where logs go) and defines say().
#
#   measured RSS_FILE LOG_FILE CMD...   runs CMD, its output to LOG_FILE, its
#                                       peak RSS (KiB) to RSS_FILE (GNU time's
#                                       %M, else getrusage of the child)
#   one_run NAME SED_PATTERN CMD...     runs CMD as $work/NAME.log; prints
#                                       "FIGURE RSS_MB" (FIGURE: the last match
#                                       of the pattern's group 1) or fails with
#                                       the log's tail
#   median V...                         the median (the mean of the middle two
#                                       for an even count)
#   ratio A B                           "A/Bx" to two decimals

if [ -x /usr/bin/time ]; then
  measured() { local rss=$1 log=$2; shift 2; /usr/bin/time -f %M -o "$rss" "$@" >"$log" 2>&1; }
else
  measured() {
    local rss=$1 log=$2; shift 2
    python3 -c 'import resource, subprocess, sys
rc = subprocess.call(sys.argv[2:])
open(sys.argv[1], "w").write("%d\n" % resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)
sys.exit(rc)' "$rss" "$@" >"$log" 2>&1
  }
fi

median() { printf '%s\n' "$@" | sort -g | awk '{a[NR]=$1} END {if (NR % 2) print a[(NR+1)/2]; else printf "%.2f\n", (a[NR/2]+a[NR/2+1])/2}'; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN {printf "%.2fx", a/b}'; }

one_run() {
  local name=$1 pattern=$2; shift 2
  local log=$work/$name.log rss=$work/$name.rss figure
  if ! measured "$rss" "$log" "$@"; then
    say "$name failed: $*"; tail -n 15 "$log" >&2; exit 1
  fi
  figure=$(sed -nE "s/$pattern/\1/p" "$log" | tail -n 1)
  [ -n "$figure" ] || { say "$name: no figure in $log"; tail -n 15 "$log" >&2; exit 1; }
  echo "$figure $(awk '/^[0-9]+$/ {v=$1} END {printf "%.0f", v/1024}' "$rss")"
}
