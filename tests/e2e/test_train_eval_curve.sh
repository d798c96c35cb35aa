#!/usr/bin/env bash
# e2e-lane: private (it writes only under its own temporary directories, so it may run beside other tests)
# Accuracy during training (train.evaluate_every / evaluate_examples / keep_checkpoints, model/training/train_eval.h):
#  - eval_curve.jsonl has one line per evaluate_every step (not step 0), n = evaluate_examples per set, accuracy in
#    [0, 1] and = correct / n;
#  - evaluating does not change training: the weights and optimizer state equal, bit for bit, those of the same run
#    without evaluate_every (MoEUT with expert dropout, so the dropout RNG must be untouched too);
#  - the curve's numbers are bin/evaluate's: a kept checkpoint evaluated with bin/evaluate --checkpoint step<S> on the
#    same examples gives the curve line's correct counts and mean answer losses;
#  - resume: a run stopped mid-way, with a stale curve line and kept checkpoint of a later step (what a crash after an
#    evaluation but before the checkpoint leaves), continues to the same curve, no duplicate or missing step;
#  - bad values and --checkpoint names are refused with one line.
source "$(dirname "$0")/train_common.sh"
command -v python3 >/dev/null || { echo "SKIP: python3 missing"; exit 77; }
[ -x bin/evaluate ] || fail "bin/evaluate missing (run make first)"

# with_train_keys IN OUT JSON_FRAGMENT: the config with extra "train" keys (inserted after "precision").
with_train_keys() { sed "s/\"precision\": \"fp32\"/\"precision\": \"fp32\", $3/" "$1" >"$2"; }

train_data "$tmp/data"
steps=12 every=4 examples=50 # examples = the config's evaluate.max_examples_per_set: bin/evaluate sees the same ones
train_config "$tmp/plain.json" moeut answer $steps ff_expert_dropout=0.1 att_expert_dropout=0.1
with_train_keys "$tmp/plain.json" "$tmp/eval.json" \
  "\"evaluate_every\": $every, \"evaluate_examples\": $examples, \"keep_checkpoints\": true"

run_train() { # run_train CONFIG DIR [ARGS...]
  local cfg=$1 dir=$2
  shift 2
  bin/train --config "$cfg" --data "$tmp/data" --out "$dir" --threads 1 "$@" >>"$dir.log" 2>&1 \
    || { cat "$dir.log"; fail "train $cfg -> $dir $*"; }
}
run_train "$tmp/plain.json" "$tmp/plain"
run_train "$tmp/eval.json" "$tmp/eval"

# the same trajectory
cmp "$tmp/plain/model.safetensors" "$tmp/eval/model.safetensors" || fail "evaluate_every changed the trained weights"
cmp "$tmp/plain/optim.safetensors" "$tmp/eval/optim.safetensors" || fail "evaluate_every changed the optimizer state"
diff <(strip_rate "$tmp/plain/metrics.jsonl") <(strip_rate "$tmp/eval/metrics.jsonl") >/dev/null \
  || fail "evaluate_every changed metrics.jsonl"
[ ! -e "$tmp/plain/eval_curve.jsonl" ] && [ ! -e "$tmp/plain/checkpoints" ] || fail "a run without evaluate_every wrote a curve"
echo "ok: weights, optimizer state and metrics identical with and without evaluate_every"

# the curve
python3 - "$tmp/eval/eval_curve.jsonl" "$steps" "$every" "$examples" <<'PY' || fail "eval_curve.jsonl"
import json, sys
path, steps, every, examples = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
lines = [json.loads(l) for l in open(path)]
want = list(range(every, steps + 1, every))
assert [l["step"] for l in lines] == want, f"steps {[l['step'] for l in lines]}, expected {want}"
for l in lines:
    assert l["tokens"] == l["step"] * 8 * 128, l
    assert sorted(l["sets"]) == ["extrapolate", "interpolate"], l
    for name, s in l["sets"].items():
        assert s["n"] == examples, (name, s)
        assert 0 <= s["accuracy"] <= 1 and abs(s["accuracy"] - s["correct"] / s["n"]) < 1e-12, (name, s)
        assert s["mean_answer_loss"] > 0, (name, s)
print("curve steps", [l["step"] for l in lines], "accuracy",
      [(l["sets"]["interpolate"]["accuracy"], l["sets"]["extrapolate"]["accuracy"]) for l in lines])
PY
grep -q "eval at step $every: interpolate" "$tmp/eval.log" || fail "no log line for the evaluation at step $every"
echo "ok: eval_curve.jsonl has steps $every..$steps every $every, n = $examples, accuracy = correct/n in [0, 1]"

# kept checkpoints, evaluable by bin/evaluate
for s in $(seq $every $every $steps); do
  [ -f "$tmp/eval/checkpoints/step$s/model.safetensors" ] && [ -f "$tmp/eval/checkpoints/step$s/train_summary.json" ] \
    || fail "checkpoints/step$s incomplete"
done
[ "$(ls "$tmp/eval/checkpoints")" = "$(printf 'step12\nstep4\nstep8')" ] || fail "checkpoints/ holds $(ls "$tmp/eval/checkpoints")"
cmp "$tmp/eval/checkpoints/step$steps/model.safetensors" "$tmp/eval/model.safetensors" \
  || fail "the checkpoint kept at the last step differs from the final weights"
cmp -s "$tmp/eval/checkpoints/step4/model.safetensors" "$tmp/eval/checkpoints/step8/model.safetensors" \
  && fail "the checkpoints of steps 4 and 8 are identical"
bin/evaluate --run "$tmp/eval" --config "$tmp/eval.json" --data "$tmp/data" --checkpoint step8 \
  --out "$tmp/eval/checkpoints/step8/result.json" >"$tmp/ck8.log" 2>&1 || { cat "$tmp/ck8.log"; fail "evaluate --checkpoint step8"; }
python3 - "$tmp/eval/eval_curve.jsonl" "$tmp/eval/checkpoints/step8/result.json" <<'PY' || fail "evaluate --checkpoint step8 disagrees with the curve"
import json, sys
curve = {l["step"]: l for l in map(json.loads, open(sys.argv[1]))}
r = json.load(open(sys.argv[2]))
assert r["run"] == "eval" and r["training"]["steps"] == 8, (r["run"], r["training"]["steps"])
for name in ("interpolate", "extrapolate"):
    c, e = curve[8]["sets"][name], r["evaluation"]["sets"][name]
    assert (c["n"], c["correct"]) == (e["n"], e["correct"]), (name, c, e)
    assert c["mean_answer_loss"] == e["mean_answer_loss"], (name, c["mean_answer_loss"], e["mean_answer_loss"])
print("step 8: curve and bin/evaluate --checkpoint agree:", {n: curve[8]["sets"][n]["mean_answer_loss"] for n in curve[8]["sets"]})
PY
bin/analyze --run "$tmp/eval" --config "$tmp/eval.json" --data "$tmp/data" --checkpoint step8 \
  --out "$tmp/eval/checkpoints/step8/analysis.json" >"$tmp/an8.log" 2>&1 || { cat "$tmp/an8.log"; fail "analyze --checkpoint step8"; }
[ -s "$tmp/eval/checkpoints/step8/analysis.json" ] || fail "analyze --checkpoint step8 wrote no record"
echo "ok: checkpoints/step<S> kept at each evaluation; bin/evaluate --checkpoint step8 reproduces the curve line;"
echo "    bin/analyze --checkpoint step8 reads it too"

# resume: stop after step 6, fake what a crash after the step-8 evaluation would leave, continue
d="$tmp/resumed"
run_train "$tmp/eval.json" "$d" --stop-after 6
[ "$(wc -l <"$d/eval_curve.jsonl")" = 1 ] || fail "after --stop-after 6: $(wc -l <"$d/eval_curve.jsonl") curve lines, expected 1"
echo '{"step": 8, "tokens": 0, "sets": {}}' >>"$d/eval_curve.jsonl"
mkdir -p "$d/checkpoints/step8" && echo stale >"$d/checkpoints/step8/model.safetensors"
run_train "$tmp/eval.json" "$d" --resume
cmp "$tmp/eval/eval_curve.jsonl" "$d/eval_curve.jsonl" || fail "the resumed run's curve differs from the uninterrupted one"
cmp "$tmp/eval/checkpoints/step8/model.safetensors" "$d/checkpoints/step8/model.safetensors" \
  || fail "the stale kept checkpoint of step 8 was not replaced"
same_as_ref "$tmp/eval" "$d" "resume mid-run with evaluate_every: same weights and the same curve"

# starting over removes the old curve and checkpoints
run_train "$tmp/eval.json" "$d" --stop-after 2
[ ! -e "$d/eval_curve.jsonl" ] && [ ! -e "$d/checkpoints" ] || fail "starting over kept the old curve or checkpoints"
echo "ok: starting over removes eval_curve.jsonl and checkpoints/"

# refusals
refused() { # refused LABEL EXPECTED_TEXT CMD...
  local label=$1 want=$2 rc=0
  shift 2
  "$@" >"$tmp/refused.log" 2>&1 || rc=$?
  [ "$rc" = 1 ] || { cat "$tmp/refused.log"; fail "$label: exit status $rc, expected 1"; }
  grep -q -- "$want" "$tmp/refused.log" || { cat "$tmp/refused.log"; fail "$label: message"; }
  echo "ok: $label refused: $(tail -n 1 "$tmp/refused.log")"
}
with_train_keys "$tmp/plain.json" "$tmp/bad1.json" '"evaluate_every": -1'
refused "evaluate_every -1" "bad1.json: train.evaluate_every: must be >= 0" \
  bin/train --config "$tmp/bad1.json" --data "$tmp/data" --out "$tmp/bad"
with_train_keys "$tmp/plain.json" "$tmp/bad2.json" '"keep_checkpoints": true'
refused "keep_checkpoints without evaluate_every" "bad2.json: train.keep_checkpoints: needs evaluate_every > 0" \
  bin/train --config "$tmp/bad2.json" --data "$tmp/data" --out "$tmp/bad"
with_train_keys "$tmp/plain.json" "$tmp/bad3.json" '"evaluate_examples": "all"'
refused "evaluate_examples \"all\"" "train.evaluate_examples" \
  bin/train --config "$tmp/bad3.json" --data "$tmp/data" --out "$tmp/bad"
[ ! -e "$tmp/bad" ] || fail "a refused config created its run directory"
refused "--checkpoint ../x" "--checkpoint ../x: expected step<S>" \
  bin/evaluate --run "$tmp/eval" --config "$tmp/eval.json" --data "$tmp/data" --checkpoint ../x --out "$tmp/x.json"
refused "--checkpoint step5" "checkpoints/step5 does not exist" \
  bin/evaluate --run "$tmp/eval" --config "$tmp/eval.json" --data "$tmp/data" --checkpoint step5 --out "$tmp/x.json"
echo "PASS"
