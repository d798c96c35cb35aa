#!/usr/bin/env bash
# e2e-lane: private (it writes only under its own temporary directories, so it may run beside other tests)
# mk/gpu/session.sh, the GPU checklist as one command called again until done, with a stand-in for mk/gpu/run.sh
# (GPU_RUN) whose steps take no time and fail or continue on demand: a call whose budget is short of a step's minimum
# runs what fits and exits 3 saying what is left; the next call skips what is done, runs the rest and records a failing
# step without stopping; `small` exiting 3 (its time limit) continues in the next call; --skip leaves a step out; a
# step whose .rc is deleted runs again; a call with everything passed exits 0; every call leaves the summary and the
# log tarball in $OUT.
set -euo pipefail
cd "$(dirname "$0")/../.."
fail() { echo "FAIL: $*"; exit 1; }
tmp=$(mktemp -d /tmp/test_gpu_session.XXXXXX)
trap '[ -n "${KEEP_TMP:-}" ] || rm -rf "$tmp"' EXIT
# A scratch copy of the scripts, so that build/gpu-session of the checkout is never touched.
mkdir -p "$tmp/tree/mk/gpu" "$tmp/out"
cp mk/gpu/session.sh "$tmp/tree/mk/gpu/"
cat >"$tmp/fake_run.sh" <<'FAKE'
#!/usr/bin/env bash
# Stand-in for mk/gpu/run.sh: logs its arguments; "tests" fails unless tests.pass exists; "small" exits 3 on its
# first call (stopped at its time limit) and 0 afterwards.
echo "$*" >>"$FAKE_DIR/calls"
case $1 in
  tests) [ -f "$FAKE_DIR/tests.pass" ] && { echo "5 passed, 0 failed"; exit 0; }; echo "4 passed, 1 failed"; exit 1 ;;
  small) if [ -f "$FAKE_DIR/small.started" ]; then echo "small: complete"; exit 0; fi
         touch "$FAKE_DIR/small.started"; echo "small: incomplete"; exit 3 ;;
  *) echo "$1: ok"; exit 0 ;;
esac
FAKE
chmod +x "$tmp/fake_run.sh"
export FAKE_DIR=$tmp GPU_RUN=$tmp/fake_run.sh OUT=$tmp/out
session() { (cd "$tmp/tree" && mk/gpu/session.sh "$@"); }

# Call 1: 100 s of budget is below tests' minimum (120 s): probe runs, everything else waits.
rc=0; session --budget 100 >"$tmp/call1.log" 2>&1 || rc=$?
[ $rc = 3 ] || { cat "$tmp/call1.log"; fail "call 1 exited $rc, expected 3"; }
grep -q "tests: left for the next call" "$tmp/call1.log" && grep -q "small: left for the next call" "$tmp/call1.log" ||
  fail "call 1 does not say what is left"
[ "$(cut -d' ' -f1 "$tmp/calls")" = probe ] || fail "call 1 ran $(cat "$tmp/calls"), expected probe only"
tar tzf "$tmp/out/gpu-session.tar.gz" >"$tmp/list1"
[ -s "$tmp/out/gpu-session-summary.txt" ] && grep -qx 'build/gpu-session/probe.log' "$tmp/list1" ||
  fail "call 1 left no summary or log tarball"

# Call 2: the rest; tests fails (recorded, the session goes on); small stops at its limit; sanitizer skipped.
rc=0; session --budget 500 --skip sanitizer --small-seeds 2 >"$tmp/call2.log" 2>&1 || rc=$?
[ $rc = 3 ] || { cat "$tmp/call2.log"; fail "call 2 exited $rc, expected 3 (small continues)"; }
grep -q "probe: done in an earlier call (exit 0)" "$tmp/call2.log" || fail "call 2 did not skip the done probe"
grep -q "tests: exit 1" "$tmp/call2.log" && grep -q "4 passed, 1 failed" "$tmp/call2.log" ||
  fail "call 2 does not report the failing tests"
grep -q "sanitizer: skipped" "$tmp/call2.log" || fail "call 2 ran the skipped sanitizer"
grep -q "small: continues in the next call" "$tmp/call2.log" || fail "call 2 does not say small continues"
grep -q "^bench --steps 10 --warmup 2 --c-variant DMMATH_CUDA_ATTENTION=gemm --c-variant DMMATH_CUDA_MATMUL=plain --c-variant DMMATH_CUDA_CVMM=loop --c-variant DMMATH_CUDA_ATTENTION=fused DMMATH_CUDA_CVMM=loop$" "$tmp/calls" ||
  fail "bench was not given its arguments: $(grep ^bench "$tmp/calls")"
grep -Eq "^small --limit [0-9]+ --jobs 4 --seeds 2$" "$tmp/calls" ||
  fail "small was not given --limit, --jobs and --seeds: $(grep ^small "$tmp/calls")"

# Call 3: small completes; the recorded tests failure makes the exit status 1.
rc=0; session --budget 500 --skip sanitizer >"$tmp/call3.log" 2>&1 || rc=$?
[ $rc = 1 ] || { cat "$tmp/call3.log"; fail "call 3 exited $rc, expected 1 (tests failed earlier)"; }
[ "$(grep -c '^tests' "$tmp/calls")" = 1 ] || fail "call 3 ran tests again"
grep -q "small: exit 0" "$tmp/call3.log" || fail "call 3 did not complete small"

# Call 4: tests fixed and its .rc deleted: it runs again, and with the sanitizer every step has passed.
touch "$tmp/tests.pass"; rm "$tmp/tree/build/gpu-session/tests.rc"
rc=0; session --budget 500 >"$tmp/call4.log" 2>&1 || rc=$?
[ $rc = 0 ] || { cat "$tmp/call4.log"; fail "call 4 exited $rc, expected 0"; }
grep -q "gpu_session: done, every step passed" "$tmp/call4.log" || fail "call 4 does not say every step passed"
[ "$(grep -c '^tests' "$tmp/calls")" = 2 ] && [ "$(grep -c '^sanitizer' "$tmp/calls")" = 1 ] ||
  fail "call 4 should have run tests again and the sanitizer once: $(cut -d' ' -f1 "$tmp/calls" | paste -sd' ')"
echo "ok: budgets, continuation, recorded failures, --skip and reruns behave as documented"
echo "PASS"
