#!/usr/bin/env bash
# Data-parallel failure handling, CPU backend, 2 ranks under mpirun:
#  - SIGTERM to rank 1 alone (SIGINT to rank 0 alone) stops both ranks at the same step with one committed
#    checkpoint; resumed with 2 ranks, the run ends bit-identical to an uninterrupted 2-rank run;
#  - kill -9 of rank 1 mid-run: mpirun ends within a bounded time, rank 0 says in one line that rank 1 died, and the
#    last checkpoint is intact (a 1-process --resume continues from it);
#  - weights that differ across ranks at a checkpoint (a testing hook nudges one weight of rank 1) are an error
#    naming the rank, and no checkpoint is written.
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
