#!/usr/bin/env bash
# make reproduce's seeds (mk/reproduce.mk, bin/runs) as dry runs (no training, fast):
#  - SEEDS=2 lists train/evaluate/analyze of RUN.seed2 with --set train.seed=2, the config's own seed in RUN, and the
#    report expecting all 8 run directories;
#  - without SEEDS and seeds.json, the commands are those of a single seed (no .seed directory, no --set);
#  - experiments/EXP/seeds.json's list is used (seed 3 -> RUN.seed3; the own seed 1 -> RUN), SEEDS=N overrides it;
#  - a bad seeds.json or SEEDS value stops make with one line naming the file and field (or SEEDS), before any work.
set -euo pipefail
cd "$(dirname "$0")/../.."
fail() { echo "FAIL: $*"; exit 1; }
for b in runs train evaluate; do [ -x "bin/$b" ] || fail "bin/$b missing (run make first)"; done
exp=_seeds_test_$$
civ=_seeds_ci_$$ # a scratch copy of experiment ci (below)
tmp=$(mktemp -d /tmp/test_seeds.XXXXXX)
trap 'rm -rf "experiments/$exp" "experiments/$civ" "$tmp" build/plan/$exp-* build/plan/$civ-* "data/$civ" "runs/$civ" \
  "reports/$civ" build/reproduce/$civ' EXIT

dry() { make --no-print-directory -n reproduce "$@" 2>&1; }

# A scratch copy of experiment ci, so that the dry runs list every stage whatever runs/ci holds (runs of another
# test, e.g. the seed-2 runs test_reproduce_seeds.sh leaves, would make them up to date).
mkdir -p "experiments/$civ"
cp experiments/ci/*.json "experiments/$civ/"
out=$(dry EXPERIMENT=$civ SEEDS=2) || { echo "$out"; fail "make -n reproduce EXPERIMENT=$civ SEEDS=2"; }
for r in dense_qa dense_answer moeut_qa moeut_answer; do
  grep -q "^bin/train --config experiments/$civ/$r.json .*--set 'train.seed=2' --out runs/$civ/$r.seed2 " <<<"$out" \
    || { echo "$out"; fail "SEEDS=2: no train of runs/$civ/$r.seed2 with --set train.seed=2"; }
  grep -q "^bin/evaluate --run runs/$civ/$r.seed2 --config experiments/$civ/$r.json" <<<"$out" \
    || fail "SEEDS=2: no evaluate of $r.seed2"
  grep -q "^bin/analyze --run runs/$civ/$r.seed2 --config experiments/$civ/$r.json .*--set 'train.seed=2' --out " <<<"$out" \
    || fail "SEEDS=2: no analyze of $r.seed2 with --set train.seed=2"
  grep -q "^bin/train --config experiments/$civ/$r.json --data data/$civ --backend cpu  --out runs/$civ/$r --auto-resume $" <<<"$out" \
    || fail "SEEDS=2: the config's own seed 1 is not trained in runs/$civ/$r as without seeds"
done
grep -q -- "--expected-runs dense_qa,dense_qa.seed2,dense_answer,dense_answer.seed2,moeut_qa,moeut_qa.seed2,moeut_answer,moeut_answer.seed2$" <<<"$out" \
  || fail "SEEDS=2: the report does not expect all 8 run directories"
grep -q "seed1" <<<"$out" && fail "SEEDS=2: a .seed1 directory (seed 1 is the configs' own)"
echo "ok: SEEDS=2 dry run: RUN and RUN.seed2 (--set train.seed=2) for each run, report expects 8"

out=$(dry EXPERIMENT=$civ) || fail "make -n reproduce EXPERIMENT=$civ"
# (the planning line, whose bin/runs --stages always passes make's SET, empty here, as --set '')
[ "$(grep -v -- " --stages " <<<"$out" | grep -c -E "\.seed|--set")" = 0 ] || { echo "$out"; fail "a single seed shows seed directories or --set"; }
[ "$(grep -c '^bin/train ' <<<"$out")" = 4 ] || fail "a single seed does not train 4 runs"
echo "ok: without seeds: 4 runs, no .seed directory, no --set"

mkdir -p "experiments/$exp"
cp experiments/ci/data.json experiments/ci/dense_qa.json "experiments/$exp/"
seeds_json() { printf '%s\n' "$1" >"experiments/$exp/seeds.json"; }
seeds_json '{"comment": "two seeds", "seeds": [1, 3]}'
out=$(dry EXPERIMENT=$exp RUNS=dense_qa) || { echo "$out"; fail "seeds.json [1, 3]"; }
grep -q "^bin/train .*--backend cpu  --out runs/$exp/dense_qa --auto-resume $" <<<"$out" || fail "seeds.json: no own-seed run"
grep -q "^bin/train .*--set 'train.seed=3' --out runs/$exp/dense_qa.seed3 " <<<"$out" || fail "seeds.json: no seed 3"
[ "$(grep -c '^bin/train ' <<<"$out")" = 2 ] || fail "seeds.json [1, 3]: not 2 trainings"
out=$(dry EXPERIMENT=$exp RUNS=dense_qa SEEDS=1) || fail "SEEDS=1 with seeds.json"
[ "$(grep -v -- " --stages " <<<"$out" | grep -c -E "\.seed|--set")" = 0 ] || fail "SEEDS=1 does not override seeds.json"
echo "ok: seeds.json's list is used, SEEDS overrides it"

refused() { # refused LABEL EXPECTED_TEXT MAKE_ARGS...
  local label=$1 want=$2 rc attempt
  shift 2
  # -k (keep going), as under make test, whose -k reaches this make through MAKEFLAGS: the refusal must stop make
  # even then, not let it go on with an earlier seeds list (mk/reproduce.mk writes the refusal into the generated
  # seeds makefile as $(error)). Run twice: the second make reads the recorded refusal without running bin/runs.
  for attempt in 1 2; do
    rc=0
    make --no-print-directory -k -n reproduce "$@" >"$tmp/out.log" 2>&1 || rc=$?
    [ "$rc" != 0 ] || { cat "$tmp/out.log"; fail "$label: accepted (attempt $attempt)"; }
    grep -q -- "$want" "$tmp/out.log" || { cat "$tmp/out.log"; fail "$label: no line saying '$want' (attempt $attempt)"; }
    grep -q "^bin/\(fetch\|train\)" "$tmp/out.log" && { cat "$tmp/out.log"; fail "$label: work was listed (attempt $attempt)"; }
  done
  echo "ok: $label refused: $(grep -m1 "error" "$tmp/out.log")"
}
seeds_json '{"seeds": [1, 2, 1]}'
refused "a repeated seed" "experiments/$exp/seeds.json: seeds\[2\]: seed 1 is listed twice" EXPERIMENT=$exp RUNS=dense_qa
seeds_json '{"seeds": [1, 2.5]}'
refused "a fractional seed" "experiments/$exp/seeds.json: seeds\[1\]: expected an integer >= 0, got 2.5" EXPERIMENT=$exp RUNS=dense_qa
seeds_json '{"seeds": []}'
refused "no seeds" "experiments/$exp/seeds.json: seeds: expected 1 to 1000 seeds, got 0" EXPERIMENT=$exp RUNS=dense_qa
seeds_json '{"comment": "x", "seeds": [1], "seed": 2}'
refused "an unknown key" "experiments/$exp/seeds.json: seed: unknown key (did you mean seeds?)" EXPERIMENT=$exp RUNS=dense_qa
seeds_json '{"seeds": [1, 2'
refused "broken JSON" "experiments/$exp/seeds.json:" EXPERIMENT=$exp RUNS=dense_qa
seeds_json '{"seeds": [1, 3]}'
out=$(dry EXPERIMENT=$exp RUNS=dense_qa) || { echo "$out"; fail "a fixed seeds.json after refusals"; }
grep -q "^bin/train .*--set 'train.seed=3' --out runs/$exp/dense_qa.seed3 " <<<"$out" \
  || { echo "$out"; fail "a fixed seeds.json is not read again after a refusal"; }
echo "ok: a fixed seeds.json is read again after a refusal"
rm "experiments/$exp/seeds.json"
refused "SEEDS=0" "SEEDS=0 (--count): must be in \[1, 1000\]" EXPERIMENT=$exp RUNS=dense_qa SEEDS=0
refused "SEEDS=two" "two" EXPERIMENT=$exp RUNS=dense_qa SEEDS=two
echo "PASS"
