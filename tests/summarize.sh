#!/usr/bin/env bash
# Prints the closing line of the whole test run from build/test-results.txt: "N passed, N failed, N skipped".
f=${1:-build/test-results.txt}
[ -f "$f" ] || { echo "0 passed, 1 failed"; echo "no test results recorded ($f missing)" >&2; exit 1; }
awk '{p+=$3; f+=$4; s+=$5} END {printf "%d passed, %d failed, %d skipped\n", p, f, s; exit (f>0 || p==0)}' "$f"
