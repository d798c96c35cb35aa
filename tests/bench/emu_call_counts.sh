#!/usr/bin/env bash
# What one training step of the CUDA backend asks of the GPU, counted on the CUDA emulator (make bench-emu-counts):
# kernel launches, cuBLAS calls, GEMM problems inside them, device-to-host copies (each makes the host wait for the
# GPU) and host-to-device copies, per optimizer step, for the paper's dense and MoEUT layouts at a tiny width
# (tests/bench/configs/*_paper_layout_narrow.json: same layer count, heads, experts and top-k as the 244M models, so
# the same loops and GEMM sets). Each configuration runs with the backend's default kernel paths and with the
# comparator paths in the same command (default DMMATH_CUDA_ATTENTION=fused DMMATH_CUDA_CVMM=loop, the pre-grouped
# design), and the ratios are printed. Per-step figures are the difference between runs of 1 and 2 timed steps
# (the same warm-up), so set-up and teardown cancel. These are counts, not times: they show where per-call overhead
# and host-GPU round trips go, which no CPU run can time. Needs build/emu/bench/bench_train_step.
# Usage: tests/bench/emu_call_counts.sh [CONFIG ...]   (COMPARATOR_ENV overrides the comparator's environment)
set -euo pipefail
cd "$(dirname "$0")/../.."
exe=build/emu/bench/bench_train_step
[ -x "$exe" ] || { echo "emu_call_counts: $exe missing (make bench-emu-counts builds it)" >&2; exit 1; }
configs=("$@")
[ ${#configs[@]} -gt 0 ] || configs=(tests/bench/configs/dense_paper_layout_narrow.json
                                     tests/bench/configs/moeut_paper_layout_narrow.json)
comparator_env=${COMPARATOR_ENV:-"DMMATH_CUDA_ATTENTION=fused DMMATH_CUDA_CVMM=loop"}
tmp=$(mktemp -d /tmp/emu_call_counts.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
export ASAN_OPTIONS=detect_leaks=0

# counts CONFIG STEPS ENV... -> JSON counters file path on stdout
counts() {
  local cfg=$1 steps=$2 out
  shift 2
  out="$tmp/$(basename "$cfg" .json).$steps.$(echo "$*" | tr -c 'A-Za-z0-9' _).json"
  if ! env "$@" CUDA_EMU_STATS="$out" "$exe" --config "$cfg" --backend cuda --steps "$steps" --warmup 1 \
      >"$out.log" 2>&1; then
    cat "$out.log" >&2
    echo "emu_call_counts: bench_train_step failed on $cfg ($*)" >&2
    exit 1
  fi
  echo "$out"
}

per_step() { # per_step ONE_STEP_JSON TWO_STEP_JSON -> "launches cublas problems d2h d2h_bytes h2d"
  python3 - "$1" "$2" <<'PY'
import json, sys
a, b = (json.load(open(p)) for p in sys.argv[1:3])
keys = ["kernel_launches", "cublas_calls", "gemm_problems", "copies_d2h", "bytes_d2h", "copies_h2d"]
print(" ".join(str(b[k] - a[k]) for k in keys))
PY
}

printf '%-38s %-10s %10s %9s %9s %8s %11s %8s\n' config paths launches cuBLAS GEMMs d2h d2h_bytes h2d
for cfg in "${configs[@]}"; do
  [ -f "$cfg" ] || { echo "emu_call_counts: no such config: $cfg" >&2; exit 1; }
  name=$(basename "$cfg" .json)
  read -r -a new <<<"$(per_step "$(counts "$cfg" 1 DMMATH_UNUSED=1)" "$(counts "$cfg" 2 DMMATH_UNUSED=1)")"
  # shellcheck disable=SC2086
  read -r -a old <<<"$(per_step "$(counts "$cfg" 1 $comparator_env)" "$(counts "$cfg" 2 $comparator_env)")"
  printf '%-38s %-10s %10s %9s %9s %8s %11s %8s\n' "$name" default "${new[@]}"
  printf '%-38s %-10s %10s %9s %9s %8s %11s %8s\n' "$name" comparator "${old[@]}"
  python3 - "$name" "${new[*]}" "${old[*]}" <<'PY'
import sys
name, new, old = sys.argv[1], [int(x) for x in sys.argv[2].split()], [int(x) for x in sys.argv[3].split()]
labels = ["launches", "cuBLAS calls", "GEMM problems", "device-to-host copies", "device-to-host bytes",
          "host-to-device copies"]
parts = [f"{l} {o / n:.2f}x" if n else f"{l} {o} vs 0" for l, n, o in zip(labels, new, old)]
print(f"  {name}: comparator/default per step: " + ", ".join(parts))
PY
done
echo "(counts per optimizer step on the CUDA emulator; comparator: $comparator_env)"
