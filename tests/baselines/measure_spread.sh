#!/usr/bin/env bash
# Measures how far honest reruns of an experiment drift from its recorded baselines, to derive compare's tolerances.
#
#   tests/baselines/measure_spread.sh EXPERIMENT [VARIANT ...]
#
# Needs bin/ built and data/EXPERIMENT made (make tokenize EXPERIMENT=EXP). Trains and evaluates every run of
# experiments/EXPERIMENT once per variant into $SPREAD_WORK/EXP/<variant>/<run> (default /tmp/spread), never into
# runs/, then writes reports/baselines/EXP/spread.json (tests/baselines/spread_table.py: per metric class and variant
# the largest |new - baseline| and |new - baseline| / baseline, and the across-seed standard deviation).
# Variants (default: all honest ones, then the degraded ones):
#   rerun              the baseline's own config and environment (checks the baseline reproduces here)
#   seed2, seed3       train.seed 2 / 3 (a temp copy of the config: a different config_sha256, compared anyway)
#   coretype-NAME      OPENBLAS_CORETYPE=NAME (Sandybridge = AVX, Nehalem = SSE4; Haswell, AVX2, is what OpenBLAS picks
#                      on the AVX2 machine the baselines were recorded on, so there it equals rerun; SkylakeX needs AVX-512)
#   threadsN           train --threads N (the others use 2, as make reproduce does on 2 cores)
#   steps90, lrhalf    DEGRADED on purpose: 10% fewer steps / half the learning rate (what compare must catch)
# Existing finished variant directories are reused (delete $SPREAD_WORK/EXP/<variant> to redo one); SPREAD_RUNS
# limits the runs (default: all four); SPREAD_TABLE_ONLY=1 trains nothing and only rewrites the verdicts and the table
# from what $SPREAD_WORK/EXP holds. Run it with nice: a tiny variant is 4 training runs of ~40 s on 2 free cores.
set -euo pipefail
cd "$(dirname "$0")/../.."
EXP=${1:?usage: measure_spread.sh EXPERIMENT [VARIANT ...]}
shift
VARIANTS=("$@")
[ ${#VARIANTS[@]} -gt 0 ] || VARIANTS=(rerun seed2 seed3 coretype-Sandybridge coretype-Nehalem
                                      threads1 steps90 lrhalf)
RUNS=${SPREAD_RUNS:-dense_qa dense_answer moeut_qa moeut_answer}
WORK=${SPREAD_WORK:-/tmp/spread}/$EXP
BASE=reports/baselines/$EXP
# On a shared machine, spinning OpenMP/OpenBLAS threads waiting at barriers slow training many-fold; passive waiting
# changes the speed only, never the numbers (the reduction order is fixed by the code, not by the wait policy).
export OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-PASSIVE}
for f in bin/train bin/evaluate data/$EXP/tokenize_manifest.json $BASE/tolerances.json; do
    [ -e "$f" ] || { echo "measure_spread: $f missing (make all; make tokenize EXPERIMENT=$EXP)" >&2; exit 2; }
done

run_variant() { # variant run
    local v=$1 r=$2 cfg=experiments/$EXP/$2.json out=$WORK/$1/$2 threads=2 env=()
    [ -f "$out/result.json" ] && { echo "measure_spread: $out/result.json exists (reused)"; return 0; }
    mkdir -p "$out"
    case $v in
        rerun) ;;
        seed*) jq ".train.seed = ${v#seed}" "$cfg" >"$out/config.json"; cfg=$out/config.json ;;
        coretype-*) env=(OPENBLAS_CORETYPE="${v#coretype-}") ;;
        threads*) threads=${v#threads} ;;
        steps90) jq '.train.steps = (.train.steps * 9 / 10 | floor)' "$cfg" >"$out/config.json"; cfg=$out/config.json ;;
        lrhalf) jq '.train.lr = .train.lr / 2' "$cfg" >"$out/config.json"; cfg=$out/config.json ;;
        *) echo "measure_spread: unknown variant $v" >&2; exit 2 ;;
    esac
    echo "measure_spread: $EXP/$v/$r: training ($(date +%T))"
    env "${env[@]}" bin/train --config "$cfg" --data "data/$EXP" --out "$out" --threads "$threads" >"$out/train.log" 2>&1
    env "${env[@]}" bin/evaluate --run "$out" --config "$cfg" --data "data/$EXP" --out "$out/result.json.tmp.json" \
        --predictions "$out/predictions.jsonl" >"$out/evaluate.log" 2>&1
    mv "$out/result.json.tmp.json" "$out/result.json"
}

if [ -z "${SPREAD_TABLE_ONLY:-}" ]; then
    for v in "${VARIANTS[@]}"; do
        for r in $RUNS; do run_variant "$v" "$r"; done
    done
fi
# compare's verdict on each variant with the current tolerances. Seed and degraded variants were trained from a config
# copy (another config_sha256), so compare sees a copy of each record carrying the baseline's identity (config,
# config_sha256, and the step/token counts that steps90 changes): every loss and accuracy in it is the variant's own.
: >"$WORK/verdicts.tsv"
for vdir in "$WORK"/*/; do
    v=$(basename "$vdir")
    [ "$v" = _as_baseline ] && continue
    as=$WORK/_as_baseline/$v
    rm -rf "$as"
    n=0
    for r in $RUNS; do
        [ -f "$vdir/$r/result.json" ] || continue
        mkdir -p "$as/$r"
        jq --slurpfile b "$BASE/$r.result.json" '.config = $b[0].config | .config_sha256 = $b[0].config_sha256
            | .training.steps = $b[0].training.steps | .training.tokens = $b[0].training.tokens' \
            "$vdir/$r/result.json" >"$as/$r/result.json"
        n=$((n + 1))
    done
    [ $n -gt 0 ] || continue
    rc=0
    bin/compare --baselines "$BASE" --runs "$as" --only "$(ls "$as" | paste -sd,)" --only-failures \
        >"$WORK/$v.compare.log" 2>&1 || rc=$?
    printf '%s\t%s\t%s\n' "$v" "$rc" "$(grep -c ' WORSE' "$WORK/$v.compare.log" || true)" >>"$WORK/verdicts.tsv"
done
python3 tests/baselines/spread_table.py --experiment "$EXP" --baselines "$BASE" --work "$WORK" \
    \
    --command "${SPREAD_RUNS:+SPREAD_RUNS=\"$SPREAD_RUNS\" }tests/baselines/measure_spread.sh $EXP $(ls "$WORK" | grep -v '^_' | grep -v '\.' | paste -sd' ')" --out "$BASE/spread.json"
