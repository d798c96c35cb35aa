#!/usr/bin/env bash
# All-reduce time against bytes between two emulated hosts (tests/e2e/netns_hosts.sh), one rank per host, OpenMPI over
# TCP, under tc tbf rate limits on both veths (bucket: 10 ms at the rate, at least 32 KiB); fits t = latency +
# bytes / bandwidth per rate: latency = the time of the smallest message (4 KiB), bandwidth by least squares through
# (0, latency) over the messages of 64 KiB and more.
# Not part of make test (about a minute): the measurement behind pipeline/base/dist.md's "Scaling estimate".
# Usage: bash tests/e2e/bench_allreduce_hosts.sh [RATE_MBIT ...] (default: none 400 100 25; "none" = no limit)
source "$(dirname "$0")/train_common.sh"
source "$(dirname "$0")/mpi_common.sh"
source "$(dirname "$0")/netns_hosts.sh"

command -v mpicc >/dev/null 2>&1 || fail "mpicc not installed (mk/deps.sh build installs libopenmpi-dev)"
mpicc -O2 -std=c11 -Wall -Wextra -o "$tmp/allreduce_bench" tests/e2e/allreduce_bench.c || fail "cannot build the benchmark"
rates=("$@")
[ ${#rates[@]} -gt 0 ] || rates=(none 400 100 25)
echo "| tc rate | bytes | median all-reduce time |"
echo "|---|---|---|"
fits=()
for rate in "${rates[@]}"; do
  max=$((16 << 20))
  if [ "$rate" != none ]; then
    burst=$((rate * 1000000 / 8 / 100))
    [ $burst -ge 32768 ] || burst=32768
    for h in a b; do tc -n ${ns}$h qdisc add dev veth0 root tbf rate ${rate}mbit burst $burst latency 2s || fail "tc"; done
    [ "$rate" -lt 100 ] && max=$((4 << 20)) # a 16 MiB call at 25 Mbit/s would take 10 s
  fi
  hosts_mpirun -np 2 --map-by ppr:1:node "$tmp/allreduce_bench" $max 5 >"$tmp/r$rate" || fail "benchmark at rate $rate"
  [ "$rate" != none ] && for h in a b; do tc -n ${ns}$h qdisc del dev veth0 root; done
  awk -v r="$rate" '{printf "| %s | %d | %.2f ms |\n", r == "none" ? "none" : r " Mbit/s", $1, 1e3 * $2}' "$tmp/r$rate"
  fits+=("$(awk -v r="$rate" 'NR == 1 {a = $2} $1 >= 65536 {sxx += $1 * $1; sxy += $1 * ($2 - a)}
    END {b = sxy / sxx; printf "| %s | %.3f ms | %.1f MB/s (%.0f Mbit/s) |", r == "none" ? "none" : r " Mbit/s",
         1e3 * a, 1e-6 / b, 8e-6 / b}' "$tmp/r$rate")")
done
echo
echo "| tc rate | latency (4 KiB) | fitted bandwidth (bytes / (t - latency)) |"
echo "|---|---|---|"
printf '%s\n' "${fits[@]}"
