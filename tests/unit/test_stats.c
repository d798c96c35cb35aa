/* Wilson score interval against the published values of Newcombe (1998), "Two-sided confidence intervals for the
 * single proportion", Stat. Med. 17:857-872, Table I (method 3, Wilson score), plus its structural properties. */
#include <check.h>
#include <math.h>
#include <stdlib.h>

#include "pipeline/stats.h"
#include "tests/unit/suite_runner.h"

START_TEST(newcombe_table) {
    const struct { long k, n; double lo, hi; } cases[] = {
        {81, 263, 0.2553, 0.3662}, {15, 148, 0.0624, 0.1605}, {0, 20, 0.0000, 0.1611}, {1, 29, 0.0061, 0.1718},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        double lo, hi;
        ck_assert_int_eq(wilson_interval(cases[i].k, cases[i].n, STATS_Z95, &lo, &hi), 0);
        ck_assert_msg(fabs(lo - cases[i].lo) < 6e-5 && fabs(hi - cases[i].hi) < 6e-5,
                      "%ld/%ld: got [%.5f, %.5f], published [%.4f, %.4f]", cases[i].k, cases[i].n, lo, hi,
                      cases[i].lo, cases[i].hi);
    }
}
END_TEST

START_TEST(properties) {
    double lo, hi;
    /* Symmetry: the interval of k/n mirrors that of (n-k)/n. */
    double lo2, hi2;
    wilson_interval(3, 17, STATS_Z95, &lo, &hi);
    wilson_interval(14, 17, STATS_Z95, &lo2, &hi2);
    ck_assert_msg(fabs(lo - (1 - hi2)) < 1e-12 && fabs(hi - (1 - lo2)) < 1e-12, "not symmetric");
    /* Contains the point estimate, stays in [0,1], ends exactly at 0 and 1 for the extreme counts. */
    for (long n = 1; n <= 60; n += 7)
        for (long k = 0; k <= n; k++) {
            ck_assert_int_eq(wilson_interval(k, n, STATS_Z95, &lo, &hi), 0);
            double p = (double)k / n;
            ck_assert(lo >= 0 && hi <= 1 && lo <= p && p <= hi && lo < hi);
            if (k == 0) ck_assert(lo == 0);
            if (k == n) ck_assert(hi == 1);
        }
    /* Narrows with n at a fixed proportion. */
    double w1, w2;
    wilson_interval(50, 100, STATS_Z95, &lo, &hi);
    w1 = hi - lo;
    wilson_interval(500, 1000, STATS_Z95, &lo, &hi);
    w2 = hi - lo;
    ck_assert(w2 < w1 / 3);
    /* Empty set: uninformative; invalid counts: error with NaN. */
    ck_assert_int_eq(wilson_interval(0, 0, STATS_Z95, &lo, &hi), 0);
    ck_assert(lo == 0 && hi == 1);
    ck_assert_int_eq(wilson_interval(5, 4, STATS_Z95, &lo, &hi), -1);
    ck_assert(isnan(lo) && isnan(hi));
    ck_assert_int_eq(wilson_interval(-1, 4, STATS_Z95, &lo, &hi), -1);
    ck_assert(safe_ratio(3, 4) == 0.75 && safe_ratio(0, 0) == 0);
}
END_TEST

int main(void) {
    Suite *s = suite_create("stats");
    TCase *tc = tcase_create("wilson");
    tcase_add_test(tc, newcombe_table);
    tcase_add_test(tc, properties);
    suite_add_tcase(s, tc);
    return run_test_suite(s);
}
