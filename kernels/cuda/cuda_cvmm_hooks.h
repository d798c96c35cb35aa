/* C entry points into the CUDA cvmm internals, for the CUDA unit tests (tests/unit/cuda_backend_ops.c): the device
 * routing plan's chunk size and the GEMM path a backend uses. Not part of the Backend interface. */
#ifndef KERNELS_CUDA_CUDA_CVMM_HOOKS_H
#define KERNELS_CUDA_CUDA_CVMM_HOOKS_H

#include <stddef.h>
#include <stdint.h>

/* Entries per chunk of the device routing plan (one thread block each); tests size M to span several chunks. */
#define CUDA_CVMM_PLAN_CHUNK 1024

#ifdef __cplusplus
extern "C" {
#endif

#include "kernels/backend.h" /* C declarations: included with C linkage, as cuda_common.cuh does */

/* The expert-GEMM path cvmm takes on this backend for fp32 (bf16 = 0) or bf16 operands: "loop", "grouped" or "mma"
 * (the tensor-core kernels, bf16 operands under DMMATH_CUDA_CVMM=mma). Under
 * DMMATH_CUDA_CVMM=auto this runs the one-time probe if it has not run yet. */
const char *cuda_cvmm_path(Backend *be, int bf16);

/* 1 when cuBLAS does not take the grouped call (cublasGemmGroupedBatchedEx) for this operand type at all, with its
 * status in why; 0 when it takes it (whether it then computes the right thing is the tests' question). Runs the probe
 * anew, whatever DMMATH_CUDA_CVMM says. The tests run the forced grouped path only where cuBLAS takes it: a cuBLAS
 * that refuses bf16 A/B with an fp32 C (an H100's CUDA 13.0 cuBLAS does) is recorded, not a crash. */
int cuda_cvmm_grouped_refused(Backend *be, int bf16, char *why, size_t whylen);

#ifdef __cplusplus
}
#endif

#endif
