/* Private helpers shared by the CPU backend's source files (the .c files of kernels/cpu). Not part of the backend contract.
 *
 * Determinism rule for every op here: the result must not depend on the number of OpenMP threads. Loops are
 * parallelised over independent outputs (rows, columns, experts, (b,h) pairs); every reduction runs in a fixed order
 * inside one iteration, or over fixed-size chunks whose partial sums are combined serially. Resuming a training run
 * bit-identically relies on this.
 */
#ifndef KERNELS_CPU_CPU_INTERNAL_H
#define KERNELS_CPU_CPU_INTERNAL_H

#include <math.h>
#include <stddef.h>
#include <stdint.h>

#include "kernels/backend.h"

/* Scalar math matching scalar_t (float maths in the f32 build, double in the f64 gradient-check build). */
#ifdef SCALAR_F64
#define sc_exp exp
#define sc_log log
#define sc_sqrt sqrt
#define sc_cos cos
#define sc_sin sin
#else
#define sc_exp expf
#define sc_log logf
#define sc_sqrt sqrtf
#define sc_cos cosf
#define sc_sin sinf
#endif

/* Backend-private state: scratch buffers grown on demand (ops are called from one thread at a time). */
typedef struct {
    void *buf[10];
    size_t cap[10];
} CpuImpl;

/* Scratch slots (each op uses distinct slots for buffers alive at the same time). */
enum { SCRATCH_A = 0, SCRATCH_B, SCRATCH_C, SCRATCH_D, SCRATCH_E, SCRATCH_F, SCRATCH_G, SCRATCH_H, SCRATCH_I, SCRATCH_J };
/* SCRATCH_G is reserved for cpu_gemm_batch's tile list, SCRATCH_I for cvmm's per-expert GEMM descriptors. */

/* Returns scratch slot `slot` holding at least `bytes` (contents undefined). Dies on allocation failure. */
void *cpu_scratch(Backend *be, int slot, size_t bytes);

/* C[M,N] = alpha * op(A) @ op(B) + beta * C with explicit leading dimensions (row-major), via BLAS.
 * All CPU parallelism is OpenMP: cpu_gemm_batch splits the C of every GEMM into fixed tiles and computes all tiles in
 * ONE parallel loop with single-threaded BLAS calls (OpenBLAS's own threads would compete with the OpenMP threads
 * for the cores and spin between calls; one loop for a batch of per-expert GEMMs keeps the number of barriers low).
 * The tiling depends only on the shapes: results do not depend on the thread count.
 * cpu_gemm_serial is one BLAS call, for use inside parallel loops. */
typedef struct {
    int M, N, K;
    const scalar_t *A;
    int lda;
    const scalar_t *B;
    int ldb;
    scalar_t *C;
    int ldc;
} CpuGemm;
void cpu_gemm_batch(int transA, int transB, scalar_t alpha, scalar_t beta, const CpuGemm *gemms, int n_gemms,
                    Backend *be);
void cpu_gemm_serial(int transA, int transB, int M, int N, int K, scalar_t alpha, const scalar_t *A, int lda,
                     const scalar_t *B, int ldb, scalar_t beta, scalar_t *C, int ldc);

/* y[j] = exp(x[j] - shift) for j < n (y may alias x), vectorised; returns sum_j y[j] (double, fixed order). */
double cpu_exp_shift(scalar_t *y, const scalar_t *x, scalar_t shift, int n);

/* Parallel loops that call BLAS themselves (one GEMM per thread) first switch OpenBLAS to one thread, so that the
 * threads do not oversubscribe the cores; begin returns the previous setting for end to restore. */
int cpu_blas_single_begin(void);
void cpu_blas_single_end(int previous);

/* Numerically safe logistic sigmoid. */
static inline scalar_t cpu_sigmoid(scalar_t x) {
    if (x >= 0) return (scalar_t)1 / ((scalar_t)1 + sc_exp(-x));
    scalar_t e = sc_exp(x);
    return e / ((scalar_t)1 + e);
}

/* The op implementations, cpu_<op> for every op of kernels/backend_ops.h (cpu_backend.c's table points at them).
 * The ops by file: cpu_dense.c (matmul, elementwise, embedding, LayerNorm), cpu_attention.c (RoPE, attention),
 * cpu_routing.c (selection, gates, expert counts), cpu_balance.c (the balancing losses), cpu_cvmm.c (the routing
 * plan, cvmm), cpu_loss_optim.c (cross-entropy, argmax, optimizer, norms). */
#define BACKEND_OP(ret, name, params) ret cpu_##name params;
#include "kernels/backend_ops.h"
#undef BACKEND_OP

#endif
