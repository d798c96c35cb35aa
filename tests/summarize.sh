#!/usr/bin/env bash
# Prints the closing line of the whole test run from build/test-results.txt: "N passed, N failed, N skipped", counting
# each test once: the sanitizer reruns of the unit tests (suite "asan") are the same checks built another way, so they
# get their own line after it, and a failure there fails the run all the same.
f=${1:-build/test-results.txt}
[ -f "$f" ] || { echo "0 passed, 1 failed"; echo "no test results recorded ($f missing)" >&2; exit 1; }
awk '$1 == "asan" {ap+=$3; af+=$4; as+=$5; next} {p+=$3; f+=$4; s+=$5}
     END {printf "%d passed, %d failed, %d skipped\n", p, f, s
          if (ap + af + as > 0) printf "sanitizer reruns of the unit tests (ASan+UBSan): %d passed, %d failed\n", ap, af
          exit (f > 0 || af > 0 || p == 0)}' "$f"
