#!/usr/bin/env bash
# e2e-lane: private (it writes only under its own temporary directories, so it may run beside other tests)
# Whole tiny models on the CUDA backend against the CPU backend (the cuda_model_vs_cpu program) with each forced
# expert-GEMM path of the CUDA cvmm: DMMATH_CUDA_CVMM=loop (one cuBLAS GEMM per expert), =grouped (one
# cublasGemmGroupedBatchedEx per GEMM set) and =mma (bf16 operands on cvmm's tensor-core kernels, fp32 ones on the
# cuBLAS path auto picks). The CUDA suites run the same program under the default, auto, which picks loop or grouped
# per operand type after a probe; this script makes sure every path passes, whichever auto picks.
# CUDA_TEST_UNIT_DIR=DIR takes the program from DIR (default build/tests; make test-cuda-emu: build/emu/tests).
# Exit 77 (SKIP) where the program is not built (no nvcc) or exits 77 itself (no usable CUDA GPU).
set -u
cd "$(dirname "$0")/../.."
prog=${CUDA_TEST_UNIT_DIR:-build/tests}/cuda_model_vs_cpu
[ -x "$prog" ] || { echo "SKIP: $prog is not built (make $prog; it needs nvcc)"; exit 77; }
tmp=$(mktemp -d /tmp/test_cuda_cvmm_paths.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
# The passes (each with attention as configured only: the cvmm path is what varies here, and the CUDA suites run both
# attention paths under the default cvmm path): each forced path; on the CUDA emulator also the forced grouped path with the emulator's cuBLAS made to
# refuse bf16, as an H100's CUDA 13.0 cuBLAS does (the refusal must be recorded, and the fp32 cases still run grouped).
# On the emulator the forced grouped pass is left out: the emulator's grouped call passes auto's probe for both operand
# types, so the CUDA suite's own run of this program (auto) runs exactly it; the refusing pass still forces grouped.
for pass in loop grouped mma grouped-refuses-bf16; do
  path=${pass%%-*}
  log=$tmp/$pass.log
  on_emulator=0; grep -q '^cuda device: .*emulator' "$tmp/loop.log" 2>/dev/null && on_emulator=1
  if [ "$pass" = grouped ] && [ $on_emulator = 1 ]; then
    echo "note: DMMATH_CUDA_CVMM=grouped: not forced on the emulator (auto takes it there: the suite's own run)"; continue
  fi
  if [ "$pass" = grouped-refuses-bf16 ]; then
    [ $on_emulator = 1 ] || continue # CUDA_EMU_* acts on the emulator only
    CUDA_MODEL_GEMM_ATTENTION=0 DMMATH_CUDA_CVMM=grouped CUDA_EMU_GROUPED_GEMM=unsupported-bf16 "$prog" >"$log" 2>&1; rc=$?
  else
    CUDA_MODEL_GEMM_ATTENTION=0 DMMATH_CUDA_CVMM=$path "$prog" >"$log" 2>&1; rc=$?
  fi
  if [ "$rc" = 77 ]; then grep -m1 '^SKIP' "$log" || echo "SKIP: $prog exited 77"; exit 77; fi
  if [ "$rc" != 0 ]; then
    echo "FAIL: DMMATH_CUDA_CVMM=$path ($pass): $prog exited $rc"; tail -n 40 "$log" | sed 's/^/    /'; exit 1
  fi
  # auto's probe logs its choice; a forced path must not have run it
  if grep -q 'DMMATH_CUDA_CVMM=auto)' "$log"; then
    echo "FAIL: DMMATH_CUDA_CVMM=$path was not applied (auto ran)"; exit 1
  fi
  # cuBLAS may refuse the grouped call for bf16 operands (bf16 A/B with an fp32 C): the program then records each
  # bf16 case with experts as not run, with cuBLAS's status; the loop pass and auto (the CUDA suites) run them.
  refused=$(grep -c 'not run: DMMATH_CUDA_CVMM=grouped, and cuBLAS refuses' "$log")
  if [ "$pass" = grouped-refuses-bf16 ] && [ "$refused" = 0 ]; then
    echo "FAIL: with the emulator's grouped GEMM refusing bf16, no bf16 case was recorded as refused"; exit 1
  fi
  echo "ok: DMMATH_CUDA_CVMM=$path${pass#$path}: $(grep -E '^[0-9]+%: Checks' "$log")"
  [ "$refused" = 0 ] || echo "    recorded: $refused bf16 case(s) not run: $(grep -m1 -o 'cuBLAS refuses the grouped GEMM for bf16 operands here (.*); recorded' "$log" | sed 's/; recorded$//')"
done
echo "cuda cvmm paths: cuda_model_vs_cpu passed with the loop expert GEMMs, the grouped ones and the tensor-core kernels (bf16 cases that cuBLAS refuses grouped: recorded above)"
