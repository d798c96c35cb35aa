#!/usr/bin/env bash
# End to end: `make diff A=... B=...` (bin/compare --diff) on two short ci runs of dense_qa that differ only in
# train.lr (10 steps each, 0.002 vs 0.008), named as make names them: runs/EXP/dense_qa and runs/EXP/dense_qa@VARIANT
# (VARIANT = the run's variant key, which the diff prints). Checks: the one differing config key with both values;
# every metric row with B - A; paired bootstrap intervals over the 400 shared evaluation examples, each containing
# its own change; exit 0 (a diff is not a gate); a baseline record prefix as one side (no intervals, said why); and
# one clear error line, non-zero exit, when A or B is missing or names no run. The runs live in a temporary
# RUNS_DIR (given on the make command line), never in runs/ci. About 30-60 s on 2 CPU cores.
set -u
cd "$(dirname "$0")/../.."
fail() { echo "FAIL: $*"; exit 1; }
for b in train evaluate compare; do [ -x bin/$b ] || fail "bin/$b missing (run make first)"; done
make --no-print-directory tokenize EXPERIMENT=ci >/dev/null 2>&1 || fail "make tokenize EXPERIMENT=ci"
tmp=$(mktemp -d /tmp/test_make_diff.XXXXXX)
trap '[ -n "${KEEP_TMP:-}" ] || rm -rf "$tmp"' EXIT
export OMP_WAIT_POLICY=PASSIVE
CFG=experiments/ci/dense_qa.json
runs=$tmp/runs
mkdir -p "$runs"

evaluate() { # evaluate DIR [--set K=V ...]
  local out=$1
  shift
  bin/evaluate --run "$out" --config $CFG --data data/ci --out "$out/result.json" --set train.steps=10 "$@" \
    >"$tmp/eval.log" 2>&1 || { tail -5 "$tmp/eval.log"; fail "bin/evaluate $out"; }
}
train_eval() { # train_eval DIR [--set K=V ...]
  bin/train --config $CFG --data data/ci --out "$1" --set train.steps=10 "${@:2}" >"$tmp/train.log" 2>&1 ||
    { tail -5 "$tmp/train.log"; fail "bin/train $*"; }
  evaluate "$@"
}
train_eval "$runs/dense_qa"
train_eval "$runs/lr" --set train.lr=0.008
# The sweep point's directory name, as make names it: dense_qa@<its variant key> (the diff prints the key).
variant=$(bin/compare --diff "$runs/lr" "$runs/lr" | sed -n -E 's/^A = .*, variant ([0-9a-f]{8}), .*/\1/p')
[ -n "$variant" ] || fail "the diff does not print the run's variant key"
mv "$runs/lr" "$runs/dense_qa@$variant"
evaluate "$runs/dense_qa@$variant" --set train.lr=0.008 # its records then carry its name

md() { make --no-print-directory diff EXPERIMENT=ci RUNS_DIR="$runs" "$@"; }
md A=dense_qa B="dense_qa@$variant" >"$tmp/diff.log" 2>&1 || { cat "$tmp/diff.log"; fail "make diff exit $?"; }
head -4 "$tmp/diff.log"
grep -q "^B = .*run dense_qa@$variant, variant $variant, seed 1," "$tmp/diff.log" || fail "B's identity line"
grep -q '^config: 1 key(s) differ' "$tmp/diff.log" || fail "not exactly one config key reported as differing"
grep -qE '^  train\.lr +A 0\.002  B 0\.008$' "$tmp/diff.log" || fail "train.lr 0.002 -> 0.008 not shown"
for m in training.final_train_loss evaluation.mean_accuracy interpolate.accuracy interpolate.mean_answer_loss \
         extrapolate.mean_answer_loss extrapolate.greedy_disagreements; do
  grep -qE "^${m//./\\.} " "$tmp/diff.log" || fail "no row for $m"
done
grep -qE '^interpolate\.arithmetic__[a-z_]+\.mean_answer_loss .*\(n=[0-9]+\)$' "$tmp/diff.log" ||
  fail "no per-module row with a paired interval"
grep -q 'over the 400 evaluation examples both runs share, 2000 replicates' "$tmp/diff.log" ||
  fail "the intervals are not over the 400 shared examples"
# Every interval contains its own change B - A, and the final train loss (no examples behind it) has none.
awk '/\(n=[0-9]+\)$/ { d = $4 + 0; lo = $5; hi = $6; gsub(/[\[,]/, "", lo); gsub(/\]/, "", hi);
       n++; if (d < lo - 1e-9 || d > hi + 1e-9) { print "interval misses its change: " $0; bad = 1 } }
     END { if (n < 20) { print "only " n " intervals"; bad = 1 } exit bad }' "$tmp/diff.log" ||
  fail "an interval does not contain its change"
grep -E '^training\.final_train_loss ' "$tmp/diff.log" | grep -q '(n=' && fail "final_train_loss has an interval"
n_loss=$(grep -cE '^(interpolate|extrapolate)\.mean_answer_loss .*\(n=200\)$' "$tmp/diff.log")
[ "$n_loss" = 2 ] || fail "the two sets' mean_answer_loss rows lack their 200-example intervals"
echo "make diff A=dense_qa B=dense_qa@$variant: exit 0, train.lr shown, $(grep -c '(n=' "$tmp/diff.log") paired intervals"

# A baseline record prefix as A: metrics, no intervals, and why.
md A=reports/baselines/ci/dense_qa B=dense_qa >"$tmp/base.log" 2>&1 || { cat "$tmp/base.log"; fail "make diff with a baseline prefix"; }
grep -q '^intervals: none: reports/baselines/ci/dense_qa.result.json is a baseline record' "$tmp/base.log" ||
  fail "no 'intervals: none' reason for a baseline record"
grep -qE '^  train\.steps +A 40  B 10$' "$tmp/base.log" || fail "the baseline's train.steps 40 vs 10 not shown"

# Missing or unknown runs: one clear line, non-zero exit.
if md A=dense_qa >"$tmp/missing.log" 2>&1; then fail "make diff without B succeeded"; fi
grep -q '^make diff: B is missing: give two runs' "$tmp/missing.log" || { cat "$tmp/missing.log"; fail "no 'B is missing' line"; }
if md A=dense_qa B=dense_qa@00000000 >"$tmp/unknown.log" 2>&1; then fail "make diff of an unknown run succeeded"; fi
grep -q "^make diff: B=dense_qa@00000000: no run $runs/dense_qa@00000000 .*(runs in $runs: dense_qa dense_qa@$variant" \
  "$tmp/unknown.log" || { cat "$tmp/unknown.log"; fail "no clear error for an unknown run"; }
echo "ok: make diff shows the differing config key, every metric with B-A and paired intervals, accepts a baseline prefix, and refuses a missing or unknown run in one line"
