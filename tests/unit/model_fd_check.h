/* Whole-model finite-difference gradient check (f64 build), shared by f64_model_dense.c and f64_model_moeut.c.
 *
 * Objective J(params) = ce_sum/n_counted + c_ffn*reg_ffn + att_entropy_reg*reg_att (c_ffn: model_config_ffn_balance_coef),
 * exactly what
 * model_train_step differentiates with grad_scale 1. The analytic gradient comes from one train step; for a random
 * subset of the elements of every tensor, J(p + eps) and J(p - eps) are evaluated with further train steps (their
 * gradient output is discarded) and compared: |fd - an| / max(|fd|, |an|, floor) < tol. */
#ifndef TESTS_UNIT_MODEL_FD_CHECK_H
#define TESTS_UNIT_MODEL_FD_CHECK_H

#include <check.h>
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "model/model.h"
#include "pipeline/base/rng.h"

typedef struct {
    const int32_t *inputs, *targets;
    const uint8_t *valid;
    int B, T;
} FdBatch;

static inline double fd_objective(Model *m, const FdBatch *b, StepStats *st_out) {
    StepStats st;
    model_train_step(m, b->inputs, b->targets, b->valid, b->B, b->T, 1.0, &st, NULL);
    const ModelConfig *c = model_config(m);
    double ce = st.n_counted > 0 ? st.ce_sum / (double)st.n_counted : 0.0;
    if (st_out) *st_out = st;
    return model_config_objective(c, ce, st.reg_ffn, st.reg_att, st.reg_seq); /* the dense model's terms are 0 */
}

static inline void fd_set_param(Model *m, size_t i, scalar_t v) {
    Backend *be = model_backend(m);
    be->to_device(be, model_params(m) + i, &v, sizeof v);
}

/* Central difference with step h at element i whose value is v (restored afterwards). */
static inline double fd_central(Model *m, const FdBatch *b, size_t i, scalar_t v, double h) {
    fd_set_param(m, i, v + h);
    double jp = fd_objective(m, b, NULL);
    fd_set_param(m, i, v - h);
    double jm = fd_objective(m, b, NULL);
    fd_set_param(m, i, v);
    return (jp - jm) / (2 * h);
}

/* Richardson extrapolation of two central differences (h, h/2): truncation error O(h^4) instead of O(h^2), so a
 * step large enough to keep the rounding noise of J (~1e-15 |J| / h) small is still accurate. */
static inline double fd_richardson(Model *m, const FdBatch *b, size_t i, scalar_t v, double h) {
    double d1 = fd_central(m, b, i, v, h), d2 = fd_central(m, b, i, v, h / 2);
    return (4 * d2 - d1) / 3;
}

/* Checks up to per_tensor random elements of every tensor; returns the number of elements checked. Elements whose
 * both gradients are below `floor` count as checked but carry no information; the caller asserts enough are not. */
static inline int fd_check_model(Model *m, const FdBatch *b, int per_tensor, double eps, double tol, double floor_,
                                 uint64_t seed, int *n_informative) {
    Backend *be = model_backend(m);
    size_t np = model_n_params(m);
    be->zero(be, model_grads(m), np * sizeof(scalar_t));
    const double J0 = fd_objective(m, b, NULL);
    /* Rounding noise of a Richardson difference: J carries ~eps_mach |J| of rounding, the central difference at h/2
     * divides it by h, the extrapolation weights 4/3 and 1/3 add up to < 2: below 16 eps_mach |J| / h with margin.
     * An element whose gradient is that small cannot be checked to `tol` relative; it is held to this absolute bound
     * instead (e.g. J = 3, h = 1e-4: 1e-10, for gradients of 1e-1 down to 1e-6). */
    const double noise = 16 * DBL_EPSILON * fabs(J0) / eps;
    scalar_t *g = malloc(np * sizeof(scalar_t)), *p = malloc(np * sizeof(scalar_t));
    ck_assert(g && p);
    be->to_host(be, g, model_grads(m), np * sizeof(scalar_t));
    be->to_host(be, p, model_params(m), np * sizeof(scalar_t));
    Rng r;
    rng_seed(&r, seed);
    int checked = 0, informative = 0;
    double worst = 0;
    for (int t = 0; t < model_n_tensors(m); t++) {
        const ParamTensor *pt = model_tensor(m, t);
        if (pt->buffer) continue; /* not differentiated: the objective is piecewise constant in a selection bias */
        int k = (size_t)per_tensor < pt->numel ? per_tensor : (int)pt->numel;
        for (int j = 0; j < k; j++) {
            size_t i = pt->offset + (k == (int)pt->numel ? (size_t)j : rng_below(&r, pt->numel));
            double fd = fd_richardson(m, b, i, p[i], eps), an = g[i];
            double denom = fmax(fmax(fabs(fd), fabs(an)), floor_);
            double rel = fabs(fd - an) / denom;
            if (rel > worst) worst = rel;
            ck_assert_msg(rel < tol || fabs(fd - an) < noise,
                          "%s[%zu]: analytic %.12g, finite difference %.12g (rel err %.3g, abs %.3g > noise %.3g)",
                          pt->name, i - pt->offset, an, fd, rel, fabs(fd - an), noise);
            checked++;
            if (fmax(fabs(fd), fabs(an)) > floor_) informative++;
        }
    }
    printf("fd check: %d elements, %d informative, worst rel err %.3g\n", checked, informative, worst);
    free(g);
    free(p);
    if (n_informative) *n_informative = informative;
    return checked;
}

/* fd_check_model plus what every whole-model check asserts about its coverage: per_tensor elements of at least 10
 * tensors were checked, and at least half of them carry information. */
static inline void fd_check_model_covered(Model *m, const FdBatch *b, int per_tensor, double eps, double tol,
                                          double floor_, uint64_t seed) {
    int informative = 0;
    int n = fd_check_model(m, b, per_tensor, eps, tol, floor_, seed, &informative);
    ck_assert_int_ge(n, per_tensor * 10);
    ck_assert_msg(informative >= n / 2, "only %d of %d checked gradients are non-negligible", informative, n);
}

#endif
