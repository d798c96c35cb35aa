#!/usr/bin/env bash
# Data-parallel training under Slurm, on a one-node cluster this script starts itself (munged, slurmctld, slurmd;
# config, keys, state and logs in its temporary directory, its own ports; every daemon stopped and the directory
# removed on exit, failure included):
#  - srun --mpi=pmix -n 2 bin/train (the moeut_qa ci config, 3 steps) is one job of 2 ranks, and its weights, AdamW
#    state and metrics are bit-identical to mpirun -np 2 of the same command;
#  - make reproduce EXPERIMENT=ci RUNS=dense_qa NPROC=2 in a batch job (sbatch --wait, the form of the example in
#    pipeline/base/dist.md) starts train with srun --mpi=pmix -n 2, and every record it writes (weights, AdamW state,
#    metrics, result.json, predictions.jsonl, analysis.json) equals the same make command's under mpirun.
# SKIP (77) with the reason where the daemons cannot run: no root, no Slurm/munge (mk/deps.sh test installs them),
# no PMIx plugin, or a daemon that does not come up. About 60 s on 2 CPU cores.
source "$(dirname "$0")/train_common.sh"
source "$(dirname "$0")/mpi_common.sh"

skip() { echo "SKIP: $*"; exit 77; }
for c in munged slurmctld slurmd srun sbatch sinfo scontrol; do
  command -v "$c" >/dev/null 2>&1 || skip "$c not installed (mk/deps.sh test installs slurmctld slurmd slurm-client munge)"
done
[ "$(id -u)" = 0 ] || skip "slurmd must run as root to start job steps (this runs as uid $(id -u))"
ncpu=$(nproc)
[ "$ncpu" -ge 2 ] || skip "2 ranks need 2 CPUs for one Slurm node; this machine has $ncpu"

# A Slurm job around this script (a real cluster's) must not leak into ours: its variables would make srun and make
# use that job.
for v in $(compgen -e | grep '^SLURM_' || true); do unset "$v"; done

slurm=$tmp/slurm
mkdir -p "$slurm/state" "$slurm/spool"
daemon_pids=()
stop_daemons() { # each daemon this script started, by the pid it recorded; then its own jobs and the directory
  local f p
  for f in slurmd slurmctld munged; do
    p=$(cat "$slurm/$f.pid" 2>/dev/null) || continue
    kill "$p" 2>/dev/null || continue
    for _ in $(seq 1 50); do kill -0 "$p" 2>/dev/null || break; sleep 0.1; done
    kill -9 "$p" 2>/dev/null || true
  done
  for j in $(jobs -p); do kill "$j" 2>/dev/null; done
  wait 2>/dev/null
  [ -n "${KEEP_TMP:-}" ] || rm -rf "$tmp"
}
trap stop_daemons EXIT

free_port() { # a TCP port nothing listens on now (random, so that two copies of this test do not collide)
  local p
  for _ in $(seq 1 100); do
    p=$((20000 + RANDOM % 40000))
    (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null || { echo "$p"; return 0; }
  done
  return 1
}
ctld_port=$(free_port) || fail "no free TCP port for slurmctld"
slurmd_port=$(free_port) || fail "no free TCP port for slurmd"
[ "$ctld_port" != "$slurmd_port" ] || slurmd_port=$((ctld_port + 1))

# munge: its own key and socket, so no system munged is needed or touched
dd if=/dev/urandom of="$slurm/munge.key" bs=1024 count=1 status=none
chmod 400 "$slurm/munge.key"
munged --force --socket="$slurm/munge.sock" --key-file="$slurm/munge.key" --log-file="$slurm/munged.log" \
  --pid-file="$slurm/munged.pid" --seed-file="$slurm/munged.seed" 2>"$slurm/munged.err" \
  || skip "munged does not start: $(tail -n 1 "$slurm/munged.err")"

host=$(hostname -s)
: >"$slurm/plugstack.conf" # no SPANK plugins (the system's /etc/slurm/plugstack.conf is not ours)
cat >"$slurm/slurm.conf" <<EOF
ClusterName=dmmathtest
SlurmctldHost=$host(127.0.0.1)
SlurmctldPort=$ctld_port
SlurmdPort=$slurmd_port
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$slurm/munge.sock
StateSaveLocation=$slurm/state
SlurmdSpoolDir=$slurm/spool
SlurmctldPidFile=$slurm/slurmctld.pid
SlurmdPidFile=$slurm/slurmd.pid
SlurmctldLogFile=$slurm/slurmctld.log
SlurmdLogFile=$slurm/slurmd.log
PlugStackConfig=$slurm/plugstack.conf
ProctrackType=proctrack/pgid
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
SchedulerType=sched/builtin
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
MpiDefault=none
ReturnToService=2
NodeName=testnode NodeAddr=127.0.0.1 CPUs=$ncpu State=UNKNOWN
PartitionName=test Nodes=testnode Default=YES MaxTime=INFINITE State=UP
EOF
export SLURM_CONF=$slurm/slurm.conf
slurmctld -f "$SLURM_CONF" 2>"$slurm/slurmctld.err" || skip "slurmctld does not start: $(tail -n 1 "$slurm/slurmctld.err")"
slurmd -f "$SLURM_CONF" -N testnode 2>"$slurm/slurmd.err" || skip "slurmd does not start: $(tail -n 1 "$slurm/slurmd.err")"
for _ in $(seq 1 100); do # up to 20 s for the node to register
  [ "$(sinfo -h -n testnode -o %T 2>/dev/null)" = idle ] && break
  sleep 0.2
done
[ "$(sinfo -h -n testnode -o %T 2>/dev/null)" = idle ] ||
  skip "the Slurm node did not come up: $(tail -n 2 "$slurm/slurmd.log" "$slurm/slurmctld.log" 2>/dev/null | tr '\n' ' ')"
srun --mpi=list 2>&1 | grep -q pmix || skip "Slurm has no PMIx plugin (mpi_pmix in slurm-wlm-basic-plugins)"
echo "ok: a one-node Slurm cluster up in ${SECONDS} s ($ncpu CPUs, slurmctld port $ctld_port, slurmd port $slurmd_port)"

make --no-print-directory tokenize EXPERIMENT=ci >"$tmp/tokenize.log" 2>&1 || { cat "$tmp/tokenize.log"; fail "make tokenize EXPERIMENT=ci"; }

# 1. bin/train by hand: srun against mpirun, 3 steps of the MoEUT ci run
args=(--threads 1 --config experiments/ci/moeut_qa.json --data data/ci --steps 3)
srun --mpi=pmix -n 2 bin/train "${args[@]}" --out "$tmp/srun" >"$tmp/srun.log" 2>&1 || { cat "$tmp/srun.log"; fail "srun --mpi=pmix -n 2 bin/train"; }
mpirun --oversubscribe -np 2 bin/train "${args[@]}" --out "$tmp/mpirun" >"$tmp/mpirun.log" 2>&1 || { cat "$tmp/mpirun.log"; fail "mpirun -np 2 bin/train"; }
grep -q "data-parallel: 2 rank(s)" "$tmp/srun.log" || { cat "$tmp/srun.log"; fail "srun: bin/train did not run as one job of 2 ranks"; }
[ "$(grep -c 'done: 3 steps' "$tmp/srun.log")" = 1 ] || { cat "$tmp/srun.log"; fail "srun: expected one 'done' line (rank 0's)"; }
same_as_ref "$tmp/mpirun" "$tmp/srun" "srun --mpi=pmix -n 2 bin/train: bit-identical to mpirun -np 2 (weights, AdamW state, metrics; at ${SECONDS} s)"

# 2. make reproduce in a batch job against the same make command under mpirun (train, evaluate and the depth analysis
# over evaluation prompts shortened by SET: the launcher, not the length, is under test)
make_args=(reproduce EXPERIMENT=ci RUNS=dense_qa NPROC=2
  "SET=train.steps=12 evaluate.max_examples_per_set=50 analyze.eval_prompts=4")
cat >"$tmp/job.sh" <<EOF
#!/bin/bash
#SBATCH --ntasks=2
#SBATCH --output=$tmp/job.log
make --no-print-directory $(printf "%q " "${make_args[@]}") RUNS_DIR=$tmp/by_srun/ci REPORT_DIR=$tmp/by_srun_report
EOF
sbatch --wait --quiet "$tmp/job.sh" || { cat "$tmp/job.log"; fail "sbatch --wait of make reproduce NPROC=2"; }
echo "ok: the batch job of make reproduce NPROC=2 ended (at ${SECONDS} s)"
grep -q '^srun --mpi=pmix -n 2 bin/train ' "$tmp/job.log" || { cat "$tmp/job.log"; fail "make in a Slurm job did not start train with srun --mpi=pmix -n 2"; }
grep -q "data-parallel: 2 rank(s)" "$tmp/job.log" || { cat "$tmp/job.log"; fail "make in a Slurm job: train was not one job of 2 ranks"; }
make --no-print-directory "${make_args[@]}" RUNS_DIR="$tmp/by_mpirun/ci" REPORT_DIR="$tmp/by_mpirun_report" \
  >"$tmp/make_mpirun.log" 2>&1 || { cat "$tmp/make_mpirun.log"; fail "make reproduce NPROC=2 under mpirun"; }
grep -q '^mpirun -np 2 .*bin/train ' "$tmp/make_mpirun.log" || fail "make outside Slurm did not start train with mpirun"
a=$tmp/by_mpirun/ci/dense_qa b=$tmp/by_srun/ci/dense_qa
same_as_ref "$a" "$b" "make reproduce NPROC=2 in a Slurm batch job: train bit-identical to mpirun's"
# The records name their run directory and time themselves: those fields aside, they are equal.
records() { sed -E -e "s#$tmp/by_(srun|mpirun)#RUNS#g" -e '/"(wall_time_s|tokens_per_s|hardware)"/d' "$1"; }
for f in result.json predictions.jsonl analysis.json; do
  diff <(records "$a/$f") <(records "$b/$f") || fail "make reproduce in a Slurm job: $f differs from mpirun's"
done
echo "ok: make reproduce in a Slurm batch job: result.json, predictions.jsonl, analysis.json equal mpirun's (${SECONDS} s in all)"
