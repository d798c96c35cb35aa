#!/usr/bin/env bash
# e2e-lane: private (it writes only under its own temporary directories, so it may run beside other tests)
# bin/train failure paths: a NaN gradient (--debug-nan) or a diverging lr stops with "non-finite ... at step S; last
# good checkpoint step K kept", exit 1, and the checkpoint of step K stays intact and resumable; bad inputs (unknown
# config key, n_tokens vs tokenizer, tokenizer vs shard, micro-batches, missing data) are one clear line, exit 1,
# and leave no output directory behind.
source "$(dirname "$0")/train_common.sh"

train_data "$tmp/data"

# ---- NaN injected at step 6 with checkpoints every 2 steps: step 4 is kept ----
train_config "$tmp/nan.json" dense qa 10 checkpoint_every=2
rc=0
bin/train --config "$tmp/nan.json" --data "$tmp/data" --out "$tmp/nan" --threads 1 --debug-nan 6 2>"$tmp/nan.log" || rc=$?
[ "$rc" = 1 ] || { cat "$tmp/nan.log"; fail "NaN: exit status $rc, expected 1"; }
grep -q "non-finite gradient norm at step 6; last good checkpoint step 4 kept" "$tmp/nan.log" \
  || { cat "$tmp/nan.log"; fail "NaN: message"; }
[ "$(json_get "$tmp/nan/state.json" step)" = 4 ] || fail "NaN: state.json is not the step-4 checkpoint"
[ ! -f "$tmp/nan/train_summary.json" ] || fail "NaN: train_summary.json written"
recorded=$(grep -A2 '"files"' "$tmp/nan/state.json" | sed -n -E 's/.*"model.safetensors":[[:space:]]*"([0-9a-f]{64})".*/\1/p')
[ "$recorded" = "$(sha256sum "$tmp/nan/model.safetensors" | cut -d' ' -f1)" ] || fail "NaN: model.safetensors changed after step 4"
# the kept checkpoint is usable: resuming without the injection finishes the run
bin/train --config "$tmp/nan.json" --data "$tmp/data" --out "$tmp/nan" --threads 1 --resume 2>"$tmp/nan2.log" \
  || { cat "$tmp/nan2.log"; fail "NaN: resume from the kept checkpoint"; }
[ "$(json_get "$tmp/nan/train_summary.json" steps)" = 10 ] || fail "NaN: resumed run did not finish"
echo "ok: injected NaN stops the run and keeps the last good checkpoint"

# ---- a diverging learning rate ----
train_config "$tmp/lr.json" moeut qa 10 lr=1e30 warmup=0 checkpoint_every=1
rc=0
bin/train --config "$tmp/lr.json" --data "$tmp/data" --out "$tmp/lr" --threads 1 2>"$tmp/lr.log" || rc=$?
[ "$rc" = 1 ] || { cat "$tmp/lr.log"; fail "lr 1e30: exit status $rc, expected 1"; }
grep -E -q "non-finite (loss|gradient norm|weights) at step [0-9]+; last good checkpoint step [0-9a-z ()]+ kept" "$tmp/lr.log" \
  || { cat "$tmp/lr.log"; fail "lr 1e30: message"; }
[ ! -f "$tmp/lr/train_summary.json" ] || fail "lr 1e30: train_summary.json written"
grep "non-finite" "$tmp/lr.log"
echo "ok: a diverging lr stops the run"

# ---- bad inputs: one line naming the culprit, exit 1, no output directory ----
expect_error() { # expect_error LABEL PATTERN ARGS...
  local label=$1 pattern=$2 rc=0
  shift 2
  rm -rf "$tmp/bad"
  bin/train "$@" --out "$tmp/bad" --threads 1 2>"$tmp/bad.log" || rc=$?
  [ "$rc" = 1 ] || { cat "$tmp/bad.log"; fail "$label: exit status $rc, expected 1"; }
  grep -q -- "$pattern" "$tmp/bad.log" || { cat "$tmp/bad.log"; fail "$label: message does not match '$pattern'"; }
  [ "$(grep -c 'error' "$tmp/bad.log")" = 1 ] || { cat "$tmp/bad.log"; fail "$label: expected one error line"; }
  [ ! -e "$tmp/bad" ] || fail "$label: output directory created"
  echo "ok: $label"
}
train_config "$tmp/good.json" dense qa 4
sed 's/"seed": 1,/"seed": 1, "sead": 2,/' "$tmp/good.json" >"$tmp/unknown.json"
expect_error "unknown train key" "unknown.json: train.sead: unknown key (did you mean train.seed?)" --config "$tmp/unknown.json" --data "$tmp/data"
train_config "$tmp/ntok.json" dense qa 4 n_tokens=256
expect_error "n_tokens vs tokenizer" "model.n_tokens is 256 but .*tokenizer.json has 512 pieces" \
  --config "$tmp/ntok.json" --data "$tmp/data"
train_config "$tmp/nmb.json" dense qa 4 n_microbatch=3
expect_error "n_microbatch" "train.n_microbatch" --config "$tmp/nmb.json" --data "$tmp/data"
expect_error "missing data" "$tmp/nodata/tokenizer.json" --config "$tmp/good.json" --data "$tmp/nodata"
# a shard made with another tokenizer
sed 's/"vocab_size": 512/"vocab_size": 400/' experiments/tiny/data.json >"$tmp/data400.json"
bin/tokenize --raw "$tmp/raw" --config "$tmp/data400.json" --out "$tmp/data400" >/dev/null 2>&1 || fail "tokenize 400"
mkdir -p "$tmp/mixed"
cp "$tmp/data/tokenizer.json" "$tmp/mixed/"
cp "$tmp/data400/train.shard" "$tmp/mixed/"
expect_error "tokenizer vs shard" "train.shard: tokenizer_sha256 .* does not match .*tokenizer.json" \
  --config "$tmp/good.json" --data "$tmp/mixed"
rc=0
bin/train --data "$tmp/data" --out "$tmp/bad" 2>/dev/null || rc=$?
[ "$rc" = 2 ] || fail "missing --config: exit status $rc, expected 2"
echo "ok: bad inputs"

# ---- a config too large for the memory, run over a finished run: the error comes before starting over ----
# (context 10^6 x 2048 windows of d_model 4096: petabytes of activations, beyond any machine's address space.) The
# arena used to be allocated after start_or_resume had removed the earlier run's checkpoint and summary.
cp -r "$tmp/nan" "$tmp/big"
train_config "$tmp/big.json.tmp" dense qa 4 context=1000000 batch_size=2048
sed 's/"d_model": 64/"d_model": 4096/' "$tmp/big.json.tmp" >"$tmp/big.json"
before=$(cd "$tmp/big" && sha256sum model.safetensors optim.safetensors state.json train_summary.json metrics.jsonl)
rc=0
bin/train --config "$tmp/big.json" --data "$tmp/data" --out "$tmp/big" --threads 1 2>"$tmp/big.log" || rc=$?
[ "$rc" = 1 ] || { cat "$tmp/big.log"; fail "too large: exit status $rc, expected 1"; }
grep -q "out of memory allocating [0-9.]* GiB ([0-9]* bytes) for the activations of [0-9]* training tokens per micro-batch (train.batch_size / train.n_microbatch x train.context)" "$tmp/big.log" \
  || { cat "$tmp/big.log"; fail "too large: no out-of-memory message naming the size and the config keys"; }
[ "$(grep -c 'error' "$tmp/big.log")" = 1 ] || { cat "$tmp/big.log"; fail "too large: expected one error line"; }
after=$(cd "$tmp/big" && sha256sum model.safetensors optim.safetensors state.json train_summary.json metrics.jsonl 2>&1 || true)
[ "$before" = "$after" ] || fail "too large: the earlier run in --out was changed or removed: $after"
echo "ok: a config too large for the memory leaves the earlier run in --out intact"
# Weights too large: d_model 2^18 (10^9 parameters, 4.3 GB of weights) under a 3 GB address-space limit (ulimit -v,
# so the allocation fails the same way on any machine, whatever its memory and overcommit settings); the message
# names the size and the keys that set it.
sed 's/"d_model": 64/"d_model": 262144/' "$tmp/nan.json" >"$tmp/wide.json"
rc=0
(ulimit -v 3000000; exec bin/train --config "$tmp/wide.json" --data "$tmp/data" --out "$tmp/wide" --threads 1) \
  2>"$tmp/wide.log" || rc=$?
[ "$rc" = 1 ] || { cat "$tmp/wide.log"; fail "wide: exit status $rc, expected 1"; }
grep -q "out of memory allocating [0-9.]* GiB ([0-9]* bytes) for the weights and gradients of [0-9]* parameters (model.n_tokens=512, d_model=262144, n_layers=4, d_ff=256)" "$tmp/wide.log" \
  || { cat "$tmp/wide.log"; fail "wide: no out-of-memory message naming the size and the model keys"; }
echo "ok: out-of-memory errors name the size and the config keys: $(grep -o 'out of memory.*' "$tmp/wide.log" | cut -c1-120)..."

# ---- a checkpoint that cannot be written (a full disk, here a file size limit: EFBIG instead of ENOSPC) ----
# One error line with the cause, exit 1, and no partial .pending files left holding the space; the limit (in KiB)
# lets model.safetensors (~0.9 MB for this model) through and stops optim.safetensors (twice that).
train_config "$tmp/fsz.json" dense qa 4 checkpoint_every=2
rc=0
( ulimit -f 1500; trap '' XFSZ; exec bin/train --config "$tmp/fsz.json" --data "$tmp/data" --out "$tmp/fsz" --threads 1 ) \
  2>"$tmp/fsz.log" || rc=$?
[ "$rc" = 1 ] || { cat "$tmp/fsz.log"; fail "checkpoint write failure: exit status $rc, expected 1"; }
grep -q "optim.safetensors.pending.*: write failed: File too large" "$tmp/fsz.log" \
  || { cat "$tmp/fsz.log"; fail "checkpoint write failure: the message does not give the cause"; }
[ "$(grep -c 'error' "$tmp/fsz.log")" = 1 ] || { cat "$tmp/fsz.log"; fail "checkpoint write failure: expected one error line"; }
left=$(ls -A "$tmp/fsz" | grep -E 'pending|\.tmp\.' || true)
[ -z "$left" ] || fail "checkpoint write failure: partial files left: $left"
[ ! -e "$tmp/fsz/state.json" ] || fail "checkpoint write failure: a state.json was committed"
echo "ok: a checkpoint that cannot be written is one error with its cause and leaves no partial files"
