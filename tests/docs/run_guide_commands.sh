#!/usr/bin/env bash
# tests/docs/run_guide_commands.sh — runs the commands a doc shows (docs/guide.md),
# so that a guide's commands keep working.
#
# usage: bash tests/docs/run_guide_commands.sh [--list] DOC.md [DOC.md ...]
#
# In a ```console block, a line "$ COMMAND" is a command (one ending in "\"
# goes on on the next line); the other lines are sample output. Right after
# the closing fence (blank lines between allowed) comments may say how CI runs
# the block's commands, exactly one per command, in order:
#   <!-- ci: CHEAP COMMAND -->   run this instead (same program: first word)
#   <!-- ci-skip: REASON -->     do not run it (a skipped test case, with the reason)
# A block without such comments runs as written. Each command runs by itself
# (bash -c in the repo root, stdin /dev/null: a cd does not carry over) within
# GUIDE_TIMEOUT seconds (120); its output goes to a log whose last 30 lines are
# shown when it fails. --list prints what would run, and runs nothing.
# A format error (wrong number of comments, a ci: form of another program, a
# ci comment anywhere else) is one line "DOC:LINE: what", and then nothing
# runs. Exit status: 0 when every command passed or was skipped.
# Under tests/run_tests.sh (EMBER_TEST_RESULTS set) each command is one test
# case "guide: DOC:LINE COMMAND"; the last line is the summary run_tests.sh
# reads: [guide] test cases: N | N passed | N failed | N skipped
set -u
root=$(cd "$(dirname "$0")/../.." && pwd)
list=0
docs=()
for a in "$@"; do
  case "$a" in
    --list) list=1 ;;
    -h|--help) sed -n '2,22p' "$0"; exit 0 ;;
    *) docs+=("$a") ;;
  esac
done
[ ${#docs[@]} -gt 0 ] || { echo "usage: bash tests/docs/run_guide_commands.sh [--list] DOC.md [DOC.md ...]" >&2; exit 2; }
timeout_s=${GUIDE_TIMEOUT:-120}

# One entry per command: where (DOC:LINE), the doc's command, what runs, and
# why it is skipped (empty: it runs).
where=() written=() run=() skip=() errors=()

# Sets T to $1 without its leading and trailing spaces.
trim() { T=${1#"${1%%[![:space:]]*}"}; T=${T%"${T##*[![:space:]]}"}; }

parse() {
  local doc=$1 lines=() i n t fence cmds cmd_at j k kind value T
  if [ ! -r "$doc" ]; then errors+=("$doc:0: cannot read it"); return; fi
  mapfile -t lines < "$doc"
  n=${#lines[@]}
  local fence_re='^(```+|~~~+)[[:space:]]*(.*)$'
  local note_re='^<!--[[:space:]]*(ci|ci-skip):[[:space:]]*(.*[^[:space:]])[[:space:]]*-->$'
  local any_note_re='^<!--[[:space:]]*ci[^[:space:]:]*[[:space:]]*:'  # typos too: <!-- ci-skp: ... -->
  for ((i = 0; i < n; i++)); do
    trim "${lines[i]}"; t=$T
    if [[ $t =~ $any_note_re ]]; then
      errors+=("$doc:$((i + 1)): a ci comment belongs right after a console block"); continue
    fi
    [[ $t =~ $fence_re ]] || continue
    fence=${BASH_REMATCH[1]}
    local console=0 open=$((i + 1))
    [[ ${BASH_REMATCH[2]} == console* ]] && console=1
    cmds=() cmd_at=()
    for ((i++; i < n; i++)); do
      trim "${lines[i]}"; t=$T
      [[ $t == "$fence"* && -z ${t//"${fence:0:1}"/} ]] && break   # the closing fence
      [[ $console == 1 && $t == '$ '* ]] || continue
      cmd_at+=($((i + 1)))
      trim "${t:2}"; local cmd=$T
      while [[ $cmd == *\\ && $((i + 1)) -lt $n ]]; do  # goes on on the next line
        trim "${cmd%\\}"; cmd=$T
        i=$((i + 1)); trim "${lines[i]}"; cmd+=" $T"
      done
      cmds+=("$cmd")
    done
    if [ "$i" -ge "$n" ]; then errors+=("$doc:$open: code fence $fence is never closed"); return; fi
    [ "$console" = 1 ] || continue
    # The ci comments after the block.
    local kinds=() values=() note_at=()
    for ((j = i + 1; j < n; j++)); do
      trim "${lines[j]}"; t=$T
      [ -z "$t" ] && continue
      [[ $t =~ $any_note_re ]] || break
      i=$j
      if [[ ! $t =~ $note_re ]]; then
        errors+=("$doc:$((j + 1)): expected <!-- ci: COMMAND --> or <!-- ci-skip: REASON -->"); continue
      fi
      kinds+=("${BASH_REMATCH[1]}"); values+=("${BASH_REMATCH[2]}"); note_at+=($((j + 1)))
    done
    if [ ${#kinds[@]} -gt 0 ] && [ ${#kinds[@]} -ne ${#cmds[@]} ]; then
      errors+=("$doc:${note_at[0]}: ${#kinds[@]} ci comments for the ${#cmds[@]} commands of the block at line $open")
      continue
    fi
    for k in "${!cmds[@]}"; do
      where+=("$doc:${cmd_at[k]}"); written+=("${cmds[k]}"); kind=${kinds[k]:-}; value=${values[k]:-}
      if [ "$kind" = ci ] && [ "${value%% *}" != "${cmds[k]%% *}" ]; then
        errors+=("$doc:${note_at[k]}: the ci form runs '${value%% *}', the command at line ${cmd_at[k]} runs '${cmds[k]%% *}'")
      fi
      if [ "$kind" = ci ]; then run+=("$value"); else run+=("${cmds[k]}"); fi
      if [ "$kind" = ci-skip ]; then skip+=("$value"); else skip+=(""); fi
    done
  done
}

for doc in "${docs[@]}"; do parse "$doc"; done
cd "$root" || exit 1

# Appends OUTCOME NAME [REASON] to the results file of tests/run_tests.sh.
record() {
  [ -n "${EMBER_TEST_RESULTS:-}" ] || return 0
  printf '%s\t%s%s\n' "$1" "${2//$'\t'/ }" "${3:+$'\t'${3//$'\t'/ }}" >> "$EMBER_TEST_RESULTS"
}
summary() { echo "[guide] test cases: $(($1 + $2 + $3)) | $1 passed | $2 failed | $3 skipped"; }

if [ ${#errors[@]} -gt 0 ]; then
  for e in "${errors[@]}"; do
    echo "$e"
    [ "$list" = 1 ] || record failed "guide: $e"
  done
  [ "$list" = 1 ] || summary 0 ${#errors[@]} 0
  exit 1
fi

if [ "$list" = 1 ]; then
  for k in "${!where[@]}"; do
    if [ -n "${skip[k]}" ]; then echo "${where[k]}  SKIP (${skip[k]}): ${written[k]}"
    elif [ "${run[k]}" != "${written[k]}" ]; then echo "${where[k]}  ${run[k]}    (ci form of: ${written[k]})"
    else echo "${where[k]}  ${run[k]}"; fi
  done
  exit 0
fi

logs=$(mktemp -d)
trap 'rm -rf "$logs"' EXIT
passed=0 failed=0 skipped=0
for k in "${!where[@]}"; do
  shown=${run[k]}
  [ ${#shown} -gt 100 ] && shown="${shown:0:97}..."
  name="guide: ${where[k]} $shown"
  if [ -n "${skip[k]}" ]; then
    printf '%-8s %s  %s  (%s)\n' skipped "${where[k]}" "$shown" "${skip[k]}"
    record skipped "$name" "${skip[k]}"; skipped=$((skipped + 1)); continue
  fi
  record running "$name"
  start=$(date +%s)
  # The command's own test binaries must not write into this run's results file.
  env -u EMBER_TEST_RESULTS timeout -k 10 "$timeout_s" bash -c "${run[k]}" > "$logs/$k.log" 2>&1 < /dev/null
  rc=$?
  seconds=$(( $(date +%s) - start ))
  if [ "$rc" = 0 ]; then
    printf '%-8s %s  %s  (%s s)\n' ok "${where[k]}" "$shown" "$seconds"
    record passed "$name"; passed=$((passed + 1))
  else
    why="exit $rc"
    [ "$rc" = 124 ] || [ "$rc" = 137 ] && why="timed out after $timeout_s s"
    printf '%-8s %s  %s  (%s, %s s)\n' FAILED "${where[k]}" "$shown" "$why" "$seconds"
    tail -n 30 "$logs/$k.log" | sed 's/^/    | /'
    record failed "$name"; failed=$((failed + 1))
  fi
done
summary $passed $failed $skipped
[ "$failed" = 0 ]
