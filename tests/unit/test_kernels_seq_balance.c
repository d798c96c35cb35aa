/* CPU backend, f32: seq_balance, DeepSeek-V3's sequence-wise balance loss (arXiv 2412.19437 §2.1.2, eqs. 17-20):
 * closed forms (a uniform router gives 1 whatever it selects, with its gradient f_e - 1 by hand; a one-position
 * sequence gives E s'_0), the mean over the sequences that have counted positions, and the accumulating gradient. */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "kernels/backend.h"
#include "tests/unit/kernel_test_util.h"

/* B = 2 sequences of T = 3, E = 4, k = 2, every logit 0 (s' = 1/4 for both routers). Sequence 0 selects {0,1}, {0,1},
 * {0,2}: counts {3,2,1,0}, f = E/(k T) c = {2, 4/3, 2/3, 0}; sequence 1 has position 2 masked, selects {2,3}, {3,1}:
 * counts {0,1,1,2}, f = 4/(2*2) c = {0,1,1,2}. Each L_b = sum_i f_i / 4 = 1, the mean 1. Gradient at a counted position
 * of b: coef / (B_c n_b) * w * (f_e - sum_i f_i s'_i) = coef / (2 n_b) * w * (f_e - 1), w = sigmoid'(0) / sum sigmoid
 * = 0.25 / 2 (sigmoid) or s'_e = 0.25 (softmax); the masked position's gradient is left as it was. */
START_TEST(test_seq_balance_uniform) {
    Backend *be = ktu_cpu();
    enum { B = 2, T = 3, E = 4, K = 2 };
    scalar_t l[B * T * E] = {0};
    const int32_t sel[B * T * K] = {0, 1, 0, 1, 0, 2, /**/ 2, 3, 3, 1, 0, 1};
    const uint8_t valid[B * T] = {1, 1, 1, 1, 1, 0};
    const double f[B][E] = {{2, 4.0 / 3, 2.0 / 3, 0}, {0, 1, 1, 2}};
    const double n[B] = {3, 2};
    for (int kind = 0; kind < 2; kind++) {
        scalar_t dl[B * T * E];
        for (int i = 0; i < B * T * E; i++) dl[i] = 0.5f; /* the op adds to it */
        const double coef = 0.3;
        double v = be->seq_balance(be, dl, l, sel, valid, B, T, E, K, (RouterKind)kind, (scalar_t)coef);
        ck_assert_msg(fabs(v - 1) < 1e-12, "kind %d: value %.17g, want 1", kind, v);
        const double w = kind == ROUTER_SOFTMAX ? 0.25 : 0.25 / 2;
        for (int b = 0; b < B; b++)
            for (int t = 0; t < T; t++)
                for (int e = 0; e < E; e++) {
                    double want = valid[b * T + t] ? 0.5 + coef / (2 * n[b]) * w * (f[b][e] - 1) : 0.5;
                    double got = dl[(b * T + t) * E + e];
                    ck_assert_msg(fabs(got - want) < 1e-6, "kind %d b %d t %d e %d: %.9g, want %.9g", kind, b, t, e,
                                  got, want);
                }
        /* dlogits NULL: the value alone */
        ck_assert(fabs(be->seq_balance(be, NULL, l, sel, valid, B, T, E, K, (RouterKind)kind, 1) - 1) < 1e-12);
    }
    backend_destroy(be);
}
END_TEST

/* One position, E = 2, k = 1, expert 0 selected: f = {2, 0}, L = 2 s'_0. Logits {1, -1}: softmax s'_0 = 1 / (1 + e^-2)
 * = 0.880797, L = 1.761594; sigmoid s'_0 = sigmoid(1) / (sigmoid(1) + sigmoid(-1)) = 0.731059 (the two sum to 1),
 * L = 1.462117. A second, fully masked sequence is left out of the mean (B_c = 1); all masked gives 0. */
START_TEST(test_seq_balance_one_position) {
    Backend *be = ktu_cpu();
    const scalar_t l[4] = {1, -1, 3, 2};
    const int32_t sel[2] = {0, 1};
    const uint8_t valid[2] = {1, 0}, none[2] = {0, 0};
    double vs = be->seq_balance(be, NULL, l, sel, valid, 2, 1, 2, 1, ROUTER_SOFTMAX, 1);
    double vg = be->seq_balance(be, NULL, l, sel, valid, 2, 1, 2, 1, ROUTER_SIGMOID, 1);
    ck_assert_msg(fabs(vs - 2 / (1 + exp(-2.0))) < 1e-6, "softmax %.9g", vs);
    ck_assert_msg(fabs(vg - 2 * (1 / (1 + exp(-1.0)))) < 1e-6, "sigmoid %.9g", vg);
    scalar_t dl[4] = {0, 0, 0, 0};
    ck_assert(be->seq_balance(be, dl, l, sel, none, 2, 1, 2, 1, ROUTER_SIGMOID, 1) == 0);
    for (int i = 0; i < 4; i++) ck_assert(dl[i] == 0);
    /* both sequences counted: the mean of 2 s'_0 of the first and 2 s'_1 of the second (it selects expert 1) */
    double v2 = be->seq_balance(be, NULL, l, sel, NULL, 2, 1, 2, 1, ROUTER_SOFTMAX, 1);
    double want = (2 / (1 + exp(-2.0)) + 2 / (1 + exp(1.0))) / 2;
    ck_assert_msg(fabs(v2 - want) < 1e-6, "two sequences %.9g, want %.9g", v2, want);
    backend_destroy(be);
}
END_TEST

static Suite *suite(void) {
    Suite *s = suite_create("kernels_seq_balance");
    TCase *tc = tcase_create("cpu");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_seq_balance_uniform);
    tcase_add_test(tc, test_seq_balance_one_position);
    suite_add_tcase(s, tc);
    return s;
}

int main(void) { return ktu_run_suite(suite()); }
