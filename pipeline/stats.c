/* Wilson score interval (E. B. Wilson, 1927), the interval the reports print beside every accuracy. */
#include "pipeline/stats.h"

#include <math.h>

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
