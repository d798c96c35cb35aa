/* Small statistics helpers for evaluation results. */
#ifndef PIPELINE_STATS_H
#define PIPELINE_STATS_H

#include <stdint.h>

/* z for a two-sided 95% interval of the normal distribution. */
#define STATS_Z95 1.959963984540054

/* Wilson score interval for a binomial proportion with `successes` out of `n` trials:
 *   centre = (p + z^2/(2n)) / (1 + z^2/n),  half = z * sqrt(p(1-p)/n + z^2/(4n^2)) / (1 + z^2/n),  p = successes/n.
 * Unlike the normal (Wald) interval it stays inside [0,1] and is sensible at p = 0 or 1 and for small n.
 * n == 0 gives the uninformative interval [0, 1]. Returns 0, or -1 for invalid counts (n < 0, successes outside
 * [0, n]) with lo = hi = NaN. */
int wilson_interval(long successes, long n, double z, double *lo, double *hi);

/* successes / n, or 0 when n == 0 (an empty set has no accuracy; callers print n so that this is visible). */
double safe_ratio(long successes, long n);

/* ---- across-seed intervals ---- */

/* Two-sided 95% critical value of Student's t with df degrees of freedom (the 0.975 quantile), by bisection on the
 * t CDF (regularized incomplete beta). df = 1: 12.706, 2: 4.303, 4: 2.776, large: 1.960. df < 1 gives NaN. */
double t_quantile_975(int df);

/* Student's t CDF P(T <= t) for df > 0 degrees of freedom. */
double t_cdf(double t, double df);

/* Mean and 95% t-interval for the mean of n values (sample standard deviation, n-1 degrees of freedom):
 * mean +- t_quantile_975(n-1) * sd / sqrt(n). n == 1: the mean, with lo = hi = NaN (an interval needs >= 2 values).
 * Returns 0, or -1 for n < 1 (all outputs NaN). sd_out may be NULL. */
int mean_t_interval(const double *x, int n, double *mean, double *lo, double *hi, double *sd_out);

/* ---- paired tests on per-example correctness ---- */

/* Exact two-sided McNemar test on the discordant pairs of a paired 2x2 table: b = examples only the first system
 * gets right, c = only the second. Under H0 (equal accuracy) b ~ Binomial(b + c, 1/2); the p-value is
 * min(1, 2 * P(X <= min(b, c))). b + c == 0 gives 1. Negative counts give NaN. */
double mcnemar_exact_p(long b, long c);

/* A small, fast, fully specified RNG (splitmix64, pipeline/base/rng.h) so that bootstrap intervals are the same on every
 * machine and C library (rand() is not). */
typedef struct {
    uint64_t state;
} StatsRng;
void stats_rng_seed(StatsRng *r, unsigned long long seed);
unsigned long long stats_rng_next(StatsRng *r);
long stats_rng_below(StatsRng *r, long n); /* uniform in [0, n), n >= 1 (rejection sampling: no modulo bias) */

/* Quantile q in [0,1] of sorted[n] with linear interpolation between order statistics (R's and NumPy's default,
 * "type 7": position q*(n-1)). n >= 1. */
double quantile_sorted(const double *sorted, int n, double q);

/* Hierarchical (two-stage) bootstrap of a mean over seeds and examples.
 *
 * values[s * n_examples + i] is a per-example quantity of seed s (e.g. correct_A - correct_B, in {-1, 0, 1}); every
 * seed was evaluated on the SAME n_examples examples (a crossed design). The statistic is
 *     mean over seeds of (mean over examples of values[s, i]).
 * One replicate draws n_seeds seeds with replacement, then n_examples example indices with replacement, ONE draw of
 * examples shared by the drawn seeds (the examples are shared by the seeds, so drawing them independently per seed
 * would average the example variance away and understate it), and evaluates the statistic on the drawn cells. The
 * interval is the 2.5% and 97.5% quantiles (quantile_sorted) of n_replicates replicates; rng_seed fixes the draws,
 * so the interval is reproducible. With one seed it reduces to the ordinary example bootstrap.
 * Returns 0 with the point estimate (the statistic on the data), lo and hi; -1 when a count is < 1. */
typedef struct {
    double estimate, lo, hi;
    int n_replicates;
    unsigned long long rng_seed;
} BootstrapResult;
int hierarchical_bootstrap_mean(const double *values, int n_seeds, long n_examples, int n_replicates,
                                unsigned long long rng_seed, BootstrapResult *out);

#endif
