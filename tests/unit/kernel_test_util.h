/* Shared helpers for the kernel tests (tests/unit/test_kernels_*.c, f64_kernels_*.c, cuda_backend_ops.c):
 * a small deterministic RNG, random fills, closeness checks and a central finite-difference gradient checker.
 * Header-only (static functions) so each test program stays one translation unit. */
#ifndef TESTS_UNIT_KERNEL_TEST_UTIL_H
#define TESTS_UNIT_KERNEL_TEST_UTIL_H

#include <check.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/backend.h"
#include "tests/unit/suite_runner.h"

/* ---- deterministic RNG (splitmix64) ---- */
typedef struct {
    uint64_t s;
} KtuRng;

static inline uint64_t ktu_next(KtuRng *r) {
    uint64_t z = (r->s += 0x9E3779B97F4A7C15ULL);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
}
/* uniform in [0,1) with 53 random bits */
static inline double ktu_unit(KtuRng *r) { return (double)(ktu_next(r) >> 11) * (1.0 / 9007199254740992.0); }
static inline double ktu_uniform(KtuRng *r, double lo, double hi) { return lo + (hi - lo) * ktu_unit(r); }
static inline int ktu_int(KtuRng *r, int n) { return (int)(ktu_next(r) % (uint64_t)n); } /* [0, n) */
static inline double ktu_normal(KtuRng *r) {
    double u1 = ktu_unit(r), u2 = ktu_unit(r);
    if (u1 < 1e-300) u1 = 1e-300;
    return sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
}

/* The CPU backend (creation asserted). */
static inline Backend *ktu_cpu(void) {
    char err[256];
    Backend *be = backend_create("cpu", err, sizeof err);
    ck_assert_msg(be != NULL, "backend_create(cpu): %s", err);
    return be;
}

static inline void *ktu_alloc(size_t bytes) {
    void *p = calloc(bytes ? bytes : 1, 1);
    ck_assert_msg(p != NULL, "out of memory (%zu bytes)", bytes);
    return p;
}
static inline scalar_t *ktu_scalars(size_t n) { return (scalar_t *)ktu_alloc(n * sizeof(scalar_t)); }
static inline double *ktu_doubles(size_t n) { return (double *)ktu_alloc(n * sizeof(double)); }
static inline int32_t *ktu_ints(size_t n) { return (int32_t *)ktu_alloc(n * sizeof(int32_t)); }

static inline void ktu_fill_uniform(KtuRng *r, scalar_t *x, size_t n, double lo, double hi) {
    for (size_t i = 0; i < n; i++) x[i] = (scalar_t)ktu_uniform(r, lo, hi);
}
static inline void ktu_fill_normal(KtuRng *r, scalar_t *x, size_t n, double std) {
    for (size_t i = 0; i < n; i++) x[i] = (scalar_t)(std * ktu_normal(r));
}
static inline scalar_t *ktu_random(KtuRng *r, size_t n, double lo, double hi) {
    scalar_t *x = ktu_scalars(n);
    ktu_fill_uniform(r, x, n, lo, hi);
    return x;
}
static inline scalar_t *ktu_copy(const scalar_t *x, size_t n) {
    scalar_t *y = ktu_scalars(n);
    memcpy(y, x, n * sizeof(scalar_t));
    return y;
}

/* Asserts |got - want| <= atol + rtol*|want| elementwise; the message names the first bad index. */
static inline void ktu_assert_close(const scalar_t *got, const double *want, size_t n, double atol, double rtol,
                                    const char *what) {
    for (size_t i = 0; i < n; i++) {
        double g = (double)got[i], w = want[i];
        ck_assert_msg(fabs(g - w) <= atol + rtol * fabs(w) && !isnan(g),
                      "%s[%zu]: got %.9g, want %.9g (|diff| %.3g > atol %.1g + rtol %.1g*|want|)", what, i, g, w,
                      fabs(g - w), atol, rtol);
    }
}
/* Same with a scalar_t reference. */
static inline void ktu_assert_close_s(const scalar_t *got, const scalar_t *want, size_t n, double atol, double rtol,
                                      const char *what) {
    for (size_t i = 0; i < n; i++) {
        double g = (double)got[i], w = (double)want[i];
        ck_assert_msg(fabs(g - w) <= atol + rtol * fabs(w) && !isnan(g),
                      "%s[%zu]: got %.9g, want %.9g (|diff| %.3g > atol %.1g + rtol %.1g*|want|)", what, i, g, w,
                      fabs(g - w), atol, rtol);
    }
}
static inline void ktu_assert_equal_bits(const scalar_t *a, const scalar_t *b, size_t n, const char *what) {
    for (size_t i = 0; i < n; i++)
        ck_assert_msg(memcmp(&a[i], &b[i], sizeof(scalar_t)) == 0, "%s[%zu]: %.9g vs %.9g are not bit-identical",
                      what, i, (double)a[i], (double)b[i]);
}

/* <a, r> in double: the scalar "loss" whose gradient w.r.t. a is r. */
static inline double ktu_dot(const scalar_t *a, const scalar_t *r, size_t n) {
    double s = 0;
    for (size_t i = 0; i < n; i++) s += (double)a[i] * (double)r[i];
    return s;
}

/* ---- central finite differences ----
 * loss(ctx) evaluates the scalar objective from the current contents of the parameter arrays. For every i of
 * param[n] (or a deterministic subset of `max_checks` entries when n is larger), the FD derivative
 * (L(p+eps) - L(p-eps)) / (2 eps) is compared with analytic[i]. The relative error is
 *   |a - f| / max(|a|, |f|, 1e-3 * max_j |a_j|)
 * (the floor keeps entries whose gradient is ~0 from dividing FD round-off by ~0) and must be < tol.
 * Returns the largest relative error seen. */
typedef double (*KtuLossFn)(void *ctx);

static inline double ktu_fd_check(void *ctx, KtuLossFn loss, scalar_t *param, const scalar_t *analytic, size_t n,
                                  double eps, double tol, size_t max_checks, const char *what) {
    double gmax = 0;
    for (size_t i = 0; i < n; i++)
        if (fabs((double)analytic[i]) > gmax) gmax = fabs((double)analytic[i]);
    ck_assert_msg(gmax > 0, "%s: analytic gradient is identically zero (test would check nothing)", what);
    size_t stride = (max_checks && n > max_checks) ? (n + max_checks - 1) / max_checks : 1;
    double worst = 0;
    for (size_t i = 0; i < n; i += stride) {
        scalar_t saved = param[i];
        param[i] = saved + (scalar_t)eps;
        double lp = loss(ctx);
        param[i] = saved - (scalar_t)eps;
        double lm = loss(ctx);
        param[i] = saved;
        double f = (lp - lm) / (2 * eps), a = (double)analytic[i];
        double den = fmax(fmax(fabs(a), fabs(f)), 1e-3 * gmax);
        double err = fabs(a - f) / den;
        if (err > worst) worst = err;
        ck_assert_msg(err < tol, "%s[%zu]: analytic %.12g vs finite difference %.12g (rel err %.3g >= %.1g)", what, i,
                      a, f, err, tol);
    }
    return worst;
}

/* Runs a Check suite; returns the process exit status (0 when every test passed). */
static inline int ktu_run_suite(Suite *s) { return run_test_suite(s); }

#endif
