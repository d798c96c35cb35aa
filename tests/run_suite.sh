#!/usr/bin/env bash
# Runs test programs and appends "suite name passed failed skipped" lines to build/test-results.txt.
#   tests/run_suite.sh SUITE PROG...                                     one suite
#   tests/run_suite.sh --suite SUITE [--env VAR=VALUE]... PROG... [--suite ...]...
#                                                                        several suites in one run (make test), each
#                                                                        program run with its suite's VAR=VALUE words
#                                                                        added to its environment (env(1), no shell)
# Check binaries are counted by their "Checks: N, Failures: F, Errors: E" line; other programs (e2e scripts) count as
# one test each: exit 0 passed, exit 77 skipped (printing why), anything else failed.
#
# SUITE_JOBS=N runs up to N programs at once (default 1), in two lanes. The pool holds the programs that share
# nothing: compiled test programs (each works in its own mkdtemp directory) and scripts whose second line is
# "# e2e-lane: private" (they write only under their own temporary directories; tests/e2e/test_lanes.sh holds them to
# it). Every other script uses the tree (make, runs/, data/, reports/) and runs in the tree lane: one at a time, in
# the order given, beside the pool, which then has N - 1 slots. The pool starts its programs in the order given, the
# suites of one run mixed in one pool, so that no core waits for the last program of one suite while another suite
# has work (make test lists the long ones first). Each program's report is printed whole when it ends, so parallel
# reports never interleave; the results file gets one short appended line per program (O_APPEND, atomic at that
# size).
# TEST_TIMEOUT_S=S stops a program that runs longer than S seconds (SIGTERM, then SIGKILL 10 s later) and counts it as
# failed: on a GPU job with a wall-time limit one hung kernel must not take the time of every later step.
set -u
# The programs, each with its suite and the index of its suite's environment words (envs[k]: words joined by \x1f).
progs=() prog_suite=() prog_env=() envs=()
if [ "${1:-}" != --suite ]; then
  [ $# -ge 1 ] || { echo "run_suite: usage: tests/run_suite.sh SUITE PROG... | --suite SUITE [--env VAR=VALUE]... PROG..." >&2; exit 2; }
  set -- --suite "$@"
fi
while [ $# -gt 0 ]; do
  case $1 in
    --suite)
      [ $# -ge 2 ] && [[ "$2" =~ ^[a-z0-9][a-z0-9-]*$ ]] || { echo "run_suite: --suite needs a name of a-z, 0-9 and - (got '${2:-}')" >&2; exit 2; }
      suite=$2; envs+=(""); shift 2 ;;
    --env)
      [ $# -ge 2 ] && [[ "$2" =~ ^[A-Z_][A-Z0-9_]*= ]] || { echo "run_suite: --env needs VAR=VALUE (got '${2:-}')" >&2; exit 2; }
      k=$(( ${#envs[@]} - 1 )); envs[k]+="${envs[k]:+$'\x1f'}$2"; shift 2 ;;
    *) progs+=("$1"); prog_suite+=("$suite"); prog_env+=($(( ${#envs[@]} - 1 ))); shift ;;
  esac
done
jobs=${SUITE_JOBS:-1}
[[ "$jobs" =~ ^[1-9][0-9]{0,2}$ ]] || { echo "run_suite: SUITE_JOBS must be a count 1-999 (got '$jobs')" >&2; exit 2; }
test_timeout=${TEST_TIMEOUT_S:-}
[ -z "$test_timeout" ] || [[ "$test_timeout" =~ ^[1-9][0-9]{0,5}$ ]] ||
  { echo "run_suite: TEST_TIMEOUT_S must be a number of seconds 1-999999 (got '$test_timeout')" >&2; exit 2; }
# Programs sharing the cores must not spin at OpenMP barriers waiting for a core another program holds (that slows
# them many-fold); passive waiting changes the speed only, never a number.
[ "$jobs" -gt 1 ] && export OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-PASSIVE}
mkdir -p build/test-logs
results=build/test-results.txt
status_dir=$(mktemp -d build/test-logs/.status.XXXXXX)
trap 'rm -rf "$status_dir"' EXIT

# run_one I: runs program I of the list.
run_one() {
  local t=${progs[$1]} suite=${prog_suite[$1]} name log start rc secs line checks fails errs bad good skipped report
  local -a env_words=()
  [ -z "${envs[${prog_env[$1]}]}" ] || IFS=$'\x1f' read -r -a env_words <<<"${envs[${prog_env[$1]}]}"
  name=$(basename "$t")
  log=build/test-logs/$suite-$name.log
  start=$(date +%s)
  local -a cmd=(env ${env_words[@]+"${env_words[@]}"})
  [ -z "$test_timeout" ] || cmd+=(timeout -k 10 "$test_timeout")
  "${cmd[@]}" "$t" >"$log" 2>&1; rc=$?
  if [ -n "$test_timeout" ] && { [ "$rc" = 124 ] || [ "$rc" = 137 ]; }; then
    echo "run_suite: stopped at TEST_TIMEOUT_S=$test_timeout s" >>"$log"
  fi
  secs=$(( $(date +%s) - start ))
  line=$(grep -E '^[0-9]+%: Checks: [0-9]+' "$log" | tail -1)
  if [ -n "$line" ]; then
    checks=$(sed -E 's/.*Checks: ([0-9]+).*/\1/' <<<"$line")
    fails=$(sed -E 's/.*Failures: ([0-9]+).*/\1/' <<<"$line")
    errs=$(sed -E 's/.*Errors: ([0-9]+).*/\1/' <<<"$line")
    bad=$((fails + errs)); good=$((checks - bad))
    skipped=$(grep -c '^SKIP' "$log" || true)
    [ "$rc" != 0 ] && [ "$bad" = 0 ] && bad=1
  elif [ "$rc" = 77 ]; then good=0; bad=0; skipped=1
  elif [ "$rc" = 0 ]; then good=1; bad=0; skipped=0
  else good=0; bad=1; skipped=0
  fi
  echo "$suite $name $good $bad $skipped" >>"$results"
  if [ "$bad" != 0 ]; then
    touch "$status_dir/failed"
    report="FAIL [$suite] $name (${secs}s) — log: $log"$'\n'$(tail -n 30 "$log" | sed 's/^/    /')
  elif [ "$skipped" != 0 ] && [ "$good" = 0 ]; then
    report="SKIP [$suite] $name: $(grep -m1 -i 'skip' "$log")"
  else
    report="ok   [$suite] $name: $good passed (${secs}s)"
    local skips
    skips=$(grep '^SKIP' "$log" | sed 's/^/    /')
    [ -n "$skips" ] && report+=$'\n'"$skips"
  fi
  printf '%s\n' "$report"
}

# private PROGRAM: true for a compiled program or a script marked private on its second line.
private() { [ "$(head -c 2 "$1" 2>/dev/null)" != '#!' ] || [[ "$(sed -n 2p "$1")" == '# e2e-lane: private'* ]]; }

if [ "$jobs" = 1 ]; then
  for i in "${!progs[@]}"; do run_one "$i"; done
else
  pool=() tree=()
  for i in "${!progs[@]}"; do
    if private "${progs[$i]}"; then pool+=("$i"); else tree+=("$i"); fi
  done
  # The tree lane is one background job, so while it runs the pool's count of running jobs leaves it its slot.
  [ ${#tree[@]} = 0 ] || { for i in "${tree[@]}"; do run_one "$i"; done; } &
  for i in ${pool[@]+"${pool[@]}"}; do
    while [ "$(jobs -rp | wc -l)" -ge "$jobs" ]; do wait -n; done
    run_one "$i" &
  done
fi
wait
[ ! -e "$status_dir/failed" ]
