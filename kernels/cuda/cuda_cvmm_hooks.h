/* C entry points into the CUDA cvmm internals, for the CUDA unit tests (tests/unit/cuda_backend_vs_cpu.c): the device
 * routing plan and the GEMM path a backend uses. Not part of the Backend interface. */
#ifndef KERNELS_CUDA_CUDA_CVMM_HOOKS_H
#define KERNELS_CUDA_CUDA_CVMM_HOOKS_H

#include <stdint.h>

/* Entries per chunk of the device routing plan (one thread block each); tests size M to span several chunks. */
#define CUDA_CVMM_PLAN_CHUNK 1024

#ifdef __cplusplus
extern "C" {
#endif

#include "kernels/backend.h" /* C declarations: included with C linkage, as cuda_common.cuh does */

/* Builds the routing plan of the device ids sel[M] (values in [0, n_experts)) as cvmm does and copies it to the host:
 * perm[M] (sorted position -> entry), inv[M] (entry -> sorted position), offset[n_experts + 1] (expert e's rows are
 * the sorted positions [offset[e], offset[e+1])) and, if group_expert is not NULL, the non-empty experts in increasing
 * order into group_expert[0 .. return value). An id outside [0, n_experts) dies with cvmm's error message. */
int cuda_cvmm_plan_to_host(Backend *be, const int32_t *sel, int M, int n_experts, int32_t *perm, int32_t *inv,
                           int32_t *offset, int32_t *group_expert);

/* The expert-GEMM path cvmm takes on this backend for fp32 (bf16 = 0) or bf16 operands: "loop" or "grouped". Under
 * DMMATH_CUDA_CVMM=auto this runs the one-time probe if it has not run yet. */
const char *cuda_cvmm_path(Backend *be, int bf16);

#ifdef __cplusplus
}
#endif

#endif
