#!/usr/bin/env bash
# The researcher's loop through make (mk/reproduce.mk, bin/runs): no run is overwritten, sweeps are one command.
#  - changing SET and rerunning keeps the finished run aside as runs/EXP/RUN@<variant> (both have their records, with
#    their own lr); make diff between them names train.lr and gives the metrics' paired intervals; going back to the first SET brings it back without training again;
#  - a refused SET (an unknown key) is one line naming the key, and changes no file under runs/;
#  - seeds of one run config trained with different lr are not pooled in the report, which names the key;
#  - make sweep over a 3x2 grid trains each point in its own directory, with the point's values in its record, and
#    the report has the sweep's table and plot, and reports/EXP/runs.csv one row per run (read with pandas);
#  - make prune deletes the kept variants and sweep points, and nothing else.
# The runs are tiny (4 steps, 20 examples per set, no depth analysis): a scratch copy of experiment ci.
set -euo pipefail
cd "$(dirname "$0")/../.."
fail() { echo "FAIL: $*"; exit 1; }
for b in runs train evaluate report; do [ -x "bin/$b" ] || fail "bin/$b missing (run make first)"; done
exp=_variants_$$
trap 'rm -rf "experiments/$exp" "data/$exp" "runs/$exp" "reports/$exp" build/plan/$exp-* build/reproduce/$exp' EXIT
mkdir -p "experiments/$exp"
cp experiments/ci/*.json "experiments/$exp/"
small="train.steps=4 train.evaluate_every=0 evaluate.max_examples_per_set=20 analyze.enabled=false"
m() { make --no-print-directory "$@" EXPERIMENT=$exp 2>&1; }
lr_of() { python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["config"]["train"]["lr"])' "$1"; }
# The state of runs/: every file with its size and modification time.
snapshot() { find "runs/$exp" -type f -printf '%p %s %T@\n' | sort; }

# 1. A first run, then the same run with another lr: the first is kept.
out=$(m evaluate RUN=dense_qa SET="$small") || { echo "$out"; fail "first run"; }
[ -f "runs/$exp/dense_qa/result.json" ] || fail "first run: no result.json"
out=$(m evaluate RUN=dense_qa SET="$small train.lr=1e-3") || { echo "$out"; fail "second run (lr 1e-3)"; }
kept=$(echo "$out" | sed -nE "s|.*runs/$exp/dense_qa holds another config \(train.lr 0.002 -> 0.001\): kept as runs/$exp/(dense_qa@[0-9a-f]{8})\$|\1|p")
[ -n "$kept" ] || { echo "$out"; fail "changing lr: no 'kept as' line naming the key and both values"; }
[ "$(lr_of "runs/$exp/$kept/result.json")" = 0.002 ] || fail "the kept run $kept does not hold lr 0.002"
[ "$(lr_of "runs/$exp/dense_qa/result.json")" = 0.001 ] || fail "the current run does not hold lr 0.001"
echo "ok: changing lr kept the earlier run as runs/$exp/$kept (lr 0.002) beside runs/$exp/dense_qa (lr 0.001)"

# Both are in the report: the current run and the kept one, each a row of the Variants and sweeps table.
bin/report --experiment $exp --runs runs/$exp --out reports/$exp --expected-runs dense_qa \
  >build/plan/$exp-report.log 2>&1 || { cat build/plan/$exp-report.log; fail "bin/report after the lr change"; }
variants=$(sed -n '/^## Variants and sweeps/,/^## [^V]/p' reports/$exp/report.md)
grep -q "$kept" <<<"$variants" && grep -q "train.lr" <<<"$variants" \
  || fail "the report's Variants and sweeps section lacks the kept run $kept or the train.lr column"
echo "ok: the report shows both runs (dense_qa and $kept) with their train.lr"

# The diff of the two: the config key that differs with both values, and the metrics with a paired interval.
out=$(m diff A="$kept" B=dense_qa) || { echo "$out"; fail "make diff A=$kept B=dense_qa"; }
grep -qE '^ *train\.lr +A 0\.002 +B 0\.001' <<<"$out" || { echo "$out"; fail "make diff: no train.lr row with A 0.002 and B 0.001"; }
grep -qE '^interpolate\.mean_answer_loss +[-0-9.]+ +[-0-9.]+ +[-+][0-9.]+ +\[[-+][0-9.e-]+, [-+][0-9.e-]+\]' <<<"$out" \
  || { echo "$out"; fail "make diff: no interpolate.mean_answer_loss row with a paired interval"; }
echo "ok: make diff shows train.lr 0.002 -> 0.001 and the metrics' changes with paired intervals"

# 2. A refused SET changes nothing.
before=$(snapshot)
if out=$(m evaluate RUN=dense_qa SET="$small train.lrx=1e-3"); then fail "an unknown key was accepted"; fi
grep -q "train.lrx: unknown key (did you mean train.lr?)" <<<"$out" || { echo "$out"; fail "refusal: no line naming train.lrx"; }
[ "$(snapshot)" = "$before" ] || fail "a refused SET changed files under runs/$exp"
echo "ok: a refused SET names the key and changes no file"

# 3. Back to the first SET: the kept run comes back, nothing is trained, the lr 1e-3 run is kept in its turn.
out=$(m evaluate RUN=dense_qa SET="$small") || { echo "$out"; fail "back to the first SET"; }
grep -q "runs/$exp/$kept holds the wanted config: back as runs/$exp/dense_qa" <<<"$out" || { echo "$out"; fail "not brought back"; }
grep -q "^bin/train" <<<"$out" && { echo "$out"; fail "going back retrained"; }
[ "$(lr_of "runs/$exp/dense_qa/result.json")" = 0.002 ] || fail "runs/$exp/dense_qa does not hold lr 0.002 again"
n_kept=$(ls -d runs/$exp/dense_qa@* | wc -l)
[ "$n_kept" = 1 ] || fail "expected one kept variant (lr 1e-3), found $n_kept"
echo "ok: going back brought the kept run back without training; the lr 1e-3 run is kept"

# 4. Seeds of one config name trained with different configs are never pooled: seed 2 with lr 2e-3 (the current
#    config), then seed 1 back to lr 1e-3 (the kept run comes back); the report names the key and both values.
out=$(m evaluate RUNS=dense_qa SEEDS=2 SET="$small") || { echo "$out"; fail "seed 2"; }
out=$(m evaluate RUNS=dense_qa SET="$small train.lr=1e-3") || { echo "$out"; fail "seed 1 back to lr 1e-3"; }
grep -q "^bin/train" <<<"$out" && { echo "$out"; fail "bringing the lr 1e-3 run back retrained it"; }
bin/report --experiment $exp --runs runs/$exp --out reports/$exp --expected-runs dense_qa,dense_qa.seed2 \
  >build/plan/$exp-report.log 2>&1 || { cat build/plan/$exp-report.log; fail "bin/report on mixed seeds"; }
grep -q "dense_qa: seeds 1 and 2 not pooled: train.lr differs (0.001 / 0.002)" reports/$exp/report.md \
  || fail "the report pooled seeds of different configs, or did not name train.lr and its values"
echo "ok: seeds 1 (lr 1e-3) and 2 (lr 2e-3) of dense_qa are not pooled; the report names train.lr"

# 5. A 3x2 sweep in one command: six points, each in its own directory with its values.
out=$(m sweep RUNS=dense_qa SET="$small" SWEEP="train.lr=1e-3,2e-3,4e-3 train.warmup=1,2") || { echo "$out"; fail "make sweep"; }
points=$(ls -d runs/$exp/dense_qa@* | wc -l)
[ "$points" -ge 6 ] || fail "make sweep: $points variant directories, expected the 6 points (+ kept ones)"
found=""
for d in runs/$exp/dense_qa@*; do
  [ -f "$d/result.json" ] || fail "$d: no result.json"
  found="$found $(python3 -c 'import json,sys; t=json.load(open(sys.argv[1]))["config"]["train"]; print("%g/%d" % (t["lr"], t["warmup"]))' "$d/result.json")"
done
for p in 0.001/1 0.001/2 0.002/1 0.002/2 0.004/1 0.004/2; do
  grep -qw "$p" <<<"$found" || fail "make sweep: no run with lr/warmup $p (found:$found)"
done
grep -q "^## Variants and sweeps" reports/$exp/report.md || fail "the report has no Variants and sweeps section"
for key in train.lr train.warmup; do
  grep -q "$key" <(sed -n '/^## Variants and sweeps/,/^## [^V]/p' reports/$exp/report.md) \
    || fail "the sweep table has no $key column"
done
ls reports/$exp/sweep_dense_qa_train.lr*.svg >/dev/null 2>&1 || fail "no plot of accuracy against train.lr"
for d in runs/$exp/dense_qa@*; do
  grep -q "${d##*/}" reports/$exp/report.md || fail "the report does not list ${d##*/}"
done
echo "ok: make sweep trained the 3x2 grid, each point in runs/$exp/dense_qa@<variant>; the report has its table and plot"

# The CSV of every run: one line of pandas (where installed; else the csv module), a row per run directory.
PY=python3
for p in python3 /usr/bin/python3; do
  if command -v "$p" >/dev/null && "$p" -c 'import pandas' 2>/dev/null; then PY=$p; break; fi
done
n_dirs=$(ls -d runs/$exp/*/ | wc -l)
rows=$("$PY" - "reports/$exp/runs.csv" <<'PYCSV'
import sys
try:
    import pandas
    df = pandas.read_csv(sys.argv[1])
    print(len(df), int(df["train.lr"].notna().all()), "pandas")
except ImportError:
    import csv
    rows = list(csv.DictReader(open(sys.argv[1])))
    print(len(rows), int(all(r["train.lr"] for r in rows)), "csv")
PYCSV
) || fail "reports/$exp/runs.csv does not load"
set -- $rows
[ "$1" = "$n_dirs" ] && [ "$2" = 1 ] || fail "runs.csv: $1 rows (expected $n_dirs, one per run directory), train.lr everywhere: $2"
[ "$3" = pandas ] || echo "NOTE: pandas not installed (Debian python3-pandas): runs.csv read with the csv module"
echo "ok: reports/$exp/runs.csv loads in one line ($3): $1 rows, one per run directory"

# 6. make prune deletes the kept variants and sweep points only.
out=$(m prune) || { echo "$out"; fail "make prune"; }
ls -d runs/$exp/*@* 2>/dev/null && fail "make prune left variant directories"
[ -f "runs/$exp/dense_qa/result.json" ] || fail "make prune deleted the current run"
echo "ok: make prune deleted the variants and kept the current run"
echo PASS
