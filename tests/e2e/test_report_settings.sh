#!/usr/bin/env bash
# The report's "Loss-mode effect by training budget and learning rate" (pipeline/report/report_settings.c): with the
# dense pair swept over two budgets and the answer-only run at another learning rate, the table has a comparable row
# per budget with the paired effect (an analyze key differing does not make a pair incomparable), and the learning-rate
# point is "not comparable", naming train.lr with both values; the plot of the effect against train.steps is written.
# A scratch copy of experiment ci, runs of 4-8 steps.
set -euo pipefail
cd "$(dirname "$0")/../.."
fail() { echo "FAIL: $*"; exit 1; }
for b in runs train evaluate report; do [ -x "bin/$b" ] || fail "bin/$b missing (run make first)"; done
exp=_settings_$$
[ -n "${KEEP:-}" ] || trap 'rm -rf "experiments/$exp" "data/$exp" "runs/$exp" "reports/$exp" build/plan/$exp-* build/reproduce/$exp' EXIT
mkdir -p "experiments/$exp"
cp experiments/ci/data.json experiments/ci/dense_qa.json experiments/ci/dense_answer.json "experiments/$exp/"
small="train.evaluate_every=0 evaluate.max_examples_per_set=20 analyze.enabled=false"
m() { env -u MAKEFLAGS -u MFLAGS -u MAKELEVEL make --no-print-directory "$@" EXPERIMENT=$exp 2>&1; }
out=$(m sweep RUNS=dense_qa SET="$small" SWEEP="train.steps=4,8") || { echo "$out" | tail -30; fail "sweep"; }
# an analyze key differs in the answer-only points: it changes neither training nor evaluation, so the pairs stay
# comparable (config_key_is_analysis_only)
out=$(m sweep RUNS=dense_answer SET="$small analyze.eval_prompts=7" SWEEP="train.steps=4,8") ||
  { echo "$out" | tail -30; fail "sweep"; }
out=$(m sweep RUNS=dense_answer SET="$small train.steps=4" SWEEP="train.lr=1e-3") || { echo "$out" | tail -30; fail "lr point"; }
section=$(sed -n '/^## Loss-mode effect by training budget and learning rate/,/^## [^L]/p' "reports/$exp/report.md")
[ -n "$section" ] || fail "the report has no loss-mode-by-setting section"
for steps in 4 8; do
  echo "$section" | grep -qE "^\| Transformer \| $steps \| 0.002 \|.*\| [+-][0-9.]+ \[[+-][0-9.]+, [+-][0-9.]+\].*\| yes \|" ||
    { echo "$section"; fail "no comparable row with an effect and its interval at train.steps $steps"; }
done
echo "$section" | grep -qE "^\| Transformer \| 4 \| 0.001 \|.*not comparable: train.lr differs \(dense_answer@[0-9a-f]{8} 0.001 / dense_qa(@[0-9a-f]{8})? 0.002\)" ||
  { echo "$section"; fail "the lr point is not marked not comparable, naming train.lr"; }
[ -s "reports/$exp/loss_mode_by_budget.svg" ] || fail "no plot of the effect against train.steps"
echo "ok: the report's loss-mode-by-setting table: a comparable row with the paired effect per budget, the lr point not comparable (train.lr named), the plot written"
