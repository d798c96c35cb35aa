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

/* Op implementations, one group per source file. */
/* cpu_dense.c */
void cpu_matmul(Backend *be, scalar_t *C, const scalar_t *A, const scalar_t *B, int M, int N, int K, int transA,
                int transB, scalar_t alpha, scalar_t beta);
void cpu_add_inplace(Backend *be, scalar_t *y, const scalar_t *x, size_t n);
void cpu_scale_inplace(Backend *be, scalar_t *y, scalar_t s, size_t n);
void cpu_add_bias(Backend *be, scalar_t *y, const scalar_t *bias, int N, int C);
void cpu_bias_backward(Backend *be, scalar_t *dbias, const scalar_t *dy, int N, int C);
void cpu_relu_forward(Backend *be, scalar_t *y, const scalar_t *x, size_t n);
void cpu_relu_backward(Backend *be, scalar_t *dx, const scalar_t *dy, const scalar_t *pre, size_t n);
void cpu_embedding_forward(Backend *be, scalar_t *h, const int32_t *tokens, const scalar_t *table, int N, int C);
void cpu_embedding_backward(Backend *be, scalar_t *dtable, const scalar_t *dh, const int32_t *tokens, int N, int C);
void cpu_layernorm_forward(Backend *be, scalar_t *y, scalar_t *mean, scalar_t *rstd, const scalar_t *x,
                           const scalar_t *w, const scalar_t *b, int N, int C, scalar_t eps);
void cpu_layernorm_backward(Backend *be, scalar_t *dx, scalar_t *dw, scalar_t *db, const scalar_t *dy,
                            const scalar_t *x, const scalar_t *w, const scalar_t *mean, const scalar_t *rstd, int N,
                            int C);
/* cpu_attention.c */
void cpu_rope(Backend *be, scalar_t *x, int B, int T, int H, int D, int n_rot, int pos_offset, scalar_t base,
              int inverse);
void cpu_attention_forward(Backend *be, scalar_t *out, scalar_t *lse, const scalar_t *q, const scalar_t *k,
                           const scalar_t *v, int B, int Tq, int Tk, int H, int D, scalar_t scale);
void cpu_attention_backward(Backend *be, scalar_t *dq, scalar_t *dk, scalar_t *dv, const scalar_t *dout,
                            const scalar_t *out, const scalar_t *lse, const scalar_t *q, const scalar_t *k,
                            const scalar_t *v, int B, int T, int H, int D, scalar_t scale);
/* cpu_routing.c */
void cpu_topk_select(Backend *be, int32_t *sel, const scalar_t *logits, const uint8_t *drop, const scalar_t *bias,
                     RouterKind score, int N, int G, int E, int k);
void cpu_expert_count(Backend *be, int64_t *counts, const int32_t *sel, const uint8_t *drop, const uint8_t *valid,
                      int N, int G, int E, int k);
void cpu_router_gates(Backend *be, scalar_t *gate, const scalar_t *logits, const int32_t *sel, const uint8_t *drop,
                      int N, int G, int E, int k, RouterKind kind, int renorm);
void cpu_router_gates_backward(Backend *be, scalar_t *dlogits, const scalar_t *dgate, const scalar_t *gate,
                               const scalar_t *logits, const int32_t *sel, const uint8_t *drop, int N, int G, int E,
                               int k, RouterKind kind, int renorm);
/* cpu_balance.c */
double cpu_switch_balance(Backend *be, scalar_t *dlogits, const scalar_t *logits, const int32_t *sel,
                          const uint8_t *valid, int B, int T, int G, int E, int k, scalar_t coef);
double cpu_entropy_reg(Backend *be, scalar_t *dlogits, const scalar_t *logits, const uint8_t *valid, int R, int B,
                       int T, int G, int E, scalar_t coef);
/* cpu_cvmm.c */
void cpu_routing_plan(Backend *be, RoutingPlan *plan, const int32_t *sel, int M, int n_experts);
void cpu_cvmm_forward(Backend *be, scalar_t *Y, const scalar_t *X, const scalar_t *W, const RoutingPlan *plan,
                      const scalar_t *w, int in_div, int out_div, int Kin, int Nout, int order);
void cpu_cvmm_backward(Backend *be, scalar_t *dX, scalar_t *dW, scalar_t *dw, const scalar_t *dY, const scalar_t *X,
                       const scalar_t *W, const RoutingPlan *plan, const scalar_t *w, int in_div, int out_div, int Kin,
                       int Nout, int order);
/* cpu_loss_optim.c */
double cpu_cross_entropy(Backend *be, scalar_t *dlogits, scalar_t *losses, const scalar_t *logits,
                         const int32_t *targets, int N, int V, scalar_t grad_scale);
void cpu_argmax_rows(Backend *be, int32_t *argmax, const scalar_t *x, int N, int V);
void cpu_adamw_step(Backend *be, scalar_t *p, const scalar_t *g, scalar_t *m, scalar_t *v, size_t n, double lr,
                    double beta1, double beta2, double eps, double wd, long t);
double cpu_sum_squares(Backend *be, const scalar_t *x, size_t n);
int cpu_all_finite(Backend *be, const scalar_t *x, size_t n);

#endif
