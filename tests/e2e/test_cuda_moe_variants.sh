#!/usr/bin/env bash
# e2e-lane: private (it writes only under its own temporary directories, so it may run beside other tests)
# The MoE-variant switches on the CUDA backend: expert capacity (CF 1.0: 5 steps on the device, step 1's loss and
# dropped counts as the CPU's, every step drops), and DeepSeek-V3's router (sigmoid gates normalised over the
# selected, times 2.5, balance "bias", group-limited: 4 groups of 2 experts, 3 kept, the sequence-wise balance loss
# with alpha 1e-4) with a dense first pair of layers and a shared expert, through bin/train --backend cuda:
#   * step 1's loss equals the CPU backend's within fp32 rounding (same initial weights, same windows);
#   * it trains: the loss falls, and the expert biases are nonzero integer multiples of gamma (they move by exactly
#     gamma per step), not in the AdamW state;
#   * a run stopped after 5 steps and resumed ends byte-identical to the uninterrupted run (the biases are in the
#     checkpoint; the bias update is deterministic);
#   * expert-choice routing: step 1 as on the CPU, the loss falls, equal expert loads.
# Then PR-MoE (a pyramid of 12/4 experts, model.ff_n_experts_per_layer, with a residual MLP, model.ff_residual_size,
# and one routed expert): 5 steps, step 1 as on the CPU, loss falling, per-application expert counts.
# Exit 77 (SKIP) without a usable CUDA GPU. CUDA_TEST_BIN / CUDA_TEST_BACKEND / CUDA_E2E_DATA / CUDA_RESUME_SETTINGS as
# in test_cuda_resume.sh (make test-cuda-emu runs this on the CUDA emulator).
source "$(dirname "$0")/train_common.sh"

cuda_device_under_test
e2e_data train.shard

steps=12
# shellcheck disable=SC2086
train_config "$tmp/cfg.json" moeut answer $steps checkpoint_every=4 log_every=1 ${CUDA_RESUME_SETTINGS:-}
sets=(--set model.router_renorm=true --set model.balance=bias --set model.balance_gamma=0.01
  --set model.entropy_reg=null --set model.n_dense_first=2 --set model.n_shared_experts=1
  --set model.routed_scaling_factor=2.5 --set model.n_group=4 --set model.topk_group=3
  --set model.seq_balance_alpha=0.0001)
run() { # run BIN BACKEND OUT [args]
  local bin=$1 backend=$2 out=$3
  shift 3
  "$bin"/train --backend "$backend" --threads 2 --config "$tmp/cfg.json" --data "$data" --out "$out" "${sets[@]}" \
    "$@" >>"$out.log" 2>&1 || { cat "$out.log"; fail "$backend: bin/train $out $*"; }
}
run "$dut_bin" "$be" "$tmp/ref"
run bin cpu "$tmp/cpu" --set train.steps=1
run "$dut_bin" "$be" "$tmp/res" --stop-after 5
run "$dut_bin" "$be" "$tmp/res" --resume
same_as_ref "$tmp/ref" "$tmp/res" "$be: a bias + dense-prefix + shared-expert run stopped at step 5 and resumed"

python3 - "$tmp" "$be" <<'PY' || fail "$be: the switches' run"
import json, sys
tmp, be = sys.argv[1:3]
sys.path.insert(0, "tests/e2e")
from safetensors_diff import load  # noqa: E402
def tensors(path):
    return {name: values for name, (shape, values) in load(path).items()}
dev = [json.loads(l) for l in open(f"{tmp}/ref/metrics.jsonl")]
cpu = [json.loads(l) for l in open(f"{tmp}/cpu/metrics.jsonl")]
a, b = dev[0]["loss"], cpu[0]["loss"]
assert abs(a - b) <= 1e-4 * abs(b), f"step 1 loss: {be} {a!r}, cpu {b!r}"
assert dev[-1]["loss"] < dev[0]["loss"], f"loss did not fall: {dev[0]['loss']} -> {dev[-1]['loss']}"
w, o = tensors(f"{tmp}/ref/model.safetensors"), tensors(f"{tmp}/ref/optim.safetensors")
for i in range(2):
    bias = w[f"transformer.layers.{i}.ffn.expert_bias"]
    assert any(x != 0 for x in bias), f"layer {i}: the bias never moved"
    for x in bias:
        k = x / 0.01
        assert abs(k - round(k)) < 1e-3 and abs(round(k)) <= len(dev), f"layer {i}: bias {x} is not a multiple of gamma"
assert not any("expert_bias" in k for k in o), "AdamW state for a buffer"
assert "transformer.dense_layers.1.attention.q.weight" in w and "transformer.layers.0.ffn.shared_keys" in w
print(f"ok: {be}: step 1 loss {a:.7f} vs cpu {b:.7f}; loss {dev[0]['loss']:.4f} -> {dev[-1]['loss']:.4f}; "
      "biases move in steps of gamma")
PY

# arch "moe" (dense attention, a routed FFN with expert biases; one dense first layer, then 3 MoE layers with
# Mixtral's renormalised softmax top-2 and the Switch loss): step 1's loss equals the CPU backend's, 5 steps train,
# the routing statistics cover applications 1..3
python3 tests/e2e/moe_arch_config.py "$tmp/cfg.json" "$tmp/moe.json"
moe_run() { # moe_run BIN BACKEND OUT STEPS
  "$1"/train --backend "$2" --threads 2 --config "$tmp/moe.json" --data "$data" --out "$3" --set train.steps="$4" \
    --set train.checkpoint_every=0 >>"$3.log" 2>&1 || { cat "$3.log"; fail "$2: bin/train (arch moe) $3"; }
}
moe_run "$dut_bin" "$be" "$tmp/moe_dev" 5
moe_run bin cpu "$tmp/moe_cpu" 1
python3 - "$tmp" "$be" <<'PY' || fail "$be: the arch moe run"
import json, math, sys
tmp, be = sys.argv[1:3]
dev = [json.loads(l) for l in open(f"{tmp}/moe_dev/metrics.jsonl")]
cpu = [json.loads(l) for l in open(f"{tmp}/moe_cpu/metrics.jsonl")]
a, b = dev[0]["loss"], cpu[0]["loss"]
assert abs(a - b) <= 1e-4 * abs(b), f"step 1 loss: {be} {a!r}, cpu {b!r}"
assert abs(dev[0]["reg_ffn"] - cpu[0]["reg_ffn"]) <= 1e-4 * abs(cpu[0]["reg_ffn"]), (dev[0]["reg_ffn"], cpu[0]["reg_ffn"])
assert len(dev) == 5 and all(math.isfinite(l["loss"]) for l in dev)
assert dev[-1]["loss"] < dev[0]["loss"], f"loss did not fall: {dev[0]['loss']} -> {dev[-1]['loss']}"
r = dev[-1]["routing"]
assert r["first_application"] == 1 and len(r["applications"]) == 3, (r["first_application"], len(r["applications"]))
print(f"ok: {be}: arch moe step 1 loss {a:.7f} vs cpu {b:.7f}; loss {dev[0]['loss']:.4f} -> {dev[-1]['loss']:.4f}")
PY
# hash routing (Roller et al.): the FFN expert of the input token id; the ids reach every layer on the device. 5 steps
# train (loss falls), step 1's loss equals the CPU backend's.
sets=(--set model.ff_k=1 --set model.balance=none --set model.entropy_reg=null --set model.ff_expert_dropout=null
  --set model.routing=hash)
run "$dut_bin" "$be" "$tmp/hash" --set train.steps=5
run bin cpu "$tmp/hash_cpu" --set train.steps=1
python3 - "$tmp" "$be" <<'PY' || fail "$be: the hash routing run"
import json, sys
tmp, be = sys.argv[1:3]
dev = [json.loads(l) for l in open(f"{tmp}/hash/metrics.jsonl")]
cpu = [json.loads(l) for l in open(f"{tmp}/hash_cpu/metrics.jsonl")]
a, b = dev[0]["loss"], cpu[0]["loss"]
assert abs(a - b) <= 1e-4 * abs(b), f"step 1 loss: {be} {a!r}, cpu {b!r}"
assert dev[-1]["loss"] < dev[0]["loss"], f"loss did not fall: {dev[0]['loss']} -> {dev[-1]['loss']}"
c0 = dev[0]["routing"]["applications"][0]["counts"]
assert c0 == cpu[0]["routing"]["applications"][0]["counts"], "step 1 routing counts differ from the cpu's"
print(f"ok: {be}: hash routing: step 1 loss {a:.7f} vs cpu {b:.7f}, same counts; loss {dev[0]['loss']:.4f} -> "
      f"{dev[-1]['loss']:.4f}")
PY
# expert capacity (CF 1.0, position order): 5 steps on the device; step 1's loss and dropped counts equal the CPU's
sets=(--set model.ff_capacity_factor=1.0)
run "$dut_bin" "$be" "$tmp/cap" --set train.steps=5
run bin cpu "$tmp/cap_cpu" --set train.steps=1
python3 - "$tmp" "$be" <<'PY' || fail "$be: the expert-capacity run"
import json, sys
tmp, be = sys.argv[1:3]
dev = [json.loads(l) for l in open(f"{tmp}/cap/metrics.jsonl")]
cpu = [json.loads(l) for l in open(f"{tmp}/cap_cpu/metrics.jsonl")]
a, b = dev[0]["loss"], cpu[0]["loss"]
assert abs(a - b) <= 1e-4 * abs(b), f"step 1 loss: {be} {a!r}, cpu {b!r}"
drop = lambda line: [app["dropped"] for app in line["routing"]["applications"]]  # noqa: E731
assert drop(dev[0]) == drop(cpu[0]), f"step 1 dropped: {be} {drop(dev[0])}, cpu {drop(cpu[0])}"
assert all(sum(drop(line)) > 0 for line in dev), "a step dropped nothing"
assert all(x == x and abs(x) < 1e9 for x in (line["loss"] for line in dev))
print(f"ok: {be}: capacity run, step 1 loss {a:.7f} vs cpu {b:.7f}, dropped per application {drop(dev[0])}")
PY
# DeepSpeed-MoE's PR-MoE: a pyramid (12 then 4 experts) and a residual MLP beside one routed expert: 5 steps on the
# device, step 1's loss equal to the CPU backend's, the loss falling, its tensors in the checkpoint.
rsets=(--set model.ff_k=1 --set model.ff_residual_size=48 --set model.ff_n_experts=null
  --set 'model.ff_n_experts_per_layer=[12,4]' --set train.steps=5 --set train.checkpoint_every=0)
for pair in "$dut_bin:$be:resid" "bin:cpu:resid_cpu"; do
  IFS=: read -r bin backend out <<<"$pair"
  "$bin"/train --backend "$backend" --threads 2 --config "$tmp/cfg.json" --data "$data" --out "$tmp/$out" \
    "${rsets[@]}" >>"$tmp/$out.log" 2>&1 || { cat "$tmp/$out.log"; fail "$backend: bin/train of the residual MLP"; }
done
python3 - "$tmp" "$be" <<'PY' || fail "$be: the residual MLP run"
import json, sys
tmp, be = sys.argv[1:3]
sys.path.insert(0, "tests/e2e")
from safetensors_diff import load  # noqa: E402
dev = [json.loads(l) for l in open(f"{tmp}/resid/metrics.jsonl")]
cpu = [json.loads(l) for l in open(f"{tmp}/resid_cpu/metrics.jsonl")]
a, b = dev[0]["loss"], cpu[0]["loss"]
assert abs(a - b) <= 1e-4 * abs(b), f"step 1 loss: {be} {a!r}, cpu {b!r}"
assert len(dev) == 5 and dev[-1]["loss"] < dev[0]["loss"], f"loss: {[l['loss'] for l in dev]}"
w = load(f"{tmp}/resid/model.safetensors")
assert w["transformer.layers.1.ffn.residual_keys"][0] == [64, 48], w["transformer.layers.1.ffn.residual_keys"][0]
assert w["transformer.layers.0.ffn.keys"][0][0] == 12 and w["transformer.layers.1.ffn.keys"][0][0] == 4
assert [a["n_experts"] for a in dev[-1]["routing"]["applications"]] == [12, 4, 12, 4], dev[-1]["routing"]
print(f"ok: {be}: PR-MoE (pyramid 12/4 + residual MLP) step 1 loss {a:.7f} vs cpu {b:.7f}; loss {dev[0]['loss']:.4f} -> {dev[-1]['loss']:.4f}")
PY
# expert-choice routing (Zhou et al. 2022; the selection runs on the host, shared with the CPU): step 1's loss equals
# the CPU backend's, the loss falls, every expert takes the same number of positions in every application
sets=(--set model.routing=expert_choice --set model.ff_capacity_factor=4 --set model.router=softmax
  --set model.balance=none --set model.entropy_reg=null)
run "$dut_bin" "$be" "$tmp/ec"
run bin cpu "$tmp/ec_cpu" --set train.steps=1
python3 - "$tmp" "$be" <<'PY' || fail "$be: the expert-choice run"
import json, sys
tmp, be = sys.argv[1:3]
dev = [json.loads(l) for l in open(f"{tmp}/ec/metrics.jsonl")]
cpu = [json.loads(l) for l in open(f"{tmp}/ec_cpu/metrics.jsonl")]
a, b = dev[0]["loss"], cpu[0]["loss"]
assert abs(a - b) <= 1e-4 * abs(b), f"step 1 loss: {be} {a!r}, cpu {b!r}"
assert dev[-1]["loss"] < dev[0]["loss"], f"loss did not fall: {dev[0]['loss']} -> {dev[-1]['loss']}"
for l in dev:
    for app in l["routing"]["applications"]:
        assert len(set(app["counts"])) == 1, app["counts"]
print(f"ok: {be}: expert choice, step 1 loss {a:.7f} vs cpu {b:.7f}; loss {dev[0]['loss']:.4f} -> "
      f"{dev[-1]['loss']:.4f}; equal loads")
PY
