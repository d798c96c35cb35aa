/* Statistics for the reports: the Wilson score interval (E. B. Wilson, 1927) printed beside every accuracy, the
 * t-interval across seeds, the exact McNemar test and a hierarchical bootstrap for paired differences. */
#include "pipeline/base/stats.h"

#include <math.h>
#include <stdlib.h>

#include "pipeline/base/log.h"
#include "pipeline/base/rng.h"

int wilson_interval(long successes, long n, double z, double *lo, double *hi) {
    if (n < 0 || successes < 0 || successes > n) {
        *lo = *hi = NAN;
        return -1;
    }
    if (n == 0) {
        *lo = 0.0;
        *hi = 1.0;
        return 0;
    }
    const double nn = (double)n;
    const double p = (double)successes / nn;
    const double z2 = z * z;
    const double denom = 1.0 + z2 / nn;
    const double centre = (p + z2 / (2.0 * nn)) / denom;
    const double half = z * sqrt(p * (1.0 - p) / nn + z2 / (4.0 * nn * nn)) / denom;
    double l = centre - half, h = centre + half;
    /* Rounding can push the ends a hair outside [0,1] at p = 0 or 1; the exact interval ends there. */
    if (successes == 0 || l < 0.0) l = 0.0;
    if (successes == n || h > 1.0) h = 1.0;
    *lo = l;
    *hi = h;
    return 0;
}

double safe_ratio(long successes, long n) { return n > 0 ? (double)successes / (double)n : 0.0; }

/* ---------------------------------------------------------------- Student's t ------------------------------ */

/* Continued fraction of the regularized incomplete beta function (modified Lentz; Press et al., Numerical Recipes,
 * 3rd ed., §6.4), converging fast for x < (a+1)/(a+b+2). */
static double beta_cf(double a, double b, double x) {
    const double tiny = 1e-300;
    double c = 1.0, d = 1.0 - (a + b) * x / (a + 1.0);
    if (fabs(d) < tiny) d = tiny;
    d = 1.0 / d;
    double h = d;
    for (int m = 1; m <= 500; m++) {
        const double m2 = 2.0 * m;
        double aa = m * (b - m) * x / ((a - 1.0 + m2) * (a + m2));
        d = 1.0 + aa * d;
        if (fabs(d) < tiny) d = tiny;
        c = 1.0 + aa / c;
        if (fabs(c) < tiny) c = tiny;
        d = 1.0 / d;
        h *= d * c;
        aa = -(a + m) * (a + b + m) * x / ((a + m2) * (a + 1.0 + m2));
        d = 1.0 + aa * d;
        if (fabs(d) < tiny) d = tiny;
        c = 1.0 + aa / c;
        if (fabs(c) < tiny) c = tiny;
        d = 1.0 / d;
        const double del = d * c;
        h *= del;
        if (fabs(del - 1.0) < 1e-15) break;
    }
    return h;
}

/* I_x(a, b), the regularized incomplete beta function. */
static double incomplete_beta(double a, double b, double x) {
    if (x <= 0.0) return 0.0;
    if (x >= 1.0) return 1.0;
    const double front = exp(lgamma(a + b) - lgamma(a) - lgamma(b) + a * log(x) + b * log1p(-x));
    if (x < (a + 1.0) / (a + b + 2.0)) return front * beta_cf(a, b, x) / a;
    return 1.0 - front * beta_cf(b, a, 1.0 - x) / b;
}

double t_cdf(double t, double df) {
    if (!(df > 0) || isnan(t)) return NAN;
    /* P(|T| > |t|) = I_{df/(df+t^2)}(df/2, 1/2) */
    const double tail2 = incomplete_beta(df / 2.0, 0.5, df / (df + t * t));
    return t >= 0 ? 1.0 - 0.5 * tail2 : 0.5 * tail2;
}

double t_quantile_975(int df) {
    if (df < 1) return NAN;
    /* t_cdf is increasing; the 0.975 quantile lies in [1.95, 12.71] for every df >= 1. */
    double lo = 1.9, hi = 13.0;
    for (int i = 0; i < 200 && hi - lo > 1e-13; i++) {
        const double mid = 0.5 * (lo + hi);
        if (t_cdf(mid, df) < 0.975) lo = mid;
        else hi = mid;
    }
    return 0.5 * (lo + hi);
}

int mean_t_interval(const double *x, int n, double *mean, double *lo, double *hi, double *sd_out) {
    *mean = *lo = *hi = NAN;
    if (sd_out) *sd_out = NAN;
    if (n < 1) return -1;
    double s = 0;
    for (int i = 0; i < n; i++) s += x[i];
    const double m = s / n;
    *mean = m;
    if (n < 2) return 0;
    double ss = 0;
    for (int i = 0; i < n; i++) ss += (x[i] - m) * (x[i] - m);
    const double sd = sqrt(ss / (n - 1));
    const double half = t_quantile_975(n - 1) * sd / sqrt((double)n);
    *lo = m - half;
    *hi = m + half;
    if (sd_out) *sd_out = sd;
    return 0;
}

/* ---------------------------------------------------------------- McNemar ---------------------------------- */

double mcnemar_exact_p(long b, long c) {
    if (b < 0 || c < 0) return NAN;
    const long n = b + c, k = b < c ? b : c;
    if (n == 0) return 1.0;
    /* P(X <= k), X ~ Bin(n, 1/2), summed in log space so that n in the thousands neither overflows nor underflows
     * to a wrong 0 too early. */
    double sum = 0.0;
    const double log_half_n = -(double)n * log(2.0);
    for (long i = 0; i <= k; i++)
        sum += exp(lgamma((double)n + 1) - lgamma((double)i + 1) - lgamma((double)(n - i) + 1) + log_half_n);
    const double p = 2.0 * sum;
    return p > 1.0 ? 1.0 : p;
}

/* ---------------------------------------------------------------- bootstrap -------------------------------- */

void stats_rng_seed(StatsRng *r, unsigned long long seed) { r->state = seed; }

unsigned long long stats_rng_next(StatsRng *r) { return splitmix64_next(&r->state); }

long stats_rng_below(StatsRng *r, long n) { return (long)splitmix64_below(&r->state, (uint64_t)n); }

double quantile_sorted(const double *sorted, int n, double q) {
    if (n == 1) return sorted[0];
    const double pos = q * (n - 1);
    int i = (int)floor(pos);
    if (i >= n - 1) return sorted[n - 1];
    if (i < 0) return sorted[0];
    const double frac = pos - i;
    return sorted[i] + frac * (sorted[i + 1] - sorted[i]);
}

static int cmp_double(const void *a, const void *b) {
    const double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int hierarchical_bootstrap_mean(const double *values, int n_seeds, long n_examples, int n_replicates,
                                unsigned long long rng_seed, BootstrapResult *out) {
    out->estimate = out->lo = out->hi = NAN;
    out->n_replicates = n_replicates;
    out->rng_seed = rng_seed;
    if (n_seeds < 1 || n_examples < 1 || n_replicates < 1) return -1;
    double total = 0;
    for (long i = 0; i < (long)n_seeds * n_examples; i++) total += values[i];
    out->estimate = total / ((double)n_seeds * (double)n_examples);

    StatsRng rng;
    stats_rng_seed(&rng, rng_seed);
    double *reps = xmalloc((size_t)n_replicates * sizeof *reps);
    int *seeds = xmalloc((size_t)n_seeds * sizeof *seeds);
    /* Per-example sum over the drawn seeds, so that one example draw costs one addition. */
    double *col = xmalloc((size_t)n_examples * sizeof *col);
    for (int r = 0; r < n_replicates; r++) {
        for (int s = 0; s < n_seeds; s++) seeds[s] = (int)stats_rng_below(&rng, n_seeds);
        for (long i = 0; i < n_examples; i++) {
            double acc = 0;
            for (int s = 0; s < n_seeds; s++) acc += values[(size_t)seeds[s] * n_examples + i];
            col[i] = acc;
        }
        double sum = 0;
        for (long i = 0; i < n_examples; i++) sum += col[stats_rng_below(&rng, n_examples)];
        reps[r] = sum / ((double)n_seeds * (double)n_examples);
    }
    qsort(reps, (size_t)n_replicates, sizeof *reps, cmp_double);
    out->lo = quantile_sorted(reps, n_replicates, 0.025);
    out->hi = quantile_sorted(reps, n_replicates, 0.975);
    free(col);
    free(seeds);
    free(reps);
    return 0;
}
