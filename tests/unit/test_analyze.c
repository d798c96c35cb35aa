/* The residual-erasure analysis (model/depth_analysis.c) on tiny random models: map shape, position 0 never erased, scores
 * in [0, sqrt 2], each batched cell equal to a one-copy re-run erased by hand, a zero score when the "erased" vector
 * equals the residual it replaces, the counterfactual mean, and the depth summary on a hand-made map. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/backend.h"
#include "model/depth_analysis.h"
#include "model/model.h"
#include "tests/unit/model_test_util.h"
#include "tests/unit/suite_runner.h"

/* The score of cell (l, t) recomputed on its own: capture h_l, replace position t, run l..L-1 on one copy. */
static double naive_cell(Model *m, const scalar_t *erased_dev, const int32_t *tokens, int T, int n_answer, int l,
                         int t) {
    Backend *be = model_backend(m);
    const int L = model_config(m)->n_layers, C = model_config(m)->d_model, V = model_config(m)->n_tokens;
    const int Tin = T - 1;
    scalar_t *h = be->alloc(be, (size_t)Tin * C * sizeof(scalar_t));
    scalar_t *cap = be->alloc(be, (size_t)(L + 1) * Tin * C * sizeof(scalar_t));
    model_embed(m, h, tokens, 1, Tin);
    model_run_layers(m, h, tokens, 1, Tin, 0, cap);
    float *ref = malloc(sizeof(float) * Tin * V), *out = malloc(sizeof(float) * Tin * V);
    model_forward_eval(m, tokens, 1, Tin, ref); /* the plain forward is the reference */
    be->copy(be, h, cap + (size_t)l * Tin * C, (size_t)Tin * C * sizeof(scalar_t));
    be->copy(be, h + (size_t)t * C, erased_dev + (size_t)l * C, (size_t)C * sizeof(scalar_t));
    model_run_layers(m, h, tokens, 1, Tin, l, NULL);
    scalar_t *lg = be->alloc(be, (size_t)Tin * V * sizeof(scalar_t));
    model_head(m, lg, h, 1, Tin);
    be->to_host(be, out, lg, (size_t)Tin * V * sizeof(float));
    double best = 0, *p = malloc(sizeof(double) * V), *q = malloc(sizeof(double) * V);
    for (int j = Tin - n_answer; j < Tin; j++) {
        depth_softmax_row(ref + (size_t)j * V, V, p);
        depth_softmax_row(out + (size_t)j * V, V, q);
        double d = 0;
        for (int v = 0; v < V; v++) d += (p[v] - q[v]) * (p[v] - q[v]);
        best = fmax(best, sqrt(d));
    }
    free(p);
    free(q);
    free(ref);
    free(out);
    be->free(be, lg);
    be->free(be, cap);
    be->free(be, h);
    return best;
}

static void check_model(ModelConfig c, uint64_t seed) {
    Backend *be = mtu_backend();
    Model *m = mtu_noisy_model(be, c, seed);
    const int L = c.n_layers, C = c.d_model, V = c.n_tokens;
    int32_t cf[12], tokens[9];
    mtu_tokens(cf, 12, V, seed + 1);
    mtu_tokens(tokens, 9, V, seed + 2);
    const int T = 9, n_answer = 2, Tin = T - 1;

    /* counterfactual mean = host mean over the 11 input positions of each captured row */
    scalar_t *erased = be->alloc(be, (size_t)L * C * sizeof(scalar_t));
    depth_counterfactual_means(m, cf, 12, erased);
    scalar_t *cap = be->alloc(be, (size_t)(L + 1) * 11 * C * sizeof(scalar_t));
    scalar_t *h = be->alloc(be, (size_t)11 * C * sizeof(scalar_t));
    model_embed(m, h, cf, 1, 11);
    model_run_layers(m, h, cf, 1, 11, 0, cap);
    scalar_t *caph = malloc(sizeof(scalar_t) * (L + 1) * 11 * C), *eh = malloc(sizeof(scalar_t) * L * C);
    be->to_host(be, caph, cap, sizeof(scalar_t) * (L + 1) * 11 * C);
    be->to_host(be, eh, erased, sizeof(scalar_t) * L * C);
    for (int l = 0; l < L; l++)
        for (int k = 0; k < C; k++) {
            double s = 0;
            for (int t = 0; t < 11; t++) s += caph[((size_t)l * 11 + t) * C + k];
            ck_assert_msg(fabs(s / 11 - eh[(size_t)l * C + k]) < 1e-5, "mean row %d dim %d", l, k);
        }

    /* shape (guard cells after the map stay untouched), position 0 zero, range [0, sqrt 2], not all zero */
    size_t cells = (size_t)L * Tin;
    double *scores = malloc(sizeof(double) * (cells + 4));
    for (size_t i = 0; i < cells + 4; i++) scores[i] = -7.0;
    depth_erasure_scores(m, erased, tokens, T, n_answer, scores);
    for (size_t i = cells; i < cells + 4; i++) ck_assert(scores[i] == -7.0);
    double mx = 0;
    for (int l = 0; l < L; l++) {
        ck_assert_msg(scores[(size_t)l * Tin] == 0.0, "position 0 of row %d erased", l);
        for (int t = 0; t < Tin; t++) {
            double s = scores[(size_t)l * Tin + t];
            ck_assert_msg(s >= 0 && s <= sqrt(2.0) + 1e-12, "score[%d][%d] = %g outside [0, sqrt 2]", l, t, s);
            mx = fmax(mx, s);
        }
    }
    ck_assert_msg(mx > 1e-3, "a random model ignores every erasure (max %g)", mx);

    /* every cell equals the one-copy re-run (checks the copy/position bookkeeping of the batch) */
    for (int l = 0; l < L; l++)
        for (int t = 1; t < Tin; t++) {
            double want = naive_cell(m, erased, tokens, T, n_answer, l, t);
            ck_assert_msg(fabs(scores[(size_t)l * Tin + t] - want) < 2e-5, "cell (%d,%d): batched %g, alone %g", l, t,
                          scores[(size_t)l * Tin + t], want);
        }

    /* "erasing" with the residual itself changes nothing: score exactly 0 at that cell, unchanged elsewhere */
    const int l0 = L - 1, t0 = 3;
    scalar_t *pcap = be->alloc(be, (size_t)(L + 1) * Tin * C * sizeof(scalar_t));
    model_embed(m, h, tokens, 1, Tin);
    model_run_layers(m, h, tokens, 1, Tin, 0, pcap);
    be->copy(be, erased + (size_t)l0 * C, pcap + ((size_t)l0 * Tin + t0) * C, (size_t)C * sizeof(scalar_t));
    double *s2 = malloc(sizeof(double) * cells);
    depth_erasure_scores(m, erased, tokens, T, n_answer, s2);
    ck_assert_msg(s2[(size_t)l0 * Tin + t0] < 1e-6, "identity erasure scored %g", s2[(size_t)l0 * Tin + t0]);
    for (int l = 0; l < l0; l++)
        for (int t = 0; t < Tin; t++) ck_assert(fabs(s2[(size_t)l * Tin + t] - scores[(size_t)l * Tin + t]) < 1e-9);

    free(s2);
    free(scores);
    free(caph);
    free(eh);
    be->free(be, pcap);
    be->free(be, h);
    be->free(be, cap);
    be->free(be, erased);
    model_free(m);
    backend_destroy(be);
}

START_TEST(dense_random_model) { check_model(mtu_tiny_dense(), 11); }
END_TEST

START_TEST(moeut_random_model) { check_model(mtu_tiny_moeut(), 23); }
END_TEST

START_TEST(depth_fraction_definition) {
    /* L = 4 rows, 8 input positions, q_len = 6 (question columns 1..4; columns 5..7 answer-predicting) */
    enum { L = 4, Tin = 8, QL = 6 };
    double s[L * Tin] = {0};
    const double r[L] = {1.0, 0.5, 0.05, 0.0};
    for (int l = 0; l < L; l++) {
        s[l * Tin + 2] = r[l];
        s[l * Tin + 6] = 1.4; /* answer-predicting columns are ignored */
    }
    ck_assert(fabs(depth_fraction(s, L, Tin, QL) - 0.5) < 1e-12); /* rows 0 and 1 reach 10% of the max */
    s[3 * Tin + 4] = 0.2;                                         /* row 3 now reads the question */
    ck_assert(fabs(depth_fraction(s, L, Tin, QL) - 0.75) < 1e-12);
    s[0 * Tin + 5] = 100; /* column 5 = q_len-1 is answer-predicting: ignored */
    ck_assert(fabs(depth_fraction(s, L, Tin, QL) - 0.75) < 1e-12);
    double z[L * Tin] = {0};
    ck_assert(depth_fraction(z, L, Tin, QL) == 0.0);
}
END_TEST

int main(void) {
    Suite *s = suite_create("analyze");
    TCase *tc = tcase_create("analyze");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, dense_random_model);
    tcase_add_test(tc, moeut_random_model);
    tcase_add_test(tc, depth_fraction_definition);
    suite_add_tcase(s, tc);
    return run_test_suite(s);
}
