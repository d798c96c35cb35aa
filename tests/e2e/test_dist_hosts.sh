#!/usr/bin/env bash
# e2e-lane: private (it writes only under its own temporary directories, so it may run beside other tests)
# Data-parallel training across two hosts, emulated with network namespaces this test creates and removes
# (tests/e2e/netns_hosts.sh: "hosta" and "hostb", each with its own hostname, OpenMPI over TCP between them). The
# process ids stay visible across the namespaces, but each rank's watchdog only inspects the pids of ranks with its own
# hostname: a rank on the other host is known only through --dist-timeout, as on real hosts.
#  - 2 hosts x 2 ranks are bit-identical to 4 ranks on one host (weights, AdamW state, metrics; MoEUT, 4 micro-batches);
#  - hostb's link taken down mid-run: every rank ends within seconds, a rank of hosta saying in one line that
#    hostb's ranks gave no answer; the last checkpoint is intact (it resumes);
#  - a bandwidth limit (tc tbf on both veths): the run takes at least steps x gradient bytes / rate, and ends
#    bit-identical;
#  - 5 % packet loss (nftables, dropping at random on hostb's veth): the run completes bit-identical (TCP resends);
#  - host hosta frozen (its ranks 0 and 1 SIGSTOPped) during rank 0's evaluation: hostb's ranks end within seconds,
#    saying in one line that rank 0 (host hosta) sent no sign of life during the wait for its evaluation.
source "$(dirname "$0")/train_common.sh"
source "$(dirname "$0")/mpi_common.sh"

source "$(dirname "$0")/netns_hosts.sh"

train_data "$tmp/data"
steps=4
args=(--threads 1 --config experiments/ci/moeut_qa.json --data "$tmp/data" --dist-timeout 5 --set train.n_microbatch=4
  --set train.steps=$steps --set train.evaluate_every=0 --set train.log_every=1 --set train.checkpoint_every=2)
# hosts_train OUT: 2 ranks per host, in the foreground (the caller may put it in the background)
hosts_train() { hosts_mpirun -np 4 --map-by ppr:2:node bin/train "${args[@]}" --out "$1"; }

ref=$tmp/one-host
mpirun --oversubscribe -np 4 bin/train "${args[@]}" --out "$ref" >"$ref.log" 2>&1 || { cat "$ref.log"; fail "4 ranks on one host"; }
d=$tmp/two-hosts
hosts_train "$d" >"$d.log" 2>&1 || { cat "$d.log"; fail "2 hosts x 2 ranks"; }
same_as_ref "$ref" "$d" "2 hosts x 2 ranks bit-identical to 4 ranks on one host"
base_s=$(sed -E -n 's/.*done: [0-9]+ steps, .*, ([0-9.]+) s, .*/\1/p' "$d.log")

# Bandwidth: tbf on each host's veth (both directions of the link between the hosts). Each step hosta needs hostb's
# gradient contribution and the other way round: at least the gradient's bytes cross the link in each direction.
rate_mbit=40
for h in a b; do
  tc -n ${ns}$h qdisc add dev veth0 root tbf rate ${rate_mbit}mbit burst 64kb latency 1s \
    || { echo "SKIP: tc tbf not permitted here"; exit 77; }
done
d=$tmp/tbf
hosts_train "$d" >"$d.log" 2>&1 || { cat "$d.log"; fail "2 hosts at ${rate_mbit} Mbit/s"; }
same_as_ref "$ref" "$d" "2 hosts at ${rate_mbit} Mbit/s: bit-identical"
took=$(sed -E -n 's/.*done: [0-9]+ steps, .*, ([0-9.]+) s, .*/\1/p' "$d.log")
n_params=$(sed -E -n 's/.*moeut, ([0-9]+) parameters.*/\1/p' "$d.log")
floor=$(awk -v n="$n_params" -v s=$steps -v r=$rate_mbit 'BEGIN {printf "%.1f", s * n * 4 * 8 / (r * 1e6)}')
awk -v t="$took" -v f="$floor" 'BEGIN {exit !(t >= f)}' \
  || fail "tbf: $steps steps took $took s, less than the $floor s the gradient bytes need at ${rate_mbit} Mbit/s (limit not in force?)"
# and the limiter did hold packets back on both links (its "overlimits" counter)
for h in a b; do
  over=$(tc -s -n ${ns}$h qdisc show dev veth0 | sed -E -n 's/.*overlimits ([0-9]+).*/\1/p' | head -n 1)
  [ "${over:-0}" -gt 0 ] || fail "tbf: the limit on host$h's link never held a packet back (overlimits ${over:-none})"
  tc -n ${ns}$h qdisc del dev veth0 root
done
echo "ok: tbf ${rate_mbit} Mbit/s: $took s (unlimited: $base_s s; floor ${floor} s = $steps x $n_params x 4 B at the rate)"

# Packet loss: nftables drops 5 % of hostb's outgoing packets at random.
if command -v nft >/dev/null 2>&1 && ip netns exec ${ns}b nft add table inet loss 2>/dev/null; then
  ip netns exec ${ns}b nft add chain inet loss out '{ type filter hook output priority 0; }'
  ip netns exec ${ns}b nft add rule inet loss out oifname veth0 numgen random mod 100 '<' 5 counter drop
  d=$tmp/loss
  hosts_train "$d" >"$d.log" 2>&1 || { cat "$d.log"; fail "2 hosts with 5 % packet loss"; }
  dropped=$(ip netns exec ${ns}b nft list ruleset | sed -E -n 's/.*counter packets ([0-9]+) .*/\1/p')
  ip netns exec ${ns}b nft delete table inet loss
  [ "${dropped:-0}" -gt 0 ] || fail "packet loss: the rule dropped no packet"
  same_as_ref "$ref" "$d" "2 hosts, 5 % of hostb's packets dropped ($dropped packets): completes bit-identical"
else
  echo "SKIP (sub-case): packet loss: nft not installed or nftables not permitted here (mk/deps.sh test installs nftables)"
fi

# Host hosta frozen (SIGSTOP of its ranks 0 and 1) during rank 0's evaluation at step 2: hostb's ranks know it only by
# rank 0's signs of life. (With rank 1 running, it would see rank 0's stopped pid on its own host and could end the
# job first: which rank speaks would be a race.)
d=$tmp/stop0
ranks_of() { pgrep -f "^bin/train .*--out $1\$"; }
eval_args=("${args[@]/train.evaluate_every=0/train.evaluate_every=2}")
eval_args=("${eval_args[@]/train.steps=$steps/train.steps=40}")
hosts_mpirun -np 4 --map-by ppr:2:node bin/train "${eval_args[@]}" --set train.evaluate_examples=200 --out "$d" >"$d.log" 2>&1 &
job=$!
for _ in $(seq 1 1200); do
  [ -f "$d/metrics.jsonl" ] && [ "$(wc -l <"$d/metrics.jsonl")" -ge 2 ] && break
  kill -0 "$job" 2>/dev/null || { cat "$d.log"; fail "rank 0 stopped: the run ended early"; }
  sleep 0.1
done
pid0= pid1=
for p in $(ranks_of "$d"); do
  env_of=$(tr '\0' '\n' <"/proc/$p/environ" 2>/dev/null)
  grep -qx "OMPI_COMM_WORLD_RANK=0" <<<"$env_of" && pid0=$p
  grep -qx "OMPI_COMM_WORLD_RANK=1" <<<"$env_of" && pid1=$p
done
[ -n "$pid0" ] && [ -n "$pid1" ] || fail "rank 0 stopped: the processes of ranks 0 and 1 (hosta) not found"
before=$(date +%s.%N)
kill -STOP "$pid0" "$pid1"
for _ in $(seq 1 300); do [ "$(ranks_of "$d" | grep -vx -e "$pid0" -e "$pid1" | wc -l)" = 0 ] && break; sleep 0.1; done
took=$(awk -v a="$before" -v b="$(date +%s.%N)" 'BEGIN {printf "%.1f", b - a}')
{ kill -CONT "$pid0" "$pid1" && kill -9 "$pid0" "$pid1"; } 2>/dev/null || true # mpirun may have ended them
timeout 30 tail --pid="$job" -f /dev/null || { kill "$job"; fail "rank 0 stopped: mpirun still running 30 s after the ranks ended"; }
wait "$job" || true
awk -v t="$took" 'BEGIN {exit !(t <= 10)}' || fail "hosta frozen: hostb's ranks took $took s to end (bound 10 s)"
pattern="train\[rank [23]\]: error: rank 0 (host hosta) sent no sign of life for 5 s .*during the wait for rank 0's evaluation of step 2"
grep -q "$pattern" "$d.log" || { cat "$d.log"; fail "rank 0 stopped: no line from a hostb rank naming rank 0"; }
echo "ok: hosta frozen during rank 0's evaluation: hostb's ranks ended in $took s: $(grep "$pattern" "$d.log" | head -1 | grep -o "error: .*" | cut -c1-150)"

# hostb's link down mid-run. Each rank on hosta waits for hostb in a collective and gives up after --dist-timeout;
# hostb's ranks likewise. Timed until no rank process is left (mpirun then waits for hostb's daemon: the link comes
# back up to let it finish).
args=("${args[@]/train.steps=$steps/train.steps=40}")
d=$tmp/linkdown
hosts_train "$d" >"$d.log" 2>&1 &
job=$!
for _ in $(seq 1 1200); do
  [ -f "$d/metrics.jsonl" ] && [ "$(wc -l <"$d/metrics.jsonl")" -ge 3 ] && break
  kill -0 "$job" 2>/dev/null || { cat "$d.log"; fail "link down: the run ended early"; }
  sleep 0.1
done
ranks() { pgrep -f "^bin/train .*--out $d\$" | wc -l; }
[ "$(ranks)" = 4 ] || fail "link down: expected 4 rank processes, found $(ranks)"
before=$(date +%s.%N)
ip -n ${ns}b link set veth0 down
for _ in $(seq 1 300); do [ "$(ranks)" = 0 ] && break; sleep 0.1; done
took=$(awk -v a="$before" -v b="$(date +%s.%N)" 'BEGIN {printf "%.1f", b - a}')
ip -n ${ns}b link set veth0 up
[ "$(ranks)" = 0 ] || fail "link down: rank processes still running 30 s later"
timeout 30 tail --pid="$job" -f /dev/null || { kill "$job"; fail "link down: mpirun still running 30 s after the ranks ended"; }
rc=0
wait "$job" || rc=$?
[ "$rc" != 0 ] || fail "link down: mpirun exited 0"
awk -v t="$took" 'BEGIN {exit !(t <= 10)}' || fail "link down: the ranks took $took s to end (bound 10 s)"
pattern="train\[rank [01]\]: error: no answer for 5 s from the other hosts (rank 2 on host hostb, rank 3 on host hostb)"
grep -q "$pattern" "$d.log" || { cat "$d.log"; fail "link down: no line from a hosta rank naming hostb's ranks"; }
echo "ok: hostb's link down: all ranks ended in $took s (mpirun: status $rc): $(grep "$pattern" "$d.log" | head -1 | grep -o "error: .*" | cut -c1-170)"
k=$(json_get "$d/state.json" step)
bin/train "${args[@]}" --out "$d" --resume --stop-after $((k + 1)) >>"$d.log" 2>&1 \
  || { cat "$d.log"; fail "link down: the last checkpoint (step $k) does not resume"; }
echo "ok: hostb's link down: the last checkpoint (step $k) resumes"
