#!/usr/bin/env bash
# e2e-lane: private (it writes only under its own temporary directories, so it may run beside other tests)
# End to end: compare's tolerances (reports/baselines/ci/tolerances.json, derived from the spread measured by
# tests/baselines/measure_spread.sh ci) pass an honest rerun on another BLAS kernel path and thread count, and fail a
# deliberately degraded one.
#  1. Honest: every ci run retrained with OPENBLAS_CORETYPE=Sandybridge (AVX kernels instead of this machine's
#     default AVX2 Haswell ones: different float rounding, a chaotically different training trajectory) and
#     --threads 1, evaluated, and compared with reports/baselines/ci: must exit 0.
#  2. Degraded: dense_qa and moeut_qa retrained with bin/train --steps 36 (10% fewer steps, the cosine schedule
#     shortened with them; the same config file, so the same config_sha256). Compare already fails such a run on its
#     changed step and token counts (checked too), which says nothing about the loss tolerances; so the test also
#     compares a copy of each record in which only training.steps and training.tokens are set back to the baseline's:
#     every loss and accuracy in it is the real, shorter-trained model's. That must still exit 1, with WORSE losses
#     and no CHANGED count.
# About 2 minutes on 2 free CPU cores (6 CI-sized training runs).
set -u
cd "$(dirname "$0")/../.."
fail() { echo "FAIL: $*"; exit 1; }
for b in fetch tokenize train evaluate compare; do [ -x bin/$b ] || fail "bin/$b missing (run make first)"; done
command -v jq >/dev/null || { echo "SKIP: jq not installed"; exit 77; }
tmp=$(mktemp -d /tmp/test_compare_spread.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
# The ci data as make tokenize EXPERIMENT=ci makes it, here in the test's own directory (the test runs beside others).
source tests/e2e/ci_data.sh
ci_data "$tmp/data" || fail "fetch + tokenize of the ci data"
export OMP_WAIT_POLICY=PASSIVE # speed only on a busy machine; the numbers do not depend on it

train_eval() { # train_eval OUT_ROOT RUN [train flags...]: trains and evaluates experiments/ci/RUN into OUT_ROOT/RUN
  local out=$1/$2 cfg=experiments/ci/$2.json
  shift 2
  bin/train --config "$cfg" --data "$tmp/data" --out "$out" "$@" >"$out.train.log" 2>&1 ||
    { tail -5 "$out.train.log"; fail "bin/train $cfg $*"; }
  bin/evaluate --run "$out" --config "$cfg" --data "$tmp/data" --out "$out/result.json" >"$out.eval.log" 2>&1 ||
    { tail -5 "$out.eval.log"; fail "bin/evaluate $out"; }
}

# 1. honest rerun on another kernel path and thread count
# (the restored copies sit in a runs directory named like the one they were evaluated in: a record names its experiment
# after that directory)
mkdir -p "$tmp/honest" "$tmp/degraded" "$tmp/restored/degraded"
for r in dense_qa dense_answer moeut_qa moeut_answer; do
  OPENBLAS_CORETYPE=Sandybridge train_eval "$tmp/honest" $r --threads 1
done
bin/compare --baselines reports/baselines/ci --runs "$tmp/honest" >"$tmp/honest.log" 2>&1; rc=$?
[ $rc = 0 ] || { grep -E 'WORSE|CHANGED|BETTER|error' "$tmp/honest.log"; fail "honest Sandybridge/1-thread rerun: compare exit $rc, want 0"; }
# It must really be another trajectory, or this part tested nothing.
grep -E '^training\.final_train_loss' "$tmp/honest.log" | grep -qv ' +0 ' ||
  fail "the Sandybridge/1-thread rerun reproduced the baseline's final losses exactly: the variation did not vary"
echo "honest rerun (OPENBLAS_CORETYPE=Sandybridge, --threads 1): compare exit 0; final train losses:"
grep -E '^(== |training\.final_train_loss)' "$tmp/honest.log" | sed 's/^/    /'

# 2. degraded: 10% fewer steps
for r in dense_qa moeut_qa; do
  train_eval "$tmp/degraded" $r --steps 36
  mkdir -p "$tmp/restored/degraded/$r"
  jq --slurpfile b reports/baselines/ci/$r.result.json \
    '.training.steps = $b[0].training.steps | .training.tokens = $b[0].training.tokens' \
    "$tmp/degraded/$r/result.json" >"$tmp/restored/degraded/$r/result.json" || fail "jq on $r"
done
bin/compare --baselines reports/baselines/ci --runs "$tmp/degraded" --only dense_qa,moeut_qa >"$tmp/degraded.log" 2>&1
rc=$?
[ $rc = 1 ] || { cat "$tmp/degraded.log"; fail "36-step runs: compare exit $rc, want 1"; }
bin/compare --baselines reports/baselines/ci --runs "$tmp/restored/degraded" --only dense_qa,moeut_qa \
  --only-failures >"$tmp/restored.log" 2>&1
rc=$?
[ $rc = 1 ] || { cat "$tmp/restored.log"; fail "36-step runs with the counts set back: compare exit $rc, want 1"; }
if grep -q CHANGED "$tmp/restored.log"; then cat "$tmp/restored.log"; fail "a count still differs in the restored copy"; fi
for r in dense_qa moeut_qa; do
  sed -n "/^== $r:/,/^== $r:/p" "$tmp/restored.log" | grep -E 'loss .*WORSE' >/dev/null ||
    { cat "$tmp/restored.log"; fail "$r: no loss WORSE after 10% fewer steps"; }
done
echo "degraded (36 of 40 steps): compare exit 1; the losses outside their tolerance:"
grep -E '^== |WORSE' "$tmp/restored.log" | sed 's/^/    /'
echo "ok: an honest Sandybridge/1-thread rerun passes compare against reports/baselines/ci; 10% fewer steps fails it"
