#!/usr/bin/env bash
# The fuzz harnesses (tests/fuzz/, mk/fuzz.mk) in make test: every committed input (the seed corpus and every input
# that once crashed a reader, tests/fuzz/regressions/) runs once through its harness under ASan/UBSan/LeakSanitizer,
# then each harness fuzzes briefly (FUZZ_CI_SECONDS, default 5 s) from its corpus. Any crash, leak, timeout or
# out-of-memory fails the test, and its input is kept in build/fuzz/artifacts/<harness>/ (commit it to
# tests/fuzz/regressions/<harness>/ once the reader is fixed). Needs clang (make deps-test installs it).
set -uo pipefail
cd "$(dirname "$0")/../.."
if ! command -v clang >/dev/null; then
  echo "SKIP: clang not installed (make deps-test or mk/deps.sh fuzz installs it)"
  exit 77
fi
make --no-print-directory fuzz-bins >build/fuzz-build.log 2>&1 || { tail -30 build/fuzz-build.log; echo "FAIL: make fuzz-bins"; exit 1; }
harnesses=$(ls build/fuzz/bin | sed 's/^fuzz_//')
[ "$(echo "$harnesses" | wc -w)" -ge 10 ] || { echo "FAIL: expected at least 10 harnesses, got: $harnesses"; exit 1; }
tests/fuzz/run_regressions.sh $harnesses || { echo "FAIL: a committed input crashes its harness"; exit 1; }
FUZZ_JOBS=${FUZZ_JOBS:-2} tests/fuzz/run_fuzz.sh "${FUZZ_CI_SECONDS:-5}" $harnesses || { echo "FAIL: the brief fuzz found a crash"; exit 1; }
echo "PASS"
