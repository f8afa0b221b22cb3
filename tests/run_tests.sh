#!/usr/bin/env bash
# tests/run_tests.sh — runs each doctest suite given as an argument (a
# binary, optionally with environment assignments before it, e.g.
# "CUDASIM_SCHEDULE=reverse build/test_sim"), then prints one closing line
# "N passed, N failed" summed from doctest's own test-case counts, and exits
# non-zero if anything failed or a suite did not finish.
set -u
passed=0
failed=0
status=0
for suite in "$@"; do
  echo "=== $suite"
  log=$(mktemp)
  start=$(date +%s)
  bash -c "exec env $suite" 2>&1 | tee "$log"
  rc=${PIPESTATUS[0]}
  line=$(grep -E '^\[doctest\] test cases:' "$log" | tail -n 1)
  rm -f "$log"
  echo "=== $suite: exit $rc, $(( $(date +%s) - start )) s"
  if [ -z "$line" ]; then
    echo "run_tests: '$suite' printed no doctest summary (exit code $rc)"
    failed=$((failed + 1))
    status=1
    continue
  fi
  p=$(echo "$line" | sed -E 's/.*\| *([0-9]+) passed.*/\1/')
  f=$(echo "$line" | sed -E 's/.*\| *([0-9]+) failed.*/\1/')
  passed=$((passed + p))
  failed=$((failed + f))
  if [ "$rc" -ne 0 ]; then
    status=1
    # a suite that failed after its tests passed (e.g. kernel coverage) counts once
    [ "$f" -eq 0 ] && failed=$((failed + 1))
  fi
done
echo "$passed passed, $failed failed"
[ "$failed" -ne 0 ] && status=1
exit $status
