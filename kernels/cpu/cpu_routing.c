/* CPU reference: sigmoid top-k expert selection and the masked entropy ("perplexity") regularizer. */
#include <float.h>
#include <string.h>

#include <omp.h>

#include "kernels/cpu/cpu_internal.h"
#include "kernels/entropy_reg_value.h"
#include "pipeline/log.h"

/* For each (n,g): the k largest logits among experts not dropped, in descending order (ties: lower index first).
 * sel = g*E + e (global expert id), gate = sigmoid(logit).
 * If fewer than k experts survive the drop mask, the remaining slots take the lowest-index dropped experts with
 * gate 0: the reference sets dropped sigmoid values to -inf before top-k, which then picks such entries with a
 * weight that contributes nothing. */
void cpu_topk_sigmoid(Backend *be, int32_t *sel, scalar_t *gate, const scalar_t *logits, const uint8_t *drop, int N,
                      int G, int E, int k) {
    if (k < 1 || k > E) die("topk_sigmoid: k=%d must be in [1, E=%d]", k, E);
#pragma omp parallel for schedule(static) if ((size_t)N * G * E > 32768)
    for (long ng = 0; ng < (long)N * G; ng++) {
        int g = (int)(ng % G);
        const scalar_t *l = logits + (size_t)ng * E;
        const uint8_t *dr = drop ? drop + (size_t)ng * E : NULL;
        int32_t *s = sel + (size_t)ng * k;
        scalar_t *gv = gate + (size_t)ng * k; /* holds the selected logits until the final sigmoid */
        int count = 0;
        for (int e = 0; e < E; e++) {
            if (dr && dr[e]) continue;
            scalar_t val = l[e];
            if (count == k && !(val > gv[k - 1])) continue; /* strictly greater: an equal later expert loses */
            int pos = count < k ? count : k - 1;            /* insertion point, shifting smaller entries down */
            while (pos > 0 && val > gv[pos - 1]) {
                gv[pos] = gv[pos - 1];
                s[pos] = s[pos - 1];
                pos--;
            }
            gv[pos] = val;
            s[pos] = e;
            if (count < k) count++;
        }
        for (int j = 0; j < count; j++) {
            gv[j] = cpu_sigmoid(gv[j]);
            s[j] += g * E;
        }
        for (int e = 0; e < E && count < k; e++) /* not enough surviving experts: dropped ones, weight 0 */
            if (dr && dr[e]) {
                s[count] = g * E + e;
                gv[count] = 0;
                count++;
            }
    }
}

/* dlogits[N,G,E] += dgate * gate * (1 - gate) at the selected experts (distinct within a row). */
void cpu_topk_sigmoid_backward(Backend *be, scalar_t *dlogits, const scalar_t *dgate, const int32_t *sel,
                               const scalar_t *gate, int N, int G, int E, int k) {
#pragma omp parallel for schedule(static) if ((size_t)N * G * k > 32768)
    for (long ng = 0; ng < (long)N * G; ng++) {
        int g = (int)(ng % G);
        for (int j = 0; j < k; j++) {
            size_t slot = (size_t)ng * k + j;
            int e = sel[slot] - g * E;
            if (e < 0 || e >= E) continue; /* not an expert of this group: cannot come from topk_sigmoid */
            scalar_t y = gate[slot];
            dlogits[(size_t)ng * E + e] += dgate[slot] * y * (1 - y);
        }
    }
}

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

/* logits[R,B,T,G,E], valid[B,T] (NULL = all valid). See backend.h for the formula. Everything in double; every
 * sum runs in a fixed order, parallel loops only split independent (b,g) pairs or positions. */
double cpu_entropy_reg(Backend *be, scalar_t *dlogits, const scalar_t *logits, const uint8_t *valid, int R, int B,
                       int T, int G, int E, scalar_t coef) {
    size_t n_logits = (size_t)R * B * T * G * E;
    int n_threads = omp_get_max_threads();
    double *cnt = cpu_scratch(be, SCRATCH_A, (size_t)B * sizeof(double));            /* [B] R * valid positions */
    double *logpbar = cpu_scratch(be, SCRATCH_B, (size_t)B * G * E * sizeof(double)); /* [B,G,E] */
    double *H = cpu_scratch(be, SCRATCH_C, (size_t)B * G * sizeof(double));           /* [B,G] */
    double *prow = cpu_scratch(be, SCRATCH_D, (size_t)n_threads * E * sizeof(double)); /* per-thread softmax row */

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
