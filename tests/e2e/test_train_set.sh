#!/usr/bin/env bash
# e2e-lane: private (it writes only under its own temporary directories, so it may run beside other tests)
# --set KEY=VALUE (bin/train, bin/evaluate, bin/analyze): a run trained with `--set train.steps=4` is byte-identical
# to a run of a config file that says 4 steps, records the override ("overrides", "seed", "run_config" in
# train_summary.json, state.json, result.json, the predictions header, analysis.json) and a config_sha256 that is not
# the file's (the file's bytes followed by "\n--set train.steps=4"); evaluate without the same --set refuses, naming
# both override lists, and with it works; a misspelt key is reported (with the closest valid key) before the missing
# key it causes; malformed --set arguments are usage errors (exit 2) naming the argument; --auto-resume with another
# --set starts over, saying why, and --resume refuses.
source "$(dirname "$0")/train_common.sh"
for b in evaluate analyze; do [ -x "bin/$b" ] || fail "bin/$b missing (run make first)"; done

train_data "$tmp/data"
train_config "$tmp/run.json" dense qa 6
train_config "$tmp/four.json" dense qa 4

# ---- --set train.steps=4 trains exactly what a file with 4 steps trains ----
bin/train --config "$tmp/run.json" --set train.steps=4 --data "$tmp/data" --out "$tmp/set4" --threads 1 \
  >"$tmp/set4.log" 2>&1 || { cat "$tmp/set4.log"; fail "train --set train.steps=4"; }
bin/train --config "$tmp/four.json" --data "$tmp/data" --out "$tmp/file4" --threads 1 >"$tmp/file4.log" 2>&1 \
  || { cat "$tmp/file4.log"; fail "train of four.json"; }
grep -q "run.json (--set train.steps=4): dense" "$tmp/set4.log" || { cat "$tmp/set4.log"; fail "the start line does not show the override"; }
grep -q "four.json (no --set): dense" "$tmp/file4.log" || { cat "$tmp/file4.log"; fail "the start line does not say 'no --set'"; }
[ "$(json_get "$tmp/set4/train_summary.json" steps)" = 4 ] || fail "--set train.steps=4 did not train 4 steps"
cmp "$tmp/set4/model.safetensors" "$tmp/file4/model.safetensors" \
  || fail "--set train.steps=4 and a file with 4 steps trained different weights"
echo "ok: --set train.steps=4 trains the same bytes as a config file with 4 steps"

# ---- provenance and config_sha256 ----
file_sha=$(sha256sum "$tmp/run.json" | cut -d' ' -f1)
set_sha=$({ cat "$tmp/run.json"; printf '\n--set train.steps=4'; } | sha256sum | cut -d' ' -f1)
for f in train_summary.json state.json; do
  [ "$(json_get "$tmp/set4/$f" config_sha256)" = "$set_sha" ] \
    || fail "$f: config_sha256 $(json_get "$tmp/set4/$f" config_sha256), expected sha256(file + '\\n--set train.steps=4') $set_sha"
  grep -q '"overrides":[[:space:]]*\["train.steps=4"\]' "$tmp/set4/$f" || { cat "$tmp/set4/$f"; fail "$f: overrides not recorded"; }
  [ "$(json_get "$tmp/set4/$f" seed)" = 1 ] || fail "$f: seed not recorded"
  [ "$(json_get "$tmp/set4/$f" run_config)" = run ] || fail "$f: run_config not recorded"
done
[ "$set_sha" != "$file_sha" ] || fail "config_sha256 with --set equals the file's"
[ "$(json_get "$tmp/file4/train_summary.json" config_sha256)" = "$(sha256sum "$tmp/four.json" | cut -d' ' -f1)" ] \
  || fail "without --set, config_sha256 is not the sha256 of the file's bytes"
grep -q '"overrides":[[:space:]]*\[\]' "$tmp/file4/train_summary.json" || fail "without --set, overrides is not []"
echo "ok: overrides, seed, run_config and config_sha256 recorded by train"

# ---- --set train.seed=2: recorded as the seed, a different run ----
bin/train --config "$tmp/four.json" --set train.seed=2 --data "$tmp/data" --out "$tmp/seed2" --threads 1 \
  >"$tmp/seed2.log" 2>&1 || { cat "$tmp/seed2.log"; fail "train --set train.seed=2"; }
[ "$(json_get "$tmp/seed2/train_summary.json" seed)" = 2 ] || fail "--set train.seed=2: seed not 2 in train_summary.json"
cmp -s "$tmp/seed2/model.safetensors" "$tmp/file4/model.safetensors" && fail "--set train.seed=2 trained seed 1's weights"
echo "ok: --set train.seed=2 is recorded as seed 2 and trains another model"

# ---- evaluate / analyze need the same --set ----
rc=0
bin/evaluate --run "$tmp/set4" --config "$tmp/run.json" --data "$tmp/data" --out "$tmp/set4/result.json" \
  2>"$tmp/ev_no.log" || rc=$?
[ "$rc" = 1 ] || { cat "$tmp/ev_no.log"; fail "evaluate without the --set: exit $rc, expected 1"; }
grep -q "trained with --set train.steps=4, this stage was given no --set: pass the same --set as train" "$tmp/ev_no.log" \
  || { cat "$tmp/ev_no.log"; fail "evaluate without the --set: message does not name both override lists"; }
[ ! -e "$tmp/set4/result.json" ] || fail "a refused evaluate wrote result.json"
rc=0
bin/evaluate --run "$tmp/set4" --config "$tmp/run.json" --set train.steps=5 --data "$tmp/data" \
  --out "$tmp/set4/result.json" 2>"$tmp/ev_other.log" || rc=$?
[ "$rc" = 1 ] && grep -q "trained with --set train.steps=4, this stage was given --set train.steps=5" "$tmp/ev_other.log" \
  || { cat "$tmp/ev_other.log"; fail "evaluate with another --set: not refused naming both lists"; }
bin/evaluate --run "$tmp/set4" --config "$tmp/run.json" --set train.steps=4 --data "$tmp/data" \
  --out "$tmp/set4/result.json" >"$tmp/ev.log" 2>&1 || { cat "$tmp/ev.log"; fail "evaluate with the same --set"; }
bin/analyze --run "$tmp/set4" --config "$tmp/run.json" --set train.steps=4 --data "$tmp/data" \
  --out "$tmp/set4/analysis.json" >"$tmp/an.log" 2>&1 || { cat "$tmp/an.log"; fail "analyze with the same --set"; }
for f in result.json analysis.json; do
  grep -q '"overrides":[[:space:]]*\["train.steps=4"\]' "$tmp/set4/$f" || { cat "$tmp/set4/$f"; fail "$f: overrides not recorded"; }
  [ "$(json_get "$tmp/set4/$f" seed)" = 1 ] && [ "$(json_get "$tmp/set4/$f" run_config)" = run ] \
    || fail "$f: seed / run_config not recorded"
done
[ "$(json_get "$tmp/set4/result.json" config_sha256)" = "$set_sha" ] || fail "result.json: config_sha256 is not train's"
grep -q '"overrides":[[:space:]]*\["train.steps=4"\]' "$tmp/set4/predictions.meta.json" \
  && [ "$(json_get "$tmp/set4/predictions.meta.json" seed)" = 1 ] \
  && [ "$(json_get "$tmp/set4/predictions.meta.json" run_config)" = run ] \
  || { cat "$tmp/set4/predictions.meta.json"; fail "predictions.meta.json: provenance not recorded"; }
# the effective config (with the override applied) is what result.json records
python3 -c 'import json, sys; sys.exit(json.load(open(sys.argv[1]))["config"]["train"]["steps"] != 4)' \
  "$tmp/set4/result.json" || fail "result.json: config does not hold the overridden train.steps"
echo "ok: evaluate refuses another --set (naming both lists) and records the override with the same one"

# ---- a misspelt key: reported with the closest key, before the missing key it causes ----
sed 's/"lr": 0.003/"learning_rate": 0.003/' "$tmp/four.json" >"$tmp/typo.json"
grep -q learning_rate "$tmp/typo.json" || fail "could not misspell lr"
expect_exit() { # expect_exit LABEL STATUS PATTERN ARGS...: one error line matching PATTERN, nothing created
  local label=$1 want=$2 pattern=$3 rc=0
  shift 3
  rm -rf "$tmp/bad"
  bin/train "$@" --data "$tmp/data" --out "$tmp/bad" --threads 1 >/dev/null 2>"$tmp/bad.log" || rc=$?
  [ "$rc" = "$want" ] || { cat "$tmp/bad.log"; fail "$label: exit status $rc, expected $want"; }
  grep -q -- "$pattern" "$tmp/bad.log" || { cat "$tmp/bad.log"; fail "$label: message does not match '$pattern'"; }
  [ "$(grep -c 'error' "$tmp/bad.log")" = 1 ] || { cat "$tmp/bad.log"; fail "$label: expected one error line"; }
  [ ! -e "$tmp/bad" ] || fail "$label: output directory created"
  echo "ok: $label"
}
expect_exit "misspelt key in the file" 1 "typo.json: train.learning_rate: unknown key (did you mean train.lr?)" \
  --config "$tmp/typo.json"
grep -q "missing" "$tmp/bad.log" && fail "the missing lr was reported besides the misspelling"
expect_exit "misspelt key in --set" 1 "four.json: train.lerning_rate: unknown key (did you mean train.lr?)" \
  --config "$tmp/four.json" --set train.lerning_rate=1e-3
expect_exit "wrong type in --set" 1 "four.json: train.steps: expected an integer, got a string" \
  --config "$tmp/four.json" --set train.steps=four
expect_exit "--set without '='" 2 "train: error: --set 'train.steps': expected KEY=VALUE" \
  --config "$tmp/four.json" --set train.steps
expect_exit "--set KEY without section" 2 "--set 'steps=4': KEY must be a dotted path section.key" \
  --config "$tmp/four.json" --set steps=4
expect_exit "--set of a section the file lacks" 2 "--set trian.steps: .*four.json has no section \"trian\"" \
  --config "$tmp/four.json" --set trian.steps=4
expect_exit "--set of one KEY twice" 2 "--set 'train.steps=5': train.steps is already set by an earlier --set" \
  --config "$tmp/four.json" --set train.steps=4 --set train.steps=5
rc=0
bin/evaluate --run "$tmp/set4" --config "$tmp/run.json" --set steps=4 --data "$tmp/data" --out "$tmp/x.json" \
  2>"$tmp/ev_usage.log" || rc=$?
[ "$rc" = 2 ] && grep -q "evaluate: error: --set 'steps=4'" "$tmp/ev_usage.log" \
  || { cat "$tmp/ev_usage.log"; fail "evaluate --set steps=4: exit $rc, not a usage error"; }
echo "ok: evaluate reports a malformed --set as a usage error"

# ---- --auto-resume with another --set starts over saying why; with the same one it resumes ----
d="$tmp/auto"
bin/train --config "$tmp/run.json" --set train.lr=0.002 --data "$tmp/data" --out "$d" --threads 1 --stop-after 2 \
  >"$d.log1" 2>&1 || { cat "$d.log1"; fail "--stop-after 2"; }
rc=0
bin/train --config "$tmp/run.json" --set train.lr=0.001 --data "$tmp/data" --out "$d" --threads 1 --resume \
  2>"$d.strict" || rc=$?
[ "$rc" = 1 ] && grep -q "refusing to resume .*the --set overrides changed since the checkpoint" "$d.strict" \
  || { cat "$d.strict"; fail "--resume with another --set: exit $rc, not refused"; }
bin/train --config "$tmp/run.json" --set train.lr=0.002 --data "$tmp/data" --out "$d" --threads 1 --auto-resume \
  >"$d.log2" 2>&1 || { cat "$d.log2"; fail "--auto-resume with the same --set"; }
grep -q "resumed .* at step 2 of 6" "$d.log2" || { cat "$d.log2"; fail "--auto-resume with the same --set did not resume"; }
bin/train --config "$tmp/run.json" --data "$tmp/data" --out "$d" --threads 1 --stop-after 2 >/dev/null 2>&1 \
  || fail "restart without --set"
bin/train --config "$tmp/run.json" --set train.lr=0.001 --data "$tmp/data" --out "$d" --threads 1 --auto-resume \
  >"$d.log3" 2>&1 || { cat "$d.log3"; fail "--auto-resume with another --set"; }
grep -q "starting over: the --set overrides changed since the checkpoint (it was trained with no --set, this run has --set train.lr=0.001)" \
  "$d.log3" || { cat "$d.log3"; fail "--auto-resume with another --set: no 'starting over' naming both lists"; }
grep -q "resumed" "$d.log3" && fail "--auto-resume resumed a checkpoint of another --set"
[ "$(json_get "$d/train_summary.json" steps)" = 6 ] || fail "the started-over run did not finish"
grep -q '"overrides":[[:space:]]*\["train.lr=0.001"\]' "$d/train_summary.json" || fail "the started-over run's overrides"
echo "ok: --auto-resume starts over when the --set changed (and --resume refuses), resumes when it did not"
echo "PASS"
