#!/usr/bin/env bash
# The MoE-variant switches on the CUDA backend: DeepSeek-V3's router (sigmoid gates normalised over the
# selected, balance "bias") with a dense first pair of layers and a shared expert, through bin/train --backend cuda:
#   * step 1's loss equals the CPU backend's within fp32 rounding (same initial weights, same windows);
#   * it trains: the loss falls, and the expert biases are nonzero integer multiples of gamma (they move by exactly
#     gamma per step), not in the AdamW state;
#   * a run stopped after 5 steps and resumed ends byte-identical to the uninterrupted run (the biases are in the
#     checkpoint; the bias update is deterministic);
#   * expert-choice routing: step 1 as on the CPU, the loss falls, equal expert loads.
# Exit 77 (SKIP) without a usable CUDA GPU. CUDA_TEST_BIN / CUDA_TEST_BACKEND / CUDA_E2E_DATA / CUDA_RESUME_SETTINGS as
# in test_cuda_resume.sh (make test-cuda-emu runs this on the CUDA emulator).
source "$(dirname "$0")/train_common.sh"

cuda_device_under_test
e2e_data train.shard

steps=12
# shellcheck disable=SC2086
train_config "$tmp/cfg.json" moeut answer $steps checkpoint_every=4 log_every=1 ${CUDA_RESUME_SETTINGS:-}
sets=(--set model.router_renorm=true --set model.balance=bias --set model.balance_gamma=0.01
  --set model.entropy_reg=null --set model.n_dense_first=2 --set model.n_shared_experts=1)
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
