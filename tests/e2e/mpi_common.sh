# Shared helpers of the tests/e2e/test_train_mpi*.sh scripts (sourced after train_common.sh, not a test itself).
# Provides: mpi_train NP ARGS... (bin/train as NP ranks under mpirun, one OpenMP thread each), rank_pid MPIRUN_PID
# RANK, weights_within_one_step REF DIR M LABEL (the summation-order bound of one step, see below).

command -v mpirun >/dev/null 2>&1 || { echo "SKIP: mpirun not installed (mk/deps.sh build installs openmpi-bin)"; exit 77; }
# CI runs as root, which OpenMPI refuses unless told; the vader single-copy mechanism (CMA) needs ptrace rights that
# containers often lack, and copying through shared memory is what it falls back to anyway.
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_btl_vader_single_copy_mechanism=none
export OMPI_MCA_rmaps_base_oversubscribe=1

# A failing check must not leave a background job behind (mpirun and its ranks) in a removed directory.
trap 'for j in $(jobs -p); do kill "$j" 2>/dev/null; done; wait 2>/dev/null; rm -rf "$tmp"' EXIT

mpi_train() { # mpi_train NP ARGS...: the launch make train NPROC=NP uses
  local np=$1
  shift
  mpirun --oversubscribe -np "$np" bin/train --threads 1 "$@"
}

rank_pid() { # rank_pid MPIRUN_PID RANK: the pid of that rank (a child of mpirun on a single host)
  local p
  for p in $(pgrep -P "$1"); do
    tr '\0' '\n' <"/proc/$p/environ" 2>/dev/null | grep -qx "OMPI_COMM_WORLD_RANK=$2" && { echo "$p"; return 0; }
  done
  return 1
}

# The bound on |w_W - w_1| per weight after ONE step from an identical state (a checkpoint continued for one step by
# W ranks and by 1 process, or by W and W' ranks; same micro-batches):
# each gradient element is a sum of at most m computed terms c_j (m = batch_size * context * layer repeats: one per
# token position and application of a shared layer); W ranks add the same terms in another order (each rank its own
# micro-batches, then the all-reduce), and two orders of one fp32 sum differ by at most 2*gamma_(m-1)*sum|c_j|,
# gamma_k = k*u/(1-k*u), u = 2^-24 (Higham, Accuracy and Stability, 4.2). AdamW divides each coordinate by its own
# running magnitude, so a relative gradient error d moves that step's update by at most lr*d, to first order, for a
# coordinate whose terms do not cancel (kappa = sum|c_j| / |sum c_j| = 1):
#     |w_W - w_1| <= kappa * 2*gamma_(m-1) * lr_t   (the step's learning rate).
# kappa is not known from outside: the test allows kappa = 100. The bound holds for one step only: from the second
# step on, the two runs start from states that already differ, and the difference grows as between any two
# roundings of the same training (pipeline/base/dist.md measures it), so no per-step sum bounds a long run. A wrong
# window, micro-batch or normalisation moves weights by ~lr_t in that one step, 100x the bound or more.
weights_within_one_step() { # weights_within_one_step REF DIR M LABEL: REF's last step was the one step
  local ref=$1 dir=$2 m=$3 label=$4
  local lr bound got
  lr=$(tail -n 1 "$ref/metrics.jsonl" | sed -E -n 's/.*"lr":([^,]*),.*/\1/p')
  [ -n "$lr" ] || fail "$label: no lr in the last line of $ref/metrics.jsonl"
  bound=$(awk -v m="$m" -v lr="$lr" 'BEGIN {u = 2^-24; g = (m-1)*u/(1-(m-1)*u); printf "%.6g", 100*2*g*lr}')
  got=$(python3 tests/e2e/safetensors_diff.py "$ref/model.safetensors" "$dir/model.safetensors") \
    || fail "$label: cannot compare the weights"
  awk -v d="${got%% *}" -v b="$bound" 'BEGIN {exit !(d <= b)}' \
    || fail "$label: max |w - w_ref| = ${got%% *} (in ${got##* }) exceeds the one-step summation-order bound $bound"
  echo "ok: $label: max |w - w_ref| = ${got%% *} <= one-step bound $bound (m = $m, lr = $lr)"
}

# metrics_head LINE_FILE: a metrics line's fields that do not depend on rounding of the update (step 1's loss terms
# are computed from identical weights on identical windows and reduced exactly)
loss_fields() { sed -E 's/,"lr".*//' "$1"; }
