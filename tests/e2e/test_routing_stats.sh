#!/usr/bin/env bash
# e2e-lane: private (it writes only under its own temporary directories, so it may run beside other tests)
# Routing statistics (pipeline/records/routing_stats.h) through bin/train and bin/evaluate on the CPU: every metrics.jsonl
# line of a MoEUT run carries "routing" for its step (one entry per layer application, counts over the E experts
# that sum to k selections per routed position, and max/mean, unused and entropy recomputed here from the counts by
# an independent formula); the two micro-batches of a step are both counted (tokens of a 2-micro-batch step equal
# those of the same step as one batch); result.json carries "routing" for each evaluation set; the dense model
# writes none; a resumed run's routing lines equal the uninterrupted run's.
source "$(dirname "$0")/train_common.sh"
[ -x bin/evaluate ] || fail "bin/evaluate not built (run make first)"

train_data "$tmp/data"
train_config "$tmp/moeut.json" moeut answer 6 log_every=2 checkpoint_every=2
train_config "$tmp/moeut1.json" moeut answer 6 log_every=2 n_microbatch=1
train_config "$tmp/dense.json" dense answer 2 log_every=1
run() { # run CONFIG OUT [args]
  local cfg=$1 out=$2
  shift 2
  bin/train --config "$cfg" --data "$tmp/data" --out "$out" --threads 1 "$@" >"$out.log" 2>&1 \
    || { cat "$out.log"; fail "bin/train $out failed"; }
}
run "$tmp/moeut.json" "$tmp/moeut"
run "$tmp/moeut1.json" "$tmp/moeut1"
run "$tmp/dense.json" "$tmp/dense"

python3 - "$tmp" <<'PY' || fail "routing statistics in metrics.jsonl"
import json, math, sys
tmp = sys.argv[1]

def check(r, where, n_apps=4, E=8, k=4):
    assert set(r) == {"n_experts", "k", "tokens", "first_application", "applications"}, f"{where}: keys {sorted(r)}"
    assert r["first_application"] == 0, f"{where}: first_application {r['first_application']} without a dense prefix"
    assert (r["n_experts"], r["k"]) == (E, k), f"{where}: n_experts/k {r['n_experts']}/{r['k']}"
    assert r["tokens"] > 0, f"{where}: no tokens"
    assert len(r["applications"]) == n_apps, f"{where}: {len(r['applications'])} applications"
    for a, app in enumerate(r["applications"]):
        c = app["counts"]
        assert len(c) == E and all(isinstance(x, int) and x >= 0 for x in c), f"{where} app {a}: counts {c}"
        assert sum(c) == k * r["tokens"], f"{where} app {a}: {sum(c)} selections for {r['tokens']} tokens, k={k}"
        load = [x / sum(c) for x in c]
        want = {"max_over_mean": max(load) * E, "unused_fraction": sum(x == 0 for x in c) / E,
                "entropy": -sum(p * math.log(p) for p in load if p > 0) / math.log(E)}
        for key, v in want.items():
            assert abs(app[key] - v) < 1e-12, f"{where} app {a}: {key} {app[key]} != {v}"
    return r

lines = [json.loads(l) for l in open(f"{tmp}/moeut/metrics.jsonl")]
assert [l["step"] for l in lines] == [2, 4, 6], [l["step"] for l in lines]
two = [check(l["routing"], f"moeut step {l['step']}") for l in lines]
one = [check(json.loads(l)["routing"], "moeut1") for l in open(f"{tmp}/moeut1/metrics.jsonl")]
# the same windows as one micro-batch: the same routed positions (the counts differ: other weights after step 1)
assert [r["tokens"] for r in two] == [r["tokens"] for r in one], ([r["tokens"] for r in two], [r["tokens"] for r in one])
assert all(r["tokens"] <= 8 * 128 for r in two)
for l in open(f"{tmp}/dense/metrics.jsonl"):
    assert "routing" not in json.loads(l), "dense metrics.jsonl has routing"
print("ok: metrics.jsonl routing lines (steps 2, 4, 6; counts sum to k x tokens; derived fields; both micro-batches)")
PY

# evaluate: result.json has routing per set for MoEUT, none for dense
bin/evaluate --run "$tmp/moeut" --config "$tmp/moeut.json" --data "$tmp/data" --out "$tmp/moeut/result.json" \
  2>"$tmp/ev.log" || { cat "$tmp/ev.log"; fail "bin/evaluate moeut failed"; }
bin/evaluate --run "$tmp/dense" --config "$tmp/dense.json" --data "$tmp/data" --out "$tmp/dense/result.json" \
  2>"$tmp/evd.log" || { cat "$tmp/evd.log"; fail "bin/evaluate dense failed"; }
python3 - "$tmp" <<'PY' || fail "routing statistics in result.json"
import json, sys
tmp = sys.argv[1]
r = json.load(open(f"{tmp}/moeut/result.json"))
for name, s in r["evaluation"]["sets"].items():
    rt = s["routing"]
    assert len(rt["applications"]) == 4 and rt["tokens"] >= s["n"] > 0, (name, rt["tokens"], s["n"])
    for a, app in enumerate(rt["applications"]):
        assert sum(app["counts"]) == rt["k"] * rt["tokens"], (name, a)
d = json.load(open(f"{tmp}/dense/result.json"))
assert all("routing" not in s for s in d["evaluation"]["sets"].values()), "dense result.json has routing"
print("ok: result.json routing per evaluation set (MoEUT), none for the dense model")
PY

# a run stopped at step 2 and resumed logs the same routing as the uninterrupted one
run "$tmp/moeut.json" "$tmp/resumed" --stop-after 2
run "$tmp/moeut.json" "$tmp/resumed" --resume
same_as_ref "$tmp/moeut" "$tmp/resumed" "moeut run stopped at step 2 and resumed (routing lines included)"

# the report reads the records (strictly): a result.json whose derived field disagrees with its counts is refused
python3 - "$tmp/moeut/result.json" "$tmp/bad.json" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
r["evaluation"]["sets"]["interpolate"]["routing"]["applications"][0]["entropy"] += 0.5
json.dump(r, open(sys.argv[2], "w"))
PY
mkdir -p "$tmp/runs/moeut_answer"
cp "$tmp/bad.json" "$tmp/runs/moeut_answer/result.json"
sed -i -e 's/"experiment": *"[^"]*"/"experiment": "e2e"/' -e 's/"run": *"[^"]*"/"run": "moeut_answer"/' \
  "$tmp/runs/moeut_answer/result.json"
rc=0
bin/report --experiment e2e --runs "$tmp/runs" --out "$tmp/report" >"$tmp/report.log" 2>&1 || rc=$?
[ "$rc" != 0 ] || fail "bin/report accepted a routing record that disagrees with its counts"
grep -q 'evaluation.sets.interpolate.routing.applications\[0\].entropy' "$tmp/report.log" \
  || { cat "$tmp/report.log"; fail "the refusal does not name the routing field"; }
echo "ok: a routing record that disagrees with its counts is refused naming the field"
