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

/* Scratch: CPU_SCRATCH_BUFFERS buffers grown on demand and shared by every op (ops are called from one thread at a
 * time, and nothing in a buffer outlives the op call that filled it). Each op names the buffers it uses after what
 * they hold, below: the names one op uses are different buffers (alive at the same time), names of different ops may
 * be the same buffer. Shapes are in the op's own dimensions; "threads" = omp_get_max_threads(). */
enum { CPU_SCRATCH_BUFFERS = 10 };

typedef struct {
    void *buf[CPU_SCRATCH_BUFFERS];
    size_t cap[CPU_SCRATCH_BUFFERS];
} CpuImpl;

/* cpu_gemm_batch (cpu_dense.c) runs inside every op that multiplies matrices, so no other op uses its buffer. */
enum { SCRATCH_GEMM_TILES = 6 /* GemmTile[n_tiles]: the tiles of all the batch's GEMMs */ };
/* routing_plan (cpu_cvmm.c) */
enum { SCRATCH_PLAN_CURSOR = 7 /* int32_t[n_experts]: the next free sorted position of each expert */ };
/* cvmm_forward, cvmm_backward (cpu_cvmm.c); M routed rows, in plan (expert-sorted) order */
enum {
    SCRATCH_CVMM_X_SORTED = 3,  /* scalar_t[M, Kin]: the inputs X gathered in plan order */
    SCRATCH_CVMM_Y_SORTED = 4,  /* scalar_t[M, Nout]: forward outputs, or backward output gradients, in plan order */
    SCRATCH_CVMM_DX_SORTED = 5, /* scalar_t[M, Kin]: backward Q = dY_p @ W[e]^T in plan order */
    SCRATCH_CVMM_GEMMS = 8,     /* CpuGemm[n_experts]: the per-expert GEMMs handed to cpu_gemm_batch */
};
/* cross_entropy, sum_squares (cpu_loss_optim.c) */
enum {
    SCRATCH_XENT_ROW_LOSS = 0, /* double[N]: each row's loss, summed in row order afterwards */
    SCRATCH_XENT_EXPS = 1,     /* scalar_t[threads, V]: each thread's exp(logit - row max) */
    SCRATCH_SUMSQ_PARTIAL = 0, /* double[n_chunks]: each fixed-size chunk's sum of squares, summed serially */
};
/* rope, attention_forward, attention_backward (cpu_attention.c) */
enum {
    SCRATCH_ROPE_COS = 0,    /* scalar_t[T, n_rot/2]: cos(angle) per position and frequency */
    SCRATCH_ROPE_SIN = 1,    /* scalar_t[T, n_rot/2]: sin(angle) */
    SCRATCH_ATTN_SCORES = 0, /* scalar_t[threads, QBLOCK * Tk]: each thread's score block P (backward: P and dP,
                              * twice as long) */
};
/* entropy_reg, switch_balance (cpu_balance.c) */
enum {
    SCRATCH_EREG_COUNT = 0,      /* double[B]: R * valid positions of each sequence */
    SCRATCH_EREG_LOG_PBAR = 1,   /* double[B, G, E]: log of the mean routing softmax per sequence and group */
    SCRATCH_EREG_ENTROPY = 2,    /* double[B, G]: entropy of that mean */
    SCRATCH_SWB_LOAD = 0,        /* double[G, E]: load fraction f (share of selections per expert) */
    SCRATCH_SWB_MEAN_PROB = 1,   /* double[G, E]: mean routing probability P */
    SCRATCH_BALANCE_SOFTMAX = 3, /* double[threads, E]: each thread's softmax row (both ops) */
};

/* Returns scratch buffer `slot` (one of the names above) holding at least `bytes` (contents undefined). Dies on
 * allocation failure. */
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
