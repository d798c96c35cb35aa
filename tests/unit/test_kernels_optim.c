/* CPU backend, f32: cross-entropy (with ignored targets, aliasing), argmax, AdamW one step against a hand
 * computation, and the global-norm clipping math built on sum_squares. */
#include <stdint.h>

#include "kernels/backend.h"
#include "tests/unit/kernel_test_util.h"

START_TEST(test_cross_entropy) {
    Backend *be = ktu_cpu();
    KtuRng rng = {21};
    int N = 97, V = 53;
    scalar_t *logits = ktu_random(&rng, (size_t)N * V, -4, 4);
    logits[5] = 80; /* a large logit: the log-sum-exp must stay finite */
    /* row 2: a spread of 1e3, so most exponentials underflow (exp(-1000) = 0 exactly in float) */
    for (int v = 0; v < V; v++) logits[2 * V + v] = (scalar_t)(-1000.0 + 20.0 * v);
    int32_t *tg = ktu_ints(N);
    for (int n = 0; n < N; n++) tg[n] = (n % 4 == 1) ? -1 : ktu_int(&rng, V);
    tg[0] = 7;
    double want_sum = 0, *want_loss = ktu_doubles(N), *want_d = ktu_doubles((size_t)N * V);
    scalar_t gs = (scalar_t)0.37;
    for (int n = 0; n < N; n++) {
        const scalar_t *l = logits + (size_t)n * V;
        double mx = l[0], s = 0;
        for (int v = 0; v < V; v++) mx = l[v] > mx ? l[v] : mx;
        for (int v = 0; v < V; v++) s += exp(l[v] - mx);
        double lse = mx + log(s);
        want_loss[n] = tg[n] >= 0 ? lse - l[tg[n]] : 0;
        want_sum += want_loss[n];
        for (int v = 0; v < V; v++)
            want_d[(size_t)n * V + v] = tg[n] >= 0 ? gs * (exp(l[v] - lse) - (v == tg[n])) : 0;
    }
    scalar_t *losses = ktu_scalars(N), *dl = ktu_random(&rng, (size_t)N * V, -1, 1);
    double sum = be->cross_entropy(be, dl, losses, logits, tg, N, V, gs);
    ck_assert_msg(fabs(sum - want_sum) < 1e-4 * (1 + want_sum), "sum %.9g vs %.9g", sum, want_sum);
    ktu_assert_close(losses, want_loss, N, 1e-5, 1e-5, "per-row loss");
    ktu_assert_close(dl, want_d, (size_t)N * V, 1e-6, 1e-5, "dlogits");
    /* uncounted rows are exactly 0 in losses and dlogits */
    for (int v = 0; v < V; v++) ck_assert(dl[(size_t)1 * V + v] == 0);
    ck_assert(losses[1] == 0);
    /* without optional outputs: same sum */
    double sum2 = be->cross_entropy(be, NULL, NULL, logits, tg, N, V, gs);
    ck_assert(sum2 == sum);
    /* dlogits aliasing logits */
    scalar_t *alias = ktu_copy(logits, (size_t)N * V);
    double sum3 = be->cross_entropy(be, alias, NULL, alias, tg, N, V, gs);
    ck_assert(sum3 == sum);
    ktu_assert_close(alias, want_d, (size_t)N * V, 1e-6, 1e-5, "dlogits aliased");
    /* all rows ignored: 0 */
    for (int n = 0; n < N; n++) tg[n] = -1;
    ck_assert(be->cross_entropy(be, NULL, NULL, logits, tg, N, V, gs) == 0);
    free(logits), free(tg), free(want_loss), free(want_d), free(losses), free(dl), free(alias);
    backend_destroy(be);
}
END_TEST

START_TEST(test_argmax) {
    Backend *be = ktu_cpu();
    scalar_t x[3 * 4] = {1, 3, 3, 2, /* tie: lowest index */ -5, -4, -4.5f, -6, 7, 7, 7, 7};
    int32_t am[3];
    be->argmax_rows(be, am, x, 3, 4);
    ck_assert_int_eq(am[0], 1);
    ck_assert_int_eq(am[1], 1);
    ck_assert_int_eq(am[2], 0);
    backend_destroy(be);
}
END_TEST

/* grad_scale: the step reads g * grad_scale, bit for bit what scaling g in place first gave, and leaves g as it was. */
START_TEST(test_adamw_grad_scale) {
    Backend *be = ktu_cpu();
    KtuRng rng = {31};
    size_t n = 4099;
    const scalar_t s = (scalar_t)0.3717;
    scalar_t *p = ktu_random(&rng, n, -1, 1), *g = ktu_random(&rng, n, -0.1, 0.1), *g0 = ktu_copy(g, n);
    scalar_t *m = ktu_scalars(n), *v = ktu_scalars(n), *p2 = ktu_copy(p, n), *m2 = ktu_scalars(n), *v2 = ktu_scalars(n);
    scalar_t *gs = ktu_copy(g, n);
    be->scale_inplace(be, gs, s, n);
    for (long t = 1; t <= 2; t++) {
        be->adamw_step(be, p, g, m, v, n, 1e-3, 0.9, 0.999, 1e-8, 0.1, t, s);
        be->adamw_step(be, p2, gs, m2, v2, n, 1e-3, 0.9, 0.999, 1e-8, 0.1, t, 1);
    }
    ck_assert(memcmp(p, p2, n * sizeof *p) == 0 && memcmp(m, m2, n * sizeof *m) == 0);
    ck_assert(memcmp(v, v2, n * sizeof *v) == 0 && memcmp(g, g0, n * sizeof *g) == 0);
    backend_destroy(be);
    free(p), free(g), free(g0), free(m), free(v), free(p2), free(m2), free(v2), free(gs);
}
END_TEST

/* One and then a second AdamW step against values computed by hand from the PyTorch formulas (double). */
START_TEST(test_adamw) {
    Backend *be = ktu_cpu();
    KtuRng rng = {22};
    size_t n = 70001;
    scalar_t *p = ktu_random(&rng, n, -1, 1), *g = ktu_random(&rng, n, -0.1, 0.1);
    scalar_t *m = ktu_scalars(n), *v = ktu_scalars(n), *p0 = ktu_copy(p, n);
    for (size_t i = 0; i < 10; i++) g[i] = 0; /* zero gradient: weight decay still applies */
    double lr = 1e-3, b1 = 0.9, b2 = 0.999, eps = 1e-8, wd = 0.1;
    double *wp = ktu_doubles(n), *wm = ktu_doubles(n), *wv = ktu_doubles(n);
    for (size_t i = 0; i < n; i++) wp[i] = p[i];
    for (long t = 1; t <= 2; t++) {
        for (size_t i = 0; i < n; i++) {
            double gi = g[i];
            wp[i] *= 1 - lr * wd;
            wm[i] = b1 * wm[i] + (1 - b1) * gi;
            wv[i] = b2 * wv[i] + (1 - b2) * gi * gi;
            double mhat = wm[i] / (1 - pow(b1, t)), vhat = wv[i] / (1 - pow(b2, t));
            wp[i] -= lr * mhat / (sqrt(vhat) + eps); /* = lr/bc1 * m / (sqrt(v)/sqrt(bc2) + eps) */
        }
        be->adamw_step(be, p, g, m, v, n, lr, b1, b2, eps, wd, t, 1);
        ktu_assert_close(m, wm, n, 1e-9, 1e-5, "adamw m");
        ktu_assert_close(v, wv, n, 1e-12, 1e-5, "adamw v");
        ktu_assert_close(p, wp, n, 1e-6, 1e-5, "adamw p");
    }
    /* parameters with zero gradient move only by weight decay: p0 * (1 - lr*wd)^2 after two steps */
    for (size_t i = 0; i < 10; i++)
        ck_assert_msg(fabs(p[i] - p0[i] * (1 - lr * wd) * (1 - lr * wd)) < 1e-7, "wd on zero-grad param %zu", i);
    backend_destroy(be);
    free(p), free(p0), free(g), free(m), free(v), free(wp), free(wm), free(wv);
}
END_TEST

/* Global-norm clipping as the trainer does it: total = sqrt(sum over buffers of sum_squares), scale every gradient
 * by min(1, clip/(total+1e-6)); the clipped global norm must be clip*total/(total+1e-6). */
START_TEST(test_sum_squares_and_clipping) {
    Backend *be = ktu_cpu();
    KtuRng rng = {23};
    size_t sizes[2] = {200003, 77};
    scalar_t *g[2];
    double want = 0;
    for (int k = 0; k < 2; k++) {
        g[k] = ktu_random(&rng, sizes[k], -1, 1);
        for (size_t i = 0; i < sizes[k]; i++) want += (double)g[k][i] * g[k][i];
    }
    double total_sq = be->sum_squares(be, g[0], sizes[0]) + be->sum_squares(be, g[1], sizes[1]);
    ck_assert_msg(fabs(total_sq - want) < 1e-9 * want, "sum_squares %.15g vs %.15g", total_sq, want);
    ck_assert(be->sum_squares(be, g[1], 0) == 0);
    double total = sqrt(total_sq), clip = 0.25;
    ck_assert(total > clip);
    double scale = fmin(1.0, clip / (total + 1e-6));
    for (int k = 0; k < 2; k++) be->scale_inplace(be, g[k], (scalar_t)scale, sizes[k]);
    double after = sqrt(be->sum_squares(be, g[0], sizes[0]) + be->sum_squares(be, g[1], sizes[1]));
    double expect = clip * total / (total + 1e-6);
    ck_assert_msg(fabs(after - expect) < 1e-6 * expect, "clipped norm %.9g vs %.9g", after, expect);
    free(g[0]), free(g[1]);
    backend_destroy(be);
}
END_TEST

START_TEST(test_all_finite) {
    Backend *be = ktu_cpu();
    size_t n = 100000;
    scalar_t *x = ktu_scalars(n);
    ck_assert_int_eq(be->all_finite(be, x, n), 1);
    x[n - 1] = NAN;
    ck_assert_int_eq(be->all_finite(be, x, n), 0);
    x[n - 1] = 0;
    x[3] = -INFINITY;
    ck_assert_int_eq(be->all_finite(be, x, n), 0);
    ck_assert_int_eq(be->all_finite(be, x, 3), 1);
    free(x);
    backend_destroy(be);
}
END_TEST

static Suite *suite(void) {
    Suite *s = suite_create("kernels_optim");
    TCase *tc = tcase_create("cpu");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_cross_entropy);
    tcase_add_test(tc, test_argmax);
    tcase_add_test(tc, test_adamw);
    tcase_add_test(tc, test_adamw_grad_scale);
    tcase_add_test(tc, test_sum_squares_and_clipping);
    tcase_add_test(tc, test_all_finite);
    suite_add_tcase(s, tc);
    return s;
}

int main(void) { return ktu_run_suite(suite()); }
