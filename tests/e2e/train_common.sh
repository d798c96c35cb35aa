# Shared helpers of the tests/e2e/test_train_*.sh scripts (sourced, not a test itself).
# Provides: $tmp (removed on exit; KEEP_TMP=1 keeps it to look into a failure), train_data DIR (fetch + tokenize of the embedded sample), train_config PATH ARCH
# MODE STEPS [KEY=VALUE ...] (a small run config; KEY=VALUE overrides a "train" or "model" key), json_get FILE EXPR.
set -euo pipefail
cd "$(dirname "$0")/../.."
for b in fetch tokenize train; do
  [ -x "bin/$b" ] || { echo "bin/$b missing (run make first)"; exit 1; }
done
tmp=$(mktemp -d /tmp/test_train_e2e.XXXXXX)
trap '[ -n "${KEEP_TMP:-}" ] || rm -rf "$tmp"' EXIT

fail() { echo "FAIL: $*"; exit 1; }

# train_data DIR: the embedded sample, arithmetic only, tokenized with the tiny experiment's settings.
train_data() {
  local out=$1
  bin/fetch --source embedded --out "$tmp/raw" --filter 'arithmetic__.*' --tokenizer-corpus-pairs 10000 \
    >"$tmp/fetch.log" 2>&1 || { cat "$tmp/fetch.log"; fail "bin/fetch failed"; }
  bin/tokenize --raw "$tmp/raw" --config experiments/tiny/data.json --out "$out" >"$tmp/tokenize.log" 2>&1 \
    || { cat "$tmp/tokenize.log"; fail "bin/tokenize failed"; }
}

# train_config PATH ARCH(dense|moeut) MODE(qa|answer) STEPS [key=value ...]
# A model small enough for a few seconds of CPU training: C 64, 4 layer applications, context 128, batch 8.
train_config() {
  local path=$1 arch=$2 mode=$3 steps=$4
  shift 4
  local answer=false nmb=1
  [ "$mode" = answer ] && answer=true
  [ "$arch" = moeut ] && nmb=2
  declare -A kv=(
    [steps]=$steps [batch_size]=8 [n_microbatch]=$nmb [context]=128 [lr]=0.003 [weight_decay]=0.01 [warmup]=5
    [min_lr_multiplier]=0.1 [grad_clip]=0.25 [adam_beta1]=0.9 [adam_beta2]=0.999 [adam_eps]=1e-08 [seed]=1
    [checkpoint_every]=0 [log_every]=1 [ff_expert_dropout]=0.0 [att_expert_dropout]=0.0 [n_tokens]=512
  )
  local a
  for a in "$@"; do kv[${a%%=*}]=${a#*=}; done
  local model
  if [ "$arch" = dense ]; then
    model="\"arch\": \"dense\", \"n_tokens\": ${kv[n_tokens]}, \"d_model\": 64, \"n_layers\": 4, \"n_heads\": 2,
    \"d_head\": 32, \"d_ff\": 256, \"dropout\": 0.0, \"lm_head_bias\": false, \"out_norm_affine\": false"
  else
    model="\"arch\": \"moeut\", \"n_tokens\": ${kv[n_tokens]}, \"d_model\": 64, \"n_layers\": 4, \"n_heads\": 2,
    \"d_head\": 32, \"ff_n_experts\": 8, \"ff_expert_size\": 32, \"ff_k\": 4, \"att_n_experts\": 3, \"att_k\": 2,
    \"group_size\": 2, \"entropy_reg\": 0.01, \"att_entropy_reg\": 0.001,
    \"ff_expert_dropout\": ${kv[ff_expert_dropout]}, \"att_expert_dropout\": ${kv[att_expert_dropout]},
    \"dropout\": 0.0, \"lm_head_bias\": false, \"out_norm_affine\": false"
  fi
  cat >"$path" <<EOF
{
  "description": "e2e test run ($arch, $mode)",
  "model": {$model},
  "train": {"loss_on_target_only": $answer, "steps": ${kv[steps]}, "batch_size": ${kv[batch_size]},
    "n_microbatch": ${kv[n_microbatch]}, "context": ${kv[context]}, "lr": ${kv[lr]},
    "weight_decay": ${kv[weight_decay]}, "warmup": ${kv[warmup]}, "min_lr_multiplier": ${kv[min_lr_multiplier]},
    "grad_clip": ${kv[grad_clip]}, "adam_beta1": ${kv[adam_beta1]}, "adam_beta2": ${kv[adam_beta2]},
    "adam_eps": ${kv[adam_eps]}, "seed": ${kv[seed]}, "checkpoint_every": ${kv[checkpoint_every]},
    "log_every": ${kv[log_every]}, "precision": "fp32"},
  "evaluate": {"max_examples_per_set": 50, "greedy_check_examples": 5},
  "analyze": {"enabled": false}
}
EOF
}

# json_get FILE KEY: a top-level scalar of a JSON file (no python needed: cJSON-style pretty output or compact).
json_get() {
  sed -n -E "s/.*\"$2\"[[:space:]]*:[[:space:]]*\"?([^\",}]*)\"?.*/\1/p" "$1" | head -n 1
}

# Resume tests: metrics.jsonl without its wall-clock-dependent field, and the byte-identity check of a resumed run
# against the uninterrupted reference run.
strip_rate() { sed -E 's/"tokens_per_s":[^,]*,//' "$1"; }

same_as_ref() { # same_as_ref REF_DIR DIR LABEL
  cmp "$1/model.safetensors" "$2/model.safetensors" || fail "$3: model.safetensors differs from the uninterrupted run"
  cmp "$1/optim.safetensors" "$2/optim.safetensors" || fail "$3: optim.safetensors differs from the uninterrupted run"
  diff <(strip_rate "$1/metrics.jsonl") <(strip_rate "$2/metrics.jsonl") >/dev/null \
    || fail "$3: metrics.jsonl differs from the uninterrupted run"
  [ -f "$2/train_summary.json" ] || fail "$3: no train_summary.json after the resumed run finished"
  echo "ok: $3"
}

# CUDA e2e scripts: require_backend BE BIN probes `BIN/inspect --backend BE` on a twin fixture (the backend_create path
# every stage takes) before any data is prepared: exit 77 with a SKIP line where the build or the machine has no usable
# CUDA GPU, a failure on any other error.
require_backend() {
  local be=$1 bin=$2 probe=tests/fixtures/twin/dense_tiny_on
  if ! "$bin"/inspect --weights "$probe/weights.safetensors" --batch "$probe/batch.json" --out "$tmp/probe.out" \
       --backend "$be" >/dev/null 2>"$tmp/probe.err"; then
    if grep -qE "no usable CUDA GPU|no CUDA support" "$tmp/probe.err"; then
      echo "SKIP: $(head -n 1 "$tmp/probe.err")"
      exit 77
    fi
    fail "$bin/inspect --backend $be: $(head -n 1 "$tmp/probe.err")"
  fi
}

# cuda_device_under_test: the backend and stages a CUDA e2e script tests, be (CUDA_TEST_BACKEND, default cuda) and
# dut_bin (CUDA_TEST_BIN, default bin; make test-cuda-emu: build/emu/bin), a note in validation mode, then
# require_backend (exit 77 without a usable GPU).
cuda_device_under_test() {
  be=${CUDA_TEST_BACKEND:-cuda}
  dut_bin=${CUDA_TEST_BIN:-bin}
  [ "$be" = cuda ] || echo "NOTE: validation mode: the backend under test is $be, not cuda"
  require_backend "$be" "$dut_bin"
}

# e2e_data SHARD: sets data= to $CUDA_E2E_DATA when given (an already tokenized directory, e.g. carried to a GPU
# machine by mk/gpu/bundle.sh; it must hold SHARD), else to the embedded sample tokenized into $tmp/data.
e2e_data() {
  if [ -n "${CUDA_E2E_DATA:-}" ]; then
    [ -f "$CUDA_E2E_DATA/$1" ] || fail "CUDA_E2E_DATA=$CUDA_E2E_DATA has no $1"
    data=$CUDA_E2E_DATA
  else
    train_data "$tmp/data"
    data=$tmp/data
  fi
}
