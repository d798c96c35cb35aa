#!/usr/bin/env bash
# The whole GPU checklist (tests/GPU_CHECKLIST.md) as one command for jobs with a wall-time limit, as under a batch
# scheduler: each call does what fits in its time and the next call continues where it stopped, until it says "done":
#
#     source mk/gpu/env.sh && mk/gpu/session.sh [--budget SECONDS] [--skip "STEP ..."] [--small-seeds N]
#                                               [--small-set "KEY=VALUE ..."]
#
# Runs the steps of mk/gpu/run.sh in this order, each at most once per machine:
#   probe, tests, selftest, bench, sanitizer, small
# within SECONDS (default 540: a 10-minute job with room to copy files in and out). A step starts only when its
# minimum time (below) is left, else the call ends and the next call on the same tree goes on from there. A step's
# exit status is kept in build/gpu-session/STEP.rc, so a failing step is reported and the checklist moves on (the
# failures are worked on afterwards, from the logs); delete STEP.rc to run it again. `small` (make
# reproduce EXPERIMENT=small BACKEND=cuda) takes whatever time is left and continues from its checkpoints in the next
# call until it completes, SMALL_JOBS (default 4) stages at a time (mk/gpu/run.sh small --jobs). The sanitizer runs
# after the benchmark because it is the slowest step and its results do not change the figures; it is capped at
# SANITIZER_MAX_S (default 240), `tests` at TESTS_MAX_S (default: no cap beyond the budget; each program is stopped
# after TEST_TIMEOUT_S, default 300). --small-set passes make's SET to `small` (e.g. "train.steps=200": a short run
# of each architecture, whose loss curve is read beside the CPU's first steps).
# Every call writes into $OUT (unset: build/gpu-session/out): gpu-session-summary.txt (each step's state and last
# lines) and gpu-session.tar.gz (every step's log, build/test-logs/, build/test-results-gpu.txt and, once `small` has
# run, small-results.tar.gz). Exit status: 0 when every step is done and passed, 3 when steps are left for the next
# call, 1 when a step failed. GPU_RUN replaces mk/gpu/run.sh (tests/e2e/test_gpu_session.sh runs a stand-in).
set -u
cd "$(dirname "$0")/../.."
budget=540 skip= small_seeds= small_set=
while [ $# -gt 0 ]; do
  [ $# -ge 2 ] || { echo "gpu_session: $1 needs a value" >&2; exit 2; }
  case "$1" in
    --budget) budget=$2 ;;
    --skip) skip=$2 ;;
    --small-seeds) small_seeds=$2 ;;
    --small-set) small_set=$2 ;;
    *) echo "gpu_session: unknown argument '$1' (--budget S, --skip \"STEP ...\", --small-seeds N, --small-set \"K=V ...\")" >&2
       exit 2 ;;
  esac
  shift 2
done
state=build/gpu-session
run=${GPU_RUN:-mk/gpu/run.sh}
out=${OUT:-$state/out}
mkdir -p "$state" "$out"
export OUT=$out # (the small step writes its small-results.tar.gz there)
start=$SECONDS
left() { echo $((budget - (SECONDS - start))); }
summary=$out/gpu-session-summary.txt
: >"$summary"
say() { echo "$*" | tee -a "$summary"; }
say "gpu_session: $(date -u +%FT%TZ), budget ${budget} s, code $(cat build/gpu-bundle/VERSION 2>/dev/null || echo unknown)"

# step NAME MIN_SECONDS CAP_SECONDS COMMAND...: run COMMAND into $state/NAME.log unless done, skipped or short of time.
more=0 failed=0
step() {
  local name=$1 min=$2 cap=$3 rc
  shift 3
  if [[ " $skip " == *" $name "* ]]; then say "  $name: skipped (--skip)"; return; fi
  if [ -f "$state/$name.rc" ]; then
    rc=$(cat "$state/$name.rc")
    say "  $name: done in an earlier call (exit $rc)"
    [ "$rc" = 0 ] || failed=1
    return
  fi
  if [ "$more" = 1 ] || [ "$(left)" -lt "$min" ]; then
    say "  $name: left for the next call (needs at least $min s, $(left) s left)"
    more=1
    return
  fi
  local t=$(left) s0=$SECONDS
  [ "$cap" -gt 0 ] && [ "$cap" -lt "$t" ] && t=$cap
  timeout -s TERM -k 30 "$t" "$@" >"$state/$name.log" 2>&1
  rc=$?
  if [ "$name" = small ] && [ "$rc" = 3 ]; then
    say "  $name: continues in the next call ($((SECONDS - s0)) s this call)"
    more=1
  else
    echo "$rc" >"$state/$name.rc"
    [ "$rc" = 0 ] || failed=1
    say "  $name: exit $rc in $((SECONDS - s0)) s$( [ "$rc" = 124 ] && echo " (stopped at its time cap of $t s)")"
  fi
  tail -n "$( [ "$name" = bench ] && echo 16 || echo 4)" "$state/$name.log" | sed 's/^/      /' | tee -a "$summary"
}

step probe 10 60 "$run" probe
step tests 120 "${TESTS_MAX_S:-0}" "$run" tests
step selftest 30 180 "$run" selftest
# The comparators: the cuBLAS attention (against auto's flash kernels, taken on the cost model's word), the
# matmul without split-K and the bf16 conversion cache (whether they pay on a GPU, as the cost model says), the
# per-expert GEMM loop alone (the bf16 expert matmul before the tensor-core kernels, which auto takes where cuBLAS
# refuses bf16 in its grouped call), then fused attention with it.
step bench 150 0 "$run" bench --steps 10 --warmup 2 --c-variant "DMMATH_CUDA_ATTENTION=gemm" \
  --c-variant "DMMATH_CUDA_MATMUL=plain" --c-variant "DMMATH_CUDA_CVMM=loop" \
  --c-variant "DMMATH_CUDA_ATTENTION=fused DMMATH_CUDA_CVMM=loop"
step sanitizer 120 "${SANITIZER_MAX_S:-240}" "$run" sanitizer
# small's own limit stops make reproduce (training saves a checkpoint) before the step's timeout would.
step small 90 0 "$run" small --limit $(( $(left) > 60 ? $(left) - 30 : 30 )) --jobs "${SMALL_JOBS:-4}" \
  ${small_seeds:+--seeds "$small_seeds"} ${small_set:+--set "$small_set"}

files=$(ls "$state"/*.log "$state"/*.rc build/test-results-gpu.txt 2>/dev/null; [ -d build/test-logs ] && echo build/test-logs)
tar czf "$out/gpu-session.tar.gz" $files
if [ "$more" = 1 ]; then
  say "gpu_session: steps left: run the same command again to continue ($((SECONDS - start)) s this call)"
  exit 3
fi
if [ "$failed" = 1 ]; then
  say "gpu_session: done, with failures (logs in gpu-session.tar.gz)"
  exit 1
fi
say "gpu_session: done, every step passed"
