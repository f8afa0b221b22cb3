#!/usr/bin/env bash
# tests/run_tests.sh — runs each doctest suite given as an argument (a
# binary, optionally with environment assignments before it, e.g.
# "CUDASIM_SCHEDULE=reverse build/test_sim"), and prints for each what ran:
#   === CUDASIM_SCHEDULE=reverse build/test_sim: 212 passed, 0 failed, 3 skipped, exit 0, 95 s
# then one closing line over the distinct test cases of all the runs:
#   N passed, N failed, N skipped
# Exits non-zero if anything failed or a suite did not finish.
#
# The counts come from what doctest did, not from its printout: each suite
# runs with EMBER_TEST_RESULTS set, and tests/support/test_main.cpp's listener
# appends a line per test case (running / passed / failed / skipped with the
# reason). A test case is counted once by its name, however many runs list
# it (the same binary under another schedule or a sanitizer has the same
# test cases): failed if it failed (or crashed its binary) in any run,
# passed if it passed in at least one and failed in none, skipped only if
# every run that listed it skipped it. A suite that exits non-zero with no
# failed test case (a crash between tests, kernel coverage, no doctest
# summary) counts as one failed entry of its own. A suite may also be the
# fuzz runner (tests/fuzz/run_fuzz.sh): it writes the same results file, one
# test case per target, and prints its "[fuzz] test cases: ..." summary in
# doctest's form; so does the guide's command runner
# (tests/docs/run_guide_commands.sh: "[guide] test cases: ...", one per command).
#
# A suite written "shards=N <suite>" runs as N processes of the same binary
# side by side, each with EMBER_TEST_SHARD=k/N (tests/support/test_main.cpp:
# every N-th test case), for the suites that keep one core busy (the
# emulator runs a kernel on one thread): their outputs follow one another,
# their counts add up, and the kernels that every shard left uncalled fail
# the suite as a whole-suite run's coverage check would.
#
# A suite written "& <suite>" starts at its place and runs in the background,
# beside the suites after it (for one that keeps a single core busy, such as
# the guide's commands, next to another such): its output is held and
# printed, with its === line, once it has ended and the suite in the
# foreground has ended too (at the latest after the last one). While suites
# share the cores this way, their OpenMP threads wait passively
# (OMP_WAIT_POLICY=passive unless set): libgomp's threads otherwise spin at
# every barrier, and two suites spinning against each other on 2 cores took
# 141 s and 134 s where passive waiting took 49 s and 58 s.
#
# Every suite has a time limit (EMBER_SUITE_TIMEOUT seconds, default 1200;
# "timeout=N <suite>" for one suite): past it the suite is stopped and fails,
# naming the test case it was running. A suite that ran no test case (a
# filter that matches nothing) fails. A suite written "skipped: NAME: REASON"
# is one the build left out (SIM=0, CUDA=0): it counts as one skipped entry
# with its reason.
set -u
results=$(mktemp -d)
trap 'rm -rf "$results"' EXIT

# run_suite INDEX SUITE: runs one suite, prints its output and its === line,
# and leaves its test cases in $results/INDEX and its status (0 or 1) in
# $results/INDEX.status.
run_suite() {
  local i=$1 suite=$2
  local file="$results/$i" log start shards command summary rc k r line sp sf whole reported missing
  local seconds counts p f s crashed extra why dp df limit status=0
  local -a pids
  : > "$file"
  # A suite the build left out: one skipped entry, with its reason.
  if [[ $suite =~ ^skipped:\ *([^:]+):\ *(.*)$ ]]; then
    echo "=== ${BASH_REMATCH[1]}: not built, skipped: ${BASH_REMATCH[2]}"
    printf 'skipped\t[suite %s]\t%s\n' "${BASH_REMATCH[1]}" "${BASH_REMATCH[2]}" >> "$file"
    echo 0 > "$file.status"
    return
  fi
  echo "=== $suite"
  log=$(mktemp)
  start=$(date +%s)
  shards=1
  command=$suite
  limit=$suite_limit
  if [[ $command =~ ^timeout=([0-9]+)\ +(.*)$ ]]; then
    limit=${BASH_REMATCH[1]}
    command=${BASH_REMATCH[2]}
  fi
  if [[ $command =~ ^shards=([0-9]+)\ +(.*)$ ]]; then
    shards=${BASH_REMATCH[1]}
    command=${BASH_REMATCH[2]}
  fi
  # Each process of the suite gets the time limit (timeout(1): TERM, then KILL 10 s later).
  local limited="timeout -k 10 $limit"
  summary=""
  if [ "$shards" -le 1 ]; then
    $limited bash -c "exec env EMBER_TEST_RESULTS=$(printf '%q' "$file") $command" 2>&1 | tee "$log"
    rc=${PIPESTATUS[0]}
    summary=$(grep -E '^\[(doctest|fuzz|guide)\] test cases:' "$log" | tail -n 1)
  else
    echo "(running $shards shards side by side; each one's output follows when it ends)"
    pids=()
    for ((k = 0; k < shards; k++)); do
      $limited bash -c "exec env EMBER_TEST_RESULTS=$(printf '%q' "$file") EMBER_TEST_SHARD=$k/$shards $command" \
        > "$log.$k" 2>&1 &
      pids+=($!)
    done
    rc=0
    sp=0; sf=0; whole=1; reported=0
    : > "$log.missing"
    for ((k = 0; k < shards; k++)); do
      wait "${pids[$k]}"
      r=$?
      [ "$r" -ne 0 ] && [ "$rc" -eq 0 ] && rc=$r
      echo "--- shard $((k + 1)) of $shards (exit $r)"
      cat "$log.$k"
      line=$(grep -E '^\[doctest\] test cases:' "$log.$k" | tail -n 1)
      if [ -z "$line" ]; then
        whole=0
      else
        sp=$((sp + $(echo "$line" | sed -E 's/.*\| *([0-9]+) passed.*/\1/')))
        sf=$((sf + $(echo "$line" | sed -E 's/.*\| *([0-9]+) failed.*/\1/')))
      fi
      # Kernel coverage: the kernels this shard never called, one per line.
      if grep -q '^kernel coverage of .*(one shard' "$log.$k"; then
        reported=$((reported + 1))
        grep -m1 '^never called:' "$log.$k" | sed 's/^never called://' | tr ' ' '\n' | sed '/^$/d' >> "$log.missing"
      fi
      rm -f "$log.$k"
    done
    [ "$whole" -eq 1 ] && summary="[doctest] test cases: $((sp + sf)) | $sp passed | $sf failed |"
    # Missed by every shard that ran kernels: listed as many times as shards reported.
    missing=$(sort "$log.missing" | uniq -c | awk -v n="$reported" '$1 == n { print $2 }')
    rm -f "$log.missing"
    if [ -n "$missing" ]; then
      echo "kernel coverage FAILED: no shard called $(echo $missing | tr '\n' ' ')(every kernel of the CUDA backend must be called)"
      [ "$rc" -eq 0 ] && rc=1
    fi
  fi
  rm -f "$log"
  seconds=$(( $(date +%s) - start ))
  # This run's outcome per test case: the last line for its name; a test case
  # still "running" crashed the binary.
  counts=$(awk -F'\t' '{ last[$2] = $1 }
    END { for (n in last) c[last[n] == "running" ? "crashed" : last[n]]++
          printf "%d %d %d %d\n", c["passed"], c["failed"], c["skipped"], c["crashed"] }' "$file")
  read -r p f s crashed <<< "$counts"
  extra=""
  [ "$crashed" -gt 0 ] && extra=" ($crashed crashed: $(awk -F'\t' '{ last[$2] = $1 } END { for (n in last) if (last[n] == "running") printf "\"%s\" ", n }' "$file"))"
  if [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ]; then
    extra="$extra (timed out: still running after the suite's limit of $limit s)"
  fi
  # A filter that selects nothing, a runner that found nothing to run: a
  # suite that checked nothing fails.
  if [ $((p + f + s + crashed)) -eq 0 ] && [ "$rc" -eq 0 ]; then
    rc=1
    echo "run_tests: '$suite' ran no test case (a filter that matches nothing?)"
  fi
  if [ -z "$summary" ] || [ "$rc" -ne 0 ]; then
    status=1
    if [ $((f + crashed)) -eq 0 ]; then
      why="exit code $rc"
      [ -z "$summary" ] && why="no doctest summary, exit code $rc"
      [ $((p + s)) -eq 0 ] && why="no test case ran, exit code $rc"
      extra=" (outside its test cases: $why)"
      printf 'failed\t[suite %s: %s]\n' "$suite" "$why" >> "$file"
      crashed=1  # shown as one failure of this run
    fi
  fi
  echo "=== $suite: $p passed, $((f + crashed)) failed$extra, $s skipped, exit $rc, $seconds s"
  awk -F'\t' '$1 == "skipped" { r[$3]++ } END { for (x in r) printf "    skipped: %d, %s\n", r[x], x }' "$file" | sort
  if [ -n "$summary" ]; then  # the listener and doctest must agree
    dp=$(echo "$summary" | sed -E 's/.*\| *([0-9]+) passed.*/\1/')
    df=$(echo "$summary" | sed -E 's/.*\| *([0-9]+) failed.*/\1/')
    if [ "$dp" != "$p" ] || [ "$df" != "$f" ]; then
      echo "run_tests: '$suite': doctest counted $dp passed, $df failed; EMBER_TEST_RESULTS has $p passed, $f failed"
      printf 'failed\t[suite %s: counts disagree]\n' "$suite" >> "$file"
      status=1
    fi
  fi
  echo "$status" > "$file.status"
}

# Every suite's time limit in seconds (a suite written "timeout=N <suite>"
# gets N): a hung suite fails, naming the test case it was running, instead
# of hanging the run. EMBER_SUITE_TIMEOUT sets the default.
suite_limit=${EMBER_SUITE_TIMEOUT:-1200}

# Prints the held output of each background suite that has ended.
background=()
print_ended() {
  local j rest=()
  for j in "${background[@]}"; do
    if [ -f "$results/$j.status" ]; then cat "$results/$j.out"; else rest+=("$j"); fi
  done
  background=("${rest[@]}")
}

i=0
for suite in "$@"; do
  i=$((i + 1))
  if [[ $suite =~ ^\&\ +(.*)$ ]]; then
    echo "=== ${BASH_REMATCH[1]} (started in the background; its output follows when it ends)"
    OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-passive} run_suite "$i" "${BASH_REMATCH[1]}" > "$results/$i.out" 2>&1 &
    background+=("$i")
  elif [ ${#background[@]} -gt 0 ]; then
    OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-passive} run_suite "$i" "$suite"
    print_ended
  else
    run_suite "$i" "$suite"
  fi
done
wait
print_ended
status=0
for j in $(seq 1 $i); do
  [ "$(cat "$results/$j.status" 2>/dev/null)" = 0 ] || status=1
done
# Over every run: the distinct test cases, each once.
final=$(for j in $(seq 1 $i); do
          awk -F'\t' -v run="$j" '{ last[$2] = $1 } END { for (n in last) printf "%s\t%s\t%s\n", run, (last[n] == "running" ? "failed" : last[n]), n }' "$results/$j"
        done | awk -F'\t' '
  { name = $3; seen[name] = 1; runs[name]++
    if ($2 == "failed") failed[name] = 1; else if ($2 == "passed") passed[name] = 1 }
  END { for (n in seen) { total++; if (runs[n] > 1) repeated++
          if (n in failed) f++; else if (n in passed) p++; else s++ }
        printf "%d %d %d %d %d\n", p, f, s, total, repeated }')
read -r p f s total repeated <<< "$final"
echo "=== $i runs, $total distinct test cases ($repeated of them listed by more than one run, counted once)"
echo "$p passed, $f failed, $s skipped"
[ "$f" -ne 0 ] && status=1
exit $status
