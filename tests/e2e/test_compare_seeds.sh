#!/usr/bin/env bash
# End to end: bin/compare on a replication with seeds the baselines do not hold, its config-change messages, and
# `make diff A=RUN B=baseline`. A scratch experiment with cpu_arith's run configs and a copy of its baselines (3
# recorded seeds per run config, recorded before analyze.eval_prompts was added to the configs); its runs are copies
# of recorded seeds' result records re-sealed as evaluate writes them for the current config file and another seed
# (config_text, config, overrides "train.seed=S", config_sha256, run, seed): no training.
#  1. Seeds 4 and 5 of every run config (runs RUN.seed4, RUN.seed5): each is compared with the recorded seeds' mean
#     within the seed spread (today's rule for a recorded seed), the recorded seeds not run here are one note per run
#     config and no failure, the config difference in analyze.eval_prompts (which changes neither training nor
#     evaluation) is a note: "8 compared", exit 0.
#  2. A replication whose final loss moved 30% is WORSE (exit 1).
#  3. A replication and a recorded seed trained at another learning rate: not comparable (exit 2), and the messages
#     name "train.lr 0.002 -> 0.008" (the replication's own train.seed is not named as a change).
#  4. make compare EXPERIMENT=... SEEDS=5 with seeds 1 to 5: the seeds 4 and 5 are compared too ("20 compared").
#  5. make diff A=dense_qa B=baseline diffs a run with its own recorded baseline; a baseline record's path
#     (.result.json) is accepted; B=baseline of a seed the baselines do not hold is one error line, exit 2.
# A few seconds.
set -u
cd "$(dirname "$0")/../.."
fail() { echo "FAIL: $*"; exit 1; }
for b in compare runs; do [ -x bin/$b ] || fail "bin/$b missing (run make first)"; done
command -v jq >/dev/null || { echo "SKIP: jq not installed"; exit 77; }
exp=_cmpseeds_$$
tmp=$(mktemp -d /tmp/test_compare_seeds.XXXXXX)
trap '[ -n "${KEEP_TMP:-}" ] || rm -rf "$tmp" "experiments/$exp" "reports/baselines/$exp" "runs/$exp" "data/$exp" \
  "reports/$exp" build/plan/$exp-* "build/reproduce/$exp"' EXIT
SRC=reports/baselines/cpu_arith
BASE=reports/baselines/$exp
RUNS=runs/$exp
CONFIGS="dense_qa dense_answer moeut_qa moeut_answer"
mkdir -p "experiments/$exp" "$BASE" "$RUNS"
cp experiments/cpu_arith/data.json "experiments/$exp/"
# the replications analyze fewer prompts than the baselines did: a config difference in a key that changes neither
# training nor evaluation, which compare must name in a note and compare through
for c in $CONFIGS; do
  jq '.analyze.eval_prompts = 400' "experiments/cpu_arith/$c.json" >"experiments/$exp/$c.json" || fail "jq on $c.json"
done
cp "$SRC/tolerances.json" "$BASE/"
for f in "$SRC"/*.result.json; do # the baselines, as recorded, under the scratch experiment's name
  jq --arg e "$exp" '.experiment = $e' "$f" >"$BASE/$(basename "$f")" || fail "jq on $f"
done

# forge SRC_RECORD RUN SEED [OVERRIDE]: runs/EXP/RUN/result.json, SRC_RECORD's results evaluated for the current
# experiments/EXP/CONFIG.json with --set train.seed=SEED (none for seed 1) and OVERRIDE
forge() {
  local src=$1 run=$2 seed=$3 extra=${4:-} cfg ov sha
  cfg=experiments/$exp/${run%%.seed*}.json
  ov=$(jq -cn --arg s "$seed" --arg x "$extra" \
    '([if $s == "1" then empty else "train.seed=" + $s end] + [if $x == "" then empty else $x end]) | sort')
  sha=$( { cat "$cfg"; jq -j '.[] | "\n--set " + .' <<<"$ov"; } | sha256sum | cut -c1-64)
  mkdir -p "$RUNS/$run"
  jq --rawfile text "$cfg" --slurpfile c "$cfg" --argjson o "$ov" --arg sha "$sha" --arg run "$run" \
    --argjson seed "$seed" --arg e "$exp" \
    '.experiment = $e | .run = $run | .seed = $seed | .overrides = $o | .config_text = $text | .config_sha256 = $sha
     | .config = ($c[0] | .train.seed = $seed
                  | reduce ($o[] | select(startswith("train.seed=") | not) | capture("^train\\.(?<k>[^=]+)=(?<v>.*)$"))
                      as $kv (.; .train[$kv.k] = ($kv.v | fromjson)))' \
    "$src" >"$RUNS/$run/result.json" || fail "forging $run"
}
gate() { # gate LOG [flags]: bin/compare of the scratch runs; prints the exit status
  local log=$1
  shift
  bin/compare --baselines "$BASE" --runs "$RUNS" "$@" >"$log" 2>"$log.err"
  echo $?
}

# 1. seeds 4 and 5
for c in $CONFIGS; do
  forge "$SRC/$c.seed2.result.json" "$c.seed4" 4
  forge "$SRC/$c.seed3.result.json" "$c.seed5" 5
done
rc=$(gate "$tmp/rep.log")
[ "$rc" = 0 ] || { cat "$tmp/rep.log" "$tmp/rep.log.err"; fail "seeds 4 and 5: compare exit $rc, want 0"; }
grep -q '^compare: 8 compared, 12 not compared (12 recorded seed(s) not run here, replicated with other seeds): all metrics within tolerances$' \
  "$tmp/rep.log" || { tail -3 "$tmp/rep.log"; fail "seeds 4 and 5: the summary line"; }
for c in $CONFIGS; do
  for s in 4 5; do
    grep -q "^== $c.seed$s: mean of 3 seeds' baselines ($BASE/$c\[.seed<S>\].result.json; a seed they do not hold, compared with their spread; tolerance at least 5 sd)" \
      "$tmp/rep.log" || { cat "$tmp/rep.log"; fail "$c.seed$s not compared with the recorded seeds' mean"; }
  done
  grep -q "^note: $c: the recorded seeds $c, $c.seed2, $c.seed3 were not run here (not compared); $c.seed4, $c.seed5," \
    "$tmp/rep.log" || { cat "$tmp/rep.log"; fail "no note on $c's recorded seeds not run here"; }
done
grep -q "^note: dense_qa.seed4: compared although its config differs from the baseline's, in keys that change neither training nor evaluation (analyze.eval_prompts 500 -> 400)" \
  "$tmp/rep.log" || { cat "$tmp/rep.log"; fail "no note on the analysis-only config difference"; }
echo "seeds 4 and 5: 8 compared with the recorded seeds' mean and spread, exit 0"

# 2. a replication that moved
f=$RUNS/dense_qa.seed4/result.json
jq '.training.final_train_loss *= 1.3' "$f" >"$f.new" && mv "$f.new" "$f"
rc=$(gate "$tmp/worse.log" --only-failures)
[ "$rc" = 1 ] || { cat "$tmp/worse.log" "$tmp/worse.log.err"; fail "a replication 30% off: compare exit $rc, want 1"; }
sed -n '/^== dense_qa.seed4: mean/,/^== dense_qa.seed4:/p' "$tmp/worse.log" | grep -qE '^training\.final_train_loss .* WORSE$' ||
  { cat "$tmp/worse.log"; fail "dense_qa.seed4's final_train_loss not WORSE"; }
echo "a replication with a 30% higher final loss: WORSE, exit 1"

# 3. another learning rate: the keys and values are named
forge "$SRC/dense_qa.seed2.result.json" dense_qa.seed4 4 train.lr=0.008
rc=$(gate "$tmp/lr.log")
[ "$rc" = 2 ] || { cat "$tmp/lr.log" "$tmp/lr.log.err"; fail "a replication at lr 0.008: compare exit $rc, want 2"; }
grep -q "dense_qa.seed4/result.json: cannot compare with the mean of $BASE/dense_qa\[.seed<S>\].result.json: its config differs from the baseline's: analyze.eval_prompts 500 -> 400; train.lr 0.002 -> 0.008 (config_sha256 " \
  "$tmp/lr.log.err" || { cat "$tmp/lr.log.err"; fail "the error does not name train.lr 0.002 -> 0.008"; }
grep -q '(dense_qa.seed4: config differs from the baseline.s: analyze.eval_prompts 500 -> 400; train.lr 0.002 -> 0.008;' \
  "$tmp/lr.log" || { tail -1 "$tmp/lr.log"; fail "the summary does not name train.lr 0.002 -> 0.008"; }
if grep -q 'train.seed' "$tmp/lr.log.err"; then cat "$tmp/lr.log.err"; fail "a replication's seed named as a change"; fi
forge "$SRC/dense_qa.seed2.result.json" dense_qa.seed4 4
forge "$SRC/dense_qa.result.json" dense_qa 1 train.lr=0.008
rc=$(gate "$tmp/lr1.log" --only dense_qa)
[ "$rc" = 2 ] || { cat "$tmp/lr1.log" "$tmp/lr1.log.err"; fail "a recorded seed at lr 0.008: compare exit $rc, want 2"; }
grep -q "dense_qa/result.json: cannot compare with $BASE/dense_qa.result.json: its config differs from the baseline's: analyze.eval_prompts 500 -> 400; train.lr 0.002 -> 0.008 (config_sha256 [0-9a-f]\{12\}\.\.\. -> [0-9a-f]\{12\}\.\.\.)" \
  "$tmp/lr1.log.err" || { cat "$tmp/lr1.log.err"; fail "a recorded seed's config change: train.lr not named"; }
echo "another learning rate: not comparable (exit 2), naming train.lr 0.002 -> 0.008"

# 4. make compare with SEEDS=5: seeds 1-3 recorded, 4 and 5 replications
for c in $CONFIGS; do
  forge "$SRC/$c.result.json" "$c" 1
  forge "$SRC/$c.seed2.result.json" "$c.seed2" 2
  forge "$SRC/$c.seed3.result.json" "$c.seed3" 3
done
m() { env -u MAKEFLAGS -u MFLAGS -u MAKELEVEL make --no-print-directory "$@" EXPERIMENT=$exp 2>&1; }
out=$(m compare SEEDS=5) || { echo "$out" | grep -v '^metric\|^$' | tail -20; fail "make compare SEEDS=5"; }
grep -q '^compare: 20 compared, 0 not compared: all metrics within tolerances$' <<<"$out" ||
  { echo "$out" | tail -3; fail "make compare SEEDS=5 did not compare the 20 runs"; }
echo "make compare SEEDS=5: the 8 replications compared beside the 12 recorded seeds"

# 5. make diff against the run's own baseline
out=$(m diff A=dense_qa B=baseline) || { echo "$out"; fail "make diff A=dense_qa B=baseline"; }
grep -q "^bin/compare --diff runs/$exp/dense_qa $BASE/dense_qa\$" <<<"$out" || { echo "$out" | head -3; fail "B=baseline resolved wrongly"; }
grep -qE '^  analyze\.eval_prompts +A 400  B 500$' <<<"$out" || { echo "$out" | head -8; fail "the diff's config key"; }
grep -qE '^training\.final_train_loss ' <<<"$out" || fail "the diff has no metric rows"
out=$(m diff A="$BASE/dense_qa.seed2.result.json" B=dense_qa.seed2) || { echo "$out"; fail "make diff with a .result.json path"; }
grep -q "^B = runs/$exp/dense_qa.seed2 " <<<"$out" || { echo "$out" | head -3; fail "the .result.json path"; }
out=$(m diff A=dense_qa.seed4 B=baseline) && fail "B=baseline of a seed the baselines do not hold: exit 0"
grep -q "^make diff: B=baseline: no baseline record $BASE/dense_qa.seed4.result.json (recorded in $BASE: dense_answer " <<<"$out" ||
  { echo "$out"; fail "B=baseline without a record: no clear error line"; }
echo "make diff A=dense_qa B=baseline: the run against its recorded baseline; a .result.json path accepted"
echo "ok: replications on other seeds are compared with the recorded seeds' spread; config changes are named; make diff B=baseline"
