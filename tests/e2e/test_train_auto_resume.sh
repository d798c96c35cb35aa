#!/usr/bin/env bash
# e2e-lane: private (it writes only under its own temporary directories, so it may run beside other tests)
# bin/train --auto-resume (make's default, RESUME=auto): an interrupted run continues bit-identically from its
# checkpoint when the config, the length, the training data and the backend are those of the checkpoint, and starts
# over, saying why, when any of them changed (--resume refuses instead, naming the same cause). Cases: --stop-after
# then --auto-resume; a changed config; a train shard reshuffled by re-tokenizing (same tokenizer, same example count:
# only the shard's sha256 tells); a checkpoint of another backend; a checkpoint written before the shard's sha256 was
# recorded; a finished run (left alone, its summary's time refreshed so make sees it up to date); both flags at once.
source "$(dirname "$0")/train_common.sh"

train_data "$tmp/data"
steps=24
train_config "$tmp/run.json" dense qa $steps checkpoint_every=0
ref="$tmp/ref"
bin/train --config "$tmp/run.json" --data "$tmp/data" --out "$ref" --threads 1 >"$ref.log" 2>&1 || { cat "$ref.log"; fail "reference run"; }

# interrupted_run DIR: a run of run.json stopped (checkpointed) after 5 steps
interrupted_run() {
  rm -rf "$1"
  bin/train --config "$tmp/run.json" --data "$tmp/data" --out "$1" --threads 1 --stop-after 5 >"$1.log" 2>&1 \
    || { cat "$1.log"; fail "--stop-after 5"; }
  [ "$(json_get "$1/state.json" step)" = 5 ] || fail "--stop-after 5 left step $(json_get "$1/state.json" step)"
}
# expect_start_over DIR LOG WHY: the run started over with a warning matching WHY and trained all steps
expect_start_over() {
  grep -q "$1: starting over: $3" "$2" || { cat "$2"; fail "no 'starting over: $3' warning"; }
  grep -q "resumed" "$2" && { cat "$2"; fail "resumed although: $3"; }
  [ "$(json_get "$1/state.json" step)" = $steps ] || fail "did not train all $steps steps after starting over ($3)"
  [ "$(grep -c '"step"' "$1/metrics.jsonl")" = $steps ] || fail "metrics.jsonl of the started-over run is not $steps lines"
}

# resume_then_auto DIR CONFIG DATA WHY: on the interrupted run DIR, --resume with CONFIG and DATA is refused (exit 1,
# WHY named, checkpoint untouched), then --auto-resume starts over saying WHY
resume_then_auto() {
  local d=$1 cfg=$2 data=$3 why=$4 rc=0
  bin/train --config "$cfg" --data "$data" --out "$d" --threads 1 --resume 2>"$d.strict" || rc=$?
  [ "$rc" = 1 ] || fail "--resume ($why): exit $rc, expected 1"
  grep -q "refusing to resume .*$why" "$d.strict" || { cat "$d.strict"; fail "--resume: no 'refusing to resume ... $why'"; }
  [ "$(json_get "$d/state.json" step)" = 5 ] || fail "a refused --resume changed the checkpoint ($why)"
  bin/train --config "$cfg" --data "$data" --out "$d" --threads 1 --auto-resume >"$d.log2" 2>&1 || { cat "$d.log2"; fail "auto-resume ($why)"; }
  expect_start_over "$d" "$d.log2" "$why"
}

# ---- same everything: continues bit-identically ----
d="$tmp/auto"
interrupted_run "$d"
bin/train --config "$tmp/run.json" --data "$tmp/data" --out "$d" --threads 1 --auto-resume >"$d.log2" 2>&1 || { cat "$d.log2"; fail "auto-resume"; }
grep -q "resumed .* at step 5 of $steps" "$d.log2" || { cat "$d.log2"; fail "auto-resume: no resume message"; }
same_as_ref "$ref" "$d" "--auto-resume after --stop-after continued bit-identically"

# ---- a changed config: started over (the new config's fresh run), --resume refuses ----
sed 's/"lr": 0.003/"lr": 0.002/' "$tmp/run.json" >"$tmp/changed.json"
grep -q '"lr": 0.002' "$tmp/changed.json" || fail "could not change the config"
d="$tmp/changed"
interrupted_run "$d"
resume_then_auto "$d" "$tmp/changed.json" "$tmp/data" ".*changed.json changed since the checkpoint"
fresh="$tmp/changed-fresh"
bin/train --config "$tmp/changed.json" --data "$tmp/data" --out "$fresh" --threads 1 >/dev/null 2>&1 || fail "fresh run of changed.json"
cmp -s "$fresh/model.safetensors" "$d/model.safetensors" || fail "the started-over run differs from a fresh run of the changed config"
cmp -s "$ref/model.safetensors" "$d/model.safetensors" && fail "changed config: weights identical to the old config's run"
echo "ok: a changed config starts over (and --resume refuses it)"

# ---- the train shard reshuffled (same tokenizer and example count) ----
sed 's/"train_shuffle_seed": 1/"train_shuffle_seed": 2/' experiments/tiny/data.json >"$tmp/data2.json"
grep -q '"train_shuffle_seed": 2' "$tmp/data2.json" || fail "could not change train_shuffle_seed"
bin/tokenize --raw "$tmp/raw" --config "$tmp/data2.json" --out "$tmp/data2" >"$tmp/tok2.log" 2>&1 || { cat "$tmp/tok2.log"; fail "re-tokenize"; }
cmp -s "$tmp/data/tokenizer.json" "$tmp/data2/tokenizer.json" || fail "the reshuffle changed the tokenizer (the case needs the same one)"
cmp -s "$tmp/data/train.shard" "$tmp/data2/train.shard" && fail "train_shuffle_seed 2 gave the same shard"
d="$tmp/reshuffled"
interrupted_run "$d"
resume_then_auto "$d" "$tmp/run.json" "$tmp/data2" "the training data in .*data2 differs from the checkpoint's"
echo "ok: a reshuffled train shard starts over (and --resume refuses it)"

# ---- a checkpoint of another backend: --auto-resume starts over, --resume continues with a warning ----
set_state_field() { # set_state_field DIR SED_EXPR: edits state.json (not covered by the checkpoint's file hashes)
  sed -E -i "$2" "$1/state.json"
}
d="$tmp/backend"
interrupted_run "$d"
set_state_field "$d" 's/"backend":[[:space:]]*"cpu"/"backend": "cuda"/'
grep -q '"backend": "cuda"' "$d/state.json" || fail "could not edit the checkpoint's backend"
cp -r "$d" "$d-strict"
bin/train --config "$tmp/run.json" --data "$tmp/data" --out "$d" --threads 1 --auto-resume >"$d.log2" 2>&1 || { cat "$d.log2"; fail "auto-resume, other backend"; }
expect_start_over "$d" "$d.log2" "the checkpoint was written by the cuda backend, this run uses cpu"
cmp -s "$ref/model.safetensors" "$d/model.safetensors" || fail "other backend: the started-over run differs from the reference"
bin/train --config "$tmp/run.json" --data "$tmp/data" --out "$d-strict" --threads 1 --resume >"$d.log3" 2>&1 || { cat "$d.log3"; fail "--resume, other backend"; }
grep -q "resuming a cuda checkpoint on the cpu backend" "$d.log3" || { cat "$d.log3"; fail "--resume, other backend: no warning"; }
grep -q "resumed .* at step 5" "$d.log3" || { cat "$d.log3"; fail "--resume, other backend: did not resume"; }
echo "ok: another backend's checkpoint: --auto-resume starts over, --resume continues with a warning"

# ---- a checkpoint written before data.train_sha256 existed: checked on tokenizer and example count ----
d="$tmp/old"
interrupted_run "$d"
grep -q '"train_sha256"' "$d/state.json" || fail "state.json does not record data.train_sha256"
set_state_field "$d" '/"train_sha256"/d; s/("n_examples":[[:space:]]*[0-9]+),/\1/'
grep -q '"train_sha256"' "$d/state.json" && fail "could not remove data.train_sha256"
bin/train --config "$tmp/run.json" --data "$tmp/data" --out "$d" --threads 1 --auto-resume >"$d.log2" 2>&1 || { cat "$d.log2"; fail "auto-resume, old state"; }
grep -q "resumed .* at step 5 of $steps" "$d.log2" || { cat "$d.log2"; fail "old state: did not resume"; }
same_as_ref "$ref" "$d" "a checkpoint without data.train_sha256 continued bit-identically"

# ---- a finished run: left alone, summary time refreshed ----
touch -d '2001-01-01' "$ref/train_summary.json"
before=$(sha256sum "$ref/model.safetensors" "$ref/train_summary.json")
bin/train --config "$tmp/run.json" --data "$tmp/data" --out "$ref" --threads 1 --auto-resume >"$tmp/again.log" 2>&1 || { cat "$tmp/again.log"; fail "auto-resume of a finished run"; }
grep -q "already finished" "$tmp/again.log" || { cat "$tmp/again.log"; fail "no 'already finished' message"; }
[ "$before" = "$(sha256sum "$ref/model.safetensors" "$ref/train_summary.json")" ] || fail "a finished run was modified"
[ "$ref/train_summary.json" -nt "$tmp/run.json" ] || fail "the finished run's train_summary.json time was not refreshed"
echo "ok: a finished run is left alone and marked up to date"

# ---- both flags: a usage error, nothing touched ----
rc=0
bin/train --config "$tmp/run.json" --data "$tmp/data" --out "$ref" --resume --auto-resume 2>"$tmp/both.log" || rc=$?
[ "$rc" != 0 ] || fail "--resume --auto-resume accepted"
[ "$(wc -l <"$tmp/both.log")" = 1 ] && grep -q -- "--resume and --auto-resume exclude each other" "$tmp/both.log" || { cat "$tmp/both.log"; fail "both flags: message"; }
[ "$before" = "$(sha256sum "$ref/model.safetensors" "$ref/train_summary.json")" ] || fail "both flags: the run was modified"
echo "ok: --resume with --auto-resume refused"
