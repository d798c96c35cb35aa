/* Test helpers that look inside arch "moe"'s layer state (model/moe_internal.h). */
#ifndef TESTS_UNIT_MOE_TEST_UTIL_H
#define TESTS_UNIT_MOE_TEST_UTIL_H

#include <check.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "model/moe_internal.h"

/* Smallest gap, over all positions of all MoE applications of the last training forward, between the K-th and the
 * (K+1)-th largest router logit (infinity when K == E): a finite-difference step far below it cannot flip top-k. */
static inline double mt_moe_min_topk_margin(Model *m) {
    MoeState *st = moe_state(m);
    const ModelConfig *c = model_config(m);
    Backend *be = model_backend(m);
    const int E = c->ff_n_experts, K = c->ff_k, N = st->B * st->T;
    if (K == E) return INFINITY;
    ck_assert_int_le(E, 64);
    double best = INFINITY;
    scalar_t *l = malloc((size_t)N * E * sizeof *l);
    ck_assert_ptr_nonnull(l);
    for (int a = 0; a < st->n_moe; a++) {
        be->to_host(be, l, st->apps[a].l, (size_t)N * E * sizeof *l);
        for (int n = 0; n < N; n++) {
            double tmp[64];
            for (int e = 0; e < E; e++) tmp[e] = l[(size_t)n * E + e];
            for (int i = 1; i < E; i++) /* insertion sort, descending (E is tiny) */
                for (int j = i; j > 0 && tmp[j] > tmp[j - 1]; j--) {
                    double t = tmp[j];
                    tmp[j] = tmp[j - 1];
                    tmp[j - 1] = t;
                }
            best = fmin(best, tmp[K - 1] - tmp[K]);
        }
    }
    free(l);
    return best;
}

#endif
