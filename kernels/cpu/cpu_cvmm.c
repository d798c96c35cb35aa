/* CPU reference: the routing plan and cvmm, the expert-selected vector-matrix multiply of the MoE layers (spec §4).
 *
 * Plan (routing_plan, once per routing decision): a stable counting sort of the M entries by expert gives perm
 * (sorted position m -> entry p), per-expert offsets, and inv (entry p -> sorted position). cvmm gathers rows into
 * contiguous per-expert blocks (unless the caller passes them in plan order already), runs each block as one GEMM
 * against its expert's weight, and scatters/reduces the results back in entry order (unless the caller takes them
 * in plan order). The order of every floating-point sum depends only on sel, never on the thread count, and not on
 * the row-order flags either: a sorted operand is exactly the block the gather would have made. The narrow flags
 * (CVMM_IN_NARROW, CVMM_OUT_NARROW) change nothing here: the CPU's narrow form is the exact fp32 tensor.
 */
#include <string.h>

#include "kernels/cpu/cpu_internal.h"
#include "pipeline/base/log.h"

#define PAR_MIN 32768

/* See backend_ops.h. A stable counting sort: count the entries of each expert, prefix-sum the counts into offsets, then
 * visit the entries in p order and give each the next free sorted position of its expert. */
void cpu_routing_plan(Backend *be, RoutingPlan *pl, const int32_t *sel, int M, int n_experts) {
    routing_plan_check_args(pl, M, n_experts);
    int32_t *offset = pl->offset;
    memset(offset, 0, ((size_t)n_experts + 1) * sizeof(int32_t));
    for (int p = 0; p < M; p++) {
        if (sel[p] < 0 || sel[p] >= n_experts)
            die("routing_plan: expert id %d at entry %d is outside [0, %d)", sel[p], p, n_experts);
        offset[sel[p] + 1]++;
    }
    for (int e = 0; e < n_experts; e++) offset[e + 1] += offset[e];
    /* stable scatter: entries are visited in p order, cursor[e] = next free sorted position of expert e */
    int32_t *cursor = cpu_scratch(be, SCRATCH_PLAN_CURSOR, (size_t)n_experts * sizeof(int32_t));
    memcpy(cursor, offset, (size_t)n_experts * sizeof(int32_t));
    for (int p = 0; p < M; p++) {
        int m = cursor[sel[p]]++;
        pl->perm[m] = p;
        pl->inv[p] = m;
    }
    int groups = 0;
    for (int e = 0; e < n_experts; e++)
        if (offset[e + 1] > offset[e]) pl->group_expert[groups++] = e;
    memcpy(pl->host_offset, offset, ((size_t)n_experts + 1) * sizeof(int32_t)); /* host memory here already */
    pl->M = M;
    pl->n_experts = n_experts;
    pl->n_groups = groups;
    pl->host_pending = 0;
}

/* per-expert GEMM descriptors for cpu_gemm_batch */
static CpuGemm *expert_gemms(Backend *be, int n_experts) {
    return cpu_scratch(be, SCRATCH_CVMM_GEMMS, (size_t)n_experts * sizeof(CpuGemm));
}

/* Xs[m, :] = X[perm[m] / in_div, :]  (rows gathered in sorted order) */
static void gather_rows(scalar_t *dst, const scalar_t *src, const int32_t *perm, int M, int div, int width) {
#pragma omp parallel for schedule(static) if ((size_t)M * width > PAR_MIN)
    for (int m = 0; m < M; m++)
        memcpy(dst + (size_t)m * width, src + (size_t)(perm[m] / div) * width, (size_t)width * sizeof(scalar_t));
}

void cpu_cvmm_forward(Backend *be, scalar_t *Y, const scalar_t *X, const scalar_t *W, const RoutingPlan *pl,
                      const scalar_t *w, int in_div, int out_div, int Kin, int Nout, int order,
                      const scalar_t *residual) {
    cvmm_forward_check_args(pl, in_div, out_div, w != NULL, order, Y, residual, Nout);
    const int M = pl->M, n_experts = pl->n_experts;
    if (M == 0) return;
    const scalar_t *Xs = X; /* [M, Kin] inputs in plan order */
    if (!(order & CVMM_IN_SORTED)) {
        scalar_t *buf = cpu_scratch(be, SCRATCH_CVMM_X_SORTED, (size_t)M * Kin * sizeof(scalar_t));
        gather_rows(buf, X, pl->perm, M, in_div, Kin);
        Xs = buf;
    }
    /* [M, Nout] outputs in plan order: the caller's Y itself when it takes them so */
    scalar_t *Ys =
        (order & CVMM_OUT_SORTED) ? Y : cpu_scratch(be, SCRATCH_CVMM_Y_SORTED, (size_t)M * Nout * sizeof(scalar_t));
    const int32_t *off = pl->offset;
    CpuGemm *g = expert_gemms(be, n_experts);
    for (int e = 0; e < n_experts; e++) /* Ys_e[c, Nout] = Xs_e[c, Kin] @ W[e][Kin, Nout] */
        g[e] = (CpuGemm){off[e + 1] - off[e], Nout, Kin, Xs + (size_t)off[e] * Kin, Kin, W + (size_t)e * Kin * Nout,
                         Nout, Ys + (size_t)off[e] * Nout, Nout};
    cpu_gemm_batch(0, 0, 1, 0, g, n_experts, be);
    if (order & CVMM_RELU_Y) cpu_relu_forward(be, Ys, Ys, (size_t)M * Nout); /* (no reduction: Ys holds Y's rows) */
    if (order & CVMM_OUT_SORTED) return;
    if (!w) { /* Y[p] = y_p */
#pragma omp parallel for schedule(static) if ((size_t)M * Nout > PAR_MIN)
        for (int p = 0; p < M; p++)
            memcpy(Y + (size_t)p * Nout, Ys + (size_t)pl->inv[p] * Nout, (size_t)Nout * sizeof(scalar_t));
        return;
    }
    int rows = M / out_div; /* Y[r] = sum_{j < out_div} w[p] y_p, p = r*out_div + j, summed in j order */
    if (residual) { /* then + residual[r]: each element's sum kept in a register, so residual may be Y itself */
#pragma omp parallel for schedule(static) if ((size_t)M * Nout > PAR_MIN)
        for (int r = 0; r < rows; r++) {
            scalar_t *yr = Y + (size_t)r * Nout;
            const scalar_t *rr = residual + (size_t)r * Nout;
#pragma omp simd
            for (int n = 0; n < Nout; n++) {
                scalar_t acc = 0;
                for (int j = 0; j < out_div; j++) {
                    int p = r * out_div + j;
                    acc += w[p] * Ys[(size_t)pl->inv[p] * Nout + n];
                }
                yr[n] = acc + rr[n];
            }
        }
        return;
    }
#pragma omp parallel for schedule(static) if ((size_t)M * Nout > PAR_MIN)
    for (int r = 0; r < rows; r++) {
        scalar_t *yr = Y + (size_t)r * Nout;
        for (int n = 0; n < Nout; n++) yr[n] = 0;
        for (int j = 0; j < out_div; j++) {
            int p = r * out_div + j;
            const scalar_t *yp = Ys + (size_t)pl->inv[p] * Nout;
            scalar_t wp = w[p];
#pragma omp simd
            for (int n = 0; n < Nout; n++) yr[n] += wp * yp[n];
        }
    }
}

/* See backend_ops.h (dX_base: each row of dX copied from it just before its terms are added; CVMM_DX_OVERWRITE: each
 * row zeroed there instead, so the sum starts at +0 as after a zero fill of the whole dX).
 * With Gu_p = dY[p/out_div] (with w) or dY[p] (without), Q_p = Gu_p @ W[sel[p]]^T:
 *   dX[p/in_div] += (w ? w[p] : 1) * Q_p,   dw[p] = <Q_p, X[p/in_div]> (= <dY[p/out_div], y_p>),
 *   dW[e] += Xs_e^T @ (w-scaled Gu)_e. */
void cpu_cvmm_backward(Backend *be, scalar_t *dX, scalar_t *dW, scalar_t *dw, const scalar_t *dY, const scalar_t *X,
                       const scalar_t *W, const RoutingPlan *pl, const scalar_t *w, int in_div, int out_div, int Kin,
                       int Nout, int order, const scalar_t *dX_base) {
    cvmm_backward_check_args(pl, in_div, out_div, w != NULL, order, dX, dX_base, Kin);
    if (dX_base == dX) dX_base = NULL; /* (the same as accumulating) */
    const int overwrite = (order & CVMM_DX_OVERWRITE) != 0;
    const int M = pl->M, n_experts = pl->n_experts;
    if (M == 0) return;
    int want_dw = (w != NULL && dw != NULL);
    int want_Q = (dX != NULL || want_dw);
    int want_Xs = (dW != NULL || want_dw);
    if (!want_Q && !dW) return;
    const int32_t *perm = pl->perm, *inv = pl->inv, *off = pl->offset;
    /* [M, Nout] output gradients in plan order: dY itself when it comes so (then w is NULL: never scaled below) */
    scalar_t *Gbuf = NULL;
    const scalar_t *Gs = dY;
    if (!(order & CVMM_OUT_SORTED)) {
        Gbuf = cpu_scratch(be, SCRATCH_CVMM_Y_SORTED, (size_t)M * Nout * sizeof(scalar_t));
        gather_rows(Gbuf, dY, perm, M, w ? out_div : 1, Nout);
        Gs = Gbuf;
    }
    const scalar_t *Xs = NULL; /* [M, Kin] inputs in plan order */
    if (want_Xs && (order & CVMM_IN_SORTED)) {
        Xs = X;
    } else if (want_Xs) {
        scalar_t *buf = cpu_scratch(be, SCRATCH_CVMM_X_SORTED, (size_t)M * Kin * sizeof(scalar_t));
        gather_rows(buf, X, perm, M, in_div, Kin);
        Xs = buf;
    }
    scalar_t *Qs = want_Q ? cpu_scratch(be, SCRATCH_CVMM_DX_SORTED, (size_t)M * Kin * sizeof(scalar_t)) : NULL;

    CpuGemm *g = expert_gemms(be, n_experts);
    if (want_Q) {
        for (int e = 0; e < n_experts; e++) /* Qs_e[c, Kin] = Gs_e[c, Nout] @ W[e]^T */
            g[e] = (CpuGemm){off[e + 1] - off[e], Kin, Nout, Gs + (size_t)off[e] * Nout, Nout,
                             W + (size_t)e * Kin * Nout, Nout, Qs + (size_t)off[e] * Kin, Kin};
        cpu_gemm_batch(0, 1, 1, 0, g, n_experts, be);
    }
    if (want_dw) {
#pragma omp parallel for schedule(static) if ((size_t)M * Kin > PAR_MIN)
        for (int p = 0; p < M; p++) {
            const scalar_t *qp = Qs + (size_t)inv[p] * Kin, *xp = Xs + (size_t)inv[p] * Kin;
            double acc = 0;
#pragma omp simd reduction(+ : acc)
            for (int i = 0; i < Kin; i++) acc += (double)qp[i] * xp[i];
            dw[p] = (scalar_t)acc;
        }
    }
    if (dW) {
        if (w) { /* w != NULL means Gs is the gathered copy Gbuf (cvmm_backward_check_args) */
#pragma omp parallel for schedule(static) if ((size_t)M * Nout > PAR_MIN)
            for (int m = 0; m < M; m++) {
                scalar_t wp = w[perm[m]];
                scalar_t *gm = Gbuf + (size_t)m * Nout;
#pragma omp simd
                for (int n = 0; n < Nout; n++) gm[n] *= wp;
            }
        }
        for (int e = 0; e < n_experts; e++) { /* dW[e][Kin, Nout] += Xs_e^T @ Gs_e (skipped for unused experts) */
            int c = off[e + 1] - off[e];
            g[e] = (CpuGemm){c ? Kin : 0, Nout, c, Xs + (size_t)off[e] * Kin, Kin, Gs + (size_t)off[e] * Nout, Nout,
                             dW + (size_t)e * Kin * Nout, Nout};
        }
        cpu_gemm_batch(1, 0, 1, 1, g, n_experts, be);
    }
    if (dX && (order & CVMM_DX_THROUGH_RELU)) {
        /* in_div = 1: dX row r (entry r, or plan row r when in sorted) = X_r > 0 ? 0 + coef Q : 0, the unfused
         * sequence's sum from a zeroed dX and relu_backward's select in one pass */
        const int sorted = (order & CVMM_IN_SORTED) != 0;
#pragma omp parallel for schedule(static) if ((size_t)M * Kin > PAR_MIN)
        for (int r = 0; r < M; r++) {
            const int p = sorted ? perm[r] : r;
            scalar_t *dxr = dX + (size_t)r * Kin;
            const scalar_t *xr = X + (size_t)r * Kin, *qp = Qs + (size_t)inv[p] * Kin;
            scalar_t wp = w ? w[p] : (scalar_t)1;
#pragma omp simd
            for (int i = 0; i < Kin; i++) {
                scalar_t acc = 0;
                acc += wp * qp[i];
                dxr[i] = xr[i] > 0 ? acc : 0;
            }
        }
    } else if (dX && (order & CVMM_IN_SORTED)) {
        /* dX[m] += (w ? w[perm[m]] : 1) Q_{perm[m]} (in_div = 1: one term per row) */
#pragma omp parallel for schedule(static) if ((size_t)M * Kin > PAR_MIN)
        for (int m = 0; m < M; m++) {
            scalar_t *dxm = dX + (size_t)m * Kin;
            const scalar_t *qm = Qs + (size_t)m * Kin;
            scalar_t wp = w ? w[perm[m]] : (scalar_t)1;
            if (dX_base) memcpy(dxm, dX_base + (size_t)m * Kin, (size_t)Kin * sizeof(scalar_t)); /* the sum's start */
            else if (overwrite) memset(dxm, 0, (size_t)Kin * sizeof(scalar_t));
#pragma omp simd
            for (int i = 0; i < Kin; i++) dxm[i] += wp * qm[i];
        }
    } else if (dX) {
        int rows = M / in_div; /* dX[r] += sum_{j < in_div} (w ? w[p] : 1) Q_p, p = r*in_div + j, in j order */
#pragma omp parallel for schedule(static) if ((size_t)M * Kin > PAR_MIN)
        for (int r = 0; r < rows; r++) {
            scalar_t *dxr = dX + (size_t)r * Kin;
            if (dX_base) memcpy(dxr, dX_base + (size_t)r * Kin, (size_t)Kin * sizeof(scalar_t)); /* the sum's start */
            else if (overwrite) memset(dxr, 0, (size_t)Kin * sizeof(scalar_t));
            for (int j = 0; j < in_div; j++) {
                int p = r * in_div + j;
                const scalar_t *qp = Qs + (size_t)inv[p] * Kin;
                scalar_t wp = w ? w[p] : (scalar_t)1;
#pragma omp simd
                for (int i = 0; i < Kin; i++) dxr[i] += wp * qp[i];
            }
        }
    }
}
