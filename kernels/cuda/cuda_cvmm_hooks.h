/* C entry points into the CUDA cvmm internals, for the CUDA unit tests (tests/unit/cuda_backend_ops.c): the device
 * routing plan's chunk size and the GEMM path a backend uses. Not part of the Backend interface. */
#ifndef KERNELS_CUDA_CUDA_CVMM_HOOKS_H
#define KERNELS_CUDA_CUDA_CVMM_HOOKS_H

#include <stdint.h>

/* Entries per chunk of the device routing plan (one thread block each); tests size M to span several chunks. */
#define CUDA_CVMM_PLAN_CHUNK 1024

#ifdef __cplusplus
extern "C" {
#endif

#include "kernels/backend.h" /* C declarations: included with C linkage, as cuda_common.cuh does */

/* The expert-GEMM path cvmm takes on this backend for fp32 (bf16 = 0) or bf16 operands: "loop" or "grouped". Under
 * DMMATH_CUDA_CVMM=auto this runs the one-time probe if it has not run yet. */
const char *cuda_cvmm_path(Backend *be, int bf16);

#ifdef __cplusplus
}
#endif

#endif
