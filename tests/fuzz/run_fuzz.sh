#!/usr/bin/env bash
# Runs libFuzzer harnesses (build/fuzz/bin/fuzz_<name>, built by make fuzz-bins) for SECONDS each and prints, per
# harness, executions, coverage and corpus size, then one summary line. Each harness works on a copy of its seed
# corpus and regression inputs (build/fuzz/corpus/<name>/, kept between runs so coverage accumulates; the committed
# tests/fuzz/corpus/ is never written). A crash, leak, timeout (-timeout=10 s per input) or out-of-memory
# (-rss_limit_mb=2048) keeps its input in build/fuzz/artifacts/<name>/ and makes the exit status 1.
# Usage: tests/fuzz/run_fuzz.sh SECONDS NAME...   (FUZZ_JOBS=N runs N harnesses at a time; default 1)
set -uo pipefail
cd "$(dirname "$0")/../.."
seconds=$1; shift
jobs=${FUZZ_JOBS:-1}
[[ "$seconds" =~ ^[0-9]+$ ]] || { echo "run_fuzz: SECONDS must be a whole number, got '$seconds'" >&2; exit 2; }
mkdir -p build/fuzz/logs
one() { # one NAME: runs it, writes build/fuzz/logs/NAME.{log,status}
  local h=$1 bin=build/fuzz/bin/fuzz_$1 work=build/fuzz/corpus/$1 art=build/fuzz/artifacts/$1
  mkdir -p "$work" "$art"
  for d in tests/fuzz/corpus/$h tests/fuzz/regressions/$h; do [ -d "$d" ] && cp -n "$d"/* "$work"/ 2>/dev/null; done
  local start=$(date +%s)
  "$bin" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 -artifact_prefix="$art/" \
    "$work" >"build/fuzz/logs/$h.log" 2>&1
  echo "$? $(( $(date +%s) - start ))" >"build/fuzz/logs/$h.status"
}
running=0
for h in "$@"; do
  [ -x "build/fuzz/bin/fuzz_$h" ] || { echo "run_fuzz: build/fuzz/bin/fuzz_$h missing (make fuzz-bins)" >&2; exit 2; }
  one "$h" &
  running=$((running + 1))
  if [ "$running" -ge "$jobs" ]; then wait -n; running=$((running - 1)); fi
done
wait
total_execs=0; total_secs=0; crashes=0
for h in "$@"; do
  read -r rc secs <"build/fuzz/logs/$h.status"
  log=build/fuzz/logs/$h.log
  execs=$(grep -o 'stat::number_of_executed_units: [0-9]*' "$log" | tail -1 | grep -o '[0-9]*$')
  cov=$(grep -o 'cov: [0-9]*' "$log" | tail -1 | grep -o '[0-9]*$')
  corpus=$(ls "build/fuzz/corpus/$h" | wc -l)
  total_execs=$((total_execs + ${execs:-0})); total_secs=$((total_secs + secs))
  if [ "$rc" = 0 ]; then
    printf 'fuzz %-18s ok     %9s executions in %4ss, coverage %5s edges, corpus %s inputs\n' "$h" "${execs:-?}" "$secs" "${cov:-?}" "$corpus"
  else
    crashes=$((crashes + 1))
    printf 'fuzz %-18s FAILED (exit %s after %ss): %s; input kept in build/fuzz/artifacts/%s/, log %s\n' "$h" "$rc" "$secs" \
      "$(grep -m1 -E 'ERROR: |==[0-9]+==|runtime error|SUMMARY' "$log" | cut -c1-160)" "$h" "$log"
  fi
done
echo "fuzz: $# harnesses, $total_execs executions, ${total_secs}s of fuzzing, $crashes failed"
[ "$crashes" = 0 ]
