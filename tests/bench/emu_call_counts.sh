#!/usr/bin/env bash
# What one training step of the CUDA backend asks of the GPU, counted on the CUDA emulator (make bench-emu-counts):
# kernel launches, cuBLAS calls, GEMM problems inside them, routing-plan builds (launches of the plan's first kernel,
# k_plan_count), device-to-host copies (each makes the host wait for the GPU) and host-to-device copies, fp32 values
# rounded to bf16 (all kernels; the weights' share is in k_to_bf16), and bytes moved: cvmm's row gathers/scatters,
# bf16 conversion kernels and device-to-device copies (read + written). Per optimizer step, for the paper's dense and
# MoEUT layouts at a tiny width (tests/bench/configs/*_paper_layout_narrow.json: same layer count, heads, experts and
# top-k as the 244M models, so the same loops and GEMM sets), in each precision of PRECISIONS. Each configuration runs
# with the backend's default kernel paths and with the comparator paths in the same command (default
# DMMATH_CUDA_ATTENTION=fused DMMATH_CUDA_CVMM=loop, the pre-grouped design; COMPARATOR_ENV=none skips them), and
# the ratios are printed. Per-step figures are the difference between runs of 1 and 2 timed steps (the same warm-up),
# so set-up and teardown cancel. These are counts, not times: they show where per-call overhead and host-GPU round
# trips go, which no CPU run can time. Needs build/emu/bench/bench_train_step.
# Usage: tests/bench/emu_call_counts.sh [CONFIG ...]
#   COMPARATOR_ENV  the comparator's environment, or none;  PRECISIONS  "fp32 bf16" (default) or one of them;
#   STATS_DIR       keep every run's CUDA_EMU_STATS record there (per-kernel launches and bf16 roundings, traffic)
set -euo pipefail
cd "$(dirname "$0")/../.."
exe=build/emu/bench/bench_train_step
[ -x "$exe" ] || { echo "emu_call_counts: $exe missing (make bench-emu-counts builds it)" >&2; exit 1; }
configs=("$@")
[ ${#configs[@]} -gt 0 ] || configs=(tests/bench/configs/dense_paper_layout_narrow.json
                                     tests/bench/configs/moeut_paper_layout_narrow.json)
comparator_env=${COMPARATOR_ENV:-"DMMATH_CUDA_ATTENTION=fused DMMATH_CUDA_CVMM=loop"}
read -r -a precisions <<<"${PRECISIONS:-fp32 bf16}"
tmp=$(mktemp -d /tmp/emu_call_counts.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
export ASAN_OPTIONS=detect_leaks=0

# counts CONFIG PRECISION STEPS ENV... -> JSON counters file path on stdout
counts() {
  local cfg=$1 prec=$2 steps=$3 out
  shift 3
  out="$tmp/$(basename "$cfg" .json).$prec.$steps.$(echo "$*" | tr -c 'A-Za-z0-9' _).json"
  if ! env "$@" CUDA_EMU_STATS="$out" "$exe" --config "$cfg" --backend cuda --precision "$prec" --steps "$steps" \
      --warmup 1 >"$out.log" 2>&1; then
    cat "$out.log" >&2
    echo "emu_call_counts: bench_train_step failed on $cfg ($prec, $*)" >&2
    exit 1
  fi
  if [ -n "${STATS_DIR:-}" ]; then mkdir -p "$STATS_DIR" && cp "$out" "$STATS_DIR/"; fi
  echo "$out"
}

# per_step ONE_STEP_JSON TWO_STEP_JSON -> the columns below, space-separated
per_step() {
  python3 - "$1" "$2" <<'PY'
import json, sys
a, b = (json.load(open(p)) for p in sys.argv[1:3])
def get(d, k):
    if k == "plans": return d["per_kernel"].get("k_plan_count", 0)
    if k == "moved": return sum(d["traffic"].values()) + d["bytes_d2d"]
    if k == "rows": return d["traffic"].get("cvmm_rows", 0)
    if k == "weights16": return d["bf16_per_kernel"].get("k_to_bf16", 0)
    return d[k]
keys = ["kernel_launches", "cublas_calls", "gemm_problems", "plans", "copies_d2h", "bytes_d2h", "copies_h2d",
        "bf16_roundings", "weights16", "moved", "rows"]
print(" ".join(str(get(b, k) - get(a, k)) for k in keys))
PY
}

fmt='%-34s %-4s %-10s %9s %7s %8s %6s %6s %9s %5s %11s %11s %12s %12s\n'
printf "$fmt" config prec paths launches cuBLAS GEMMs plans d2h d2h_bytes h2d bf16_values k_to_bf16 bytes_moved \
  cvmm_rows
for cfg in "${configs[@]}"; do
  [ -f "$cfg" ] || { echo "emu_call_counts: no such config: $cfg" >&2; exit 1; }
  name=$(basename "$cfg" .json)
  for prec in "${precisions[@]}"; do
    read -r -a new <<<"$(per_step "$(counts "$cfg" "$prec" 1 DMMATH_UNUSED=1)" "$(counts "$cfg" "$prec" 2 DMMATH_UNUSED=1)")"
    printf "$fmt" "$name" "$prec" default "${new[@]}"
    [ "$comparator_env" = none ] && continue
    # shellcheck disable=SC2086
    read -r -a old <<<"$(per_step "$(counts "$cfg" "$prec" 1 $comparator_env)" "$(counts "$cfg" "$prec" 2 $comparator_env)")"
    printf "$fmt" "$name" "$prec" comparator "${old[@]}"
    python3 - "$name $prec" "${new[*]}" "${old[*]}" <<'PY'
import sys
name, new, old = sys.argv[1], [int(x) for x in sys.argv[2].split()], [int(x) for x in sys.argv[3].split()]
labels = ["launches", "cuBLAS calls", "GEMM problems", "routing-plan builds", "device-to-host copies",
          "device-to-host bytes", "host-to-device copies", "bf16 roundings", "k_to_bf16 roundings", "bytes moved",
          "cvmm row bytes"]
parts = [f"{l} {o / n:.2f}x" if n else f"{l} {o} vs 0" for l, n, o in zip(labels, new, old)]
print(f"  {name}: comparator/default per step: " + ", ".join(parts))
PY
  done
done
echo "(counts per optimizer step on the CUDA emulator; comparator: $comparator_env; bf16_values: fp32 values rounded"
echo " to bf16 by all kernels, k_to_bf16: by the whole-tensor conversion kernel (weights and matmul operands);"
echo " bytes_moved: bytes read + written by cvmm's row kernels and the bf16 conversion kernel, plus device-to-device"
echo " copies; cvmm_rows: the row kernels' share)"
