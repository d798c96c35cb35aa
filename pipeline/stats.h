/* Small statistics helpers for evaluation results. */
#ifndef PIPELINE_STATS_H
#define PIPELINE_STATS_H

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

#endif
