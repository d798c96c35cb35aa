#!/usr/bin/env bash
# Whole tiny models on the CUDA backend against the CPU backend (the cuda_model_vs_cpu program) with each forced
# expert-GEMM path of the CUDA cvmm: DMMATH_CUDA_CVMM=loop (one cuBLAS GEMM per expert) and =grouped (one
# cublasGemmGroupedBatchedEx per GEMM set). The CUDA suites run the same program under the default, auto, which
# picks one of the two per operand type after a probe; this script makes sure both pass, whichever auto picks.
# CUDA_TEST_UNIT_DIR=DIR takes the program from DIR (default build/tests; make test-cuda-emu: build/emu/tests).
# Exit 77 (SKIP) where the program is not built (no nvcc) or exits 77 itself (no usable CUDA GPU).
set -u
cd "$(dirname "$0")/../.."
prog=${CUDA_TEST_UNIT_DIR:-build/tests}/cuda_model_vs_cpu
[ -x "$prog" ] || { echo "SKIP: $prog is not built (make $prog; it needs nvcc)"; exit 77; }
tmp=$(mktemp -d /tmp/test_cuda_cvmm_paths.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
for path in loop grouped; do
  log=$tmp/$path.log
  DMMATH_CUDA_CVMM=$path "$prog" >"$log" 2>&1; rc=$?
  if [ "$rc" = 77 ]; then grep -m1 '^SKIP' "$log" || echo "SKIP: $prog exited 77"; exit 77; fi
  # cuBLAS may refuse the grouped call (a cuBLAS older than 12.5, or an operand type combination such as bf16 A/B
  # with an fp32 C that this cuBLAS does not take): that path is then unavailable here, which auto's probe would
  # have found; recorded as a skip of the path with cuBLAS's status, not as a crash. Any other failure fails.
  refusal=$(grep -m1 -oE 'cublasGemmGroupedBatchedEx failed: CUBLAS_STATUS_(NOT_SUPPORTED|INVALID_VALUE|ARCH_MISMATCH)[^;]*' "$log")
  if [ "$rc" != 0 ] && [ "$path" = grouped ] && [ -n "$refusal" ]; then
    echo "SKIP: DMMATH_CUDA_CVMM=grouped: cuBLAS refused the grouped GEMM ($refusal); the loop path passed"
    continue
  fi
  if [ "$rc" != 0 ]; then
    echo "FAIL: DMMATH_CUDA_CVMM=$path: $prog exited $rc"; tail -n 40 "$log" | sed 's/^/    /'; exit 1
  fi
  # auto's probe logs its choice; a forced path must not have run it
  if grep -q 'DMMATH_CUDA_CVMM=auto' "$log"; then echo "FAIL: DMMATH_CUDA_CVMM=$path was not applied (auto ran)"; exit 1; fi
  echo "ok: DMMATH_CUDA_CVMM=$path: $(grep -E '^[0-9]+%: Checks' "$log")"
done
echo "cuda cvmm paths: cuda_model_vs_cpu passed with the loop expert GEMMs and the grouped ones (or cuBLAS refused them: SKIP above)"
