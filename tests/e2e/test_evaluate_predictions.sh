#!/usr/bin/env bash
# e2e-lane: private (it writes only under its own temporary directories, so it may run beside other tests)
# bin/evaluate's predictions.jsonl (schema dm-math-predictions v2, reports/README.md) on a trained tiny dense run:
#   - written beside --out by default (and where --predictions says) with its sidecar predictions.meta.json, nothing
#     temporary left, --help documents it;
#   - a JSON-lines table: every line parses to an object with the same keys in the same order (and pandas, where
#     installed, reads it with read_json(lines=True) as one table of exactly those columns and one row per example);
#   - tests/e2e/predictions_check.py against the result record of the same evaluation: the sidecar with the
#     record's experiment, run, code_version, backend, hardware and config_sha256, the file's line count and sha256;
#     every line a JSON object with exactly the schema's keys and types; the sets in order, indices 0..n-1 in shard
#     order; lines, correct flags per
#     set and per module equal the record's n and correct; the mean answer_loss per set and per module equals the
#     record's mean_answer_loss (1e-9 relative); predicted == answer iff correct; greedy_correct on exactly the first
#     greedy_n examples of each set, agreeing greedy_agree times;
#   - negative controls: altered copies (a flipped verdict, a loss moved by 1e-6 relative, a dropped line, a wrong
#     config_sha256, a predicted string changed, a greedy_correct nulled, a line cut in half, a sidecar of other
#     bytes) must each be reported;
#   - the outputs are one set: a run that fails after evaluating (--out in a place that cannot be created) leaves
#     the earlier predictions.jsonl and its sidecar byte-identical, a run whose --predictions cannot be created leaves
#     the earlier result.json byte-identical, each with one error line naming the path and no temporary file; a run
#     killed (SIGKILL) while evaluating leaves earlier files untouched; --predictions or its sidecar equal to --out is
#     refused.
# 400 training steps (~13 s on one core) and 400 examples per set: enough for a few correct examples, so that
# "correct implies predicted == answer" is not checked on zero lines.
source "$(dirname "$0")/train_common.sh"

PY=$(command -v python3 || true)
[ -n "$PY" ] || { echo "SKIP: no python3 (the checks use only its standard library)"; exit 77; }
[ -x bin/evaluate ] || fail "bin/evaluate not built (run make first)"
bin/evaluate --help | grep -q -- "--predictions" || fail "--help does not document --predictions"
bin/evaluate --help | grep -q "predictions.jsonl" || fail "--help does not name the default predictions.jsonl"

train_data "$tmp/data"
train_config "$tmp/dense.json.tmp" dense qa 400
sed -e 's/"max_examples_per_set": 50/"max_examples_per_set": 400/' \
    -e 's/"greedy_check_examples": 5/"greedy_check_examples": 20/' "$tmp/dense.json.tmp" >"$tmp/dense.json"
grep -q '"max_examples_per_set": 400' "$tmp/dense.json" && grep -q '"greedy_check_examples": 20' "$tmp/dense.json" \
  || fail "could not resize the evaluation in the run config"
bin/train --threads 1 --config "$tmp/dense.json" --data "$tmp/data" --out "$tmp/run" >"$tmp/train.log" 2>&1 \
  || { cat "$tmp/train.log"; fail "bin/train failed"; }

# evaluate OUT_DIR [options]: bin/evaluate of the run into OUT_DIR/result.json; its stderr in OUT_DIR.log.
evaluate() {
  local out=$1
  shift
  bin/evaluate --run "$tmp/run" --config "$tmp/dense.json" --data "$tmp/data" --out "$out/result.json" "$@" \
    2>"$out.log"
}
no_temps() { # no_temps DIR LABEL
  local left
  left=$(ls "$1" | grep -E '\.tmp\.' || true)
  [ -z "$left" ] || fail "$2: temporary files left in $1: $left"
}

# 1. The default path beside --out, validated against the record.
mkdir -p "$tmp/ev"
evaluate "$tmp/ev" || { cat "$tmp/ev.log"; fail "bin/evaluate failed"; }
[ -s "$tmp/ev/predictions.jsonl" ] || fail "no predictions.jsonl beside --out"
[ -s "$tmp/ev/predictions.meta.json" ] || fail "no predictions.meta.json beside predictions.jsonl"
no_temps "$tmp/ev" "evaluate"
grep -q "wrote $tmp/ev/result.json and $tmp/ev/predictions.jsonl (metadata in $tmp/ev/predictions.meta.json)" \
  "$tmp/ev.log" || fail "the log does not name the three outputs"
"$PY" tests/e2e/predictions_check.py validate "$tmp/ev/predictions.jsonl" "$tmp/ev/result.json" \
  || fail "predictions.jsonl does not agree with result.json (above)"

# 1b. One table: every line the same keys (json), and pandas reads it as one table where it is installed.
"$PY" - "$tmp/ev/predictions.jsonl" <<'PYTABLE' || fail "predictions.jsonl is not one JSON-lines table (above)"
import json, sys
lines = [json.loads(l) for l in open(sys.argv[1], encoding="utf-8")]
keys = {tuple(l) for l in lines}
if len(keys) != 1:
    sys.exit("lines with different keys: %s" % sorted(keys))
cols = list(next(iter(keys)))
print("ok: json: %d lines, every one with the keys %s" % (len(lines), cols))
try:
    import pandas
except ImportError:
    print("NOTE: pandas not installed (Debian python3-pandas, in mk/deps.sh test): its read_json check skipped")
    sys.exit(0)
df = pandas.read_json(sys.argv[1], lines=True)
if list(df.columns) != cols or len(df) != len(lines):
    sys.exit("pandas read %d rows with columns %s, expected %d rows with %s" % (len(df), list(df.columns), len(lines), cols))
if df["set"].isna().any() or df["answer_loss"].isna().any():
    sys.exit("pandas: a row without set or answer_loss (a line of another schema?)")
print("ok: pandas %s: read_json(lines=True) gives %d rows x %d columns" % (pandas.__version__, len(df), len(cols)))
PYTABLE

# 2. The checks must be able to fail: altered copies, in memory.
"$PY" - "$tmp/ev/predictions.jsonl" "$tmp/ev/result.json" "$tmp/cut.jsonl" <<'EOF' || fail "negative controls (above)"
import copy, json, sys
sys.path.insert(0, "tests/e2e")
import predictions_check as pc

header, lines, problems = pc.load(sys.argv[1])
record = json.load(open(sys.argv[2]))
assert not problems, problems
ev = record["evaluation"]["sets"]
n_correct = sum(ln["correct"] for ln in lines)
print("%d example lines, %d correct (%s), %d greedy-checked" % (
    len(lines), n_correct, ", ".join("%s %d/%d" % (s, v["correct"], v["n"]) for s, v in ev.items()),
    sum(ln["greedy_correct"] is not None for ln in lines)))
if n_correct == 0:
    sys.exit("no example is correct: 'correct implies predicted == answer' would check nothing (train longer?)")
fails = 0

def expect(label, check, alter):
    global fails
    h, ls = copy.deepcopy(header), copy.deepcopy(lines)
    alter(h, ls)
    d = pc.validate(h, ls, record)
    if d[check]:
        print("ok: negative control: %s: the %s check reports it (%s)" % (label, check, d[check][0]))
    else:
        fails += 1
        print("FAIL: negative control: %s: the %s check did not report it" % (label, check))

first_wrong = next(i for i, ln in enumerate(lines) if not ln["correct"])
first_right = next(i for i, ln in enumerate(lines) if ln["correct"])
def flip(h, ls): ls[first_wrong]["correct"] = True
def nudge_loss(h, ls): ls[-1]["answer_loss"] *= 1 + 1e-6
def drop(h, ls): del ls[len(ls) // 2]
def wrong_sha(h, ls): h["config_sha256"] = "0" * 64
def change_predicted(h, ls): ls[first_right]["predicted"] += "0"
def drop_greedy(h, ls): ls[0]["greedy_correct"] = None
def swap_sets(h, ls): ls.insert(0, ls.pop())
expect("one wrong example marked correct", "counts", flip)
expect("one wrong example marked correct", "predicted", flip)
expect("one answer_loss moved by 1e-6 relative", "losses", nudge_loss)
expect("a line dropped", "counts", drop)
expect("a line dropped", "order", drop)
expect("config_sha256 of another config", "header", wrong_sha)
expect("a correct example's predicted string changed", "predicted", change_predicted)
expect("greedy_correct nulled on a checked example", "greedy", drop_greedy)
expect("an extrapolate line moved before the interpolate lines", "order", swap_sets)
# a line cut in half (an interrupted writer without the atomic rename) is not JSON
text = open(sys.argv[1]).read().splitlines(True)
cut = sys.argv[3]
with open(cut, "w") as f:
    f.writelines(text[:5] + [text[5][: len(text[5]) // 2]])
h, ls, probs = pc.load(cut)
if any("not JSON" in p for p in probs) and any("no newline" in p for p in probs):
    print("ok: negative control: a file cut inside a line is reported (%s)" % probs[0])
else:
    fails += 1
    print("FAIL: negative control: a file cut inside a line was not reported: %s" % probs)
# the sidecar of other bytes (one line dropped after it was written): load reports the hash and the count
with open(cut, "w") as f:
    f.writelines(text[:-1])
with open(pc.meta_path(sys.argv[1])) as src, open(pc.meta_path(cut), "w") as dst:
    dst.write(src.read())
h, ls, probs = pc.load(cut)
if any("predictions_sha256" in p for p in probs) and any("n_examples" in p for p in probs):
    print("ok: negative control: a sidecar of other bytes is reported (%s)" % probs[0])
else:
    fails += 1
    print("FAIL: negative control: a sidecar of other bytes was not reported: %s" % probs)
sys.exit(1 if fails else 0)
EOF

# 3. --predictions elsewhere: the same bytes (deterministic on the CPU backend, one thread).
mkdir -p "$tmp/ev2"
evaluate "$tmp/ev2" --predictions "$tmp/elsewhere/p.jsonl" || { cat "$tmp/ev2.log"; fail "evaluate --predictions"; }
[ ! -e "$tmp/ev2/predictions.jsonl" ] || fail "--predictions given, yet predictions.jsonl was written beside --out"
cmp "$tmp/ev/predictions.jsonl" "$tmp/elsewhere/p.jsonl" || fail "a second evaluation wrote different predictions"
cmp "$tmp/ev/predictions.meta.json" "$tmp/elsewhere/p.meta.json" || fail "no identical sidecar p.meta.json beside p.jsonl"
echo "ok: --predictions writes where it says (its sidecar beside it); two evaluations give identical files"

# 4. A run failing after the evaluation leaves the earlier files byte-identical, with one error line naming the path.
cp "$tmp/ev/predictions.jsonl" "$tmp/good_predictions.jsonl"
cp "$tmp/ev/predictions.meta.json" "$tmp/good_predictions.meta.json"
cp "$tmp/ev/result.json" "$tmp/good_result.json"
: >"$tmp/not_a_dir"
mkdir -p "$tmp/bad"
if evaluate "$tmp/bad" --out "$tmp/not_a_dir/result.json" --predictions "$tmp/ev/predictions.jsonl"; then
  fail "evaluate with --out under a regular file succeeded"
fi
[ "$(grep -c 'error' "$tmp/bad.log")" = 1 ] && tail -n 1 "$tmp/bad.log" | grep -q "writing --out .*not_a_dir/result.json)$" \
  || { cat "$tmp/bad.log"; fail "--out under a regular file: expected one error line naming it"; }
cmp "$tmp/ev/predictions.jsonl" "$tmp/good_predictions.jsonl" \
  || fail "the failed run changed the earlier predictions.jsonl"
cmp "$tmp/ev/predictions.meta.json" "$tmp/good_predictions.meta.json" \
  || fail "the failed run changed the earlier predictions.meta.json"
no_temps "$tmp/ev" "the failed run (unwritable --out)"
echo "ok: unwritable --out: $(tail -n 1 "$tmp/bad.log"); the earlier predictions.jsonl is intact"

if evaluate "$tmp/bad" --out "$tmp/ev/result.json" --predictions "$tmp/not_a_dir/p.jsonl"; then
  fail "evaluate with --predictions under a regular file succeeded"
fi
[ "$(grep -c 'error' "$tmp/bad.log")" = 1 ] &&
  tail -n 1 "$tmp/bad.log" | grep -q "writing --predictions .*not_a_dir/p.jsonl)$" \
  || { cat "$tmp/bad.log"; fail "--predictions under a regular file: expected one error line naming it"; }
cmp "$tmp/ev/result.json" "$tmp/good_result.json" || fail "the failed run changed the earlier result.json"
no_temps "$tmp/ev" "the failed run (unwritable --predictions)"
echo "ok: unwritable --predictions: $(tail -n 1 "$tmp/bad.log"); the earlier result.json is intact"

if evaluate "$tmp/bad" --out "$tmp/ev/result.json" --predictions "$tmp/ev/result.json"; then
  fail "evaluate with --predictions equal to --out succeeded"
fi
grep -q -- "--predictions" "$tmp/bad.log" || fail "--predictions = --out: the error does not name the option"
cmp "$tmp/ev/result.json" "$tmp/good_result.json" || fail "--predictions = --out changed result.json"
if evaluate "$tmp/bad" --out "$tmp/ev/p.meta.json" --predictions "$tmp/ev/p.jsonl"; then
  fail "evaluate with --out equal to the sidecar of --predictions succeeded"
fi
grep -q -- "--predictions: its metadata file .*p.meta.json is --out" "$tmp/bad.log" \
  || { cat "$tmp/bad.log"; fail "sidecar = --out: the error does not say so"; }
[ ! -e "$tmp/ev/p.jsonl" ] && [ ! -e "$tmp/ev/p.meta.json" ] || fail "sidecar = --out: a file was written"

# 5. Killed while evaluating (after the first set's log line): an earlier file (here a marker) stays untouched.
echo "an earlier predictions file" >"$tmp/ev/predictions.jsonl"
cp "$tmp/ev/predictions.jsonl" "$tmp/marker"
echo "an earlier sidecar" >"$tmp/ev/predictions.meta.json"
# (bin/evaluate itself in the background, not the evaluate function: killing a subshell would leave it running)
: >"$tmp/ev.log"
bin/evaluate --run "$tmp/run" --config "$tmp/dense.json" --data "$tmp/data" --out "$tmp/ev/result.json" 2>"$tmp/ev.log" &
pid=$!
for _ in $(seq 1 1500); do
  grep -q "interpolate: .* correct" "$tmp/ev.log" && break
  kill -0 "$pid" 2>/dev/null || break
  sleep 0.02
done
kill -KILL "$pid" 2>/dev/null || true
rc=0
wait "$pid" || rc=$?
if [ "$rc" = 137 ]; then
  cmp "$tmp/ev/predictions.jsonl" "$tmp/marker" || fail "a run killed while evaluating changed predictions.jsonl"
  [ "$(cat "$tmp/ev/predictions.meta.json")" = "an earlier sidecar" ] \
    || fail "a run killed while evaluating changed predictions.meta.json"
  no_temps "$tmp/ev" "the run killed while evaluating"
  echo "ok: killed while evaluating: the earlier predictions.jsonl is untouched"
else # it finished before the kill: then the file must be the complete new one
  [ "$rc" = 0 ] || { cat "$tmp/ev.log"; fail "evaluate exited with $rc (not killed)"; }
  cmp "$tmp/ev/predictions.jsonl" "$tmp/good_predictions.jsonl" || fail "predictions.jsonl after a finished run"
  cmp "$tmp/ev/predictions.meta.json" "$tmp/good_predictions.meta.json" || fail "the sidecar after a finished run"
  echo "NOTE: evaluate finished before it could be killed; the kill check compared the finished file"
fi
echo "ok: predictions.jsonl checks passed"
