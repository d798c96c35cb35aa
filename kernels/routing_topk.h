/* topk_select's selection for one (n,g) row (kernels/backend_ops.h), one definition for the CPU reference and the
 * CUDA kernel (one thread per row there): the k largest keys (kernels/routing_key.h: the logit, or score + bias)
 * among the experts not dropped, in descending order, ties to the lower index, by insertion into the k slots; the
 * slots hold local expert ids until the end, and the comparisons recompute the keys through them. Filler slots from
 * the dropped experts when fewer than k survive. Plain C11 that nvcc also compiles as device code. */
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

/* s[k] = the global expert ids g*E + e selected from the row's logits l[E]; b = the group's bias[E] (NULL: none),
 * dr = the row's drop mask[E] (NULL: none), softmax != 0: the key's score is the softmax (else the sigmoid). */
ROUTING_KEY_FN void routing_topk_row(int32_t *s, const scalar_t *l, const scalar_t *b, const uint8_t *dr, int softmax,
                                     int g, int E, int k) {
    const int has_bias = b != NULL;
    double mx = 0, sum = 1;
#ifdef SCALAR_F64
    if (has_bias && softmax) routing_softmax_stats_d(l, E, &mx, &sum);
#else
    if (has_bias && softmax) routing_softmax_stats_f(l, E, &mx, &sum);
#endif
#define ROUTING_TOPK_KEY(e) routing_key((double)l[e], has_bias, has_bias ? (double)b[e] : 0.0, softmax, mx, sum)
    int count = 0;
    for (int e = 0; e < E; e++) {
        if (dr && dr[e]) continue;
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
    for (int e = 0; e < E && count < k; e++) /* not enough surviving experts: dropped ones fill the slots */
        if (dr && dr[e]) s[count++] = g * E + e;
}

#endif
