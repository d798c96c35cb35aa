/* Wilson score interval against the published values of Newcombe (1998), "Two-sided confidence intervals for the
 * single proportion", Stat. Med. 17:857-872, Table I (method 3, Wilson score), plus its structural properties.
 * Student-t quantiles against the printed tables (e.g. Abramowitz & Stegun Table 26.10); t-intervals, exact
 * McNemar p-values and the hierarchical bootstrap against hand-worked cases (tests/reference/stats_check.py
 * recomputes the hand-worked numbers independently in Python). */
#include <check.h>
#include <math.h>
#include <stdlib.h>

#include "pipeline/base/stats.h"
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

/* Two-sided 95% critical values of Student's t (0.975 quantiles), as printed in every t table. */
START_TEST(t_quantiles_match_tables) {
    const struct { int df; double t; } T[] = {{1, 12.7062047}, {2, 4.3026527}, {3, 3.1824463}, {4, 2.7764451},
                                             {10, 2.2281389}, {30, 2.0422725}, {1000, 1.9623391}};
    for (size_t i = 0; i < sizeof T / sizeof T[0]; i++) {
        double t = t_quantile_975(T[i].df);
        ck_assert_msg(fabs(t - T[i].t) < 1e-6, "df %d: %.8f, table %.7f", T[i].df, t, T[i].t);
    }
    ck_assert(isnan(t_quantile_975(0)));
    /* df = 1 is the Cauchy distribution: P(T <= 1) = 3/4 exactly; the CDF is symmetric about 0. */
    ck_assert(fabs(t_cdf(1.0, 1) - 0.75) < 1e-12);
    ck_assert(fabs(t_cdf(0.0, 7) - 0.5) < 1e-15);
    ck_assert(fabs(t_cdf(-1.3, 5) + t_cdf(1.3, 5) - 1.0) < 1e-14);
}
END_TEST

/* Hand-worked: {1, 2, 3}: mean 2, sd 1, half-width t(2) / sqrt 3 = 4.3026527 / 1.7320508 = 2.4841377.
 * The two seeds of moeut_answer depth_fraction, {0.875, 0.938}: mean 0.9065, sd 0.063 / sqrt 2, half-width
 * 12.7062047 * 0.0445477 / sqrt 2 = 0.4002454: two seeds say almost nothing about the mean. */
START_TEST(t_interval_hand_worked) {
    double m, lo, hi, sd;
    const double x[3] = {1, 2, 3};
    ck_assert_int_eq(mean_t_interval(x, 3, &m, &lo, &hi, &sd), 0);
    ck_assert(fabs(m - 2) < 1e-15 && fabs(sd - 1) < 1e-15);
    ck_assert_msg(fabs(lo - (2 - 2.4841377)) < 1e-6 && fabs(hi - (2 + 2.4841377)) < 1e-6, "[%f, %f]", lo, hi);
    const double y[2] = {0.875, 0.938};
    ck_assert_int_eq(mean_t_interval(y, 2, &m, &lo, &hi, NULL), 0);
    ck_assert(fabs(m - 0.9065) < 1e-12);
    ck_assert_msg(fabs((hi - lo) / 2 - 0.4002454) < 1e-6, "half-width %f", (hi - lo) / 2);
    /* one value: a mean, no interval; none: error */
    ck_assert_int_eq(mean_t_interval(y, 1, &m, &lo, &hi, NULL), 0);
    ck_assert(m == 0.875 && isnan(lo) && isnan(hi));
    ck_assert_int_eq(mean_t_interval(y, 0, &m, &lo, &hi, NULL), -1);
    ck_assert(isnan(m));
    /* identical values: zero width */
    const double z[4] = {0.5, 0.5, 0.5, 0.5};
    mean_t_interval(z, 4, &m, &lo, &hi, NULL);
    ck_assert(lo == 0.5 && hi == 0.5);
}
END_TEST

/* Exact McNemar: p = min(1, 2 P(X <= min(b,c))), X ~ Bin(b+c, 1/2), worked by hand:
 *   (0, 5): 2 / 32 = 0.0625;  (1, 9): 2 (1 + 10) / 1024 = 0.021484375;
 *   (2, 10): 2 (1 + 12 + 66) / 4096 = 0.03857421875;
 *   (3, 3): 2 * 42 / 64 > 1 -> 1;  (0, 0): no discordant pair -> 1. */
START_TEST(mcnemar_hand_worked) {
    ck_assert(fabs(mcnemar_exact_p(0, 5) - 0.0625) < 1e-14);
    ck_assert(fabs(mcnemar_exact_p(5, 0) - 0.0625) < 1e-14);
    ck_assert(fabs(mcnemar_exact_p(1, 9) - 0.021484375) < 1e-14);
    ck_assert(fabs(mcnemar_exact_p(10, 2) - 0.03857421875) < 1e-14);
    ck_assert(mcnemar_exact_p(3, 3) == 1.0);
    ck_assert(mcnemar_exact_p(0, 0) == 1.0);
    ck_assert(isnan(mcnemar_exact_p(-1, 3)));
    /* Large tables stay finite and symmetric; 400 vs 600 is far from chance (normal approx. z = 6.3, p ~ 3e-10). */
    double p = mcnemar_exact_p(400, 600);
    ck_assert_msg(p > 1e-11 && p < 1e-8, "p %g", p);
    ck_assert(fabs(p - mcnemar_exact_p(600, 400)) < 1e-20);
    ck_assert(mcnemar_exact_p(2000, 2001) > 0.9);
}
END_TEST

START_TEST(quantile_type7) {
    const double s[4] = {1, 2, 3, 4};
    ck_assert(fabs(quantile_sorted(s, 4, 0.5) - 2.5) < 1e-15);
    ck_assert(fabs(quantile_sorted(s, 4, 0.025) - 1.075) < 1e-15); /* position 0.075 */
    ck_assert(quantile_sorted(s, 4, 1.0) == 4 && quantile_sorted(s, 4, 0.0) == 1 && quantile_sorted(s, 1, 0.3) == 1);
}
END_TEST

START_TEST(rng_reproducible_and_unbiased) {
    StatsRng a, b;
    stats_rng_seed(&a, 42);
    stats_rng_seed(&b, 42);
    for (int i = 0; i < 100; i++) ck_assert(stats_rng_next(&a) == stats_rng_next(&b));
    /* splitmix64's published first output for seed 0 (Vigna's reference implementation). */
    StatsRng z;
    stats_rng_seed(&z, 0);
    ck_assert(stats_rng_next(&z) == 0xe220a8397b1dcdafull);
    long counts[3] = {0, 0, 0};
    for (int i = 0; i < 30000; i++) counts[stats_rng_below(&a, 3)]++;
    for (int k = 0; k < 3; k++) ck_assert_msg(labs(counts[k] - 10000) < 400, "count %ld", counts[k]); /* 4.5 sd */
}
END_TEST

/* One seed, 400 examples with 100 ones: the example bootstrap of a mean is close to normal with sd
 * sqrt(0.25 * 0.75 / 400) = 0.0216506, so the 95% interval is about 0.25 +- 1.96 * 0.0216506 = [0.2076, 0.2924]. */
START_TEST(bootstrap_example_variance) {
    double v[400];
    for (int i = 0; i < 400; i++) v[i] = i % 4 == 0;
    BootstrapResult r, r2, r3;
    ck_assert_int_eq(hierarchical_bootstrap_mean(v, 1, 400, 4000, 7, &r), 0);
    ck_assert(fabs(r.estimate - 0.25) < 1e-15);
    ck_assert_msg(fabs(r.lo - 0.2076) < 0.008 && fabs(r.hi - 0.2924) < 0.008, "[%f, %f]", r.lo, r.hi);
    /* same RNG seed: the same interval, bit for bit; another seed: slightly different */
    hierarchical_bootstrap_mean(v, 1, 400, 4000, 7, &r2);
    ck_assert(r.lo == r2.lo && r.hi == r2.hi);
    hierarchical_bootstrap_mean(v, 1, 400, 4000, 8, &r3);
    ck_assert(r3.lo != r.lo || r3.hi != r.hi);
    ck_assert_int_eq(hierarchical_bootstrap_mean(v, 0, 400, 10, 7, &r3), -1);
}
END_TEST

/* Seed variance only: seed A all 0, seed B all 1 (examples carry no variance). A replicate draws two seeds: mean 0
 * (both A, prob 1/4), 0.5 (prob 1/2) or 1 (prob 1/4), so the 2.5% and 97.5% quantiles are exactly 0 and 1. */
START_TEST(bootstrap_seed_variance) {
    double v[2 * 50];
    for (int i = 0; i < 100; i++) v[i] = i >= 50;
    BootstrapResult r;
    hierarchical_bootstrap_mean(v, 2, 50, 2000, 11, &r);
    ck_assert(fabs(r.estimate - 0.5) < 1e-15);
    ck_assert_msg(r.lo == 0 && r.hi == 1, "[%f, %f]", r.lo, r.hi);
}
END_TEST

/* Crossed design: three seeds that agree on every example carry no seed variance, and the examples are the same
 * ones, so the interval must be as wide as one seed's. Drawing examples independently per seed would shrink it by
 * about sqrt(3) (width ratio 0.58); the shared draw keeps the ratio near 1. */
START_TEST(bootstrap_shared_examples) {
    double one[300], three[900];
    for (int i = 0; i < 300; i++) one[i] = three[i] = three[300 + i] = three[600 + i] = (i % 3 == 0);
    BootstrapResult r1, r3;
    hierarchical_bootstrap_mean(one, 1, 300, 4000, 3, &r1);
    hierarchical_bootstrap_mean(three, 3, 300, 4000, 3, &r3);
    const double ratio = (r3.hi - r3.lo) / (r1.hi - r1.lo);
    ck_assert_msg(ratio > 0.9 && ratio < 1.1, "width ratio %f", ratio);
}
END_TEST

int main(void) {
    Suite *s = suite_create("stats");
    TCase *tc = tcase_create("wilson");
    tcase_add_test(tc, newcombe_table);
    tcase_add_test(tc, properties);
    tcase_add_test(tc, t_quantiles_match_tables);
    tcase_add_test(tc, t_interval_hand_worked);
    tcase_add_test(tc, mcnemar_hand_worked);
    tcase_add_test(tc, quantile_type7);
    tcase_add_test(tc, rng_reproducible_and_unbiased);
    tcase_add_test(tc, bootstrap_example_variance);
    tcase_add_test(tc, bootstrap_seed_variance);
    tcase_add_test(tc, bootstrap_shared_examples);
    suite_add_tcase(s, tc);
    return run_test_suite(s);
}
