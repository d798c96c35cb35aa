#!/usr/bin/env bash
# e2e-lane: private (it writes only under its own temporary directories, so it may run beside other tests)
# test_cuda_inspect.sh (bin/inspect on the CUDA backend against the CPU backend and the PyTorch twin, every fixture,
# fp32 and bf16) with the kernel paths the default does not take on these short fixtures: the cuBLAS attention
# (DMMATH_CUDA_ATTENTION=gemm; auto picks the fused kernels below 64 query rows) with the per-expert GEMM loop of cvmm
# (DMMATH_CUDA_CVMM=loop; auto picks the grouped GEMM where its probe passes), then the flash attention kernels
# (DMMATH_CUDA_ATTENTION=flash: bf16; fp32 takes auto's path). Same tolerances, same skips.
set -u
cd "$(dirname "$0")/../.."
DMMATH_CUDA_ATTENTION=gemm DMMATH_CUDA_CVMM=loop tests/e2e/test_cuda_inspect.sh || exit $?
DMMATH_CUDA_ATTENTION=flash exec tests/e2e/test_cuda_inspect.sh
