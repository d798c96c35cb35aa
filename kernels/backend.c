/* backend_create / backend_destroy: picks an implementation by name. */
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "kernels/backend.h"
#include "pipeline/base/log.h"

void backend_die_out_of_memory(const Backend *be, size_t bytes, const char *detail) {
    die("%s backend: out of %smemory allocating %.2f GiB (%zu bytes)%s%s%s%s", be->name,
        strcmp(be->name, "cuda") == 0 ? "device " : "", (double)bytes / (1024.0 * 1024.0 * 1024.0), bytes,
        be->alloc_purpose[0] ? " for " : "", be->alloc_purpose, detail && detail[0] ? ": " : "", detail ? detail : "");
}

void routing_plan_check_args(const RoutingPlan *pl, int M, int n_experts) {
    if (n_experts < 1) die("routing_plan: n_experts=%d must be at least 1", n_experts);
    if (M < 0) die("routing_plan: M=%d entries", M);
    if (M > pl->max_entries || n_experts > pl->max_experts)
        die("routing_plan: %d entries of %d experts do not fit the plan's memory (%d entries, %d experts)", M,
            n_experts, pl->max_entries, pl->max_experts);
    if (!pl->offset || !pl->group_expert || !pl->host_offset || (M > 0 && (!pl->perm || !pl->inv)))
        die("routing_plan: the plan's memory is not set (perm, inv, offset, group_expert, host_offset)");
}

/* The checks both directions share, then the ReLU flags' (forward: CVMM_RELU_Y; backward: CVMM_DX_THROUGH_RELU), the
 * overwrite flag's (backward: CVMM_DX_OVERWRITE) and the narrow ones'. */
static void cvmm_check_args(const char *op, const RoutingPlan *pl, int in_div, int out_div, int reduced, int order,
                            int forward, int has_dx) {
    if (pl->n_experts < 1) die("%s: the routing plan was not built (routing_plan)", op);
    int M = pl->M;
    if (M < 0 || in_div < 1 || M % in_div != 0) die("%s: M=%d is not a multiple of in_div=%d", op, M, in_div);
    if (reduced && (out_div < 1 || M % out_div != 0)) die("%s: M=%d is not a multiple of out_div=%d", op, M, out_div);
    if (order & ~(CVMM_IN_SORTED | CVMM_OUT_SORTED | CVMM_RELU_Y | CVMM_DX_THROUGH_RELU | CVMM_IN_NARROW |
                  CVMM_OUT_NARROW | CVMM_DX_OVERWRITE))
        die("%s: unknown order flags %#x", op, (unsigned)order);
    if ((order & CVMM_IN_SORTED) && in_div != 1) die("%s: inputs in plan order need in_div = 1 (got %d)", op, in_div);
    if ((order & CVMM_OUT_SORTED) && reduced) die("%s: outputs in plan order cannot be reduced (w given)", op);
    if (forward && (order & CVMM_DX_THROUGH_RELU)) die("%s: CVMM_DX_THROUGH_RELU is a backward flag", op);
    if (!forward && (order & CVMM_RELU_Y)) die("%s: CVMM_RELU_Y is a forward flag", op);
    if (forward && (order & CVMM_DX_OVERWRITE)) die("%s: CVMM_DX_OVERWRITE is a backward flag", op);
    if ((order & CVMM_DX_OVERWRITE) && !has_dx) die("%s: CVMM_DX_OVERWRITE needs dX", op);
    if ((order & CVMM_RELU_Y) && reduced) die("%s: CVMM_RELU_Y needs outputs without reduction (w NULL)", op);
    if (order & CVMM_DX_THROUGH_RELU) {
        if (in_div != 1) die("%s: CVMM_DX_THROUGH_RELU needs in_div = 1 (got %d)", op, in_div);
        if (!has_dx) die("%s: CVMM_DX_THROUGH_RELU needs dX", op);
    }
    if ((order & CVMM_IN_NARROW) && !(order & CVMM_IN_SORTED))
        die("%s: CVMM_IN_NARROW needs inputs in plan order (CVMM_IN_SORTED)", op);
    if ((order & CVMM_OUT_NARROW) && !(order & CVMM_OUT_SORTED))
        die("%s: CVMM_OUT_NARROW needs outputs in plan order (CVMM_OUT_SORTED)", op);
    if (!forward && (order & CVMM_IN_NARROW) && !(has_dx && (order & CVMM_DX_THROUGH_RELU)))
        die("%s: CVMM_IN_NARROW needs dX written through the ReLU (dX and CVMM_DX_THROUGH_RELU)", op);
}

/* An operand fused into an output (the forward's residual, the backward's dX_base, n elements each): the output
 * itself or a disjoint range, compared as addresses (uintptr_t: no pointer arithmetic across objects). */
static void check_fused_operand(const char *op, const char *name, const char *out_name, const scalar_t *out,
                                const scalar_t *operand, size_t n) {
    if (operand == out) return;
    const uintptr_t a = (uintptr_t)out, b = (uintptr_t)operand, bytes = n * sizeof(scalar_t);
    if (a < b + bytes && b < a + bytes)
        die("%s: %s overlaps %s without being it (only %s == %s or disjoint)", op, name, out_name, name, out_name);
}

void cvmm_forward_check_args(const RoutingPlan *pl, int in_div, int out_div, int reduced, int order,
                             const scalar_t *Y, const scalar_t *residual, int Nout) {
    cvmm_check_args("cvmm_forward", pl, in_div, out_div, reduced, order, 1, 1);
    if (!residual) return;
    if (!reduced) die("cvmm_forward: a residual needs reduction weights w (it is added after the weighted sum)");
    check_fused_operand("cvmm_forward", "residual", "Y", Y, residual, (size_t)(pl->M / out_div) * (size_t)Nout);
}

void cvmm_backward_check_args(const RoutingPlan *pl, int in_div, int out_div, int reduced, int order,
                              const scalar_t *dX, const scalar_t *dX_base, int Kin) {
    cvmm_check_args("cvmm_backward", pl, in_div, out_div, reduced, order, 0, dX != NULL);
    if (!dX_base) return;
    if (!dX) die("cvmm_backward: dX_base needs dX");
    if (order & CVMM_DX_OVERWRITE)
        die("cvmm_backward: dX_base cannot be combined with CVMM_DX_OVERWRITE (the sum starts at one of them)");
    if (order & CVMM_DX_THROUGH_RELU)
        die("cvmm_backward: dX_base cannot be combined with CVMM_DX_THROUGH_RELU (which overwrites dX)");
    const int rows = (order & CVMM_IN_SORTED) ? pl->M : pl->M / in_div;
    check_fused_operand("cvmm_backward", "dX_base", "dX", dX, dX_base, (size_t)rows * (size_t)Kin);
}

/* Whether [a, a + na) and [b, b + nb) (scalars) share memory, compared as addresses (no pointer arithmetic across
 * objects). */
static int scalars_overlap(const scalar_t *a, size_t na, const scalar_t *b, size_t nb) {
    const uintptr_t x = (uintptr_t)a, y = (uintptr_t)b;
    return na && nb && x < y + nb * sizeof(scalar_t) && y < x + na * sizeof(scalar_t);
}

void linear_backward_check_args(const scalar_t *dX, const scalar_t *X, const LinearTerm *terms, int n_terms, int N,
                                int C) {
    if (n_terms < 1 || n_terms > LINEAR_TERMS_MAX)
        die("linear_backward: n_terms=%d (1 to %d maps of one input)", n_terms, LINEAR_TERMS_MAX);
    if (N < 0 || C < 0) die("linear_backward: N=%d, C=%d", N, C);
    if (!dX || !X || !terms) die("linear_backward: dX, X and the terms must be given");
    const size_t nX = (size_t)N * (size_t)C;
    if (scalars_overlap(dX, nX, X, nX)) die("linear_backward: dX overlaps X");
    for (int i = 0; i < n_terms; i++) {
        const LinearTerm *t = &terms[i];
        if (t->m < 1) die("linear_backward: term %d has m=%d (at least 1)", i, t->m);
        if (!t->dy || !t->w) die("linear_backward: term %d lacks its dy or its w", i);
        const RopeSpec *r = t->rope;
        if (r && ((long)r->B * r->T != N || (long)r->H * r->D != t->m || r->n_rot < 0 || r->n_rot % 2 ||
                  r->n_rot > r->D))
            die("linear_backward: term %d's rope [B=%d, T=%d, H=%d, D=%d] n_rot=%d does not fit its dy [N=%d, m=%d] "
                "(B T = N, H D = m, n_rot even in [0, D])",
                i, r->B, r->T, r->H, r->D, r->n_rot, N, t->m);
        for (int j = 0; r && j < i; j++)
            if (terms[j].rope && (terms[j].rope->n_rot != r->n_rot || terms[j].rope->base != r->base))
                die("linear_backward: terms %d and %d rotate with different n_rot or base (one rotation per call)", j, i);
        const size_t ny = (size_t)N * (size_t)t->m, nw = (size_t)t->m * (size_t)C;
        if (scalars_overlap(dX, nX, t->dy, ny) || scalars_overlap(dX, nX, t->w, nw) ||
            scalars_overlap(dX, nX, t->dw, t->dw ? nw : 0))
            die("linear_backward: dX overlaps term %d's dy, w or dw", i);
        if (!t->dw) continue;
        if (scalars_overlap(t->dw, nw, X, nX)) die("linear_backward: term %d's dw overlaps X", i);
        for (int j = 0; j < n_terms; j++) {
            const LinearTerm *u = &terms[j];
            const size_t uy = (size_t)N * (size_t)u->m, uw = (size_t)u->m * (size_t)C;
            if (scalars_overlap(t->dw, nw, u->dy, uy) || scalars_overlap(t->dw, nw, u->w, uw) ||
                (j != i && scalars_overlap(t->dw, nw, u->dw, u->dw ? uw : 0)))
                die("linear_backward: term %d's dw overlaps term %d's dy, w or dw", i, j);
        }
    }
}

void linear_backward_matmuls(Backend *be, scalar_t *dX, const scalar_t *X, const LinearTerm *terms,
                             const scalar_t *const *dy, int n_terms, int N, int C, scalar_t beta) {
    for (int i = 0; i < n_terms; i++)
        if (terms[i].dw) be->matmul(be, terms[i].dw, dy[i], X, terms[i].m, C, N, 1, 0, terms[i].alpha, 1);
    for (int i = 0; i < n_terms; i++)
        be->matmul(be, dX, dy[i], terms[i].w, N, C, terms[i].m, 0, 0, terms[i].alpha, i ? 1 : beta);
}

bool backend_name_known(const char *name) { return name && (strcmp(name, "cpu") == 0 || strcmp(name, "cuda") == 0); }

Backend *backend_create(const char *name, char *err, size_t errlen) {
    if (err && errlen) err[0] = '\0';
    if (!name) {
        set_err(err, errlen, "no backend name given (expected 'cpu' or 'cuda')");
        return NULL;
    }
    if (strcmp(name, "cpu") == 0) return backend_cpu_create();
    if (strcmp(name, "cuda") == 0) {
#ifdef HAVE_CUDA
        return backend_cuda_create(err, errlen); /* NULL with "no usable CUDA GPU: <reason>" when none works */
#else
        set_err(err, errlen, "backend '%s' is not available: this build has no CUDA support", name);
        return NULL;
#endif
    }
    set_err(err, errlen, "unknown backend '%s' (expected 'cpu' or 'cuda')", name); /* BACKEND_NAMES */
    return NULL;
}

void backend_destroy(Backend *be) {
    if (be && be->destroy) be->destroy(be);
}
