#!/usr/bin/env bash
# tests/fuzz/run_fuzz.sh — runs the libFuzzer targets (tests/fuzz/fuzz_*.cpp,
# built by `make fuzz-build` into build-fuzz/) and reports one line each:
#
#   fuzz_json              ok      12.3M execs  cov: 812 ft: 2301  (15 s)
#   fuzz: 9 targets, 9 passed, 0 failed
#
# usage: tests/fuzz/run_fuzz.sh [--build DIR] [--seconds N] [--jobs J] [TARGET...]
#   (default: build-fuzz, 15 s, 2 at a time, every target)
#
# Each target runs against its committed corpus tests/fuzz/corpus/<target>
# (plus tests/fuzz/seeds/safetensors for the safetensors and .states targets)
# read-only; what it discovers goes to DIR/corpus/<target> (kept between runs,
# never committed). Flags: -max_total_time=N, -timeout=1 (an input that takes
# over a second is a hang), -rss_limit_mb=2048 (also the malloc limit),
# -dict=tests/fuzz/<target>.dict when present. A crash, leak, hang, OOM or
# sanitizer report fails the target; its input is copied to
# tests/fuzz/crashes/<target>/ and the command that reproduces it printed.
# The log of each run is DIR/logs/<target>.log. Exit status: 0 when all passed.
# Under tests/run_tests.sh (EMBER_TEST_RESULTS set) each target also counts
# as one test case, "fuzz: <target>".
set -u
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
build=build-fuzz
seconds=15
jobs=2
targets=()
while [ $# -gt 0 ]; do
  case "$1" in
    --build) build=$2; shift 2 ;;
    --seconds) seconds=$2; shift 2 ;;
    --jobs) jobs=$2; shift 2 ;;
    -h|--help) sed -n '2,20p' "$0"; exit 0 ;;
    *) targets+=("$1"); shift ;;
  esac
done
cd "$root" || exit 1
if [ ${#targets[@]} -eq 0 ]; then
  for f in tests/fuzz/fuzz_*.cpp; do targets+=("$(basename "$f" .cpp)"); done
fi
mkdir -p "$build/logs"

# Extra read-only seed folders of a target.
extra_seeds() {
  case "$1" in
    fuzz_safetensors|fuzz_states) echo tests/fuzz/seeds/safetensors ;;
  esac
}

run_one() {
  local t=$1 bin="$build/$1" log="$build/logs/$1.log" work="$build/corpus/$1"
  local artifacts="tests/fuzz/crashes/$t/"
  mkdir -p "$work" "$artifacts" "tests/fuzz/corpus/$t"
  local args=(-max_total_time="$seconds" -timeout=1 -rss_limit_mb=2048 -print_final_stats=1
              -artifact_prefix="$artifacts")
  [ -f "tests/fuzz/$t.dict" ] && args+=(-dict="tests/fuzz/$t.dict")
  # libFuzzer's own -max_total_time ends the run; the outer timeout only
  # catches a target stuck outside an input (it would not end by itself).
  timeout -k 10 $((seconds + 60)) "$bin" "${args[@]}" "$work" "tests/fuzz/corpus/$t" $(extra_seeds "$t") >"$log" 2>&1
  echo $? >"$log.rc"
}

# Runs the targets, `jobs` at a time.
running=0
for t in "${targets[@]}"; do
  if [ ! -x "$build/$t" ]; then
    echo "missing" >"$build/logs/$t.log"; echo 127 >"$build/logs/$t.log.rc"; continue
  fi
  run_one "$t" &
  running=$((running + 1))
  if [ "$running" -ge "$jobs" ]; then wait -n; running=$((running - 1)); fi
done
wait

passed=0 failed=0
for t in "${targets[@]}"; do
  log="$build/logs/$t.log"
  rc=$(cat "$log.rc" 2>/dev/null || echo 1)
  # The last status line: "#123456 DONE cov: 812 ft: 2301 corp: ..." (or pulse/NEW lines).
  last=$(grep -E '^#[0-9]+' "$log" | tail -1)
  execs=$(grep -oE 'stat::number_of_executed_units: *[0-9]+' "$log" | grep -oE '[0-9]+$' | tail -1)
  [ -z "$execs" ] && execs=$(echo "$last" | grep -oE '^#[0-9]+' | tr -d '#')
  cov=$(echo "$last" | grep -oE 'cov: [0-9]+' | tail -1)
  ft=$(echo "$last" | grep -oE 'ft: [0-9]+' | tail -1)
  if [ "$rc" = 0 ]; then
    result=ok; passed=$((passed + 1))
  else
    failed=$((failed + 1))
    if [ "$rc" = 127 ] && grep -q '^missing$' "$log"; then
      result="FAILED (not built: make fuzz-build)"
    else
      what=$(grep -m1 -oE 'ERROR: (libFuzzer|AddressSanitizer|LeakSanitizer|UndefinedBehaviorSanitizer): [a-zA-Z0-9_-]+( [a-z-]+)?|runtime error: .*|FUZZ PROPERTY VIOLATED: .{0,80}|terminate called .*' "$log")
      result="FAILED (${what:-exit $rc}; log $log)"
    fi
  fi
  printf '%-22s %-6s %12s execs  %-9s %-9s (%s s)\n' "$t" "${result%% *}" "${execs:-0}" "${cov:-cov: ?}" \
    "${ft:-ft: ?}" "$seconds"
  if [ "$result" != ok ]; then
    echo "    $result"
    for a in $(grep -oE "tests/fuzz/crashes/$t/[a-z-]+-[0-9a-f]+" "$log" | sort -u); do
      echo "    input saved: $a"
      echo "    reproduce:   $build/$t -timeout=1 -rss_limit_mb=2048 $a"
    done
  fi
done
# Scratch folders of processes that died (a crash skips their atexit).
for d in /dev/shm/ember-fuzz-* "${TMPDIR:-/tmp}"/ember-fuzz-*; do
  [ -d "$d" ] || continue
  pid=${d##*-}
  kill -0 "$pid" 2>/dev/null || rm -rf "$d"
done
echo "fuzz: ${#targets[@]} targets, $passed passed, $failed failed"
# Inside tests/run_tests.sh (EMBER_TEST_RESULTS set): each target is one test
# case "fuzz: <target>" of the closing count, and the summary line takes the
# form run_tests.sh checks a suite's own count against.
if [ -n "${EMBER_TEST_RESULTS:-}" ]; then
  for t in "${targets[@]}"; do
    [ "$(cat "$build/logs/$t.log.rc" 2>/dev/null || echo 1)" = 0 ] && r=passed || r=failed
    printf '%s\tfuzz: %s\n' "$r" "$t" >> "$EMBER_TEST_RESULTS"
  done
  echo "[fuzz] test cases: ${#targets[@]} | $passed passed | $failed failed | 0 skipped"
fi
[ "$failed" = 0 ]
