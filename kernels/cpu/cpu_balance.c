/* CPU reference of the balancing losses on router logits: the masked entropy ("perplexity") regularizer of MoEUT
 * and the Switch Transformer load-balancing loss. Formulas: kernels/backend_ops.h. */
#include <float.h>
#include <string.h>

#include <omp.h>

#include "kernels/cpu/cpu_internal.h"
#include "kernels/entropy_reg_value.h"
#include "kernels/switch_balance_value.h"
#include "pipeline/base/log.h"

/* Softmax of l[E] into p[E], in double. */
static void softmax_row(double *p, const scalar_t *l, int E) {
    double mx = -DBL_MAX;
    for (int e = 0; e < E; e++)
        if (l[e] > mx) mx = l[e];
    double s = 0;
    for (int e = 0; e < E; e++) {
        p[e] = exp((double)l[e] - mx);
        s += p[e];
    }
    for (int e = 0; e < E; e++) p[e] /= s;
}

/* logits[R,B,T,G,E], valid[B,T] (NULL = all valid). See backend_ops.h for the formula. Everything in double; every
 * sum runs in a fixed order, parallel loops only split independent (b,g) pairs or positions. */
double cpu_entropy_reg(Backend *be, scalar_t *dlogits, const scalar_t *logits, const uint8_t *valid, int R, int B,
                       int T, int G, int E, scalar_t coef) {
    size_t n_logits = (size_t)R * B * T * G * E;
    int n_threads = omp_get_max_threads();
    double *cnt = cpu_scratch(be, SCRATCH_EREG_COUNT, (size_t)B * sizeof(double));
    double *logpbar = cpu_scratch(be, SCRATCH_EREG_LOG_PBAR, (size_t)B * G * E * sizeof(double)); /* [B,G,E] */
    double *H = cpu_scratch(be, SCRATCH_EREG_ENTROPY, (size_t)B * G * sizeof(double));            /* [B,G] */
    double *prow = cpu_scratch(be, SCRATCH_BALANCE_SOFTMAX, (size_t)n_threads * E * sizeof(double));

    int n_seq = 0; /* sequences with at least one valid position: the B of the formula */
    for (int b = 0; b < B; b++) {
        long nv = 0;
        for (int t = 0; t < T; t++) nv += valid ? (valid[(size_t)b * T + t] != 0) : 1;
        cnt[b] = (double)R * (double)nv;
        if (nv > 0) n_seq++;
    }
    if (n_seq == 0 || R == 0) {
        if (dlogits) memset(dlogits, 0, n_logits * sizeof(scalar_t));
        return 0.0;
    }

    /* pbar_{b,g} = mean of softmax over the valid (r,t) of sequence b, and its entropy. */
#pragma omp parallel for schedule(static) num_threads(n_threads)
    for (int bg = 0; bg < B * G; bg++) {
        int b = bg / G, g = bg % G;
        double *acc = logpbar + (size_t)bg * E;
        for (int e = 0; e < E; e++) acc[e] = 0;
        H[bg] = 0;
        if (cnt[b] == 0) continue;
        double *p = prow + (size_t)omp_get_thread_num() * E;
        for (int r = 0; r < R; r++)
            for (int t = 0; t < T; t++) {
                if (valid && !valid[(size_t)b * T + t]) continue;
                softmax_row(p, logits + ((((size_t)r * B + b) * T + t) * G + g) * E, E);
                for (int e = 0; e < E; e++) acc[e] += p[e];
            }
        double h = 0;
        for (int e = 0; e < E; e++) {
            double pb = acc[e] / cnt[b];
            if (pb > 0) h -= pb * log(pb);
            acc[e] = log(pb > DBL_MIN ? pb : DBL_MIN); /* p underflowed to 0 there: its gradient term is 0 anyway */
        }
        H[bg] = h;
    }

    double grad_factor;
    double value = entropy_reg_value(cnt, H, B, G, n_seq, &grad_factor);

    if (dlogits) {
        /* valid position of sequence j: coef * p (log pbar_j - sum_e p log pbar_j) * mean_i(1/cnt_i) / (B*G) */
        double factor = (double)coef * grad_factor;
#pragma omp parallel for schedule(static) num_threads(n_threads)
        for (long rbt = 0; rbt < (long)R * B * T; rbt++) {
            int t = (int)(rbt % T), b = (int)((rbt / T) % B);
            scalar_t *dl = dlogits + (size_t)rbt * G * E;
            if (cnt[b] == 0 || (valid && !valid[(size_t)b * T + t])) {
                memset(dl, 0, (size_t)G * E * sizeof(scalar_t));
                continue;
            }
            double *p = prow + (size_t)omp_get_thread_num() * E;
            for (int g = 0; g < G; g++) {
                const double *lp = logpbar + ((size_t)b * G + g) * E;
                softmax_row(p, logits + ((size_t)rbt * G + g) * E, E);
                double avg = 0;
                for (int e = 0; e < E; e++) avg += p[e] * lp[e];
                for (int e = 0; e < E; e++) dl[(size_t)g * E + e] = (scalar_t)(factor * p[e] * (lp[e] - avg));
            }
        }
    }
    return value;
}

/* logits[B,T,G,E], sel[B,T,G,k], valid[B,T] (NULL = all valid). f and P accumulate serially in position order (one
 * thread per group), the gradient is parallel over positions: the result does not depend on the thread count. */
double cpu_switch_balance(Backend *be, scalar_t *dlogits, const scalar_t *logits, const int32_t *sel,
                          const uint8_t *valid, int B, int T, int G, int E, int k, scalar_t coef) {
    const long N = (long)B * T;
    const size_t GE = (size_t)G * E;
    int n_threads = omp_get_max_threads();
    double *f = cpu_scratch(be, SCRATCH_SWB_LOAD, GE * sizeof(double)); /* [G,E] load fraction */
    double *P = cpu_scratch(be, SCRATCH_SWB_MEAN_PROB, GE * sizeof(double));
    double *prow = cpu_scratch(be, SCRATCH_BALANCE_SOFTMAX, (size_t)n_threads * E * sizeof(double));
    long n = 0;
    for (long t = 0; t < N; t++) n += valid ? (valid[t] != 0) : 1;
    if (n == 0) {
        if (dlogits) memset(dlogits, 0, (size_t)N * GE * sizeof(scalar_t));
        return 0.0;
    }
#pragma omp parallel for schedule(static) num_threads(n_threads)
    for (int g = 0; g < G; g++) {
        double *fg = f + (size_t)g * E, *Pg = P + (size_t)g * E, *p = prow + (size_t)omp_get_thread_num() * E;
        for (int e = 0; e < E; e++) fg[e] = Pg[e] = 0;
        for (long t = 0; t < N; t++) {
            if (valid && !valid[t]) continue;
            const int32_t *s = sel + ((size_t)t * G + g) * k;
            for (int j = 0; j < k; j++) {
                int e = s[j] - g * E;
                if (e < 0 || e >= E) die("switch_balance: expert id %d is not in group %d of %d experts", (int)s[j], g, E);
                fg[e] += 1;
            }
            softmax_row(p, logits + ((size_t)t * G + g) * E, E);
            for (int e = 0; e < E; e++) Pg[e] += p[e];
        }
    }
    double grad_factor;
    double value = switch_balance_value(f, P, G, E, k, n, &grad_factor);
    if (dlogits) {
        const double factor = (double)coef * grad_factor;
#pragma omp parallel for schedule(static) num_threads(n_threads)
        for (long t = 0; t < N; t++) {
            scalar_t *dl = dlogits + (size_t)t * GE;
            if (valid && !valid[t]) {
                memset(dl, 0, GE * sizeof(scalar_t));
                continue;
            }
            double *p = prow + (size_t)omp_get_thread_num() * E;
            for (int g = 0; g < G; g++) {
                const double *fg = f + (size_t)g * E;
                softmax_row(p, logits + ((size_t)t * G + g) * E, E);
                double fp = 0;
                for (int e = 0; e < E; e++) fp += fg[e] * p[e];
                for (int e = 0; e < E; e++) dl[(size_t)g * E + e] = (scalar_t)(factor * p[e] * (fg[e] - fp));
            }
        }
    }
    return value;
}
