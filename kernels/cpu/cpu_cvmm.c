/* CPU reference: cvmm, the expert-selected vector-matrix multiply of the MoE layers (spec §4).
 *
 * Plan: a stable counting sort of the M entries by expert gives perm (sorted position m -> entry p), per-expert
 * offsets, and inv (entry p -> sorted position). Rows are gathered into contiguous per-expert blocks, each block is
 * one GEMM against its expert's weight, and results are scattered/reduced back in entry order. The order of every
 * floating-point sum depends only on sel, never on the thread count.
 */
#include <string.h>

#include "kernels/cpu/cpu_internal.h"
#include "pipeline/log.h"

#define PAR_MIN 32768

typedef struct {
    int32_t *perm;   /* [M] sorted position -> entry p (ascending expert, entries of one expert in p order) */
    int32_t *inv;    /* [M] entry p -> sorted position */
    int32_t *offset; /* [n_experts + 1] start of each expert's block in sorted order */
} CvmmPlan;

static CvmmPlan build_plan(Backend *be, const char *op, const int32_t *sel, int M, int n_experts) {
    CvmmPlan pl;
    pl.perm = cpu_scratch(be, SCRATCH_A, (size_t)M * sizeof(int32_t));
    pl.inv = cpu_scratch(be, SCRATCH_B, (size_t)M * sizeof(int32_t));
    pl.offset = cpu_scratch(be, SCRATCH_C, ((size_t)n_experts + 1) * sizeof(int32_t));
    memset(pl.offset, 0, ((size_t)n_experts + 1) * sizeof(int32_t));
    for (int p = 0; p < M; p++) {
        if (sel[p] < 0 || sel[p] >= n_experts)
            die("%s: expert id %d at entry %d is outside [0, %d)", op, sel[p], p, n_experts);
        pl.offset[sel[p] + 1]++;
    }
    for (int e = 0; e < n_experts; e++) pl.offset[e + 1] += pl.offset[e];
    /* stable scatter: entries are visited in p order, cursor[e] = next free sorted position of expert e */
    int32_t *cursor = cpu_scratch(be, SCRATCH_H, (size_t)n_experts * sizeof(int32_t));
    memcpy(cursor, pl.offset, (size_t)n_experts * sizeof(int32_t));
    for (int p = 0; p < M; p++) {
        int m = cursor[sel[p]]++;
        pl.perm[m] = p;
        pl.inv[p] = m;
    }
    return pl;
}

/* per-expert GEMM descriptors for cpu_gemm_batch */
static CpuGemm *expert_gemms(Backend *be, int n_experts) {
    return cpu_scratch(be, SCRATCH_I, (size_t)n_experts * sizeof(CpuGemm));
}

static void check_shape(const char *op, int M, int in_div, int out_div, int reduced) {
    if (M < 0 || in_div < 1 || M % in_div != 0) die("%s: M=%d is not a multiple of in_div=%d", op, M, in_div);
    if (reduced && (out_div < 1 || M % out_div != 0)) die("%s: M=%d is not a multiple of out_div=%d", op, M, out_div);
}

/* Xs[m, :] = X[perm[m] / in_div, :]  (rows gathered in sorted order) */
static void gather_rows(scalar_t *dst, const scalar_t *src, const int32_t *perm, int M, int div, int width) {
#pragma omp parallel for schedule(static) if ((size_t)M * width > PAR_MIN)
    for (int m = 0; m < M; m++)
        memcpy(dst + (size_t)m * width, src + (size_t)(perm[m] / div) * width, (size_t)width * sizeof(scalar_t));
}

void cpu_cvmm_forward(Backend *be, scalar_t *Y, const scalar_t *X, const scalar_t *W, const int32_t *sel,
                      const scalar_t *w, int M, int in_div, int out_div, int n_experts, int Kin, int Nout) {
    check_shape("cvmm_forward", M, in_div, out_div, w != NULL);
    if (M == 0) return;
    CvmmPlan pl = build_plan(be, "cvmm_forward", sel, M, n_experts);
    scalar_t *Xs = cpu_scratch(be, SCRATCH_D, (size_t)M * Kin * sizeof(scalar_t));  /* [M, Kin] sorted inputs */
    scalar_t *Ys = cpu_scratch(be, SCRATCH_E, (size_t)M * Nout * sizeof(scalar_t)); /* [M, Nout] sorted outputs */
    gather_rows(Xs, X, pl.perm, M, in_div, Kin);
    CpuGemm *g = expert_gemms(be, n_experts);
    for (int e = 0; e < n_experts; e++) /* Ys_e[c, Nout] = Xs_e[c, Kin] @ W[e][Kin, Nout] */
        g[e] = (CpuGemm){pl.offset[e + 1] - pl.offset[e], Nout, Kin, Xs + (size_t)pl.offset[e] * Kin, Kin,
                         W + (size_t)e * Kin * Nout, Nout, Ys + (size_t)pl.offset[e] * Nout, Nout};
    cpu_gemm_batch(0, 0, 1, 0, g, n_experts, be);
    if (!w) { /* Y[p] = y_p */
#pragma omp parallel for schedule(static) if ((size_t)M * Nout > PAR_MIN)
        for (int p = 0; p < M; p++)
            memcpy(Y + (size_t)p * Nout, Ys + (size_t)pl.inv[p] * Nout, (size_t)Nout * sizeof(scalar_t));
        return;
    }
    int rows = M / out_div; /* Y[r] = sum_{j < out_div} w[p] y_p, p = r*out_div + j, summed in j order */
#pragma omp parallel for schedule(static) if ((size_t)M * Nout > PAR_MIN)
    for (int r = 0; r < rows; r++) {
        scalar_t *yr = Y + (size_t)r * Nout;
        for (int n = 0; n < Nout; n++) yr[n] = 0;
        for (int j = 0; j < out_div; j++) {
            int p = r * out_div + j;
            const scalar_t *yp = Ys + (size_t)pl.inv[p] * Nout;
            scalar_t wp = w[p];
#pragma omp simd
            for (int n = 0; n < Nout; n++) yr[n] += wp * yp[n];
        }
    }
}

/* See backend.h. With Gu_p = dY[p/out_div] (with w) or dY[p] (without), Q_p = Gu_p @ W[sel[p]]^T:
 *   dX[p/in_div] += (w ? w[p] : 1) * Q_p,   dw[p] = <Q_p, X[p/in_div]> (= <dY[p/out_div], y_p>),
 *   dW[e] += Xs_e^T @ (w-scaled Gu)_e. */
void cpu_cvmm_backward(Backend *be, scalar_t *dX, scalar_t *dW, scalar_t *dw, const scalar_t *dY, const scalar_t *X,
                       const scalar_t *W, const int32_t *sel, const scalar_t *w, int M, int in_div, int out_div,
                       int n_experts, int Kin, int Nout) {
    check_shape("cvmm_backward", M, in_div, out_div, w != NULL);
    if (M == 0) return;
    int want_dw = (w != NULL && dw != NULL);
    int want_Q = (dX != NULL || want_dw);
    int want_Xs = (dW != NULL || want_dw);
    if (!want_Q && !dW) return;
    CvmmPlan pl = build_plan(be, "cvmm_backward", sel, M, n_experts);
    scalar_t *Gs = cpu_scratch(be, SCRATCH_E, (size_t)M * Nout * sizeof(scalar_t)); /* [M, Nout] sorted grads */
    scalar_t *Xs = want_Xs ? cpu_scratch(be, SCRATCH_D, (size_t)M * Kin * sizeof(scalar_t)) : NULL; /* [M, Kin] */
    scalar_t *Qs = want_Q ? cpu_scratch(be, SCRATCH_F, (size_t)M * Kin * sizeof(scalar_t)) : NULL;  /* [M, Kin] */

    gather_rows(Gs, dY, pl.perm, M, w ? out_div : 1, Nout);
    if (want_Xs) gather_rows(Xs, X, pl.perm, M, in_div, Kin);
    CpuGemm *g = expert_gemms(be, n_experts);
    if (want_Q) {
        for (int e = 0; e < n_experts; e++) /* Qs_e[c, Kin] = Gs_e[c, Nout] @ W[e]^T */
            g[e] = (CpuGemm){pl.offset[e + 1] - pl.offset[e], Kin, Nout, Gs + (size_t)pl.offset[e] * Nout, Nout,
                             W + (size_t)e * Kin * Nout, Nout, Qs + (size_t)pl.offset[e] * Kin, Kin};
        cpu_gemm_batch(0, 1, 1, 0, g, n_experts, be);
    }
    if (want_dw) {
#pragma omp parallel for schedule(static) if ((size_t)M * Kin > PAR_MIN)
        for (int p = 0; p < M; p++) {
            const scalar_t *qp = Qs + (size_t)pl.inv[p] * Kin, *xp = Xs + (size_t)pl.inv[p] * Kin;
            double acc = 0;
#pragma omp simd reduction(+ : acc)
            for (int i = 0; i < Kin; i++) acc += (double)qp[i] * xp[i];
            dw[p] = (scalar_t)acc;
        }
    }
    if (dW) {
        if (w) {
#pragma omp parallel for schedule(static) if ((size_t)M * Nout > PAR_MIN)
            for (int m = 0; m < M; m++) {
                scalar_t wp = w[pl.perm[m]];
                scalar_t *g = Gs + (size_t)m * Nout;
#pragma omp simd
                for (int n = 0; n < Nout; n++) g[n] *= wp;
            }
        }
        for (int e = 0; e < n_experts; e++) { /* dW[e][Kin, Nout] += Xs_e^T @ Gs_e (skipped for unused experts) */
            int c = pl.offset[e + 1] - pl.offset[e];
            g[e] = (CpuGemm){c ? Kin : 0, Nout, c, Xs + (size_t)pl.offset[e] * Kin, Kin, Gs + (size_t)pl.offset[e] * Nout,
                             Nout, dW + (size_t)e * Kin * Nout, Nout};
        }
        cpu_gemm_batch(1, 0, 1, 1, g, n_experts, be);
    }
    if (dX) {
        int rows = M / in_div; /* dX[r] += sum_{j < in_div} (w ? w[p] : 1) Q_p, p = r*in_div + j, in j order */
#pragma omp parallel for schedule(static) if ((size_t)M * Kin > PAR_MIN)
        for (int r = 0; r < rows; r++) {
            scalar_t *dxr = dX + (size_t)r * Kin;
            for (int j = 0; j < in_div; j++) {
                int p = r * in_div + j;
                const scalar_t *qp = Qs + (size_t)pl.inv[p] * Kin;
                scalar_t wp = w ? w[p] : (scalar_t)1;
#pragma omp simd
                for (int i = 0; i < Kin; i++) dxr[i] += wp * qp[i];
            }
        }
    }
}
