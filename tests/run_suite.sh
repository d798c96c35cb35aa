#!/usr/bin/env bash
# Runs test programs of one suite and appends "suite name passed failed skipped" lines to build/test-results.txt.
# Check binaries are counted by their "Checks: N, Failures: F, Errors: E" line; other programs (e2e scripts) count as
# one test each: exit 0 passed, exit 77 skipped (printing why), anything else failed.
set -u
suite=$1; shift
mkdir -p build/test-logs
results=build/test-results.txt
status=0
for t in "$@"; do
  name=$(basename "$t")
  log=build/test-logs/$suite-$name.log
  start=$(date +%s)
  "$t" >"$log" 2>&1; rc=$?
  secs=$(( $(date +%s) - start ))
  line=$(grep -E '^[0-9]+%: Checks: [0-9]+' "$log" | tail -1)
  if [ -n "$line" ]; then
    checks=$(sed -E 's/.*Checks: ([0-9]+).*/\1/' <<<"$line")
    fails=$(sed -E 's/.*Failures: ([0-9]+).*/\1/' <<<"$line")
    errs=$(sed -E 's/.*Errors: ([0-9]+).*/\1/' <<<"$line")
    bad=$((fails + errs)); good=$((checks - bad)); skipped=0
    skipped=$(grep -c '^SKIP' "$log" || true)
    [ "$rc" != 0 ] && [ "$bad" = 0 ] && bad=1
  elif [ "$rc" = 77 ]; then good=0; bad=0; skipped=1
  elif [ "$rc" = 0 ]; then good=1; bad=0; skipped=0
  else good=0; bad=1; skipped=0
  fi
  echo "$suite $name $good $bad $skipped" >>"$results"
  if [ "$bad" != 0 ]; then
    status=1
    echo "FAIL [$suite] $name (${secs}s) — log: $log"; tail -n 30 "$log" | sed 's/^/    /'
  elif [ "$skipped" != 0 ] && [ "$good" = 0 ]; then
    echo "SKIP [$suite] $name: $(grep -m1 -i 'skip' "$log")"
  else
    echo "ok   [$suite] $name: $good passed (${secs}s)"
    grep '^SKIP' "$log" | sed 's/^/    /'
  fi
done
exit $status
