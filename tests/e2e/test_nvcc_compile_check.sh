#!/usr/bin/env bash
# tests/nvcc_compile.sh (make test-nvcc) fails on what nvcc rejects or warns about: a CUDA source with an unused
# variable in device code (a warning, so an error here) and one that calls a host function from a kernel (an error)
# are each a FAIL line and a non-zero exit; a clean one passes; without nvcc it records one skip. Skips (77) on a
# machine without nvcc.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
nvcc=$(command -v nvcc 2>/dev/null || ls /usr/local/cuda/bin/nvcc 2>/dev/null || true)
[ -n "$nvcc" ] || { echo "SKIP: no nvcc on this machine"; exit 77; }
tmp=$(mktemp -d /tmp/test_nvcc.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
cd "$tmp"
flags="-O3 -std=c++17 -arch=sm_90 -Xcompiler -Wall,-Wextra,-Wno-unused-parameter"
printf '__global__ void k(float *x) { x[threadIdx.x] *= 2.0f; }\n' >clean.cu
printf '__global__ void k(float *x) { int unused = 3; x[threadIdx.x] *= 2.0f; }\n' >warning.cu
printf 'void host_only(float *x) { x[0] = 1; }\n__global__ void k(float *x) { host_only(x); }\n' >error.cu
"$root/tests/nvcc_compile.sh" "$nvcc" "$flags" clean.cu >clean.log 2>&1 || { cat clean.log; fail "a clean source failed"; }
grep -q '^ok   \[nvcc\] clean.cu' clean.log || { cat clean.log; fail "no ok line for the clean source"; }
for bad in warning error; do
  rc=0; "$root/tests/nvcc_compile.sh" "$nvcc" "$flags" $bad.cu >$bad.log 2>&1 || rc=$?
  [ $rc != 0 ] && grep -q "^FAIL \[nvcc\] $bad.cu" $bad.log || { cat $bad.log; fail "$bad.cu: exit $rc, no FAIL line"; }
done
rc=0; "$root/tests/nvcc_compile.sh" "" "$flags" clean.cu >none.log 2>&1 || rc=$?
[ $rc = 0 ] && grep -q '^SKIP \[nvcc\]' none.log && grep -q '^nvcc nvcc-missing 0 0 1$' build/test-results.txt ||
  { cat none.log; fail "without nvcc: expected one SKIP line and a recorded skip"; }
echo "ok: make test-nvcc's compile check passes a clean source, fails a device-code warning and a host call from a kernel, and skips without nvcc"

# Portability, simulated with a stub include directory in front of the toolkit's: a cuBLAS older than 12.5 (its
# version macro says 12.4, and the grouped GEMM it lacks is renamed so that any use fails to compile) and a machine
# without NCCL (DMMATH_NO_NCCL, as make defines it when it finds no nccl.h; a stub nccl.h that stops the compile proves
# it is not included). The two sources that depend on them compile, with the real flags and warnings as errors.
mkdir -p stub
cat >stub/cublas_v2.h <<'H'
#include_next <cublas_v2.h>
#undef CUBLAS_VERSION
#define CUBLAS_VERSION 120400
#define cublasGemmGroupedBatchedEx cublasGemmGroupedBatchedEx_is_absent_before_cublas_12_5
H
printf '#error "nccl.h included although DMMATH_NO_NCCL is defined"\n' >stub/nccl.h
real_flags=$(cd "$root" && env -u MAKEFLAGS -u MFLAGS -u MAKELEVEL make --no-print-directory -s nvcc-print-flags)
# The stub must bite: a source that calls the grouped GEMM does not compile against it.
printf '#include <cublas_v2.h>\nvoid *use = (void *)&cublasGemmGroupedBatchedEx;\n' >uses_grouped.cu
! "$nvcc" $real_flags -I"$tmp/stub" -c uses_grouped.cu -o uses_grouped.o >/dev/null 2>&1 ||
  fail "the stub cublas_v2.h does not hide cublasGemmGroupedBatchedEx: the simulation is broken"
for src in cuda_cvmm_gemm cuda_nccl; do
  (cd "$root" && "$nvcc" $real_flags -I"$tmp/stub" -DDMMATH_NO_NCCL -Werror all-warnings -Xcompiler -Werror \
    -c kernels/cuda/$src.cu -o "$tmp/$src.o") >$src.log 2>&1 || { cat $src.log; fail "$src.cu with cuBLAS 12.4 and no NCCL"; }
done
grep -q cublasGemmGroupedBatchedEx <<<"$(nm -C "$tmp/cuda_cvmm_gemm.o")" && fail "the cuBLAS 12.4 build still calls the grouped GEMM"
echo "ok: with a cuBLAS older than 12.5 and without nccl.h, cuda_cvmm_gemm.cu and cuda_nccl.cu compile (no grouped GEMM, no NCCL)"
