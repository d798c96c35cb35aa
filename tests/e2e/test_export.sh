#!/usr/bin/env bash
# bin/export on real runs of the ci experiment (its data config, its run configs, trained 3 steps with --set, then
# evaluated; dense_qa also analyzed): runs/ci/{dense_qa, dense_qa.seed2, moeut_answer@0123abcd} (a seed of the same
# configuration and a sweep-point name), beside a run without a result.json, which is skipped (not evaluated yet).
#   - python3's csv module reads runs.csv: a header of unique names starting with the fixed columns, one row per
#     evaluated run directory in natural order; every cell agrees with that run's result.json (identity, overrides
#     joined with ";", every config leaf flattened as model.d_model, accuracies per set and module, answer losses,
#     training numbers, the depth scores of analysis.json and depth_prompts.json), numbers exactly (float(cell) is the
#     record's double), empty cells exactly where a run has no such key; the seeds of one configuration share their
#     variant, the other run has its own;
#   - the metric columns are named as make diff names them: every metric line of bin/compare --diff on two of the
#     runs is a column of the CSV;
#   - pandas (where installed; Debian python3-pandas, in mk/deps.sh test) reads the same table: the shape, numeric
#     metric columns, NaN where empty;
#   - a record that does not load, and a symbolic link aliasing another run (read like any run directory, its record
#     names the other run), are one error line naming it, exit 1, and the earlier runs.csv stays as it was.
# About 1.5 min of CPU time (three 3-step trainings and evaluations of 200 examples per set, one analysis over ci's 24
# evaluation prompts, about 25 s; 2 min 46 s measured on a loaded 2-core machine before the analysis was added).
source "$(dirname "$0")/train_common.sh"

# A python3 with pandas where there is one (a pyenv python3 first on PATH may lack Debian's python3-pandas).
PY=$(command -v python3 || true)
for p in python3 /usr/bin/python3; do
  if command -v "$p" >/dev/null && "$p" -c 'import pandas' 2>/dev/null; then PY=$(command -v "$p"); break; fi
done
[ -n "$PY" ] || { echo "SKIP: no python3 (the checks use its csv module)"; exit 77; }
for b in evaluate export; do [ -x "bin/$b" ] || fail "bin/$b not built (run make first)"; done
bin/export --help | grep -q -- "--runs" || fail "bin/export --help does not document --runs"

bin/fetch --source embedded --out "$tmp/raw" --filter 'arithmetic__.*' --tokenizer-corpus-pairs 10000 \
  >"$tmp/fetch.log" 2>&1 || { cat "$tmp/fetch.log"; fail "bin/fetch failed"; }
bin/tokenize --raw "$tmp/raw" --config experiments/ci/data.json --out "$tmp/data" >"$tmp/tokenize.log" 2>&1 \
  || { cat "$tmp/tokenize.log"; fail "bin/tokenize failed"; }

runs=$tmp/runs/ci
# run DIR CONFIG [--set KEY=VALUE ...]: train 3 steps and evaluate, as make does for a run directory.
run() {
  local dir=$1 config=$2
  shift 2
  bin/train --threads 2 --config "experiments/ci/$config.json" --data "$tmp/data" --out "$runs/$dir" \
    --set train.steps=3 "$@" >"$tmp/train_$dir.log" 2>&1 || { cat "$tmp/train_$dir.log"; fail "train $dir"; }
  bin/evaluate --threads 2 --run "$runs/$dir" --config "experiments/ci/$config.json" --data "$tmp/data" \
    --set train.steps=3 "$@" --out "$runs/$dir/result.json" >"$tmp/evaluate_$dir.log" 2>&1 \
    || { cat "$tmp/evaluate_$dir.log"; fail "evaluate $dir"; }
}
run dense_qa dense_qa
run dense_qa.seed2 dense_qa --set train.seed=2
run moeut_answer@0123abcd moeut_answer --set train.lr=0.001
mkdir -p "$runs/unfinished" && cp "$runs/dense_qa/train_summary.json" "$runs/unfinished/"
bin/analyze --threads 2 --run "$runs/dense_qa" --config experiments/ci/dense_qa.json --data "$tmp/data" \
  --set train.steps=3 --out "$runs/dense_qa/analysis.json" >"$tmp/analyze.log" 2>&1 \
  || { cat "$tmp/analyze.log"; fail "analyze dense_qa"; }
[ -f "$runs/dense_qa/depth_prompts.json" ] || fail "analyze wrote no depth_prompts.json (analyze.eval_prompts of ci?)"
echo "ok: trained and evaluated 3 ci runs (3 steps each), analyzed dense_qa"

out=$tmp/reports/ci/runs.csv
bin/export --runs "$runs" --out "$out" >"$tmp/export.log" 2>&1 || { cat "$tmp/export.log"; fail "bin/export failed"; }
grep -q "wrote $out: 3 runs x [0-9]* columns" "$tmp/export.log" || { cat "$tmp/export.log"; fail "export log line"; }
[ -z "$(ls "$(dirname "$out")" | grep -E '\.tmp\.' || true)" ] || fail "a temporary file left beside runs.csv"

"$PY" - "$out" "$runs" <<'PYCHECK' || fail "runs.csv does not agree with the records (above)"
import csv, json, math, os, sys

path, runs = sys.argv[1], sys.argv[2]
with open(path, newline="") as f:
    raw = f.read()
assert raw.endswith("\r\n"), "records do not end with CRLF"
rows = list(csv.reader(raw.splitlines(True)))
head, body = rows[0], rows[1:]
fails = []
def check(cond, what):
    if not cond:
        fails.append(what)
        print("FAIL:", what)

FIXED = ["run", "run_config", "variant", "seed", "overrides", "arch", "loss_mode", "backend", "code_version", "n_params"]
check(head[:len(FIXED)] == FIXED, "fixed columns %s" % head[:len(FIXED)])
check(len(set(head)) == len(head), "duplicate column names")
check([r[0] for r in body] == ["dense_qa", "dense_qa.seed2", "moeut_answer@0123abcd"],
      "rows %s (the unevaluated run must be skipped)" % [r[0] for r in body])
check(all(len(r) == len(head) for r in body), "rows of another width than the header")
table = [dict(zip(head, r)) for r in body]

def same_number(cell, value, where):
    check(cell != "" and float(cell) == value, "%s: cell %r, record %r" % (where, cell, value))

def leaves(obj, prefix=""):
    for k, v in obj.items():
        key = prefix + "." + k if prefix else k
        if isinstance(v, dict) and v:
            yield from leaves(v, key)
        else:
            yield key, v

n_checked = 0
for row in table:
    rec = json.load(open(os.path.join(runs, row["run"], "result.json")))
    name = row["run"]
    check(row["run_config"] == rec["run_config"], "%s: run_config" % name)
    check(row["seed"] == str(rec["seed"]), "%s: seed %r, record %r" % (name, row["seed"], rec["seed"]))
    check(row["overrides"] == ";".join(rec["overrides"]), "%s: overrides %r" % (name, row["overrides"]))
    for k in ("arch", "loss_mode", "backend", "code_version"):
        check(row[k] == rec[k], "%s: %s" % (name, k))
    check(row["n_params"] == str(rec["n_params"]), "%s: n_params" % name)
    config = dict(leaves(rec["config"]))
    for key, value in config.items():
        cell = row.get(key)
        if isinstance(value, bool):
            check(cell == ("true" if value else "false"), "%s: %s %r" % (name, key, cell))
        elif isinstance(value, (int, float)):
            same_number(cell, value, "%s: %s" % (name, key))
        elif isinstance(value, str):
            check(cell == value, "%s: %s %r, record %r" % (name, key, cell, value))
        else:
            check(json.loads(cell) == value, "%s: %s %r" % (name, key, cell))
        n_checked += 1
    config_cols = head[len(FIXED):head.index("training.steps")]
    for key in config_cols:
        if key not in config:
            check(row[key] == "", "%s: %s should be empty (not in its config), is %r" % (name, key, row[key]))
    ev = rec["evaluation"]
    same_number(row["evaluation.mean_accuracy"], ev["mean_accuracy"], name + ": evaluation.mean_accuracy")
    for s, se in ev["sets"].items():
        same_number(row[s + ".accuracy"], se["accuracy"], "%s: %s.accuracy" % (name, s))
        check(row[s + ".n"] == str(se["n"]), "%s: %s.n" % (name, s))
        same_number(row[s + ".mean_answer_loss"], se["mean_answer_loss"], "%s: %s.mean_answer_loss" % (name, s))
        for m, me in se["modules"].items():
            same_number(row["%s.%s.accuracy" % (s, m)], me["accuracy"], "%s: %s.%s.accuracy" % (name, s, m))
            same_number(row["%s.%s.mean_answer_loss" % (s, m)], me["mean_answer_loss"],
                        "%s: %s.%s.mean_answer_loss" % (name, s, m))
            n_checked += 1
    # the depth scores: analysis.json's summary, and depth_prompts.json's means per vector and measure
    apath = os.path.join(runs, name, "analysis.json")
    if os.path.exists(apath):
        summary = json.load(open(apath))["depth_summary"]
        same_number(row["analysis." + summary["name"]], summary["value"], name + ": analysis depth summary")
        dp = json.load(open(os.path.join(runs, name, "depth_prompts.json")))
        check(row["depth_prompts.n"] == str(len(dp["prompts"])), name + ": depth_prompts.n")
        for v, vector in enumerate(dp["vectors"]):
            for measure in dp["measures"]:
                values = [p[measure][v] for p in dp["prompts"]]
                cell = row["depth_prompts.%s.%s" % (vector, measure)]
                check(cell != "" and abs(float(cell) - sum(values) / len(values)) <= 1e-12,
                      "%s: depth_prompts.%s.%s %r" % (name, vector, measure, cell))
                n_checked += 1
    else:
        check(row["analysis.depth_fraction"] == "" and row["depth_prompts.counterfactual.depth_fraction"] == "",
              name + ": depth cells of a run without an analysis should be empty")
    for k in ("steps", "tokens", "wall_time_s", "tokens_per_s", "final_train_loss"):
        same_number(row["training." + k], rec["training"][k], "%s: training.%s" % (name, k))
    same_number(row["evaluation.wall_time_s"], ev["wall_time_s"], name + ": evaluation.wall_time_s")

dense, seed2, moe = table
check(dense["variant"] == seed2["variant"] and len(dense["variant"]) == 8,
      "the seeds of dense_qa do not share their variant: %s %s" % (dense["variant"], seed2["variant"]))
check(moe["variant"] != dense["variant"], "moeut_answer has dense_qa's variant")
check(dense["model.ff_n_experts"] == "" and moe["model.ff_n_experts"] != "", "model.ff_n_experts empty for dense only")
check(dense["model.d_ff"] != "" and moe["model.d_ff"] == "", "model.d_ff empty for moeut only")
check(raw.count('"') > 0 and "," in dense["description"], "the descriptions' commas were not quoted")
print("ok: csv: %d rows x %d columns; %d config and module cells and every metric agree with the records"
      % (len(body), len(head), n_checked))

try:
    import pandas
except ImportError:
    print("NOTE: pandas not installed (Debian python3-pandas, in mk/deps.sh test): its read_csv check skipped")
    sys.exit(1 if fails else 0)
df = pandas.read_csv(path)
check(df.shape == (len(body), len(head)), "pandas shape %s" % (df.shape,))
check(list(df.columns) == head, "pandas columns")
metric_cols = head[head.index("training.steps"):]
check(all(pandas.api.types.is_numeric_dtype(df[c]) for c in metric_cols), "non-numeric metric columns: %s"
      % [c for c in metric_cols if not pandas.api.types.is_numeric_dtype(df[c])])
check(df["model.ff_n_experts"].isna().tolist() == [True, True, False], "pandas NaN for a missing config key")
check(df["interpolate.accuracy"].tolist() == [float(r["interpolate.accuracy"]) for r in table],
      "pandas interpolate.accuracy")
check(df["depth_prompts.counterfactual.depth_fraction"].notna().tolist() == [True, False, False],
      "pandas: the depth score of the analyzed run only")
check(df.groupby(["run_config", "variant"]).size().tolist() == [2, 1], "seeds grouped by run_config and variant")
print("ok: pandas %s: read_csv gives %d x %d, metric columns numeric, NaN where a run has no value"
      % (pandas.__version__, df.shape[0], df.shape[1]))
sys.exit(1 if fails else 0)
PYCHECK

# One naming of the metrics: every metric line of make diff (bin/compare --diff) on two of the runs is a column.
bin/compare --diff "$runs/dense_qa" "$runs/dense_qa.seed2" >"$tmp/diff.txt" 2>&1 || { cat "$tmp/diff.txt"; fail "diff"; }
head -1 "$out" | tr -d '\r' | tr ',' '\n' >"$tmp/columns.txt"
sed -n '/^metric /,/^intervals:/p' "$tmp/diff.txt" | sed '1d;$d' | awk '{print $1}' >"$tmp/diff_metrics.txt"
[ "$(wc -l <"$tmp/diff_metrics.txt")" -gt 20 ] || { cat "$tmp/diff.txt"; fail "too few metric lines in the diff"; }
missing=$(grep -vxF -f "$tmp/columns.txt" "$tmp/diff_metrics.txt" || true)
[ -z "$missing" ] || fail "metrics of make diff that are no column of runs.csv: $(echo $missing)"
grep -qx "depth_prompts.counterfactual.depth_fraction" "$tmp/diff_metrics.txt" || fail "the diff shows no depth score"
echo "ok: the $(wc -l <"$tmp/diff_metrics.txt") metric lines of make diff are columns of runs.csv under the same names"

# A record that does not load: one error line naming it, exit 1, the earlier table untouched.
cp "$out" "$tmp/good.csv"
cp "$runs/dense_qa.seed2/result.json" "$tmp/good_result.json"
sed -i 's/"schema_version":[[:space:]]*[0-9]*/"schema_version": 9/' "$runs/dense_qa.seed2/result.json"
rc=0
bin/export --runs "$runs" --out "$out" >"$tmp/bad.log" 2>&1 || rc=$?
[ "$rc" = 1 ] || { cat "$tmp/bad.log"; fail "export of a broken record exited $rc, expected 1"; }
[ "$(wc -l <"$tmp/bad.log")" = 1 ] && grep -q "dense_qa.seed2/result.json" "$tmp/bad.log" \
  || { cat "$tmp/bad.log"; fail "expected one error line naming dense_qa.seed2/result.json"; }
cmp "$out" "$tmp/good.csv" || fail "a failed export changed the earlier runs.csv"
echo "ok: a broken record: $(cat "$tmp/bad.log"); runs.csv untouched"
cp "$tmp/good_result.json" "$runs/dense_qa.seed2/result.json"
ln -s dense_qa "$runs/alias_of_dense_qa"
rc=0
bin/export --runs "$runs" --out "$out" >"$tmp/alias.log" 2>&1 || rc=$?
[ "$rc" = 1 ] || { cat "$tmp/alias.log"; fail "export with a link aliasing another run exited $rc, expected 1"; }
[ "$(wc -l <"$tmp/alias.log")" = 1 ] &&
  grep -q 'alias_of_dense_qa/result.json: run is "dense_qa", but the directory is "alias_of_dense_qa"' "$tmp/alias.log" ||
  { cat "$tmp/alias.log"; fail "expected one error line naming alias_of_dense_qa/result.json"; }
cmp "$out" "$tmp/good.csv" || fail "a failed export changed the earlier runs.csv"
echo "ok: a link aliasing another run: $(cat "$tmp/alias.log"); runs.csv untouched"
echo "ok: bin/export checks passed"
