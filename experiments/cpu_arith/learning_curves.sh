#!/usr/bin/env bash
# The learning-curve study that sized experiments/cpu_arith (its README has the table and the plot).
#
#   experiments/cpu_arith/learning_curves.sh [WORK]      (default WORK: /tmp/cpu_arith_curves)
#
# Trains, answer-only loss, two parameter-matched sizes of both architectures on data/cpu_arith (make tokenize
# EXPERIMENT=cpu_arith first), two runs at a time with one thread each, keeping the weights at every evaluation step
# (train.keep_checkpoints); then evaluates each kept checkpoint on the first 1,000 examples of each evaluation set
# (per module) and writes WORK/learning_curves.md and WORK/learning_curves.svg. About 35 minutes on 2 cores;
# interrupted, it continues where it stopped (train --auto-resume, evaluated checkpoints kept).
#   tiny: the tiny configs (d_model 128, 4 layers: 0.92M / 0.93M parameters), 3,000 steps of 8 x 256 tokens (6.1M)
#   mid:  d_model 192, 6 layers (dense 6 heads of 32, d_ff 768: 2.86M; MoEUT 4 heads of 48, 42 experts of 64, k = 6,
#         groups of 2: 2.88M), 1,000 steps (2.0M tokens): about the same CPU time as tiny's 3,000
# Both: lr 2e-3, warmup 100, cosine to 0.1 lr over the run. A point inside a run is not a shorter run (its learning
# rate has not decayed yet), so the curves understate what a run of that length reaches at its end.
set -euo pipefail
cd "$(dirname "$0")/../.."
WORK=${1:-/tmp/cpu_arith_curves}
DATA=data/cpu_arith
for f in bin/train bin/evaluate $DATA/tokenize_manifest.json; do
    [ -e "$f" ] || { echo "learning_curves: $f missing (make all; make tokenize EXPERIMENT=cpu_arith)" >&2; exit 2; }
done
mkdir -p "$WORK"
export OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-PASSIVE}

COMMON=(--set train.warmup=100 --set train.evaluate_examples=1000 --set train.keep_checkpoints=true
        --set train.checkpoint_every=500)
sets_for() { # arch size -> the overrides of that study run, one per line
    local arch=$1 size=$2
    printf '%s\n' "${COMMON[@]}"
    if [ "$size" = tiny ]; then
        printf '%s\n' --set train.steps=3000 --set train.evaluate_every=500
        return
    fi
    printf '%s\n' --set train.steps=1000 --set train.evaluate_every=200 --set model.d_model=192 --set model.n_layers=6
    if [ "$arch" = dense ]; then
        printf '%s\n' --set model.n_heads=6 --set model.d_head=32 --set model.d_ff=768
    else
        printf '%s\n' --set model.n_heads=4 --set model.d_head=48 --set model.ff_n_experts=42 --set model.ff_k=6
    fi
}

study_run() { # arch size
    local arch=$1 size=$2 out=$WORK/${2}_$1 cfg=experiments/tiny/${1}_answer.json
    mapfile -t sets < <(sets_for "$arch" "$size")
    nice bin/train --config "$cfg" --data $DATA --out "$out" --threads 1 --auto-resume "${sets[@]}" >"$out.log" 2>&1
    for ck in "$out"/checkpoints/step*; do
        [ -f "$ck/result.json" ] && continue
        nice bin/evaluate --run "$out" --config "$cfg" --data $DATA "${sets[@]}" --checkpoint "$(basename "$ck")" \
            --out "$ck/result.json" --batch-size 32 >"$ck.evaluate.log" 2>&1
    done
}

# two streams, one core each: the dense runs, the MoEUT runs
( study_run dense tiny && study_run dense mid ) &
( study_run moeut tiny && study_run moeut mid ) &
wait
python3 experiments/cpu_arith/learning_curves.py --svg "$WORK/learning_curves.svg" \
    tiny_dense="$WORK/tiny_dense" tiny_moeut="$WORK/tiny_moeut" mid_dense="$WORK/mid_dense" mid_moeut="$WORK/mid_moeut" \
    >"$WORK/learning_curves.md"
echo "learning_curves: wrote $WORK/learning_curves.md and $WORK/learning_curves.svg"
