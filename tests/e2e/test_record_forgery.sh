#!/usr/bin/env bash
# e2e-lane: private (it writes only under its own temporary directories, so it may run beside other tests)
# Records edited or replaced as an attacker would, and runs that cannot be read: bin/compare (the gate and --diff),
# bin/report and bin/export refuse each with an error naming the file and a non-zero exit, never a pass, a hang or a
# run silently left out.
#  A. On copies of the recorded ci baselines (no training), compare and --diff:
#     - the config block edited (train.lr 0.5, another arch) under the kept config_sha256, or config_text edited too,
#       in a run's record or in a baseline record;
#     - a record of another run in the directory (its "run"), or of another experiment (its "experiment");
#     - a record string holding \u0000 ("dense_qa\u0000evil" must not read as "dense_qa");
#     - a FIFO in place of result.json (refused within a second, never waited on; `timeout 5` turns a hang into a
#       failure), and a symbolic link in the runs directory that leads nowhere.
#  B. On two runs trained and evaluated for 3 steps (runs/ci/dense_qa and dense_qa.seed2, as make names them), report,
#     export and --diff: the forged config, a \u0000 string, a predictions.meta.json whose code_version is not the
#     record's, a FIFO result.json (each refused within a second), a run directory reached by a symbolic link (read,
#     not dropped), a link aliasing another run and a link that leads nowhere (refused, not dropped).
# About 10 s on a loaded 2-core machine (two 3-step trainings).
set -euo pipefail
cd "$(dirname "$0")/../.."
fail() { echo "FAIL: $*"; exit 1; }
for b in fetch tokenize train evaluate compare report export; do
  [ -x "bin/$b" ] || fail "bin/$b missing (run make first)"
done
command -v python3 >/dev/null || { echo "SKIP: python3 not installed (the forgeries are written with it)"; exit 77; }
tmp=$(mktemp -d /tmp/test_record_forgery.XXXXXX)
trap '[ -n "${KEEP_TMP:-}" ] || rm -rf "$tmp"' EXIT
export OMP_WAIT_POLICY=PASSIVE # speed only on a busy machine
BASE=reports/baselines/ci

# edit FILE EXPR: rewrites the JSON file after the Python statement EXPR on its object d (json.dump writes a NUL
# character of a string as \u0000, as a forger would).
edit() {
  python3 - "$1" "$2" <<'PY'
import json, sys
path, expr = sys.argv[1], sys.argv[2]
with open(path) as f:
    d = json.load(f)
exec(expr)
with open(path, "w") as f:
    json.dump(d, f, indent=1)
PY
}

# refused NAME WANT CMD: the command line in the array named CMD exits non-zero within a second (a hang is killed
# after 5 s and fails), and its stderr says WANT (fixed text) on one line.
refused() {
  local name=$1 want=$2 rc=0 t0 t1
  local -n cmd=$3
  t0=$(date +%s%N)
  timeout 5 "${cmd[@]}" >"$tmp/out" 2>"$tmp/err" || rc=$?
  t1=$(date +%s%N)
  [ "$rc" != 124 ] || fail "$name: still running after 5 s (waiting on a FIFO?)"
  [ "$rc" != 0 ] || fail "$name: exit 0: $(tail -n 3 "$tmp/out")"
  [ $(((t1 - t0) / 1000000)) -lt 1000 ] || fail "$name: took $(((t1 - t0) / 1000000)) ms"
  grep -qF -- "$want" "$tmp/err" || fail "$name: stderr does not say '$want': $(cat "$tmp/err")"
  [ "$(wc -l <"$tmp/err")" = 1 ] || fail "$name: more than one error line: $(cat "$tmp/err")"
  echo "ok: $name: exit $rc: $(grep -F -- "$want" "$tmp/err" | head -n 1)"
}

# ------------------------------------------------------------------ A. compare on copies of the ci baselines
runs=$tmp/ci # named like runs/ci: a record names the experiment of the directory it was evaluated in
fresh() { # fresh RUN [RECORD]: runs/ci holding only RUN, with a copy of RECORD's baseline (default RUN's)
  rm -rf "$runs"
  mkdir -p "$runs/$1"
  cp "$BASE/${2:-$1}.result.json" "$runs/$1/result.json"
}
gate=(bin/compare --baselines "$BASE" --runs "$runs" --only dense_qa)
diff_base=(bin/compare --diff "$runs/dense_qa" "$BASE/dense_qa")
rec=$runs/dense_qa/result.json

fresh dense_qa
"${gate[@]}" >"$tmp/honest.log" 2>&1 || { cat "$tmp/honest.log"; fail "the unedited baseline copy does not pass compare"; }
"${diff_base[@]}" >/dev/null 2>&1 || fail "compare --diff of the unedited copy and its baseline fails"

edit "$rec" "d['config']['train']['lr'] = 0.5"
refused "compare: train.lr 0.5 under the kept config_sha256" \
  "$rec: config: differs from config_text with the overrides applied (train.lr is 0.5, but config_text with the overrides gives 0.002): the record was edited" gate
refused "compare --diff: the same record" "$rec: config: differs from config_text" diff_base
fresh dense_qa
edit "$rec" "d['config']['model']['arch'] = 'moeut'"
refused "compare: another arch under the kept config_sha256" '(model.arch is "moeut", but config_text with the overrides gives "dense")' gate
fresh dense_qa
edit "$rec" "d['config']['train']['lr'] = 0.5; d['config_text'] = d['config_text'].replace('\"lr\": 0.002', '\"lr\": 0.5')"
kept_sha=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["config_sha256"])' "$rec")
refused "compare: config and config_text both edited, config_sha256 kept" \
  "$rec: config_sha256: $kept_sha is not the hash of config_text and the overrides" gate

fresh dense_qa
mkdir -p "$tmp/baselines"
cp -r "$BASE" "$tmp/baselines/ci"
edit "$tmp/baselines/ci/dense_qa.result.json" "d['config']['train']['lr'] = 0.5"
forged_base=(bin/compare --baselines "$tmp/baselines/ci" --runs "$runs" --only dense_qa)
refused "compare: a baseline record with train.lr 0.5 under its kept config_sha256" \
  "$tmp/baselines/ci/dense_qa.result.json: config: differs from config_text with the overrides applied (train.lr is 0.5" \
  forged_base

fresh dense_qa dense_answer
refused "compare: another run's record in dense_qa/" \
  "$rec: run is \"dense_answer\", but the directory is \"dense_qa\" (a record of another run?)" gate
refused "compare --diff: the same" "$rec: run is \"dense_answer\", but the directory is \"dense_qa\"" diff_base
fresh dense_qa
mv "$runs" "$tmp/tiny"
tiny_gate=(bin/compare --baselines "$BASE" --runs "$tmp/tiny" --only dense_qa)
refused "compare: a ci record in runs/tiny" \
  "$tmp/tiny/dense_qa/result.json: experiment is \"ci\", but the runs directory is \"tiny\"" tiny_gate
rm -rf "$tmp/tiny"

fresh dense_qa
edit "$rec" "d['run'] = 'dense_qa\x00evil'"
grep -qF '"dense_qa\u0000evil"' "$rec" || fail "the forged record does not hold the \\u0000 escape"
refused "compare: \"run\": \"dense_qa\\u0000evil\"" "$rec:" gate
grep -qF 'a string holds \u0000 (a NUL character, which would cut it short): refused' "$tmp/err" ||
  fail "compare: not refused for the \\u0000: $(cat "$tmp/err")"
refused "compare --diff: the same" 'a string holds \u0000' diff_base

fresh dense_qa
rm "$rec"
mkfifo "$rec"
refused "compare: a FIFO in place of result.json" "$rec: not a regular file (a FIFO): refused" gate
refused "compare --diff: the same" "$rec: not a regular file (a FIFO): refused" diff_base
fresh dense_qa
ln -s "$tmp/gone" "$runs/lost"
refused "compare: a run directory linked to nothing" "$runs/lost: a symbolic link whose target cannot be read" gate

# ------------------------------------------------------------------ B. report, export and --diff on trained runs
bin/fetch --source embedded --out "$tmp/raw" --filter 'arithmetic__.*' --tokenizer-corpus-pairs 10000 \
  >"$tmp/fetch.log" 2>&1 || { cat "$tmp/fetch.log"; fail "bin/fetch failed"; }
bin/tokenize --raw "$tmp/raw" --config experiments/ci/data.json --out "$tmp/data" >"$tmp/tokenize.log" 2>&1 ||
  { cat "$tmp/tokenize.log"; fail "bin/tokenize failed"; }
runs=$tmp/runs/ci
train_eval() { # train_eval DIR [--set KEY=VALUE ...]: experiments/ci/dense_qa, 3 steps, 20 examples per set
  local dir=$1 sets=(--set train.steps=3 --set evaluate.max_examples_per_set=20)
  shift
  bin/train --threads 1 --config experiments/ci/dense_qa.json --data "$tmp/data" --out "$runs/$dir" "${sets[@]}" "$@" \
    >"$tmp/train_$dir.log" 2>&1 || { cat "$tmp/train_$dir.log"; fail "train $dir"; }
  bin/evaluate --threads 1 --run "$runs/$dir" --config experiments/ci/dense_qa.json --data "$tmp/data" "${sets[@]}" "$@" \
    --out "$runs/$dir/result.json" >"$tmp/evaluate_$dir.log" 2>&1 || { cat "$tmp/evaluate_$dir.log"; fail "evaluate $dir"; }
}
train_eval dense_qa
train_eval dense_qa.seed2 --set train.seed=2
cp -a "$runs" "$tmp/pristine"
restore() { rm -rf "$runs"; cp -a "$tmp/pristine" "$runs"; }
csv=$tmp/reports/ci/runs.csv
export=(bin/export --runs "$runs" --out "$csv")
report=(bin/report --experiment ci --runs "$runs" --out "$tmp/reports/ci" --expected-runs dense_qa)
diff=(bin/compare --diff "$runs/dense_qa" "$runs/dense_qa.seed2")
rec=$runs/dense_qa/result.json

"${export[@]}" >"$tmp/export.log" 2>&1 || { cat "$tmp/export.log"; fail "export of the honest runs"; }
grep -q "wrote $csv: 2 runs x" "$tmp/export.log" || fail "export of the honest runs: $(cat "$tmp/export.log")"
"${report[@]}" >"$tmp/report.log" 2>&1 || { cat "$tmp/report.log"; fail "report of the honest runs"; }
"${diff[@]}" >"$tmp/diff.log" 2>&1 || { cat "$tmp/diff.log"; fail "compare --diff of the honest runs"; }
cp "$csv" "$tmp/honest.csv"
echo "ok: the honest runs export (2 rows), report and diff"

edit "$rec" "d['config']['train']['lr'] = 0.5"
for tool in export report diff; do
  refused "$tool: train.lr 0.5 under the kept config_sha256" "$rec: config: differs from config_text with the overrides applied (train.lr is 0.5" $tool
done
cmp -s "$csv" "$tmp/honest.csv" || fail "a refused export changed runs.csv"
restore
edit "$rec" "d['hardware'] = d['hardware'] + '\x00forged'"
for tool in export report diff; do
  refused "$tool: a record string holding \\u0000" 'a string holds \u0000' $tool
done
restore
edit "$runs/dense_qa/predictions.meta.json" "d['code_version'] = 'forged'"
version=$(python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))["code_version"])' "$rec")
for tool in report diff; do
  refused "$tool: predictions.meta.json of code_version forged beside a record of $version" \
    "$runs/dense_qa/predictions.meta.json: code_version \"forged\" differs from $rec's code_version \"$version\"" $tool
done

restore
rm "$runs/dense_qa.seed2/result.json"
mkfifo "$runs/dense_qa.seed2/result.json"
for tool in export report diff; do
  refused "$tool: a FIFO in place of dense_qa.seed2/result.json" \
    "$runs/dense_qa.seed2/result.json: not a regular file (a FIFO): refused" $tool
done
cmp -s "$csv" "$tmp/honest.csv" || fail "a refused export changed runs.csv"

restore
mkdir -p "$tmp/elsewhere"
mv "$runs/dense_qa.seed2" "$tmp/elsewhere/"
ln -s "$tmp/elsewhere/dense_qa.seed2" "$runs/dense_qa.seed2"
"${export[@]}" >"$tmp/export.log" 2>&1 || { cat "$tmp/export.log"; fail "export with a run directory reached by a link"; }
grep -q "wrote $csv: 2 runs x" "$tmp/export.log" || fail "export dropped the linked run: $(cat "$tmp/export.log")"
grep -q '^dense_qa.seed2,' "$csv" || fail "runs.csv has no dense_qa.seed2 row"
"${report[@]}" >"$tmp/report.log" 2>&1 || { cat "$tmp/report.log"; fail "report with a run directory reached by a link"; }
grep -q 'dense_qa\.seed2' "$tmp/reports/ci/report.md" || fail "report.md does not list the linked run"
echo "ok: a run directory reached by a symbolic link is exported and reported, not dropped"
ln -s dense_qa "$runs/alias"
for tool in export report; do
  refused "$tool: a link aliasing another run" \
    "$runs/alias/result.json: run is \"dense_qa\", but the directory is \"alias\" (a record of another run?)" $tool
done
rm "$runs/alias"
ln -s "$tmp/gone" "$runs/lost"
for tool in export report; do
  refused "$tool: a run directory linked to nothing" "$runs/lost: a symbolic link whose target cannot be read" $tool
done
echo "test_record_forgery: all passed"
