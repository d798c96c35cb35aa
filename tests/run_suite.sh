#!/usr/bin/env bash
# Runs test programs of one suite and appends "suite name passed failed skipped" lines to build/test-results.txt.
# Check binaries are counted by their "Checks: N, Failures: F, Errors: E" line; other programs (e2e scripts) count as
# one test each: exit 0 passed, exit 77 skipped (printing why), anything else failed.
#
# SUITE_JOBS=N runs up to N programs at once (default 1), in two lanes. The pool holds the programs that share
# nothing: compiled test programs (each works in its own mkdtemp directory) and scripts whose second line is
# "# e2e-lane: private" (they write only under their own temporary directories; tests/e2e/test_lanes.sh holds them to
# it). Every other script uses the tree (make, runs/, data/, reports/) and runs in the tree lane: one at a time, in
# the order given, beside the pool, which then has N - 1 slots. Each program's report is printed whole when it ends,
# so parallel reports never interleave; the results file gets one short appended line per program (O_APPEND, atomic
# at that size).
# TEST_TIMEOUT_S=S stops a program that runs longer than S seconds (SIGTERM, then SIGKILL 10 s later) and counts it as
# failed: on a GPU job with a wall-time limit one hung kernel must not take the time of every later step.
set -u
suite=$1; shift
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

run_one() {
  local t=$1 name log start rc secs line checks fails errs bad good skipped report
  name=$(basename "$t")
  log=build/test-logs/$suite-$name.log
  start=$(date +%s)
  if [ -n "$test_timeout" ]; then
    timeout -k 10 "$test_timeout" "$t" >"$log" 2>&1; rc=$?
    [ "$rc" != 124 ] && [ "$rc" != 137 ] || echo "run_suite: stopped at TEST_TIMEOUT_S=$test_timeout s" >>"$log"
  else
    "$t" >"$log" 2>&1; rc=$?
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
  for t in "$@"; do run_one "$t"; done
else
  pool=() tree=()
  for t in "$@"; do
    if private "$t"; then pool+=("$t"); else tree+=("$t"); fi
  done
  # The tree lane is one background job, so while it runs the pool's count of running jobs leaves it its slot.
  [ ${#tree[@]} = 0 ] || { for t in "${tree[@]}"; do run_one "$t"; done; } &
  for t in ${pool[@]+"${pool[@]}"}; do
    while [ "$(jobs -rp | wc -l)" -ge "$jobs" ]; do wait -n; done
    run_one "$t" &
  done
fi
wait
[ ! -e "$status_dir/failed" ]
