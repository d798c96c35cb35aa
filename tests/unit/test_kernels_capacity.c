/* CPU backend: expert capacity (capacity_drop; Switch Transformer §2.2, GShard Algorithm 1) and mask_zero. A hand-made
 * decision where a full expert has to choose, in both orders (which assignments it keeps, ties in the score order,
 * the zeroed gates, the kept counts and the dropped count under a valid mask), and random decisions against an oracle
 * that ranks every assignment by the definition (a different algorithm from the reference's ordered pass). */
#include <stdint.h>

#include "kernels/backend.h"
#include "tests/unit/kernel_test_util.h"

/* N=4 positions, E=2 experts, k=2, capacity 2; position 2 invalid (not counted, but it routes and competes).
 *   n:    0          1          2          3
 *   sel: {0, 1}     {0, 1}     {1, 0}     {0, 1}
 *   gate:{.9, .2}   {.6, .4}   {.8, .3}   {.95, .4}
 * position: first choices in position order: e0 <- n0, n1; e1 <- n2; n3's e0 dropped (full). Second choices: e1 <- n0
 *           (its 2nd), then n1's and n3's e1 and n2's e0 dropped. Kept (n,j): (0,0) (1,0) (2,0) (0,1).
 * score:    e0's assignments .95 (3,0) .9 (0,0) .6 (1,0) .3 (2,1): keeps (3,0), (0,0).
 *           e1's .8 (2,0) .4 (1,1) .4 (3,1) .2 (0,1): keeps (2,0) and, of the tie, the earlier position (1,1). */
START_TEST(test_capacity_by_hand) {
    Backend *be = ktu_cpu();
    const int N = 4, E = 2, k = 2, cap = 2;
    const int32_t sel[] = {0, 1, 0, 1, 1, 0, 0, 1};
    const scalar_t g0[] = {0.9f, 0.2f, 0.6f, 0.4f, 0.8f, 0.3f, 0.95f, 0.4f};
    const uint8_t valid[] = {1, 1, 0, 1};
    const uint8_t want_drop[2][8] = {{0, 0, 0, 1, 0, 1, 1, 1},  /* position */
                                     {0, 1, 1, 0, 0, 1, 0, 1}}; /* score */
    const int64_t want_counts[2][2] = {{2, 1}, {2, 1}}; /* kept of positions 0, 1, 3 */
    const int64_t want_dropped[2] = {3, 3};             /* dropped of positions 0, 1, 3 */
    for (int o = 0; o < 2; o++) {
        scalar_t gate[8];
        uint8_t dropped[8];
        memcpy(gate, g0, sizeof gate);
        memset(dropped, 0xAA, sizeof dropped); /* overwritten, kept entries included */
        int64_t counts[2] = {10, 20}, n_dropped = 5; /* the op accumulates */
        be->capacity_drop(be, dropped, gate, counts, &n_dropped, sel, valid, N, E, k, cap,
                          o ? CAPACITY_SCORE : CAPACITY_POSITION);
        for (int p = 0; p < 8; p++) {
            ck_assert_msg(dropped[p] == want_drop[o][p], "order %d: dropped[%d] = %d", o, p, dropped[p]);
            ck_assert_msg(gate[p] == (want_drop[o][p] ? 0.0f : g0[p]), "order %d: gate[%d] = %g", o, p, (double)gate[p]);
        }
        ck_assert(counts[0] == 10 + want_counts[o][0] && counts[1] == 20 + want_counts[o][1]);
        ck_assert_int_eq(n_dropped, 5 + want_dropped[o]);
        /* NULL counters and no valid mask: the same decision */
        memcpy(gate, g0, sizeof gate);
        be->capacity_drop(be, dropped, gate, NULL, NULL, sel, NULL, N, E, k, cap, o ? CAPACITY_SCORE : CAPACITY_POSITION);
        for (int p = 0; p < 8; p++) ck_assert(dropped[p] == want_drop[o][p]);
    }
    /* capacity 3: each expert loses one of its 4 assignments, the last in the order: position: e0's (2,1) and e1's
     * (3,1) (second choices, the later positions); score: e0's (2,1) (.3) and e1's (0,1) (.2) */
    for (int o = 0; o < 2; o++) {
        scalar_t gate[8];
        uint8_t dropped[8];
        memcpy(gate, g0, sizeof gate);
        int64_t n_dropped = 0;
        be->capacity_drop(be, dropped, gate, NULL, &n_dropped, sel, NULL, N, E, k, 3,
                          o ? CAPACITY_SCORE : CAPACITY_POSITION);
        for (int p = 0; p < 8; p++) ck_assert_msg(dropped[p] == (p == 5 || (p == 7 && o == 0) || (p == 1 && o == 1)),
                                                  "cap 3 order %d: dropped[%d] = %d", o, p, dropped[p]);
        ck_assert_int_eq(n_dropped, 2);
    }
    backend_destroy(be);
}
END_TEST

/* Random decisions (distinct experts per position, many tied gates) against the definition: an assignment is kept iff
 * fewer than cap assignments of its expert come before it in the order. */
START_TEST(test_capacity_oracle) {
    Backend *be = ktu_cpu();
    KtuRng rng = {77};
    const int N = 61, E = 7, k = 3;
    const long M = (long)N * k;
    int32_t *sel = ktu_ints((size_t)M);
    scalar_t *g0 = ktu_scalars((size_t)M), *gate = ktu_scalars((size_t)M);
    uint8_t *dropped = ktu_alloc((size_t)M), *valid = ktu_alloc((size_t)N);
    for (int n = 0; n < N; n++) {
        valid[n] = ktu_int(&rng, 4) != 0;
        for (int j = 0; j < k; j++) {
            int e, dup;
            do { /* distinct experts within a position */
                e = ktu_int(&rng, E);
                dup = 0;
                for (int i = 0; i < j; i++) dup |= sel[n * k + i] == e;
            } while (dup);
            sel[n * k + j] = e;
            g0[n * k + j] = (scalar_t)(ktu_int(&rng, 6) / 8.0); /* 6 values: ties everywhere */
        }
    }
    for (int o = 0; o < 2; o++)
        for (int cap = 1; cap <= 40; cap += 13) {
            memcpy(gate, g0, (size_t)M * sizeof *gate);
            int64_t counts[7] = {0}, n_dropped = 0, want_counts[7] = {0}, want_dropped = 0;
            be->capacity_drop(be, dropped, gate, counts, &n_dropped, sel, valid, N, E, k, cap,
                              o ? CAPACITY_SCORE : CAPACITY_POSITION);
            for (long p = 0; p < M; p++) {
                long rank = 0;
                for (long q = 0; q < M; q++) {
                    if (q == p || sel[q] != sel[p]) continue;
                    const int before = o ? (g0[q] > g0[p] || (g0[q] == g0[p] && q / k < p / k))
                                         : (q % k < p % k || (q % k == p % k && q / k < p / k));
                    rank += before;
                }
                const int want = rank >= cap;
                ck_assert_msg(dropped[p] == want, "order %d cap %d: dropped[%ld] = %d, rank %ld", o, cap, p, dropped[p],
                              rank);
                ck_assert(gate[p] == (want ? 0 : g0[p]));
                if (!valid[p / k]) continue;
                if (want) want_dropped++;
                else want_counts[sel[p]]++;
            }
            for (int e = 0; e < E; e++) ck_assert(counts[e] == want_counts[e]);
            ck_assert_int_eq(n_dropped, want_dropped);
            if (cap == 1) ck_assert_msg(want_dropped > 0, "the test must drop something");
        }
    free(sel), free(g0), free(gate), free(dropped), free(valid);
    backend_destroy(be);
}
END_TEST

START_TEST(test_mask_zero) {
    Backend *be = ktu_cpu();
    scalar_t x[5] = {1, -2, 3, -4, 5};
    const uint8_t mask[5] = {0, 1, 0, 7, 0};
    be->mask_zero(be, x, mask, 5);
    const scalar_t want[5] = {1, 0, 3, 0, 5};
    for (int i = 0; i < 5; i++) ck_assert(x[i] == want[i]);
    backend_destroy(be);
}
END_TEST

static Suite *suite(void) {
    Suite *s = suite_create("kernels_capacity");
    TCase *tc = tcase_create("cpu");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_capacity_by_hand);
    tcase_add_test(tc, test_capacity_oracle);
    tcase_add_test(tc, test_mask_zero);
    suite_add_tcase(s, tc);
    return s;
}

int main(void) { return ktu_run_suite(suite()); }
