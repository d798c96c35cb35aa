#!/usr/bin/env python3
"""Independent recomputation (Python standard library only: no NumPy or SciPy on this machine) of the hand-worked numbers in tests/unit/test_stats.c,
written from the textbook definitions rather than from pipeline/base/stats.c:

  * Student-t 0.975 quantiles: the t density integrated numerically (Simpson on a fine grid) and the quantile found
    by bisection;
  * t-intervals: mean +- t * sd / sqrt(n);
  * exact McNemar p-values: math.comb on the binomial;
  * the example bootstrap of a 0/1 mean (normal approximation) and a brute-force hierarchical bootstrap with Python's
    own generator (a different RNG, so only approximately equal to the C numbers).

Run: python3 tests/reference/stats_check.py   (prints each value and exits 1 if one is off)."""
import math
import random
import sys

failures = 0


def check(name, got, want, tol):
    global failures
    ok = abs(got - want) <= tol
    failures += not ok
    print(f"{'ok  ' if ok else 'FAIL'} {name}: {got:.10g} (test_stats.c: {want:.10g}, tol {tol:g})")


def t_pdf(x, df):
    c = math.exp(math.lgamma((df + 1) / 2) - math.lgamma(df / 2)) / math.sqrt(df * math.pi)
    return c * (1 + x * x / df) ** (-(df + 1) / 2)


def t_cdf(t, df, steps=20000):
    # P(T <= t) = 0.5 + integral_0^t pdf (composite Simpson)
    h = t / steps
    acc = t_pdf(0.0, df) + t_pdf(t, df)
    for i in range(1, steps):
        acc += (4 if i % 2 else 2) * t_pdf(i * h, df)
    return 0.5 + h / 3 * acc


def t975(df):
    lo, hi = 1.9, 13.0
    for _ in range(40):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if t_cdf(mid, df) < 0.975 else (lo, mid)
    return (lo + hi) / 2


for df, table in [(1, 12.7062047), (2, 4.3026527), (3, 3.1824463), (4, 2.7764451), (10, 2.2281389), (30, 2.0422725)]:
    check(f"t_0.975(df={df})", t975(df), table, 2e-6)


def t_interval(x):
    n = len(x)
    mean = sum(x) / n
    sd = math.sqrt(sum((v - mean) ** 2 for v in x) / (n - 1))
    return mean, t975(n - 1) * sd / math.sqrt(n)


m, half = t_interval([1, 2, 3])
check("t-interval {1,2,3} half-width", half, 2.4841377, 1e-6)
m, half = t_interval([0.875, 0.938])
check("t-interval {0.875,0.938} half-width", half, 0.4002454, 1e-6)


def mcnemar(b, c):
    n, k = b + c, min(b, c)
    if n == 0:
        return 1.0
    return min(1.0, 2 * sum(math.comb(n, i) for i in range(k + 1)) / 2**n)


for (b, c), want in [((0, 5), 0.0625), ((1, 9), 0.021484375), ((10, 2), 0.03857421875), ((3, 3), 1.0), ((0, 0), 1.0)]:
    check(f"McNemar p(b={b}, c={c})", mcnemar(b, c), want, 1e-14)
p = mcnemar(400, 600)
check("McNemar p(400, 600) in (1e-11, 1e-8): log10 p", math.log10(p), -9.5, 1.5)

# Example bootstrap of a mean: 400 values, 100 ones -> normal approximation 0.25 +- 1.96 * sqrt(.25 * .75 / 400).
sd = math.sqrt(0.25 * 0.75 / 400)
check("bootstrap 0/1 mean, lo (normal approx.)", 0.25 - 1.959964 * sd, 0.2076, 5e-4)
check("bootstrap 0/1 mean, hi (normal approx.)", 0.25 + 1.959964 * sd, 0.2924, 5e-4)
rng = random.Random(0)


def quantile(sorted_x, q):  # type 7, as quantile_sorted
    pos = q * (len(sorted_x) - 1)
    i = min(int(pos), len(sorted_x) - 2)
    return sorted_x[i] + (pos - i) * (sorted_x[i + 1] - sorted_x[i])


v = [float(i % 4 == 0) for i in range(400)]
reps = sorted(sum(v[rng.randrange(400)] for _ in range(400)) / 400 for _ in range(4000))
check("bootstrap 0/1 mean, lo (resampling)", quantile(reps, 0.025), 0.2076, 0.008)
check("bootstrap 0/1 mean, hi (resampling)", quantile(reps, 0.975), 0.2924, 0.008)


# Hierarchical bootstrap, crossed design: 3 identical seeds -> the same width as one seed.
def hier(vals, n_reps=2000):
    s_n, e_n = len(vals), len(vals[0])
    out = []
    for _ in range(n_reps):
        seeds = [rng.randrange(s_n) for _ in range(s_n)]
        ex = [rng.randrange(e_n) for _ in range(e_n)]
        out.append(sum(vals[s][e] for s in seeds for e in ex) / (s_n * e_n))
    out.sort()
    return quantile(out, 0.975) - quantile(out, 0.025)


row = [float(i % 3 == 0) for i in range(300)]
check("hierarchical bootstrap width ratio, 3 identical seeds vs 1", hier([row, row, row]) / hier([row]), 1.0, 0.1)

sys.exit(1 if failures else 0)
