/* Expert-choice selection (Zhou et al. 2022, arXiv 2202.09368 §3.1: each expert takes its top-c tokens of the
 * token-to-expert score matrix S = softmax(X W_g)): the CPU backend's; see expert_choice_pick.h. The scores use
 * routing_key.h's softmax, which the CUDA backend's selection on the device (cuda_expert_choice.cu) shares. */
#include "kernels/expert_choice_pick.h"

#include <math.h>
#include <stdlib.h>

#include "kernels/routing_key.h"
#include "pipeline/base/log.h"

void expert_choice_scores_f(double *score, const float *logits, int N, int E) {
    for (long n = 0; n < N; n++) {
        const float *l = logits + (size_t)n * E;
        double mx, s;
        routing_softmax_stats_f(l, E, &mx, &s);
        for (int e = 0; e < E; e++) score[(size_t)n * E + e] = routing_softmax_prob((double)l[e], mx, s);
    }
}

void expert_choice_scores_d(double *score, const double *logits, int N, int E) {
    for (long n = 0; n < N; n++) {
        const double *l = logits + (size_t)n * E;
        double mx, s;
        routing_softmax_stats_d(l, E, &mx, &s);
        for (int e = 0; e < E; e++) score[(size_t)n * E + e] = routing_softmax_prob(l[e], mx, s);
    }
}

typedef struct {
    double s;
    int32_t n;
} Cand;

/* descending score, a NaN score before every number (a row with a NaN logit: its whole softmax is NaN; torch.topk
 * ranks NaN largest), then ascending position: a total order, so the pick does not depend on the sort's stability
 * (cuda_expert_choice.cu's keys order alike) */
static int cand_cmp(const void *a, const void *b) {
    const Cand *x = a, *y = b;
    const int x_nan = isnan(x->s), y_nan = isnan(y->s);
    if (x_nan != y_nan) return y_nan - x_nan;
    if (!x_nan && x->s != y->s) return x->s > y->s ? -1 : 1;
    return (x->n > y->n) - (x->n < y->n);
}

void expert_choice_pick(int32_t *pos, int32_t *expert, const double *score, const uint8_t *valid, int N, int E,
                        int c) {
    int n_valid = 0;
    for (int n = 0; n < N; n++) n_valid += !valid || valid[n];
    if (c < 1 || c > n_valid) die("expert_choice_select: capacity c=%d must be in [1, %d valid positions]", c, n_valid);
    Cand *cand = xmalloc((size_t)n_valid * sizeof *cand);
    for (int e = 0; e < E; e++) {
        int m = 0;
        for (int n = 0; n < N; n++)
            if (!valid || valid[n]) cand[m++] = (Cand){score[(size_t)n * E + e], n};
        qsort(cand, (size_t)m, sizeof *cand, cand_cmp);
        for (int j = 0; j < c; j++) {
            pos[(size_t)e * c + j] = cand[j].n;
            if (expert) expert[(size_t)e * c + j] = e;
        }
    }
    free(cand);
}
