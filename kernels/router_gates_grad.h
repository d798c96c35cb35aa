/* router_gates_backward's general case for one (n,g) row (kernels/backend_ops.h), one definition for the CPU reference
 * and the CUDA kernel (one thread per row there); plain C11 that nvcc also compiles as device code. All in double.
 *
 * The gates of the row's k slots are g_j = s_j (sigmoid: s = sigmoid(l); softmax: s = softmax over the group's E
 * logits), or with renorm g_j = s_j / T, T = the sum of the live slots' scores (a dropped expert's slot is dead:
 * gate 0, no gradient). With c_j = dL/dg_j, the gradient of the scores is
 *   renorm : ds_j = (c_j - cg) / T, cg = sum_j c_j g_j     (no gradient when every live score is 0: T = 0)
 *   else   : ds_j = c_j
 * and through the transform: sigmoid dl_e += ds_j s_j (1 - s_j) at e = the slot's expert; softmax: the Jacobian over
 * the whole group, dl_e += p_e (q_e - sum_i q_i p_i), q_e = ds_j at the selected e, 0 elsewhere.
 * (The sigmoid without renorm, MoEUT's sigma-MoE, is the simpler dl = c g (1 - g), which each backend writes itself.)
 * A slot whose global expert id is outside the group is skipped: the CPU caller checks ids first and stops on one. */
#ifndef KERNELS_ROUTER_GATES_GRAD_H
#define KERNELS_ROUTER_GATES_GRAD_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif
#include "kernels/backend.h" /* scalar_t, with C linkage for the declarations also in a C++ (CUDA) file */
#ifdef __cplusplus
}
#endif
#include "kernels/routing_key.h"

/* dl[E] += the row's gradient of its logits l[E]; s[k]: global expert ids (g*E + e), c[k]: dL/dgate, gv[k]: the
 * gates; dr: the row's drop mask[E] (NULL: none); mx, sum: the row's softmax stats (routing_softmax_stats_*; unused
 * for the sigmoid). */
ROUTING_KEY_FN void router_gates_grad_row(scalar_t *dl, const scalar_t *l, const int32_t *s, const scalar_t *c,
                                          const scalar_t *gv, const uint8_t *dr, int softmax, int renorm, int g, int E,
                                          int k, double mx, double sum) {
    /* scores of the live slots, their total, and sum_j c_j gate_j */
    double total = 0, cg = 0;
    for (int j = 0; j < k; j++) {
        int e = s[j] - g * E;
        if (e < 0 || e >= E || (dr && dr[e])) continue;
        total += softmax ? exp((double)l[e] - mx) / sum : 1.0 / (1.0 + exp(-(double)l[e]));
        cg += (double)c[j] * gv[j];
    }
    if (renorm && !(total > 0)) return; /* every gate was 0: no gradient */
    if (!softmax) {
        for (int j = 0; j < k; j++) {
            int e = s[j] - g * E;
            if (e < 0 || e >= E || (dr && dr[e])) continue;
            double sj = 1.0 / (1.0 + exp(-(double)l[e]));
            double ds = renorm ? ((double)c[j] - cg) / total : (double)c[j];
            dl[e] += (scalar_t)(ds * sj * (1.0 - sj));
        }
        return;
    }
    /* softmax: q at the selected experts, then the softmax Jacobian over the whole group */
    double qp = 0; /* sum_i q_i p_i */
    for (int j = 0; j < k; j++) {
        int e = s[j] - g * E;
        if (e < 0 || e >= E || (dr && dr[e])) continue;
        double q = renorm ? ((double)c[j] - cg) / total : (double)c[j];
        qp += q * (exp((double)l[e] - mx) / sum);
    }
    for (int e = 0; e < E; e++) {
        double p = exp((double)l[e] - mx) / sum, q = 0;
        for (int j = 0; j < k; j++)
            if (s[j] - g * E == e && !(dr && dr[e])) q = renorm ? ((double)c[j] - cg) / total : (double)c[j];
        dl[e] += (scalar_t)(p * (q - qp));
    }
}

#endif
