#!/usr/bin/env bash
# Runs every committed input of each harness once (tests/fuzz/corpus/<name>/ and tests/fuzz/regressions/<name>/, the
# inputs that once crashed) through build/fuzz/bin/fuzz_<name>: libFuzzer given files runs each one and stops at the
# first crash, leak or timeout. Exit 0 when all pass.
# Usage: tests/fuzz/run_regressions.sh NAME...
set -uo pipefail
cd "$(dirname "$0")/../.."
status=0
for h in "$@"; do
  files=()
  for d in tests/fuzz/corpus/$h tests/fuzz/regressions/$h; do
    [ -d "$d" ] && while IFS= read -r f; do files+=("$f"); done < <(find "$d" -type f ! -name '*.md' | sort)
  done
  [ ${#files[@]} -gt 0 ] || { echo "regressions $h: no committed input (tests/fuzz/corpus/$h is empty)"; status=1; continue; }
  log=build/fuzz/logs/regressions-$h.log
  mkdir -p build/fuzz/logs
  if "build/fuzz/bin/fuzz_$h" -timeout=10 -rss_limit_mb=2048 "${files[@]}" >"$log" 2>&1; then
    echo "regressions $h: ${#files[@]} inputs ok"
  else
    echo "regressions $h: FAILED: $(grep -m1 -E 'ERROR: |runtime error|SUMMARY|Running: ' "$log" | cut -c1-200); log $log"
    grep -E '^Running: ' "$log" | tail -1
    status=1
  fi
done
exit $status
