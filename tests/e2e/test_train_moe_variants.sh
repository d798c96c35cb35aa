#!/usr/bin/env bash
# e2e-lane: private (it writes only under its own temporary directories, so it may run beside other tests)
# The MoE-variant switches (README "MoE-variant switches") through bin/train on the CPU: every switch trains (loss
# finite and falling), reg_ffn is the balancing term the switch names (the Switch loss > 0, "none" and "bias" exactly
# 0, expert_entropy 0 outside "entropy"), a Switch run and a bias run interrupted and resumed end byte-identical to the
# uninterrupted ones, the bias moves in steps of gamma and evaluation routes with it, a dense prefix leaves its
# applications out of the routing statistics, hash routing (model.routing "hash") trains, routes every application
# alike and analyzes, expert-choice routing trains with equal expert loads and evaluates causally, and a coefficient
# of another balance is refused with one line naming the key (--set KEY=null removes it).
source "$(dirname "$0")/train_common.sh"

train_data "$tmp/data"
train_config "$tmp/moeut.json" moeut answer 24 checkpoint_every=6
metric() { # metric DIR LINE KEY: a field of line LINE (1-based; $ = last) of metrics.jsonl
  sed -n "$2p" "$1/metrics.jsonl" | sed -E "s/.*\"$3\":([-0-9.eE+]+).*/\1/"
}

run() { # run NAME --set ... : trains 24 steps into $tmp/NAME
  local name=$1
  shift
  bin/train --config "$tmp/moeut.json" --data "$tmp/data" --out "$tmp/$name" --threads 1 "$@" >"$tmp/$name.log" 2>&1 \
    || { cat "$tmp/$name.log"; fail "$name: bin/train failed"; }
}

run switch --set model.router=softmax --set model.router_renorm=true --set model.balance=switch \
  --set model.balance_alpha=0.05 --set model.entropy_reg=null
run none --set model.router=softmax --set model.balance=none --set model.entropy_reg=null
run sigmoid_renorm --set model.router_renorm=true
bias_sets=(--set model.balance=bias --set model.balance_gamma=0.01 --set model.entropy_reg=null)
run bias "${bias_sets[@]}"
# DeepSeek-V3's router (sigmoid normalised over the selected, times its routed scaling factor 2.5, bias balancing,
# group-limited: the 8 experts in 4 groups of 2, the 3 best groups eligible, its sequence-wise balance loss with
# alpha 1e-4) with a dense first pair of layers and a shared expert: 2 dense applications, then the MoEUT group of 2 once
v3_sets=(--set model.n_group=4 --set model.topk_group=3 --set model.seq_balance_alpha=0.0001)
run deepseek --set model.router_renorm=true --set model.routed_scaling_factor=2.5 "${bias_sets[@]}" \
  --set model.n_dense_first=2 --set model.n_shared_experts=1 "${v3_sets[@]}"
# Roller et al.'s hash layers: the expert of the input token id, one per position, no router, no balancing
hash_sets=(--set model.ff_k=1 --set model.balance=none --set model.entropy_reg=null --set model.ff_expert_dropout=null
  --set model.routing=hash --set model.hash_seed=7)
run hash "${hash_sets[@]}"

# expert capacity (Switch Transformer §2.2): CF 1.0 in the position order, CF 0.75 in the score order
run capacity --set model.ff_capacity_factor=1.0
run capacity_score --set model.ff_capacity_factor=0.75 --set model.ff_capacity_order=score

# DeepSpeed-MoE's Residual-MoE (one routed expert beside a dense MLP of width 64) and Snowflake Arctic (top-2 routed
# experts beside a dense residual MLP of its own width 96)
run residual --set model.ff_k=1 --set model.ff_residual_size=64
run arctic --set model.ff_k=2 --set model.ff_residual_size=96
# DeepSpeed-MoE's Pyramid-MoE (4 then 12 experts over the group of 2) and PR-MoE (pyramid 12/4 + residual MLP, one
# routed expert) with bias balancing (each layer's bias of its own size)
run pyramid --set model.ff_n_experts=null --set 'model.ff_n_experts_per_layer=[4,12]'
run prmoe "${bias_sets[@]}" --set model.ff_n_experts=null --set 'model.ff_n_experts_per_layer=[12,4]' \
  --set model.ff_k=1 --set model.ff_residual_size=64

# expert-choice routing (Zhou et al. 2022): each of the 8 experts takes its top-c valid positions of the micro-batch,
# c = round(4 n / 8); evaluation routes each position to its top ff_k = round(4) = 4 experts
ec_sets=(--set model.routing=expert_choice --set model.ff_capacity_factor=4 --set model.router=softmax
  --set model.balance=none --set model.entropy_reg=null)
run expert_choice "${ec_sets[@]}"

for name in switch none sigmoid_renorm bias deepseek hash capacity capacity_score residual arctic pyramid prmoe \
  expert_choice; do
  first=$(metric "$tmp/$name" 1 loss) last=$(metric "$tmp/$name" '$' loss)
  awk -v a="$first" -v b="$last" 'BEGIN { exit !(b == b + 0 && b < a) }' \
    || fail "$name: loss did not fall (first $first, last $last)"
  echo "ok: $name trains (loss $first -> $last)"
done
# expert capacity: every logged step records the dropped assignments per application (some, not most), the counts
# are the kept ones; the runs without a capacity record none
python3 - "$tmp" <<'PY' || fail "capacity: the dropped counts of metrics.jsonl"
import json, sys
for name in ("capacity", "capacity_score"):
    for line in open(f"{sys.argv[1]}/{name}/metrics.jsonl"):
        r = json.loads(line)["routing"]
        for app in r["applications"]:
            kept, dropped = sum(app["counts"]), app["dropped"]
            assert dropped > 0 and kept > 0 and kept + dropped == r["k"] * r["tokens"], (name, kept, dropped, r["tokens"])
assert all("dropped" not in app for line in open(f"{sys.argv[1]}/none/metrics.jsonl")
           for app in json.loads(line)["routing"]["applications"])
print("ok: the capacity runs record their dropped assignments (kept + dropped = k * tokens)")
PY
reg=$(metric "$tmp/switch" '$' reg_ffn)
# 2 distinct layers x 2 applications: four Switch losses, each E * sum f P (1 for a perfectly uniform router)
awk -v r="$reg" 'BEGIN { exit !(r > 0.5 && r < 4 * 8) }' || fail "switch: reg_ffn $reg is not a sum of 4 Switch losses"
[ "$(metric "$tmp/switch" '$' expert_entropy)" = 0 ] || fail "switch: expert_entropy should be 0"
[ "$(metric "$tmp/none" '$' reg_ffn)" = 0 ] || fail "none: reg_ffn should be exactly 0"
[ "$(metric "$tmp/bias" '$' reg_ffn)" = 0 ] || fail "bias: reg_ffn should be exactly 0 (no loss term)"
# the sequence-wise loss: logged as reg_seq (2 routed applications, each a mean of sum_i f_i P_i), in the loss with
# alpha 1e-4 beside reg_att (bias balancing has no reg_ffn term); absent where it is off
python3 - "$tmp" <<'PY' || fail "deepseek: reg_seq"
import json, sys
tmp = sys.argv[1]
for l in (json.loads(x) for x in open(f"{tmp}/deepseek/metrics.jsonl")):
    assert 0 < l["reg_seq"] < 2 * 8, l["reg_seq"]
    want = l["ce"] + 0.001 * l["reg_att"] + 1e-4 * l["reg_seq"]
    assert abs(l["loss"] - want) <= 1e-9 * abs(want), (l["loss"], want)
assert all("reg_seq" not in json.loads(x) for x in open(f"{tmp}/bias/metrics.jsonl"))
print("ok: deepseek logs reg_seq and its loss is ce + 0.001 reg_att + 1e-4 reg_seq")
PY
ent=$(metric "$tmp/sigmoid_renorm" '$' expert_entropy)
awk -v e="$ent" 'BEGIN { exit !(e > 0 && e <= log(8) + 1e-9) }' || fail "sigmoid_renorm: expert_entropy $ent"
echo "ok: reg_ffn follows the balance (switch $reg, none 0, entropy run's expert_entropy $ent)"

# the checkpoint keeps the switches: interrupted at step 8, resumed, byte-identical to the uninterrupted run
sets=(--set model.router=softmax --set model.router_renorm=true --set model.balance=switch
  --set model.balance_alpha=0.05 --set model.entropy_reg=null)
bin/train --config "$tmp/moeut.json" --data "$tmp/data" --out "$tmp/switch_resumed" --threads 1 "${sets[@]}" \
  --stop-after 8 >"$tmp/stop.log" 2>&1 || { cat "$tmp/stop.log"; fail "--stop-after run failed"; }
bin/train --config "$tmp/moeut.json" --data "$tmp/data" --out "$tmp/switch_resumed" --threads 1 "${sets[@]}" \
  --resume >"$tmp/resume.log" 2>&1 || { cat "$tmp/resume.log"; fail "--resume run failed"; }
same_as_ref "$tmp/switch" "$tmp/switch_resumed" "switch run stopped at step 8 and resumed"

# balance "bias": the biases are buffers in model.safetensors (no AdamW state), start at 0 and move by exactly
# gamma = 0.01 per step (24 steps: integer multiples of 0.01 in [-0.24, 0.24], not all 0); the dense prefix has no
# router: 2 routed applications from application 2 on, in metrics.jsonl and in result.json
python3 - "$tmp" <<'PY' || fail "expert bias / dense-prefix routing"
import json, sys
tmp = sys.argv[1]
sys.path.insert(0, "tests/e2e")
from safetensors_diff import load  # noqa: E402
def tensors(path):
    return {name: values for name, (shape, values) in load(path).items()}
for run, n_layers in (("bias", 2), ("deepseek", 2)):
    w = tensors(f"{tmp}/{run}/model.safetensors")
    o = tensors(f"{tmp}/{run}/optim.safetensors")
    for i in range(n_layers):
        b = w[f"transformer.layers.{i}.ffn.expert_bias"]
        assert len(b) == 8 and any(x != 0 for x in b), f"{run} layer {i}: bias {b}"
        for x in b:
            steps = x / 0.01
            assert abs(steps - round(steps)) < 1e-3 and abs(round(steps)) <= 24, f"{run} layer {i}: bias {x}"
    assert not any("expert_bias" in k for k in o), f"{run}: the optimizer holds state for a buffer"
lines = [json.loads(l) for l in open(f"{tmp}/deepseek/metrics.jsonl")]
for l in lines:
    r = l["routing"]
    assert r["first_application"] == 2 and len(r["applications"]) == 2, (r["first_application"], len(r["applications"]))
w = tensors(f"{tmp}/deepseek/model.safetensors")
assert "transformer.dense_layers.1.ffn.linear1.weight" in w and "transformer.dense_layers.2.ln1.weight" not in w
assert "transformer.layers.1.ffn.keys" in w and "transformer.layers.2.ffn.keys" not in w
assert len(w["transformer.layers.0.ffn.shared_keys"]) == 1 * 64 * 32
print("ok: the expert biases move in steps of gamma and are not optimised; the dense prefix routes nothing")
for run, k, width in (("residual", 1, 64), ("arctic", 2, 96)):
    w = tensors(f"{tmp}/{run}/model.safetensors")
    for i in range(2):
        assert len(w[f"transformer.layers.{i}.ffn.residual_keys"]) == 64 * width, run
        assert len(w[f"transformer.layers.{i}.ffn.residual_values"]) == width * 64, run
    assert "transformer.layers.0.ffn.shared_keys" not in w
    # the residual MLP is outside the router: the routing counts hold the k routed selections per token only
    for l in (json.loads(x) for x in open(f"{tmp}/{run}/metrics.jsonl")):
        r = l["routing"]
        assert r["k"] == k and all(sum(a["counts"]) == k * r["tokens"] for a in r["applications"]), (run, r["k"])
print("ok: the residual MLP's tensors are in the checkpoint; the routing counts hold only the routed selections")
for run, es, k in (("pyramid", (4, 12), 4), ("prmoe", (12, 4), 1)):
    w = tensors(f"{tmp}/{run}/model.safetensors")
    for i, e in enumerate(es):
        assert len(w[f"transformer.layers.{i}.ffn.keys"]) == e * 64 * 32, (run, i)
        assert len(w[f"transformer.layers.{i}.ffn.expert_sel"]) == e * 64, (run, i)
    # each application's record has its own expert count and that many counts (the layers alternate: ABAB)
    for l in (json.loads(x) for x in open(f"{tmp}/{run}/metrics.jsonl")):
        r = l["routing"]
        assert r["n_experts"] == max(es) and [a["n_experts"] for a in r["applications"]] == list(es) * 2, run
        assert all(len(a["counts"]) == a["n_experts"] and sum(a["counts"]) == k * r["tokens"]
                   for a in r["applications"]), run
w = tensors(f"{tmp}/prmoe/model.safetensors")
for i, e in enumerate((12, 4)):
    b = w[f"transformer.layers.{i}.ffn.expert_bias"]
    assert len(b) == e and any(x != 0 for x in b), (i, b)
    assert all(abs(x / 0.01 - round(x / 0.01)) < 1e-3 for x in b), (i, b)
print("ok: the pyramid's layers have 4/12 and 12/4 experts, each application records its own count, the biases "
      "of each layer's size move in steps of gamma")
PY
bin/evaluate --run "$tmp/deepseek" --config "$tmp/moeut.json" --data "$tmp/data" --out "$tmp/deepseek/result.json" \
  "${bias_sets[@]}" --set model.router_renorm=true --set model.routed_scaling_factor=2.5 --set model.n_dense_first=2 \
  --set model.n_shared_experts=1 "${v3_sets[@]}" 2>"$tmp/ev.log" \
  || { cat "$tmp/ev.log"; fail "bin/evaluate of the deepseek run failed"; }
python3 - "$tmp/deepseek/result.json" <<'PY' || fail "result.json routing of the dense-prefix run"
import json, sys
for name, s in json.load(open(sys.argv[1]))["evaluation"]["sets"].items():
    r = s["routing"]
    assert r["first_application"] == 2 and len(r["applications"]) == 2, name
    assert all(sum(a["counts"]) == r["k"] * r["tokens"] for a in r["applications"]), name
print("ok: evaluate routes the dense-prefix bias run and records applications 2..3")
PY
# hash routing: no router and no ln2 in the checkpoint, the config keeps routing and hash_seed, reg_ffn 0, and every
# application of a step counts the same experts (one table, the same input ids); bin/evaluate and bin/analyze (its
# depth analysis runs the layers on copies of one prompt) route by the ids too
[ "$(metric "$tmp/hash" '$' reg_ffn)" = 0 ] || fail "hash: reg_ffn should be exactly 0"
bin/evaluate --run "$tmp/hash" --config "$tmp/moeut.json" --data "$tmp/data" --out "$tmp/hash/result.json" \
  "${hash_sets[@]}" 2>"$tmp/evh.log" || { cat "$tmp/evh.log"; fail "bin/evaluate of the hash run failed"; }
bin/analyze --run "$tmp/hash" --config "$tmp/moeut.json" --data "$tmp/data" --out "$tmp/hash/analysis.json" \
  "${hash_sets[@]}" 2>"$tmp/anh.log" || { cat "$tmp/anh.log"; fail "bin/analyze of the hash run failed"; }
python3 - "$tmp" <<'PY' || fail "hash routing run"
import json, sys
tmp = sys.argv[1]
sys.path.insert(0, "tests/e2e")
import struct  # noqa: E402
from safetensors_diff import load  # noqa: E402
w = load(f"{tmp}/hash/model.safetensors")
assert not any(k.endswith("ffn.expert_sel") or ".ln2." in k for k in w), "a router or ln2 in a hash checkpoint"
assert "transformer.layers.1.ffn.keys" in w
with open(f"{tmp}/hash/model.safetensors", "rb") as f:
    header = json.loads(f.read(struct.unpack("<Q", f.read(8))[0]))
cfg = json.loads(header["__metadata__"]["config"])
assert cfg["routing"] == "hash" and cfg["hash_seed"] == 7 and cfg["ff_k"] == 1 and "router" not in cfg, cfg
def same_apps(r, what):
    apps = r["applications"]
    assert r["k"] == 1 and len(apps) == 4, (what, r["k"], len(apps))
    assert all(a["counts"] == apps[0]["counts"] for a in apps), (what, [a["counts"] for a in apps])
    assert sum(apps[0]["counts"]) == r["tokens"], what
for l in open(f"{tmp}/hash/metrics.jsonl"):
    l = json.loads(l)
    same_apps(l["routing"], f"step {l['step']}")
for name, s in json.load(open(f"{tmp}/hash/result.json"))["evaluation"]["sets"].items():
    same_apps(s["routing"], name)
json.load(open(f"{tmp}/hash/analysis.json"))
print("ok: hash routing: no router or ln2, config kept, every application routes alike; evaluate and analyze run")
PY
# expert choice: every expert took the same number of positions in every application (c per micro-batch), the
# training record's k is E (a position may be taken by every expert); evaluation routes causally, ff_k per position
bin/evaluate --run "$tmp/expert_choice" --config "$tmp/moeut.json" --data "$tmp/data" \
  --out "$tmp/expert_choice/result.json" "${ec_sets[@]}" 2>"$tmp/ev_ec.log" \
  || { cat "$tmp/ev_ec.log"; fail "bin/evaluate of the expert-choice run failed"; }
python3 - "$tmp/expert_choice" <<'PY' || fail "expert-choice routing statistics"
import json, sys
run = sys.argv[1]
for l in (json.loads(l) for l in open(f"{run}/metrics.jsonl")):
    r = l["routing"]
    assert r["k"] == 8 and r["n_experts"] == 8, r["k"]
    for a in r["applications"]:
        assert len(set(a["counts"])) == 1 and a["counts"][0] > 0, a["counts"]  # c each: balanced by construction
        assert a["max_over_mean"] == 1 and a["unused_fraction"] == 0, a
for name, s in json.load(open(f"{run}/result.json"))["evaluation"]["sets"].items():
    r = s["routing"]
    assert r["k"] == 4 and all(sum(a["counts"]) == 4 * r["tokens"] for a in r["applications"]), name
print("ok: expert choice trains with equal loads (k = E in the training record) and evaluates with causal top-4")
PY
# a bias run stopped at step 8 and resumed: byte-identical (the bias is in the checkpoint)
bin/train --config "$tmp/moeut.json" --data "$tmp/data" --out "$tmp/bias_resumed" --threads 1 "${bias_sets[@]}" \
  --stop-after 8 >"$tmp/stopb.log" 2>&1 || { cat "$tmp/stopb.log"; fail "--stop-after bias run failed"; }
bin/train --config "$tmp/moeut.json" --data "$tmp/data" --out "$tmp/bias_resumed" --threads 1 "${bias_sets[@]}" \
  --resume >"$tmp/resumeb.log" 2>&1 || { cat "$tmp/resumeb.log"; fail "--resume bias run failed"; }
same_as_ref "$tmp/bias" "$tmp/bias_resumed" "bias run stopped at step 8 and resumed"

# a coefficient that has no effect under the chosen balance: refused, one line naming the key, no run written
rc=0
bin/train --config "$tmp/moeut.json" --data "$tmp/data" --out "$tmp/refused" --threads 1 \
  --set model.balance=switch >"$tmp/refused.log" 2>&1 || rc=$?
[ "$rc" != 0 ] || fail "entropy_reg with balance switch was accepted"
grep -q 'model.entropy_reg: has no effect with model.balance "switch"' "$tmp/refused.log" \
  || { cat "$tmp/refused.log"; fail "the refusal does not name model.entropy_reg"; }
[ "$(grep -c 'error' "$tmp/refused.log")" = 1 ] || { cat "$tmp/refused.log"; fail "the refusal is not one error line"; }
[ ! -e "$tmp/refused/model.safetensors" ] || fail "a refused run wrote a checkpoint"
echo "ok: a coefficient of another balance is refused naming the key"

# arch "moe" (dense attention, a routed FFN with expert biases; one dense first layer, then 3 MoE layers): 5 steps
# train, reg_ffn is the sum of its 3 Switch losses, the routing statistics cover applications 1..3, evaluate routes it
python3 tests/e2e/moe_arch_config.py "$tmp/moeut.json" "$tmp/moe.json"
bin/train --config "$tmp/moe.json" --data "$tmp/data" --out "$tmp/moe" --threads 1 --set train.steps=5 \
  >"$tmp/moe.log" 2>&1 || { cat "$tmp/moe.log"; fail "moe: bin/train failed"; }
bin/evaluate --run "$tmp/moe" --config "$tmp/moe.json" --data "$tmp/data" --out "$tmp/moe/result.json" \
  --set train.steps=5 2>"$tmp/moe_ev.log" || { cat "$tmp/moe_ev.log"; fail "moe: bin/evaluate failed"; }
python3 - "$tmp/moe" <<'PY' || fail "arch moe run"
import json, math, sys
run = sys.argv[1]
lines = [json.loads(l) for l in open(f"{run}/metrics.jsonl")]
assert len(lines) == 5 and all(math.isfinite(l["loss"]) for l in lines), [l["loss"] for l in lines]
assert lines[-1]["loss"] < lines[0]["loss"], f"loss did not fall: {lines[0]['loss']} -> {lines[-1]['loss']}"
assert all(0.5 < l["reg_ffn"] < 3 * 8 for l in lines), [l["reg_ffn"] for l in lines]
r = lines[-1]["routing"]
assert r["first_application"] == 1 and len(r["applications"]) == 3, (r["first_application"], len(r["applications"]))
for name, s in json.load(open(f"{run}/result.json"))["evaluation"]["sets"].items():
    r = s["routing"]
    assert r["first_application"] == 1 and len(r["applications"]) == 3, name
    assert all(sum(a["counts"]) == r["k"] * r["tokens"] for a in r["applications"]), name
print(f"ok: arch moe trains (loss {lines[0]['loss']:.4f} -> {lines[-1]['loss']:.4f}, reg_ffn "
      f"{lines[-1]['reg_ffn']:.3f}) and routes applications 1..3 in training and evaluation")
PY
