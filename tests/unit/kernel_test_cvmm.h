/* The four cvmm call patterns of kernels/backend_ops.h (spec §4.3) and a dense oracle written from each pattern's meaning
 * (out[t,j] = x[t] @ W[I[t,j]], plus its closed-form backward of spec §4.4), shared by the f32, f64 and CUDA tests.
 * Row mapping per entry p = (t*H + h)*K + j of sel[N,H,K] (H = 1 for the FFN patterns):
 *   FFN up  : input row t,        output row p       (no reduction)
 *   FFN down: input row p,        output row t       (w reduces the K slots)
 *   Att V   : input row t,        output row t*H+h   (w reduces the KA slots)
 *   Att O   : input row t*H+h,    output row t       (w reduces heads and slots) */
#ifndef TESTS_UNIT_KERNEL_TEST_CVMM_H
#define TESTS_UNIT_KERNEL_TEST_CVMM_H

#include "tests/unit/kernel_test_util.h"

typedef enum { PAT_FFN_UP = 0, PAT_FFN_DOWN, PAT_ATT_V, PAT_ATT_O } CvmmPattern;
static const char *const cvmm_pattern_name[] = {"ffn_up", "ffn_down", "att_v", "att_o"};

typedef struct {
    CvmmPattern pat;
    int N, H, K;   /* tokens, heads (1 for FFN), slots per (token, head) */
    int E;         /* n_experts (global ids; for attention h*EA + e) */
    int Kin, Nout;
    int reduce;    /* 1: pass the pattern's w (FFN up never reduces); 0: w = NULL, un-reduced output [M, Nout] */
} CvmmCase;

static inline int cvmm_M(const CvmmCase *c) { return c->N * c->H * c->K; }
static inline int cvmm_in_div(const CvmmCase *c) {
    switch (c->pat) {
    case PAT_FFN_UP: return c->K;
    case PAT_FFN_DOWN: return 1;
    case PAT_ATT_V: return c->H * c->K;
    default: return c->K;
    }
}
static inline int cvmm_out_div(const CvmmCase *c) {
    switch (c->pat) {
    case PAT_FFN_UP: return 1;
    case PAT_FFN_DOWN: return c->K;
    case PAT_ATT_V: return c->K;
    default: return c->H * c->K;
    }
}
static inline int cvmm_uses_w(const CvmmCase *c) { return c->reduce && c->pat != PAT_FFN_UP; }
static inline int cvmm_x_rows(const CvmmCase *c) {
    return c->pat == PAT_FFN_DOWN ? cvmm_M(c) : c->pat == PAT_ATT_O ? c->N * c->H : c->N;
}
static inline int cvmm_y_rows(const CvmmCase *c) {
    if (!cvmm_uses_w(c)) return cvmm_M(c);
    return c->pat == PAT_ATT_V ? c->N * c->H : c->N;
}
/* input row of entry p, from the pattern's meaning */
static inline int cvmm_xrow(const CvmmCase *c, int p) {
    int t = p / (c->H * c->K), h = (p / c->K) % c->H;
    switch (c->pat) {
    case PAT_FFN_UP: return t;
    case PAT_FFN_DOWN: return p;
    case PAT_ATT_V: return t;
    default: return t * c->H + h;
    }
}
/* output row of entry p */
static inline int cvmm_yrow(const CvmmCase *c, int p) {
    if (!cvmm_uses_w(c)) return p;
    int t = p / (c->H * c->K), h = (p / c->K) % c->H;
    return c->pat == PAT_ATT_V ? t * c->H + h : t;
}

/* Y (double, [y_rows, Nout]) = dense oracle */
static inline void cvmm_oracle_forward(const CvmmCase *c, double *Y, const scalar_t *X, const scalar_t *W,
                                       const int32_t *sel, const scalar_t *w) {
    int M = cvmm_M(c);
    memset(Y, 0, (size_t)cvmm_y_rows(c) * c->Nout * sizeof(double));
    for (int p = 0; p < M; p++) {
        const scalar_t *x = X + (size_t)cvmm_xrow(c, p) * c->Kin, *We = W + (size_t)sel[p] * c->Kin * c->Nout;
        double coef = cvmm_uses_w(c) ? (double)w[p] : 1.0;
        double *y = Y + (size_t)cvmm_yrow(c, p) * c->Nout;
        for (int n = 0; n < c->Nout; n++) {
            double s = 0;
            for (int k = 0; k < c->Kin; k++) s += (double)x[k] * We[(size_t)k * c->Nout + n];
            y[n] += coef * s;
        }
    }
}

/* Closed-form backward (spec §4.4): dX += w G W^T, dW += x^T (w G), dw = <G, x W>; dX/dW start from the given
 * arrays (accumulate), dw is overwritten. G = dY[yrow(p)]. */
static inline void cvmm_oracle_backward(const CvmmCase *c, double *dX, double *dW, double *dw, const scalar_t *dY,
                                        const scalar_t *X, const scalar_t *W, const int32_t *sel, const scalar_t *w) {
    int M = cvmm_M(c);
    for (int p = 0; p < M; p++) {
        const scalar_t *x = X + (size_t)cvmm_xrow(c, p) * c->Kin, *We = W + (size_t)sel[p] * c->Kin * c->Nout;
        const scalar_t *g = dY + (size_t)cvmm_yrow(c, p) * c->Nout;
        double coef = cvmm_uses_w(c) ? (double)w[p] : 1.0;
        double *dx = dX + (size_t)cvmm_xrow(c, p) * c->Kin, *dWe = dW + (size_t)sel[p] * c->Kin * c->Nout;
        double dot = 0;
        for (int k = 0; k < c->Kin; k++) {
            double s = 0;
            for (int n = 0; n < c->Nout; n++) {
                s += (double)g[n] * We[(size_t)k * c->Nout + n];
                dWe[(size_t)k * c->Nout + n] += (double)x[k] * coef * g[n];
            }
            dx[k] += coef * s;
            dot += s * x[k]; /* <G, x W> = <G W^T, x> */
        }
        if (dw) dw[p] = dot;
    }
}

/* A routing plan in host memory (the CPU backend's memory) for M entries of E experts, built by be->routing_plan from
 * sel; free with cvmm_host_plan_free. */
static inline RoutingPlan cvmm_host_plan(Backend *be, const int32_t *sel, int M, int E) {
    RoutingPlan pl = {.max_entries = M, .max_experts = E, .perm = ktu_ints((size_t)M), .inv = ktu_ints((size_t)M),
                      .offset = ktu_ints((size_t)E + 1), .group_expert = ktu_ints((size_t)E),
                      .host_offset = ktu_ints((size_t)E + 1)};
    be->routing_plan(be, &pl, sel, M, E);
    return pl;
}
static inline void cvmm_host_plan_free(RoutingPlan *pl) {
    free(pl->perm), free(pl->inv), free(pl->offset), free(pl->group_expert), free(pl->host_offset);
    memset(pl, 0, sizeof *pl);
}

/* dst[m] = src[perm[m]] for M rows of width (entry order -> plan order); unsort does the inverse. */
static inline void cvmm_rows_to_plan(scalar_t *dst, const scalar_t *src, const int32_t *perm, int M, int width) {
    for (int m = 0; m < M; m++) memcpy(dst + (size_t)m * width, src + (size_t)perm[m] * width, width * sizeof(scalar_t));
}

/* Random selection: expert ids in the global range; attention ids are head-shifted (h*EA + e, EA = E/H). */
static inline void cvmm_random_sel(const CvmmCase *c, KtuRng *rng, int32_t *sel) {
    int M = cvmm_M(c), per_head = c->E / c->H;
    for (int p = 0; p < M; p++) {
        int h = (p / c->K) % c->H;
        sel[p] = c->H > 1 ? h * per_head + ktu_int(rng, per_head) : ktu_int(rng, c->E);
    }
}

#endif
