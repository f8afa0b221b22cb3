#!/usr/bin/env bash
# tests/run_tests.sh — runs the doctest binaries given as arguments, then
# prints one closing line "N passed, N failed" summed from doctest's own
# test-case counts, and exits non-zero if anything failed or did not run.
set -u
passed=0
failed=0
status=0
for bin in "$@"; do
  log=$(mktemp)
  "$bin" 2>&1 | tee "$log"
  rc=${PIPESTATUS[0]}
  line=$(grep -E '^\[doctest\] test cases:' "$log" | tail -n 1)
  rm -f "$log"
  if [ -z "$line" ]; then
    echo "run_tests: $bin printed no doctest summary (exit code $rc)"
    failed=$((failed + 1))
    status=1
    continue
  fi
  p=$(echo "$line" | sed -E 's/.*\| *([0-9]+) passed.*/\1/')
  f=$(echo "$line" | sed -E 's/.*\| *([0-9]+) failed.*/\1/')
  passed=$((passed + p))
  failed=$((failed + f))
  [ "$rc" -ne 0 ] && status=1
done
echo "$passed passed, $failed failed"
[ "$failed" -ne 0 ] && status=1
exit $status
