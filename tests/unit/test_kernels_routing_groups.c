/* CPU backend, f32: group-limited top-k selection (DeepSeek-V3, arXiv 2412.19437 §2.1.2; topk_select with
 * n_group > 1): hand cases (the group score is a sum of SCORES, not of logits; sigmoid and softmax; a bias; a drop
 * mask and its filler slots), an oracle over random rows, and no limit (n_group 1, or every group kept) selecting
 * exactly as the ungrouped selection. */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "kernels/backend.h"
#include "tests/unit/kernel_test_util.h"

/* Hand case, E = 6 in 3 groups of 2, k = 2, one group kept, logits {5, 0 | 1.5, 1.5 | -1, -2}:
 *   sigmoid scores {0.993, 0.5 | 0.818, 0.818 | 0.269, 0.119}: group sums {1.493, 1.635, 0.388} -> group 1 -> {2, 3}
 *   (a sum of LOGITS would rank group 0 first: 5 > 3; the ungrouped top-2 is {0, 2});
 *   softmax: the scores are exp(l) / sum, group sums in proportion {e^5 + 1, 2 e^1.5, ...} = {149.4, 9.0, ...} ->
 *   group 0 -> {0, 1};
 *   sigmoid + bias {0, 0, -0.5, 0, 0.9, 0.9}: group keys {1.493, 0.318 + 0.818, 1.169 + 1.019} -> group 2 -> {4, 5}. */
START_TEST(test_group_limited_by_hand) {
    Backend *be = ktu_cpu();
    const scalar_t l[6] = {5, 0, 1.5f, 1.5f, -1, -2};
    int32_t s[3];
    be->topk_select(be, s, l, NULL, NULL, ROUTER_SIGMOID, 1, 1, 6, 2, 1, 1);
    ck_assert_msg(s[0] == 0 && s[1] == 2, "ungrouped: {%d, %d}", s[0], s[1]);
    be->topk_select(be, s, l, NULL, NULL, ROUTER_SIGMOID, 1, 1, 6, 2, 3, 1);
    ck_assert_msg(s[0] == 2 && s[1] == 3, "sigmoid, 1 of 3 groups: {%d, %d}", s[0], s[1]);
    be->topk_select(be, s, l, NULL, NULL, ROUTER_SOFTMAX, 1, 1, 6, 2, 3, 1);
    ck_assert_msg(s[0] == 0 && s[1] == 1, "softmax, 1 of 3 groups: {%d, %d}", s[0], s[1]);
    const scalar_t b[6] = {0, 0, -0.5f, 0, 0.9f, 0.9f};
    be->topk_select(be, s, l, NULL, b, ROUTER_SIGMOID, 1, 1, 6, 2, 3, 1);
    ck_assert_msg(s[0] == 4 && s[1] == 5, "sigmoid + bias, 1 of 3 groups: {%d, %d}", s[0], s[1]);
    /* 2 of 3 groups (1 and 0), k = 3: the top-3 of experts 0..3 in descending order, ties to the lower index */
    be->topk_select(be, s, l, NULL, NULL, ROUTER_SIGMOID, 1, 1, 6, 3, 3, 2);
    ck_assert_msg(s[0] == 0 && s[1] == 2 && s[2] == 3, "sigmoid, 2 of 3 groups: {%d, %d, %d}", s[0], s[1], s[2]);
    /* two rows, G = 2 (global ids g*E + e): the second row is the first one's logits reversed */
    const scalar_t l2[12] = {5, 0, 1.5f, 1.5f, -1, -2, -2, -1, 1.5f, 1.5f, 0, 5};
    int32_t s2[4];
    be->topk_select(be, s2, l2, NULL, NULL, ROUTER_SIGMOID, 1, 2, 6, 2, 3, 1);
    ck_assert_msg(s2[0] == 2 && s2[1] == 3 && s2[2] == 6 + 2 && s2[3] == 6 + 3, "G = 2: {%d, %d, %d, %d}", s2[0],
                  s2[1], s2[2], s2[3]);
    backend_destroy(be);
}
END_TEST

/* Drop mask: a group's score is over its experts not dropped (one survivor: its score alone; none: never kept unless
 * needed), and fillers come from the dropped experts of the kept groups.
 *   logits {5, 0 | 1.5, 1.5 | -1, -2}, expert 2 dropped: group 1's score is 0.818 < 1.493 -> group 0 -> {0, 1};
 *   logits {-1, -1 | 9, 9 | -9, -9}, expert 3 dropped: group 1 (0.9999) beats group 0 (0.538); its one survivor is
 *   slot 0, the filler is its dropped expert 3 (not expert 0 of the unkept group 0). */
START_TEST(test_group_limited_drop) {
    Backend *be = ktu_cpu();
    const scalar_t l[6] = {5, 0, 1.5f, 1.5f, -1, -2};
    uint8_t d[6] = {0, 0, 1, 0, 0, 0};
    int32_t s[2];
    be->topk_select(be, s, l, d, NULL, ROUTER_SIGMOID, 1, 1, 6, 2, 3, 1);
    ck_assert_msg(s[0] == 0 && s[1] == 1, "expert 2 dropped: {%d, %d}", s[0], s[1]);
    const scalar_t lf[6] = {-1, -1, 9, 9, -9, -9};
    uint8_t df[6] = {0, 0, 0, 1, 0, 0};
    be->topk_select(be, s, lf, df, NULL, ROUTER_SIGMOID, 1, 1, 6, 2, 3, 1);
    ck_assert_msg(s[0] == 2 && s[1] == 3, "filler from the kept group: {%d, %d}", s[0], s[1]);
    backend_destroy(be);
}
END_TEST

/* Oracle over random rows: N = 37 positions, G = 2 heads of E = 12 experts in 4 groups of 3, k = 3, the best 2 groups
 * kept; sigmoid and softmax, with and without a bias, with a drop mask. The oracle computes every key in double from
 * the formula: score = sigmoid(l) or softmax(l); group score = the sum of the two largest of (score + bias) over the
 * group's survivors; kept = the 2 best groups (ties: lower group); then the top-k keys among the kept survivors
 * (key: the logit without a bias, score + bias with one; ties: lower index). */
START_TEST(test_group_limited_oracle) {
    Backend *be = ktu_cpu();
    KtuRng rng = {2412};
    enum { N = 37, G = 2, E = 12, NG = 4, TG = 2, K = 3, EG = E / NG };
    const size_t nl = (size_t)N * G * E, ns = (size_t)N * G * K;
    scalar_t *lg = ktu_random(&rng, nl, -2, 2), *bias = ktu_random(&rng, (size_t)G * E, -0.3, 0.3);
    uint8_t *drop = ktu_alloc(nl);
    for (size_t i = 0; i < nl; i++) drop[i] = ktu_int(&rng, 7) == 0;
    int32_t *sel = ktu_ints(ns), *free_sel = ktu_ints(ns);
    int moved = 0;
    for (int kind = 0; kind < 2; kind++)
        for (int with_bias = 0; with_bias < 2; with_bias++) {
            const scalar_t *bb = with_bias ? bias : NULL;
            be->topk_select(be, sel, lg, drop, bb, (RouterKind)kind, N, G, E, K, NG, TG);
            be->topk_select(be, free_sel, lg, drop, bb, (RouterKind)kind, N, G, E, K, 1, 1);
            for (int ng = 0; ng < N * G; ng++) {
                const int g = ng % G;
                const scalar_t *row = lg + (size_t)ng * E;
                const uint8_t *dr = drop + (size_t)ng * E;
                double mx = row[0], sum = 0, score[E], key[E], gs[NG];
                for (int e = 1; e < E; e++) mx = fmax(mx, row[e]);
                for (int e = 0; e < E; e++) sum += exp((double)row[e] - mx);
                for (int e = 0; e < E; e++) {
                    double sc = kind == ROUTER_SOFTMAX ? exp((double)row[e] - mx) / sum : 1 / (1 + exp(-(double)row[e]));
                    score[e] = sc + (with_bias ? bias[g * E + e] : 0);
                    key[e] = with_bias ? score[e] : row[e];
                }
                for (int q = 0; q < NG; q++) {
                    double a = -INFINITY, c = -INFINITY; /* the two largest */
                    for (int e = q * EG; e < (q + 1) * EG; e++) {
                        if (dr[e]) continue;
                        if (score[e] > a) c = a, a = score[e];
                        else if (score[e] > c) c = score[e];
                    }
                    gs[q] = c == -INFINITY ? a : a + c;
                }
                int kept[NG] = {0};
                for (int t = 0; t < TG; t++) {
                    int best = -1;
                    for (int q = 0; q < NG; q++)
                        if (!kept[q] && (best < 0 || gs[q] > gs[best])) best = q;
                    kept[best] = 1;
                }
                uint8_t taken[E] = {0};
                for (int j = 0; j < K; j++) {
                    int best = -1;
                    for (int e = 0; e < E; e++)
                        if (!taken[e] && !dr[e] && kept[e / EG] && (best < 0 || key[e] > key[best])) best = e;
                    for (int e = 0; e < E && best < 0; e++) /* filler: dropped experts of the kept groups */
                        if (!taken[e] && dr[e] && kept[e / EG]) best = e;
                    ck_assert(best >= 0);
                    taken[best] = 1;
                    ck_assert_msg(sel[(size_t)ng * K + j] == g * E + best, "kind %d bias %d row %d slot %d: %d, want %d",
                                  kind, with_bias, ng, j, sel[(size_t)ng * K + j], g * E + best);
                    moved += sel[(size_t)ng * K + j] != free_sel[(size_t)ng * K + j];
                }
            }
        }
    ck_assert_msg(moved > (int)ns / 5, "the group limit changed only %d selections: the test does not exercise it",
                  moved);
    free(lg), free(bias), free(drop), free(sel), free(free_sel);
    backend_destroy(be);
}
END_TEST

/* No limit: n_group 1, or all groups kept (topk_group = n_group), selects exactly as the ungrouped call. */
START_TEST(test_group_limited_no_limit) {
    Backend *be = ktu_cpu();
    KtuRng rng = {15};
    enum { N = 29, G = 3, E = 8, K = 4 };
    const size_t nl = (size_t)N * G * E, ns = (size_t)N * G * K;
    scalar_t *lg = ktu_random(&rng, nl, -2, 2), *bias = ktu_random(&rng, (size_t)G * E, -0.3, 0.3);
    int32_t *a = ktu_ints(ns), *b = ktu_ints(ns);
    for (int kind = 0; kind < 2; kind++) {
        be->topk_select(be, a, lg, NULL, bias, (RouterKind)kind, N, G, E, K, 1, 1);
        be->topk_select(be, b, lg, NULL, bias, (RouterKind)kind, N, G, E, K, 4, 4);
        ck_assert(memcmp(a, b, ns * sizeof *a) == 0);
        be->topk_select(be, b, lg, NULL, NULL, (RouterKind)kind, N, G, E, K, 2, 2);
        be->topk_select(be, a, lg, NULL, NULL, (RouterKind)kind, N, G, E, K, 1, 1);
        ck_assert(memcmp(a, b, ns * sizeof *a) == 0);
    }
    free(lg), free(bias), free(a), free(b);
    backend_destroy(be);
}
END_TEST

static Suite *suite(void) {
    Suite *s = suite_create("kernels_routing_groups");
    TCase *tc = tcase_create("cpu");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_group_limited_by_hand);
    tcase_add_test(tc, test_group_limited_drop);
    tcase_add_test(tc, test_group_limited_oracle);
    tcase_add_test(tc, test_group_limited_no_limit);
    suite_add_tcase(s, tc);
    return s;
}

int main(void) { return ktu_run_suite(suite()); }
