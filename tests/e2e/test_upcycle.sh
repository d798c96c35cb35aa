#!/usr/bin/env bash
# e2e-lane: private (it writes only under its own temporary directories, so it may run beside other tests)
# Sparse upcycling end to end (model/upcycle.h, bin/upcycle, bin/train --init-from) on the CPU: a 5-step dense run of
# the ci experiment's config is converted into arch "moe" (copy), the upcycled model trains 5 steps (loss finite, and
# its first step's loss is the dense model's, the conversion keeping the function), an interrupted upcycled run
# resumes byte-identically, the records carry init_from (path, SHA-256 and the conversion), evaluate passes it on,
# a changed initial checkpoint makes auto-resume start over, and every refusal (starting weights holding a NaN among
# them) is one line naming the reason.
source "$(dirname "$0")/train_common.sh"
[ -x bin/upcycle ] && [ -x bin/evaluate ] || fail "bin/upcycle or bin/evaluate missing (run make first)"

train_data "$tmp/data"
bin/train --config experiments/ci/dense_qa.json --data "$tmp/data" --out "$tmp/dense" --steps 5 --threads 1 \
  >"$tmp/dense.log" 2>&1 || { cat "$tmp/dense.log"; fail "dense run failed"; }

# The upcycled run: experiment upcycle's moe_qa_upcycled model (4 experts of the dense FFN's size, top-2, softmax
# renormalised: function-preserving at step 0) with the ci dense run's training settings.
up_config() { # up_config PATH ARCH METHOD EXPERT_SIZE EXPERTS
  cat >"$1" <<JSON
{
  "description": "e2e upcycled run",
  "model": {"arch": "$2", "n_tokens": 512, "d_model": 128, "n_layers": 4, "n_heads": 4, "d_head": 32,
    "ff_n_experts": $5, "ff_expert_size": $4, "ff_k": 2, "router": "softmax", "router_renorm": true,
    "balance": "switch", "balance_alpha": 0.01, "dropout": 0.0, "lm_head_bias": false, "out_norm_affine": false},
  "train": {"loss_on_target_only": false, "steps": 5, "batch_size": 8, "n_microbatch": 2, "context": 256,
    "lr": 0.002, "weight_decay": 0.01, "warmup": 4, "min_lr_multiplier": 0.1, "grad_clip": 0.25, "adam_beta1": 0.9,
    "adam_beta2": 0.999, "adam_eps": 1e-08, "seed": 1, "checkpoint_every": 0, "log_every": 1, "precision": "fp32"},
  "evaluate": {"max_examples_per_set": 20, "greedy_check_examples": 2},
  "analyze": {"enabled": false},
  "upcycle": {"from": "dense_qa", "method": "$3", "seed": 1, "noise": 0.0}
}
JSON
}
up_config "$tmp/up.json" moe copy 512 4
bin/upcycle --config "$tmp/up.json" --dense "$tmp/dense/model.safetensors" --out "$tmp/init.safetensors" \
  >"$tmp/upcycle.log" 2>&1 || { cat "$tmp/upcycle.log"; fail "bin/upcycle failed"; }
echo "ok: converted ($(tail -n 1 "$tmp/upcycle.log"))"

train_up() { # train_up OUT [args]
  local out=$1
  shift
  bin/train --config "$tmp/up.json" --data "$tmp/data" --out "$out" --threads 1 --init-from "$tmp/init.safetensors" \
    "$@" >"$out.log" 2>&1 || { cat "$out.log"; fail "upcycled run $out failed"; }
}
train_up "$tmp/up"
metric() { sed -n "$2p" "$1/metrics.jsonl" | sed -E "s/.*\"$3\":([-0-9.eE+]+).*/\1/"; }
last=$(metric "$tmp/up" '$' ce)
awk -v x="$last" 'BEGIN { exit !(x == x + 0 && x > 0 && x < 20) }' || fail "upcycled run: final ce '$last' not finite"
# Step 1 of the upcycled run sees the windows step 1 of the dense run saw (same loader seed): the converted model
# computes the dense model's function, but from the dense run's final weights, so its step-1 loss is the dense model's
# loss after 5 steps on those windows -- below the dense run's own step-1 loss from its random init.
d1=$(metric "$tmp/dense" 1 ce) u1=$(metric "$tmp/up" 1 ce)
awk -v d="$d1" -v u="$u1" 'BEGIN { exit !(u < d - 0.1) }' \
  || fail "upcycled step 1 ce $u1 is not below the dense run's step 1 ce $d1: the dense weights were not taken"
echo "ok: upcycled run trains (step 1 ce $u1 below the dense run's $d1, final $last)"

grep -q '"init_from"' "$tmp/up/train_summary.json" || fail "train_summary.json has no init_from"
for key in '"method":"copy"' '"from":"dense_qa"' "\"source\":\"$tmp/dense/model.safetensors\"" \
  "\"source_sha256\":\"$(sha256sum "$tmp/dense/model.safetensors" | cut -c1-64)\"" \
  "\"sha256\":\"$(sha256sum "$tmp/init.safetensors" | cut -c1-64)\""; do
  tr -d ' \t\n' <"$tmp/up/train_summary.json" | grep -qF "$key" || fail "train_summary.json: init_from lacks $key"
  tr -d ' \t\n' <"$tmp/up/state.json" | grep -qF "$key" || fail "state.json: init_from lacks $key"
done
bin/evaluate --run "$tmp/up" --config "$tmp/up.json" --data "$tmp/data" --out "$tmp/up/result.json" \
  >"$tmp/eval.log" 2>&1 || { cat "$tmp/eval.log"; fail "evaluate of the upcycled run failed"; }
tr -d ' \t\n' <"$tmp/up/result.json" | grep -qF '"method":"copy"' || fail "result.json has no init_from"
grep -q '"init_from"' "$tmp/dense/train_summary.json" && fail "the dense run's records have init_from"
echo "ok: provenance: init_from in train_summary.json, state.json and result.json"

# resume: stopped after step 2, resumed: byte-identical to the uninterrupted run
train_up "$tmp/up_resumed" --stop-after 2
train_up "$tmp/up_resumed" --resume
same_as_ref "$tmp/up" "$tmp/up_resumed" "upcycled run stopped at step 2 and resumed"

# a checkpoint converted for another config is refused; another initial checkpoint of the same config (converted
# from another dense checkpoint) is refused by --resume, and auto-resume starts over from it
up_config "$tmp/up_noise.json" moe copy 512 4
sed -i 's/"noise": 0.0/"noise": 0.01/' "$tmp/up_noise.json"
bin/train --config "$tmp/up_noise.json" --data "$tmp/data" --out "$tmp/up" --threads 1 \
  --init-from "$tmp/init.safetensors" >"$tmp/mismatch.log" 2>&1 \
  && fail "an init checkpoint of another conversion was accepted"
grep -q "noise 0.01): rerun bin/upcycle" "$tmp/mismatch.log" || { cat "$tmp/mismatch.log"; fail "mismatch message"; }
bin/train --config experiments/ci/dense_qa.json --data "$tmp/data" --out "$tmp/dense3" --steps 3 --threads 1 \
  >"$tmp/dense3.log" 2>&1 || { cat "$tmp/dense3.log"; fail "second dense run failed"; }
bin/upcycle --config "$tmp/up.json" --dense "$tmp/dense3/model.safetensors" --out "$tmp/init3.safetensors" \
  >/dev/null 2>&1 || fail "conversion of the second dense run failed"
train_up "$tmp/up_other" --stop-after 2
bin/train --config "$tmp/up.json" --data "$tmp/data" --out "$tmp/up_other" --threads 1 \
  --init-from "$tmp/init3.safetensors" --resume >"$tmp/refuse.log" 2>&1 && fail "--resume accepted another init"
grep -q "refusing to resume.*the initial weights (--init-from) differ" "$tmp/refuse.log" \
  || { cat "$tmp/refuse.log"; fail "no resume refusal naming the initial weights"; }
bin/train --config "$tmp/up.json" --data "$tmp/data" --out "$tmp/up_other" --threads 1 \
  --init-from "$tmp/init3.safetensors" --auto-resume >"$tmp/auto.log" 2>&1 \
  || { cat "$tmp/auto.log"; fail "auto-resume"; }
grep -q "starting over: the initial weights" "$tmp/auto.log" \
  || { cat "$tmp/auto.log"; fail "auto-resume did not start over"; }
init3_sha=$(sha256sum "$tmp/init3.safetensors" | cut -c1-64)
tr -d ' \t\n' <"$tmp/up_other/train_summary.json" | grep -qF "\"sha256\":\"$init3_sha\"" \
  || fail "the restarted run does not record the new initial checkpoint"
echo "ok: a checkpoint of another conversion is refused; another initial checkpoint: --resume refuses," \
  "auto-resume starts over"

# refusals, one line each
refused() { # refused LABEL EXPECTED_TEXT COMMAND...
  local label=$1 want=$2
  shift 2
  "$@" >"$tmp/r.out" 2>"$tmp/r.err" && fail "$label: accepted"
  # one error line (train logs its thread count first)
  [ "$(grep -c 'error:' "$tmp/r.err")" = 1 ] || { cat "$tmp/r.err"; fail "$label: not one error line"; }
  grep 'error:' "$tmp/r.err" | grep -qF "$want" || { cat "$tmp/r.err"; fail "$label: message lacks '$want'"; }
  echo "ok: refused: $label: $(grep 'error:' "$tmp/r.err")"
}
up_config "$tmp/moeut.json" moeut copy 512 4
sed -i 's/"ff_k": 2,/"ff_k": 2, "att_n_experts": 2, "att_k": 1, "group_size": 2,/' "$tmp/moeut.json"
refused "moeut target" "cannot be upcycled from a dense model: its layers are shared" \
  bin/upcycle --config "$tmp/moeut.json" --dense "$tmp/dense/model.safetensors" --out "$tmp/x.safetensors"
up_config "$tmp/s6.json" moe copy 256 4
refused "copy with experts narrower than d_ff" "ff_expert_size must be 512" \
  bin/upcycle --config "$tmp/s6.json" --dense "$tmp/dense/model.safetensors" --out "$tmp/x.safetensors"
up_config "$tmp/split5.json" moe split 128 5
refused "split: E not a multiple of the pieces" "not a multiple of the 4 pieces" \
  bin/upcycle --config "$tmp/split5.json" --dense "$tmp/dense/model.safetensors" --out "$tmp/x.safetensors"
refused "source not dense" "not a dense checkpoint" \
  bin/upcycle --config "$tmp/up.json" --dense "$tmp/init.safetensors" --out "$tmp/x.safetensors"
refused "d_model differs" "model.d_model: 64, the dense checkpoint has 128" \
  bin/upcycle --config "$tmp/up.json" --set model.d_model=64 --set model.d_head=16 \
  --dense "$tmp/dense/model.safetensors" --out "$tmp/x.safetensors"
refused "upcycled run without --init-from" "give the checkpoint bin/upcycle wrote with --init-from" \
  bin/train --config "$tmp/up.json" --data "$tmp/data" --out "$tmp/none" --threads 1
refused "--init-from without an upcycle section" "has no \"upcycle\" section" \
  bin/train --config experiments/ci/dense_qa.json --data "$tmp/data" --out "$tmp/none" --threads 1 \
  --init-from "$tmp/init.safetensors"
[ ! -e "$tmp/x.safetensors" ] || fail "a refused conversion left an output"
# starting weights holding a NaN: refused before training, naming the tensor and the element
python3 - "$tmp/init.safetensors" "$tmp/nan.safetensors" <<'PY'
import json, struct, sys
data = bytearray(open(sys.argv[1], "rb").read())
n = struct.unpack("<Q", data[:8])[0]
e = json.loads(data[8:8 + n])["transformer.layers.1.ffn.keys"]
assert e["dtype"] == "F32", e
at = 8 + n + e["data_offsets"][0] + 4 * 5  # element 5
data[at:at + 4] = struct.pack("<f", float("nan"))
open(sys.argv[2], "wb").write(data)
PY
refused "--init-from with a NaN weight" "$tmp/nan.safetensors: tensor transformer.layers.1.ffn.keys: element 5 is NaN" \
  bin/train --config "$tmp/up.json" --data "$tmp/data" --out "$tmp/nan_run" --threads 1 \
  --init-from "$tmp/nan.safetensors"
[ ! -e "$tmp/nan_run/metrics.jsonl" ] || fail "a run from NaN weights trained"
# a split conversion trains too
up_config "$tmp/split.json" moe split 128 8
bin/upcycle --config "$tmp/split.json" --dense "$tmp/dense/model.safetensors" --out "$tmp/split.safetensors" \
  >/dev/null 2>&1 || fail "split conversion failed"
bin/train --config "$tmp/split.json" --data "$tmp/data" --out "$tmp/split" --threads 1 --init-from \
  "$tmp/split.safetensors" >"$tmp/split.log" 2>&1 || { cat "$tmp/split.log"; fail "split run failed"; }
tr -d ' \t\n' <"$tmp/split/train_summary.json" | grep -qF '"method":"split"' || fail "split run: no init_from"
echo "ok: a split conversion (4 pieces of 128, 2 replicas) trains"
# make's plan (bin/runs): each upcycled run is converted from the dense run of its seed; without it, refused
plan=$(bin/runs --experiment experiments/upcycle --runs dense_qa,moe_qa_upcycled --count 2) || fail "bin/runs failed"
grep -qx "REPRO_UPCYCLE_FROM.moe_qa_upcycled := dense_qa" <<<"$plan" || { echo "$plan"; fail "plan: seed 1 source"; }
grep -qx "REPRO_UPCYCLE_FROM.moe_qa_upcycled.seed2 := dense_qa.seed2" <<<"$plan" \
  || { echo "$plan"; fail "plan: seed 2 source"; }
refused "an upcycled run without its dense run in RUNS" "upcycle.from: no run of config dense_qa with seed 1" \
  bin/runs --experiment experiments/upcycle --runs moe_qa_upcycled
echo "ok: bin/runs plans each upcycled run's source (seed by seed)"
echo "PASS: test_upcycle"
