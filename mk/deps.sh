#!/usr/bin/env bash
# Installs the Debian packages a target group needs, only when one is missing (a fresh machine has none of them).
# Usage: mk/deps.sh build|test|torch|fuzz   (test includes build, torch and fuzz: tests/e2e/test_twin_chain.sh runs
# the twin and tests/e2e/test_fuzz_regressions.sh the fuzz harnesses; pandas reads the JSON-lines and CSV outputs
# as their users do in tests/e2e/test_evaluate_predictions.sh and test_export.sh; Slurm (slurm-wlm-basic-plugins
# holds its PMIx plugin, mpi_pmix) and munge for tests/e2e/test_slurm.sh's one-node cluster; iproute2 and nftables
# build the emulated hosts of tests/e2e/test_dist_hosts.sh; torch alone is for the twin's fixture and benchmark
# targets; fuzz is clang with its libFuzzer runtime, libclang-rt-dev, for mk/fuzz.mk)
set -euo pipefail
build_pkgs="gcc g++ make pkg-config zlib1g-dev libcjson-dev check libsubunit-dev libopenblas-dev libarchive-dev libcurl4-openssl-dev libssl-dev openmpi-bin libopenmpi-dev"
test_pkgs="$build_pkgs python3 python3-torch python3-numpy python3-pandas chromium clang libclang-rt-dev strace iproute2 nftables slurmctld slurmd slurm-client slurm-wlm-basic-plugins munge"
torch_pkgs="python3 python3-torch python3-numpy"
fuzz_pkgs="$build_pkgs clang libclang-rt-dev"
case "${1:-build}" in
  build) want="$build_pkgs" ;;
  test) want="$test_pkgs" ;;
  torch) want="$torch_pkgs" ;;
  fuzz) want="$fuzz_pkgs" ;;
  *) echo "deps.sh: unknown group '$1' (build|test|torch|fuzz)" >&2; exit 2 ;;
esac
missing=""
for p in $want; do
  case "$(dpkg-query -W -f='${Status}' "$p" 2>/dev/null)" in *"install ok installed"*) ;; *) missing="$missing $p" ;; esac
done
[ -z "$missing" ] && exit 0
echo "deps: installing missing Debian packages:$missing" >&2
if [ "$(id -u)" != 0 ]; then SUDO=sudo; else SUDO=; fi
export DEBIAN_FRONTEND=noninteractive
# A stale package list makes installs fail on a fresh machine: refresh it once, then install.
$SUDO apt-get update -qq >/dev/null || { echo "deps: apt-get update failed" >&2; exit 1; }
$SUDO apt-get install -y -qq --no-install-recommends $missing >/dev/null || { echo "deps: apt-get install failed for:$missing" >&2; exit 1; }
