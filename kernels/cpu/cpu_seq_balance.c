/* CPU reference of seq_balance, DeepSeek-V3's sequence-wise balance loss (formula: kernels/backend_ops.h). The
 * statistics accumulate serially in position order per sequence; the gradient is parallel over positions: the result
 * does not depend on the thread count. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cpu/cpu_internal.h"
#include "kernels/seq_balance_value.h"
#include "pipeline/base/log.h"

/* s'[E] = the row's scores normalised over all E experts (double); w[E] (may be NULL) = ds'_i/dl_e's common factor:
 * s'_e (softmax) or sigmoid(l_e)(1 - sigmoid(l_e)) / sum_j sigmoid(l_j) (sigmoid) */
static void normalised_scores(double *s, double *w, const scalar_t *l, int E, int softmax) {
    double sum = 0;
    if (softmax) {
        double mx = -INFINITY;
        for (int e = 0; e < E; e++) mx = fmax(mx, (double)l[e]);
        for (int e = 0; e < E; e++) sum += (s[e] = exp((double)l[e] - mx));
    } else {
        for (int e = 0; e < E; e++) sum += (s[e] = 1.0 / (1.0 + exp(-(double)l[e])));
    }
    for (int e = 0; e < E; e++) {
        double sig = s[e];
        s[e] /= sum;
        if (w) w[e] = softmax ? s[e] : sig * (1.0 - sig) / sum;
    }
}

double cpu_seq_balance(Backend *be, scalar_t *dlogits, const scalar_t *logits, const int32_t *sel,
                       const uint8_t *valid, int B, int T, int E, int k, RouterKind kind, scalar_t coef) {
    (void)be;
    if (kind != ROUTER_SIGMOID && kind != ROUTER_SOFTMAX) die("seq_balance: unknown router kind %d", (int)kind);
    const int softmax = kind == ROUTER_SOFTMAX;
    const size_t BE = (size_t)B * E;
    double *f = xcalloc(BE ? BE : 1, sizeof(double)), *P = xcalloc(BE ? BE : 1, sizeof(double));
    double *factor = xcalloc(B ? (size_t)B : 1, sizeof(double));
    double *n = xcalloc(B ? (size_t)B : 1, sizeof(double)); /* counted positions per sequence (exact) */
#pragma omp parallel for schedule(static)
    for (int b = 0; b < B; b++) {
        double *s = xmalloc((size_t)E * sizeof(double));
        for (int t = 0; t < T; t++) {
            const size_t row = (size_t)b * T + t;
            if (valid && !valid[row]) continue;
            n[b] += 1;
            for (int j = 0; j < k; j++) {
                int e = sel[row * k + j];
                if (e < 0 || e >= E) die("seq_balance: expert id %d is not in [0, %d)", e, E);
                f[(size_t)b * E + e] += 1;
            }
            normalised_scores(s, NULL, logits + row * E, E, softmax);
            for (int e = 0; e < E; e++) P[(size_t)b * E + e] += s[e];
        }
        free(s);
    }
    double value = seq_balance_value(f, P, n, B, E, k, (double)coef, factor);
    if (dlogits) {
#pragma omp parallel for schedule(static)
        for (long row = 0; row < (long)B * T; row++) {
            const int b = (int)(row / T);
            if ((valid && !valid[row]) || factor[b] == 0) continue;
            double *s = xmalloc(2 * (size_t)E * sizeof(double)), *w = s + E;
            normalised_scores(s, w, logits + (size_t)row * E, E, softmax);
            const double *fb = f + (size_t)b * E;
            double fs = 0;
            for (int e = 0; e < E; e++) fs += fb[e] * s[e];
            scalar_t *dl = dlogits + (size_t)row * E;
            for (int e = 0; e < E; e++) dl[e] += (scalar_t)(factor[b] * w[e] * (fb[e] - fs));
            free(s);
        }
    }
    free(f), free(P), free(factor), free(n);
    return value;
}
