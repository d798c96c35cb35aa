/* The quantity topk_select ranks (kernels/backend_ops.h), one definition for the CPU reference and the CUDA kernel.
 *   no bias : the logit (exact in double: ranking it equals ranking sigmoid or softmax of it)
 *   bias    : score + bias, score = sigmoid(l) or softmax_e(l) = exp(l - mx) / sum (mx, sum: the row's max logit and
 *             sum of exp(l - mx), from routing_softmax_stats), all in double (balance "bias", DeepSeek-V3 eq. 16)
 * Plain C11 that nvcc also compiles as device code. */
#ifndef KERNELS_ROUTING_KEY_H
#define KERNELS_ROUTING_KEY_H

#include <float.h>
#include <math.h>

#ifdef __CUDACC__
#define ROUTING_KEY_FN __host__ __device__ static inline
#else
#define ROUTING_KEY_FN static inline
#endif

/* Max and sum of exp(l - max) over a row of E logits, in double. */
ROUTING_KEY_FN void routing_softmax_stats_f(const float *l, int E, double *mx_out, double *sum_out) {
    double mx = -DBL_MAX, s = 0;
    for (int e = 0; e < E; e++) mx = (double)l[e] > mx ? (double)l[e] : mx;
    for (int e = 0; e < E; e++) s += exp((double)l[e] - mx);
    *mx_out = mx;
    *sum_out = s;
}
ROUTING_KEY_FN void routing_softmax_stats_d(const double *l, int E, double *mx_out, double *sum_out) {
    double mx = -DBL_MAX, s = 0;
    for (int e = 0; e < E; e++) mx = l[e] > mx ? l[e] : mx;
    for (int e = 0; e < E; e++) s += exp(l[e] - mx);
    *mx_out = mx;
    *sum_out = s;
}

/* The softmax probability of one logit from its row's stats (also expert-choice routing's score, expert_choice_pick.c
 * and cuda_expert_choice.cu). */
ROUTING_KEY_FN double routing_softmax_prob(double logit, double mx, double sum) { return exp(logit - mx) / sum; }

/* softmax != 0: the softmax score from the row's stats; else the sigmoid. has_bias == 0: the logit itself. */
ROUTING_KEY_FN double routing_key(double logit, int has_bias, double bias, int softmax, double mx, double sum) {
    if (!has_bias) return logit;
    double score = softmax ? routing_softmax_prob(logit, mx, sum) : 1.0 / (1.0 + exp(-logit));
    return score + bias;
}

#endif
