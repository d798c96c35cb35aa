#!/usr/bin/env bash
# The report's "Loss-mode effect by training budget and learning rate" (pipeline/report/report_settings.c): with the
# dense pair swept over two budgets and the answer-only run at another learning rate, the table has a comparable row
# per budget with the paired effect (an analyze key differing does not make a pair incomparable), and the learning-rate
# point is "not comparable", naming train.lr with both values; the plots of the effect against train.steps are written.
# With the MoEUT pair at one of the budgets, the interaction table has a row for that budget alone, and its estimate is
# MoEUT's effect minus the Transformer's (the rows above it), on both quantities.
# A scratch copy of experiment ci, runs of 4-8 steps.
set -euo pipefail
cd "$(dirname "$0")/../.."
fail() { echo "FAIL: $*"; exit 1; }
for b in runs train evaluate report; do [ -x "bin/$b" ] || fail "bin/$b missing (run make first)"; done
exp=_settings_$$
[ -n "${KEEP:-}" ] || trap 'rm -rf "experiments/$exp" "data/$exp" "runs/$exp" "reports/$exp" build/plan/$exp-* build/reproduce/$exp' EXIT
mkdir -p "experiments/$exp"
cp experiments/ci/data.json experiments/ci/{dense,moeut}_{qa,answer}.json "experiments/$exp/"
small="train.evaluate_every=0 evaluate.max_examples_per_set=20 analyze.enabled=false"
m() { env -u MAKEFLAGS -u MFLAGS -u MAKELEVEL make --no-print-directory "$@" EXPERIMENT=$exp 2>&1; }
out=$(m sweep RUNS=dense_qa SET="$small" SWEEP="train.steps=4,8") || { echo "$out" | tail -30; fail "sweep"; }
# an analyze key differs in the answer-only points: it changes neither training nor evaluation, so the pairs stay
# comparable (config_key_is_analysis_only)
out=$(m sweep RUNS=dense_answer SET="$small analyze.eval_prompts=7" SWEEP="train.steps=4,8") ||
  { echo "$out" | tail -30; fail "sweep"; }
out=$(m sweep RUNS=dense_answer SET="$small train.steps=4" SWEEP="train.lr=1e-3") || { echo "$out" | tail -30; fail "lr point"; }
out=$(m sweep RUNS="moeut_qa moeut_answer" SET="$small" SWEEP="train.steps=4") || { echo "$out" | tail -30; fail "moeut"; }
section=$(sed -n '/^## Loss-mode effect by training budget and learning rate/,/^## [^L]/p' "reports/$exp/report.md")
[ -n "$section" ] || fail "the report has no loss-mode-by-setting section"
for steps in 4 8; do
  grep -qE "^\| Transformer \| $steps \| 0.002 \|.*\| [+-][0-9.]+ \[[+-][0-9.]+, [+-][0-9.]+\].*\| yes \|" <<<"$section" ||
    { echo "$section"; fail "no comparable row with an effect and its interval at train.steps $steps"; }
done
grep -qE "^\| Transformer \| 4 \| 0.001 \|.*not comparable: train.lr differs \(dense_answer@[0-9a-f]{8} 0.001 / dense_qa(@[0-9a-f]{8})? 0.002\)" <<<"$section" ||
  { echo "$section"; fail "the lr point is not marked not comparable, naming train.lr"; }
for f in loss_mode_by_budget loss_mode_by_budget_answer_loss; do
  [ -s "reports/$exp/$f.svg" ] || fail "no plot $f.svg of the effect against train.steps"
done
# The interaction table: one row (train.steps 4), and interaction = MoEUT's effect - the Transformer's, per quantity
# (each printed to 1 or 2 decimals, so within rounding).
inter=$(grep -E '^\| [0-9]+ \| 0.002 \| [^|]+ / [^|]+ \| [0-9]+ \| [+-][0-9.]+ \[' <<<"$section" || true)
[ "$(grep -c . <<<"$inter")" = 1 ] || { echo "$section"; fail "the interaction table should have exactly one row"; }
grep -qE '^\| 4 \| 0.002 \| dense_answer(@[0-9a-f]{8})? / moeut_answer(@[0-9a-f]{8})? \| 1 \|' <<<"$inter" ||
  { echo "$inter"; fail "the interaction row is not of train.steps 4, dense_answer / moeut_answer, 1 seed"; }
effect() { # $1 arch, $2 column (6 accuracy, 7 answer loss): the estimate of the 4-step row
  echo "$section" | awk -F' \\| ' -v a="$1" -v c="$2" '$1 == "| " a && $2 == "4" && $3 == "0.002" { split($c, v, " "); print v[1] }'
}
for col in 6 7; do
  tol=$([ $col = 6 ] && echo 0.151 || echo 0.0151) # three roundings to 0.1 points or 0.01 nats
  d=$(effect Transformer $col); me=$(effect MoEUT $col)
  i=$(echo "$inter" | awk -F' \\| ' -v c=$((col - 1)) '{ split($c, v, " "); print v[1] }')
  [ -n "$d" ] && [ -n "$me" ] && [ -n "$i" ] || { echo "$section"; fail "could not read the effects of column $col"; }
  awk -v d="$d" -v m="$me" -v i="$i" -v t="$tol" 'BEGIN { e = (m - d) - i; exit !(e <= t && e >= -t) }' ||
    fail "interaction $i is not MoEUT's effect $me minus the Transformer's $d (column $col)"
done
echo "ok: the report's loss-mode-by-setting table: a comparable row with the paired effect per budget, the lr point not comparable (train.lr named), both plots written, the interaction at the one budget with both pairs equal to the difference of their effects"
