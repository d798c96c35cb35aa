#!/usr/bin/env bash
# Measures how far W data-parallel ranks drift from one process over a whole run (pipeline/base/dist.md, "What is
# exact and what is within rounding"): each run of experiments/EXPERIMENT trained for each step count by 1 process and
# by NPROC ranks into $DRIFT_WORK (default /tmp/dist_drift), never into runs/; prints per run and step count the
# largest |w_W - w_1|, the multi-step sum kappa * 2 gamma_(m-1) * sum_t lr_t that a per-step argument would give
# (kappa = 100, m = batch_size * context * layer applications per shared weight, as tests/e2e/mpi_common.sh), the
# final train losses (train.log_every=1 in both, to sum every step's lr), and as comparator the largest |w - w_1| of
# one process on another BLAS kernel (OPENBLAS_CORETYPE=Sandybridge, AVX instead of the AVX2 that OpenBLAS picks
# here): two roundings of the same training that involve no ranks at all.
#
#   tests/baselines/measure_dist_drift.sh [EXPERIMENT [STEPS ...]]     (default: ci 40 60)
#
# Needs bin/ built, mpirun, and data/EXPERIMENT made (make tokenize EXPERIMENT=EXP). DRIFT_RUNS limits the runs
# (default: dense_qa moeut_qa), NPROC the ranks (default 2). Run it with nice: 3 runs per run and step count, a ci run
# of 60 steps ~20-40 s on 2 free cores.
set -euo pipefail
cd "$(dirname "$0")/../.."
EXP=${1:-ci}
shift || true
STEPS=("$@")
[ ${#STEPS[@]} -gt 0 ] || STEPS=(40 60)
RUNS=${DRIFT_RUNS:-dense_qa moeut_qa}
NPROC=${NPROC:-2}
WORK=${DRIFT_WORK:-/tmp/dist_drift}/$EXP
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_btl_vader_single_copy_mechanism=none
export OMP_WAIT_POLICY=PASSIVE
[ -f "data/$EXP/train.shard" ] || { echo "data/$EXP/train.shard missing: make tokenize EXPERIMENT=$EXP" >&2; exit 1; }
mkdir -p "$WORK"
printf '%-14s %5s %14s %14s %12s %12s %20s\n' run steps max_abs_diff multi_step_sum loss_1 "loss_$NPROC" \
  max_abs_diff_1p_avx
for run in $RUNS; do
  cfg=experiments/$EXP/$run.json
  for n in "${STEPS[@]}"; do
    one=$WORK/$run.steps$n.np1 many=$WORK/$run.steps$n.np$NPROC avx=$WORK/$run.steps$n.np1.avx
    for d in "$one" "$avx"; do
      coretype=; [ "$d" = "$avx" ] && coretype=Sandybridge
      [ -f "$d/train_summary.json" ] || env ${coretype:+OPENBLAS_CORETYPE=$coretype} bin/train --config "$cfg" --data "data/$EXP" \
        --out "$d" --steps "$n" --threads 1 --set train.log_every=1 >"$d.log" 2>&1 || { cat "$d.log"; exit 1; }
    done
    [ -f "$many/train_summary.json" ] || mpirun --oversubscribe -np "$NPROC" bin/train --config "$cfg" --data "data/$EXP" \
      --out "$many" --steps "$n" --threads 1 --set train.log_every=1 >"$many.log" 2>&1 || { cat "$many.log"; exit 1; }
    python3 - "$cfg" "$one" "$many" "$n" "$avx" <<'PY'
import json, subprocess, sys
cfg, one, many, n, avx = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), sys.argv[5]
c = json.load(open(cfg))
t, m = c["train"], c["model"]
# terms per gradient element: the positions of a step, times the applications of a shared layer (MoEUT: groups)
reps = m["n_layers"] // m.get("group_size", 1) if m["arch"] == "moeut" else 1
terms = t["batch_size"] * t["context"] * reps
u = 2.0 ** -24
gamma = (terms - 1) * u / (1 - (terms - 1) * u)
lrs = [json.loads(l)["lr"] for l in open(f"{one}/metrics.jsonl")]
def max_diff(other):
    return float(subprocess.run([sys.executable, "tests/e2e/safetensors_diff.py", f"{one}/model.safetensors",
                                 f"{other}/model.safetensors"], capture_output=True, text=True,
                                check=True).stdout.split()[0])
loss = [json.load(open(f"{d}/train_summary.json"))["final_train_loss"] for d in (one, many)]
print(f"{cfg.split('/')[-1][:-5]:<14} {n:5d} {max_diff(many):14.3g} {100 * 2 * gamma * sum(lrs):14.3g} "
      f"{loss[0]:12.6f} {loss[1]:12.6f} {max_diff(avx):20.3g}")
PY
  done
done
