#!/usr/bin/env bash
# e2e-lane: private (it writes only under its own temporary directories, so it may run beside other tests)
# End to end: the report gives a claim a verdict only on runs that differ in the factor the claim is about
# (pipeline/report/report_comparable.h). Built from copies of the committed cpu_arith baseline records (3 seeds of the
# four configurations, result.json and analysis.json; no training):
#  1. As recorded (MoEUT differs from the Transformer in its model section and train.n_microbatch, the answer-only
#     runs from the Q+A runs in train.loss_on_target_only): no line says "not comparable", and every depth claim has
#     a verdict and its numbers.
#  2. dense_qa's three seeds as if trained with SET=train.lr=0.008 (an override in the record, config and
#     config_sha256 recomputed as train and evaluate write them): every claim that reads dense_qa says
#     "not comparable: train.lr differs (... 0.002 / dense_qa 0.008)" with no verdict and no numbers, the short
#     answer counts those lines apart, and the claims on the other three configurations keep their verdicts.
# A second or two.
set -u
cd "$(dirname "$0")/../.."
fail() { echo "FAIL: $*"; exit 1; }
[ -x bin/report ] || fail "bin/report missing (run make first)"
command -v jq >/dev/null || { echo "SKIP: jq not installed"; exit 77; }
tmp=$(mktemp -d /tmp/test_report_comparable.XXXXXX)
trap '[ -n "${KEEP_TMP:-}" ] || rm -rf "$tmp"' EXIT
BASE=reports/baselines/cpu_arith
runs=$tmp/cpu_arith # a record names its experiment after the directory holding it
for f in $BASE/*.result.json; do
  n=$(basename "$f" .result.json)
  mkdir -p "$runs/$n"
  cp "$f" "$runs/$n/result.json"
  cp "$BASE/$n.analysis.json" "$runs/$n/analysis.json"
done
[ "$(ls "$runs" | wc -l)" = 12 ] || fail "expected 12 baseline records of cpu_arith"
report() { # report OUT: bin/report on the copies
  bin/report --experiment cpu_arith --runs "$runs" --out "$1" >"$1.log" 2>&1 || { cat "$1.log"; fail "bin/report"; }
}
claims() { sed -n '/^## Do the paper.s claims hold here?/,/^## What this run/p' "$1/report.md"; }
depth_line() { claims "$1" | grep -F "depth summary of $2 > $3:"; }

# 1. as recorded: comparable pairs, verdicts everywhere
report "$tmp/as_recorded"
if grep -q 'not comparable:' "$tmp/as_recorded/report.md"; then
  grep 'not comparable:' "$tmp/as_recorded/report.md"; fail "the committed configurations were called not comparable"
fi
for pair in "dense_answer dense_qa" "moeut_qa dense_qa" "moeut_answer dense_answer" "moeut_answer moeut_qa"; do
  set -- $pair
  depth_line "$tmp/as_recorded" "$1" "$2" | grep -qE ": (consistent|contradicted|not resolved at this size)\. Ours: difference " ||
    { claims "$tmp/as_recorded"; fail "depth claim $1 > $2 has no verdict on the committed runs"; }
done
echo "as recorded: no claim 'not comparable'; each depth claim with a verdict"

# 2. dense_qa at another learning rate
for n in dense_qa dense_qa.seed2 dense_qa.seed3; do
  f=$runs/$n/result.json
  overrides=$(jq -c '(.overrides + ["train.lr=0.008"]) | sort' "$f")
  sha=$( { jq -j '.config_text' "$f"; jq -j '.[] | "\n--set " + .' <<<"$overrides"; } | sha256sum | cut -c1-64)
  jq --argjson o "$overrides" --arg sha "$sha" '.overrides = $o | .config.train.lr = 0.008 | .config_sha256 = $sha' \
    "$f" >"$f.new" && mv "$f.new" "$f" || fail "jq on $f"
done
report "$tmp/lr"
c=$(claims "$tmp/lr")
want='not comparable: train.lr differs (dense_answer 0.002 / dense_qa 0.008). No verdict: these runs differ in more than the factor under study'
for claim in "Answer-only loss helps the Transformer (dense_answer - dense_qa > 0) (paper: +7 points" \
             "Answer-only loss helps the Transformer (dense_answer - dense_qa > 0), on the mean answer loss" \
             "Answer-only loss helps MoEUT more than the Transformer ((moeut_answer - moeut_qa) - (dense_answer - dense_qa) > 0) (paper" \
             "Answer-only loss helps MoEUT more than the Transformer, i.e." \
             "depth summary of dense_answer > dense_qa:"; do
  line=$(grep -F -- "$claim" <<<"$c") || { echo "$c"; fail "no line for: $claim"; }
  grep -qF -- "$want" <<<"$line" || { echo "$line"; fail "not marked '$want': $claim"; }
done
depth_line "$tmp/lr" moeut_qa dense_qa |
  grep -qF 'not comparable: train.lr differs (moeut_qa 0.002 / dense_qa 0.008). No verdict' ||
  { depth_line "$tmp/lr" moeut_qa dense_qa; fail "the architecture claim on Q+A is not marked not comparable"; }
# no verdict and no numbers on those lines
if grep 'not comparable:' <<<"$c" | grep -qE ': (consistent|contradicted|not resolved at this size|smaller than)|Ours'; then
  grep 'not comparable:' <<<"$c" | grep -E ': (consistent|contradicted|not resolved|smaller than)|Ours'
  fail "a not-comparable line carries a verdict or numbers"
fi
[ "$(grep -c ': not comparable: ' <<<"$c")" = 7 ] || { echo "$c"; fail "want 7 not-comparable claim lines"; }
# the claims on the other configurations keep theirs
for pair in "moeut_answer dense_answer" "moeut_answer moeut_qa"; do
  set -- $pair
  depth_line "$tmp/lr" "$1" "$2" | grep -qE ": (consistent|contradicted|not resolved at this size)\. Ours: difference " ||
    { depth_line "$tmp/lr" "$1" "$2"; fail "depth claim $1 > $2 lost its verdict"; }
done
grep -F -- "- Answer-only loss helps MoEUT (moeut_answer - moeut_qa > 0) (paper: +27 points" <<<"$c" |
  grep -qE 'examples: (consistent|contradicted|not resolved at this size|smaller than the paper.s effect)\. Ours:' ||
  fail "the MoEUT loss-mode claim lost its verdict"
# the short answer: counted apart, not as resolved
grep -qE '^- Answer: of the 15 claim lines below, .*, 8 not resolved at this size, 0 smaller than the paper.s effect; 7 not comparable \(no verdict' \
  "$tmp/lr/report.md" || { grep -- '- Answer:' "$tmp/lr/report.md"; fail "the short answer does not count 7 not comparable apart"; }
grep -q 'helps, on accuracy: Transformer, MoEUT more than the Transformer, the same on the headline module: not comparable; MoEUT: not resolved' \
  "$tmp/lr/report.md" || { grep -- '- Answer-only loss (instead' "$tmp/lr/report.md"; fail "short answer on the loss-mode claims"; }
grep -qF '| answer-only - Q+A, Transformer | +7 | not comparable: train.lr differs (dense_answer 0.002 / dense_qa 0.008) |' \
  "$tmp/lr/report.md" || fail "the paired comparisons table shows numbers for a confounded contrast"
echo "dense_qa at train.lr 0.008: 7 claim lines 'not comparable' naming train.lr (0.002 / 0.008), no verdict; the others keep theirs"
echo "ok: the report judges claims on comparable pairs only"
