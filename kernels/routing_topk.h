/* topk_select's selection for one (n,g) row (kernels/backend_ops.h), one definition for the CPU reference and the
 * CUDA kernel (one thread per row there): the k largest keys (kernels/routing_key.h: the logit, or score + bias)
 * among the experts not dropped, in descending order, ties to the lower index, by insertion into the k slots; the
 * slots hold local expert ids until the end, and the comparisons recompute the keys through them. Filler slots from
 * the dropped experts when fewer than k survive. Plain C11 that nvcc also compiles as device code.
 * Group-limited routing (DeepSeek-V3, arXiv 2412.19437 §2.1.2; n_group > 1): the E experts form n_group contiguous
 * groups of E/n_group; a group's score is the sum of its two largest scores (sigmoid or softmax of the logits, plus
 * the bias when there is one: the selection key on the score scale, since a sum of two logits does not rank like a
 * sum of two scores), over its experts not dropped; only the topk_group best groups (ties: lower group first) stay
 * eligible, and the k experts are chosen among theirs. */
#ifndef KERNELS_ROUTING_TOPK_H
#define KERNELS_ROUTING_TOPK_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif
#include "kernels/backend.h" /* scalar_t, with C linkage for the declarations also in a C++ (CUDA) file */
#ifdef __cplusplus
}
#endif
#include "kernels/routing_key.h"

/* The most groups group-limited routing supports (the kept groups are a 64-bit mask; DeepSeek-V3 uses 8). */
#define ROUTING_MAX_GROUPS 64

/* Whether (E, k, n_group, topk_group) is a group setting topk_select accepts (kernels/backend_ops.h); host code. */
static inline int routing_groups_ok(int E, int k, int n_group, int topk_group) {
    if (n_group == 1) return topk_group == 1;
    return n_group > 1 && n_group <= ROUTING_MAX_GROUPS && E % n_group == 0 && E / n_group >= 2 && topk_group >= 1 &&
           topk_group <= n_group && k <= topk_group * (E / n_group);
}

/* s[k] = the global expert ids g*E + e selected from the row's logits l[E]; b = the group's bias[E] (NULL: none),
 * dr = the row's drop mask[E] (NULL: none), softmax != 0: the key's score is the softmax (else the sigmoid);
 * n_group, topk_group: group-limited routing (1, 1: none; the caller checked them, see topk_select). */
ROUTING_KEY_FN void routing_topk_row(int32_t *s, const scalar_t *l, const scalar_t *b, const uint8_t *dr, int softmax,
                                     int g, int E, int k, int n_group, int topk_group) {
    const int has_bias = b != NULL;
    const int grouped = n_group > 1 && topk_group < n_group; /* all groups kept = no limit */
    double mx = 0, sum = 1;
#ifdef SCALAR_F64
    if ((has_bias || grouped) && softmax) routing_softmax_stats_d(l, E, &mx, &sum);
#else
    if ((has_bias || grouped) && softmax) routing_softmax_stats_f(l, E, &mx, &sum);
#endif
#define ROUTING_TOPK_KEY(e) routing_key((double)l[e], has_bias, has_bias ? (double)b[e] : 0.0, softmax, mx, sum)
    /* kept: bit q set = group q is eligible (every group without the limit) */
    uint64_t kept = ~(uint64_t)0;
    const int Eg = E / n_group;
    if (grouped) {
        double gscore[ROUTING_MAX_GROUPS]; /* [n_group] sum of the two largest score-scale keys, -inf: none left */
        for (int q = 0; q < n_group; q++) {
            double top1 = -INFINITY, top2 = -INFINITY;
            for (int e = q * Eg; e < (q + 1) * Eg; e++) {
                if (dr && dr[e]) continue;
                double v = routing_key((double)l[e], 1, has_bias ? (double)b[e] : 0.0, softmax, mx, sum);
                if (v > top1) {
                    top2 = top1;
                    top1 = v;
                } else if (v > top2) {
                    top2 = v;
                }
            }
            gscore[q] = top2 == -INFINITY ? top1 : top1 + top2; /* one expert left: its score alone */
        }
        kept = 0;
        for (int q = 0; q < n_group; q++) { /* rank = the groups before it: higher score, or equal and lower index */
            int rank = 0;
            for (int r = 0; r < n_group; r++)
                rank += gscore[r] > gscore[q] || (gscore[r] == gscore[q] && r < q);
            if (rank < topk_group) kept |= (uint64_t)1 << q;
        }
    }
#define ROUTING_TOPK_KEPT(e) ((kept >> ((e) / Eg)) & 1)
    int count = 0;
    for (int e = 0; e < E; e++) {
        if (dr && dr[e]) continue;
        if (!ROUTING_TOPK_KEPT(e)) continue;
        double val = ROUTING_TOPK_KEY(e);
        /* strictly greater: an equal later expert loses */
        if (count == k && !(val > ROUTING_TOPK_KEY(s[k - 1]))) continue;
        int pos = count < k ? count : k - 1; /* insertion point, shifting smaller entries down */
        while (pos > 0 && val > ROUTING_TOPK_KEY(s[pos - 1])) {
            s[pos] = s[pos - 1];
            pos--;
        }
        s[pos] = e;
        if (count < k) count++;
    }
#undef ROUTING_TOPK_KEY
    for (int j = 0; j < count; j++) s[j] += g * E;
    /* not enough surviving experts: dropped ones (of the kept groups, which hold >= k experts) fill the slots */
    for (int e = 0; e < E && count < k; e++)
        if (dr && dr[e] && ROUTING_TOPK_KEPT(e)) s[count++] = g * E + e;
#undef ROUTING_TOPK_KEPT
}

#endif
