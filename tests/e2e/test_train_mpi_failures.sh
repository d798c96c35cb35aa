#!/usr/bin/env bash
# Data-parallel failure handling, CPU backend, 2 ranks under mpirun:
#  - SIGTERM to rank 1 alone (SIGINT to rank 0 alone) stops both ranks at the same step with one committed
#    checkpoint; resumed with 2 ranks, the run ends bit-identical to an uninterrupted 2-rank run;
#  - kill -9 of rank 1 mid-run: mpirun ends within a bounded time, rank 0 says in one line that rank 1 died, and the
#    last checkpoint is intact (a 1-process --resume continues from it);
#  - weights that differ across ranks at a checkpoint (a testing hook nudges one weight of rank 1) are an error
#    naming the rank, and no checkpoint is written;
#  - a refused job (bad n_microbatch for the ranks, --resume of another config, a bad --set, one rank without its
#    data) prints one error line and changes nothing in --out; make NPROC=2 for a run of n_microbatch 1 is refused
#    before make writes anything (train.inputs included).
source "$(dirname "$0")/train_common.sh"
source "$(dirname "$0")/mpi_common.sh"

train_data "$tmp/data"
steps=20
train_config "$tmp/dense.json" dense qa $steps n_microbatch=2 checkpoint_every=2
cfg=$tmp/dense.json
ref=$tmp/ref
mpi_train 2 --config "$cfg" --data "$tmp/data" --out "$ref" >"$ref.log" 2>&1 || { cat "$ref.log"; fail "reference 2-rank run"; }

# start_job DIR: a 2-rank run in the background (sets job=mpirun's pid) once it has logged >= 3 steps
start_job() {
  local dir=$1
  # mpirun itself in the background (not the mpi_train function, whose subshell would be $!)
  mpirun --oversubscribe -np 2 bin/train --threads 1 --config "$cfg" --data "$tmp/data" --out "$dir" >"$dir.log" 2>&1 &
  job=$!
  for _ in $(seq 1 600); do # up to 60 s
    [ -f "$dir/metrics.jsonl" ] && [ "$(wc -l <"$dir/metrics.jsonl")" -ge 3 ] && [ -f "$dir/state.json" ] && return 0
    kill -0 "$job" 2>/dev/null || break
    sleep 0.1
  done
  cat "$dir.log"
  fail "$dir: the 2-rank run did not get going"
}

for case in "TERM 1 143" "INT 0 130"; do
  set -- $case
  d=$tmp/sig$1
  start_job "$d"
  pid=$(rank_pid "$job" "$2") || fail "SIG$1: no rank $2 found under mpirun $job"
  kill "-$1" "$pid"
  rc=0
  wait "$job" || rc=$?
  [ "$rc" = "$3" ] || { cat "$d.log"; fail "SIG$1 to rank $2: exit status $rc, expected $3"; }
  grep -q "interrupted by SIG$1: checkpoint saved at step" "$d.log" || { cat "$d.log"; fail "SIG$1: no message"; }
  k=$(json_get "$d/state.json" step)
  [ "$(tail -n 1 "$d/metrics.jsonl" | sed -E 's/.*"step":([0-9]+),.*/\1/')" = "$k" ] \
    || fail "SIG$1: metrics.jsonl does not end at the checkpoint's step $k"
  [ "$k" -lt "$steps" ] || fail "SIG$1: the run finished before the signal (step $k)"
  echo "ok: SIG$1 to rank $2 alone: both ranks stopped at step $k (exit $rc)"
  mpi_train 2 --config "$cfg" --data "$tmp/data" --out "$d" --resume >>"$d.log" 2>&1 || { cat "$d.log"; fail "SIG$1: resume"; }
  same_as_ref "$ref" "$d" "SIG$1 to rank $2, resumed with 2 ranks: bit-identical to the uninterrupted run"
done

# kill -9 of rank 1
d=$tmp/kill
start_job "$d"
pid=$(rank_pid "$job" 1) || fail "kill: no rank 1 found under mpirun $job"
before=$(date +%s)
kill -9 "$pid"
rc=0
wait "$job" || rc=$?
took=$(($(date +%s) - before))
[ "$rc" != 0 ] || fail "kill -9 of rank 1: mpirun exited 0"
[ "$took" -le 30 ] || fail "kill -9 of rank 1: the job took $took s to end (bound 30 s)"
grep -q "rank 1 (pid $pid) died during the" "$d.log" || { cat "$d.log"; fail "kill -9: no line naming rank 1"; }
k=$(json_get "$d/state.json" step)
echo "ok: kill -9 of rank 1: job ended in ${took} s with status $rc; checkpoint at step $k"
bin/train --config "$cfg" --data "$tmp/data" --out "$d" --resume --threads 1 --stop-after $((k + 1)) >>"$d.log" 2>&1 \
  || { cat "$d.log"; fail "kill -9: the last checkpoint (step $k) does not resume"; }
grep -q "resumed .* at step $k of $steps" "$d.log" || { cat "$d.log"; fail "kill -9: no resume from step $k"; }
echo "ok: the checkpoint left by the killed job resumes at step $k"

# divergence across ranks
d=$tmp/diverge
rc=0
mpi_train 2 --config "$cfg" --data "$tmp/data" --out "$d" --debug-diverge 1 >"$d.log" 2>&1 || rc=$?
[ "$rc" != 0 ] || fail "diverged replicas: exit 0"
grep -q "step 2: the weights/AdamW state of rank(s) 1 differ from rank 0's" "$d.log" || { cat "$d.log"; fail "diverged replicas: no error naming rank 1"; }
[ ! -f "$d/state.json" ] || fail "diverged replicas: a checkpoint was written"
echo "ok: weights that differ across ranks refused at the checkpoint of step 2, naming rank 1"

# Refusals: one error line per job (rank 0's; the others exit 1 silently), and the run directory unchanged.
tree_sha() { (cd "$1" && find . -type f -print0 | sort -z | xargs -0 sha256sum) | sha256sum; }
refused() { # refused LABEL EXPECTED_LINE COMMAND...: exit 1, exactly one error line (EXPECTED_LINE), $ref unchanged
  local label=$1 want=$2 before rc=0
  shift 2
  before=$(tree_sha "$ref")
  "$@" >"$tmp/refused.log" 2>&1 || rc=$?
  [ "$rc" = 1 ] || { cat "$tmp/refused.log"; fail "$label: exit status $rc, expected 1"; }
  grep -E '^train(\[rank [0-9]+\])?: error: ' "$tmp/refused.log" >"$tmp/errors.txt" || true
  [ "$(wc -l <"$tmp/errors.txt")" = 1 ] && grep -q -- "$want" "$tmp/errors.txt" ||
    { cat "$tmp/refused.log"; fail "$label: expected one error line with '$want'"; }
  [ "$(tree_sha "$ref")" = "$before" ] || fail "$label: the run directory changed"
  echo "ok: $label: one error line ($(cut -c1-60 "$tmp/errors.txt")...), run directory unchanged"
}
refused "n_microbatch 2 on 4 ranks" "train\[rank 0\]: error: .*train.n_microbatch 2 is not a multiple of the 4 ranks" \
  mpirun --oversubscribe -np 4 bin/train --threads 1 --config "$cfg" --data "$tmp/data" --out "$ref" --auto-resume
refused "--resume of another config" "train\[rank 0\]: error: refusing to resume $ref: the --set overrides changed" \
  mpi_train 2 --config "$cfg" --data "$tmp/data" --out "$ref" --resume --set train.lr=0.001
refused "a bad --set value" "train\[rank 0\]: error: .*train.lr: expected a number" \
  mpi_train 2 --config "$cfg" --data "$tmp/data" --out "$ref" --set train.lr=abc
# A rank that fails alone (here: rank 1 given data that does not exist, as on a host without it) says why itself,
# and rank 0 stops before it touches --out.
refused "rank 1 alone without its data" "train\[rank 1\]: error: $tmp/nodata/tokenizer.json: cannot open" \
  mpirun --oversubscribe -np 2 sh -c 'd=$1; [ "$OMPI_COMM_WORLD_RANK" = 1 ] && d=$2/nodata; shift 2;
    exec bin/train --threads 1 --data "$d" "$@"' sh "$tmp/data" "$tmp" --config "$cfg" --out "$tmp/fresh"
[ ! -e "$tmp/fresh" ] || fail "rank 1 alone without its data: rank 0 created --out"

# make: NPROC=2 for a run of n_microbatch 1 is refused before make writes anything (its train.inputs stamp
# included), and the finished 1-process run stays up to date.
make --no-print-directory tokenize EXPERIMENT=ci >"$tmp/tokenize.log" 2>&1 || { cat "$tmp/tokenize.log"; fail "make tokenize EXPERIMENT=ci"; }
mk_train() { make --no-print-directory train EXPERIMENT=ci RUN=dense_qa RUNS_DIR="$tmp/runs/ci" \
  SET="train.n_microbatch=1 train.steps=3" "$@"; }
mk_train >"$tmp/mk1.log" 2>&1 || { cat "$tmp/mk1.log"; fail "make train (1 process)"; }
ref=$tmp/runs/ci/dense_qa
before=$(tree_sha "$ref")
rc=0
mk_train NPROC=2 >"$tmp/mk2.log" 2>&1 || rc=$?
[ "$rc" != 0 ] || { cat "$tmp/mk2.log"; fail "make train NPROC=2 of a run of n_microbatch 1 accepted"; }
[ "$(grep -c 'error' "$tmp/mk2.log")" = 1 ] &&
  grep -q "train.n_microbatch 1 is not a multiple of the 2 ranks of NPROC=2" "$tmp/mk2.log" ||
  { cat "$tmp/mk2.log"; fail "make train NPROC=2: expected one error line naming n_microbatch and NPROC"; }
[ "$(tree_sha "$ref")" = "$before" ] || fail "make train NPROC=2 (refused) changed the run directory"
mk_train -n >"$tmp/mk3.log" 2>&1 || { cat "$tmp/mk3.log"; fail "make -n train"; }
! grep -q 'bin/train ' "$tmp/mk3.log" || { cat "$tmp/mk3.log"; fail "after the refused NPROC=2, make would retrain the run"; }
echo "ok: make NPROC=2 for n_microbatch 1: one error line, the run directory unchanged, the run still up to date"
