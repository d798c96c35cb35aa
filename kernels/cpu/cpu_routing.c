/* CPU reference of the routing primitives: top-k selection and the gating transforms (sigmoid, softmax, each
 * optionally renormalised over the selected experts). Formulas: kernels/backend_ops.h; the balancing losses are in
 * cpu_balance.c. */
#include <float.h>
#include <string.h>

#include "kernels/cpu/cpu_internal.h"
#include "kernels/router_gates_grad.h"
#include "kernels/routing_key.h"
#include "kernels/routing_topk.h"
#include "pipeline/base/log.h"

/* Max and sum of exp(l - max) over a row of E logits (in double): softmax_e = exp(l_e - mx) / sum. */
#ifdef SCALAR_F64
#define softmax_stats routing_softmax_stats_d
#else
#define softmax_stats routing_softmax_stats_f
#endif

/* For each (n,g): routing_topk_row (kernels/routing_topk.h, the same code as the CUDA kernel's). */
void cpu_topk_select(Backend *be, int32_t *sel, const scalar_t *logits, const uint8_t *drop, const scalar_t *bias,
                     RouterKind score, int N, int G, int E, int k, int n_group, int topk_group) {
    (void)be;
    if (k < 1 || k > E) die("topk_select: k=%d must be in [1, E=%d]", k, E);
    if (score != ROUTER_SIGMOID && score != ROUTER_SOFTMAX) die("topk_select: unknown router kind %d", (int)score);
    if (!routing_groups_ok(E, k, n_group, topk_group))
        die("topk_select: n_group=%d topk_group=%d invalid for E=%d k=%d", n_group, topk_group, E, k);
    const int softmax = score == ROUTER_SOFTMAX;
#pragma omp parallel for schedule(static) if ((size_t)N * G * E > 32768)
    for (long ng = 0; ng < (long)N * G; ng++) {
        int g = (int)(ng % G);
        routing_topk_row(sel + (size_t)ng * k, logits + (size_t)ng * E, bias ? bias + (size_t)g * E : NULL,
                         drop ? drop + (size_t)ng * E : NULL, softmax, g, E, k, n_group, topk_group);
    }
}

/* Expert index within group g of slot value v, dying on an id outside the group (it cannot come from topk_select). */
static inline int local_expert(int32_t v, int g, int E, const char *op) {
    int e = v - g * E;
    if (e < 0 || e >= E) die("%s: expert id %d is not in group %d of %d experts", op, (int)v, g, E);
    return e;
}


void cpu_router_gates(Backend *be, scalar_t *gate, const scalar_t *logits, const int32_t *sel, const uint8_t *drop,
                      int N, int G, int E, int k, RouterKind kind, int renorm) {
    (void)be;
    if (kind != ROUTER_SIGMOID && kind != ROUTER_SOFTMAX) die("router_gates: unknown router kind %d", (int)kind);
#pragma omp parallel for schedule(static) if ((size_t)N * G * (kind == ROUTER_SOFTMAX ? E : k) > 32768)
    for (long ng = 0; ng < (long)N * G; ng++) {
        int g = (int)(ng % G);
        const scalar_t *l = logits + (size_t)ng * E;
        const uint8_t *dr = drop ? drop + (size_t)ng * E : NULL;
        const int32_t *s = sel + (size_t)ng * k;
        scalar_t *gv = gate + (size_t)ng * k;
        double mx = 0, sum = 1;
        if (kind == ROUTER_SOFTMAX) softmax_stats(l, E, &mx, &sum);
        double total = 0;
        for (int j = 0; j < k; j++) {
            int e = local_expert(s[j], g, E, "router_gates");
            if (dr && dr[e]) gv[j] = 0;
            else if (kind == ROUTER_SIGMOID) gv[j] = cpu_sigmoid(l[e]);
            else gv[j] = (scalar_t)(exp((double)l[e] - mx) / sum);
            total += gv[j];
        }
        if (renorm && total > 0)
            for (int j = 0; j < k; j++) gv[j] = (scalar_t)((double)gv[j] / total);
    }
}

/* With c_j = dgate_j and s_j the score before renormalisation (S = sum_j s_j over live slots):
 *   dL/ds_j = c_j                                  (no renorm)
 *   dL/ds_j = (c_j - sum_i c_i gate_i) / S         (renorm: gate_j = s_j / S)
 * then sigmoid: dl_{e_j} += dL/ds_j * s_j (1 - s_j); softmax: with q_e = dL/ds at e (0 where not selected),
 * dl_e += p_e (q_e - sum_i q_i p_i) for every e of the group. */
void cpu_router_gates_backward(Backend *be, scalar_t *dlogits, const scalar_t *dgate, const scalar_t *gate,
                               const scalar_t *logits, const int32_t *sel, const uint8_t *drop, int N, int G, int E,
                               int k, RouterKind kind, int renorm) {
    (void)be;
    if (kind != ROUTER_SIGMOID && kind != ROUTER_SOFTMAX)
        die("router_gates_backward: unknown router kind %d", (int)kind);
    if (kind == ROUTER_SIGMOID && !renorm) {
        /* MoEUT's sigma-MoE: the gate is the score, dl = dgate * gate * (1 - gate) at the selected experts (distinct
         * within a row, so no two slots write one logit) */
#pragma omp parallel for schedule(static) if ((size_t)N * G * k > 32768)
        for (long ng = 0; ng < (long)N * G; ng++) {
            int g = (int)(ng % G);
            const uint8_t *dr = drop ? drop + (size_t)ng * E : NULL;
            for (int j = 0; j < k; j++) {
                size_t slot = (size_t)ng * k + j;
                int e = local_expert(sel[slot], g, E, "router_gates_backward");
                if (dr && dr[e]) continue;
                scalar_t y = gate[slot];
                dlogits[(size_t)ng * E + e] += dgate[slot] * y * (1 - y);
            }
        }
        return;
    }
#pragma omp parallel for schedule(static) if ((size_t)N * G * E > 32768)
    for (long ng = 0; ng < (long)N * G; ng++) {
        int g = (int)(ng % G);
        const scalar_t *l = logits + (size_t)ng * E;
        const uint8_t *dr = drop ? drop + (size_t)ng * E : NULL;
        const int32_t *s = sel + (size_t)ng * k;
        const scalar_t *c = dgate + (size_t)ng * k, *gv = gate + (size_t)ng * k;
        scalar_t *dl = dlogits + (size_t)ng * E;
        double mx = 0, sum = 1;
        if (kind == ROUTER_SOFTMAX) softmax_stats(l, E, &mx, &sum);
        for (int j = 0; j < k; j++) (void)local_expert(s[j], g, E, "router_gates_backward"); /* stops on a bad id */
        router_gates_grad_row(dl, l, s, c, gv, dr, kind == ROUTER_SOFTMAX, renorm, g, E, k, mx, sum);
    }
}

/* Serial on purpose: N*G*k increments are cheap next to the GEMMs, and a fixed order needs no atomics. */
void cpu_expert_count(Backend *be, int64_t *counts, const int32_t *sel, const uint8_t *drop, const uint8_t *valid,
                      int N, int G, int E, int k) {
    (void)be;
    for (long ng = 0; ng < (long)N * G; ng++) {
        if (valid && !valid[ng / G]) continue;
        const int g = (int)(ng % G);
        const uint8_t *dr = drop ? drop + (size_t)ng * E : NULL;
        const int32_t *s = sel + (size_t)ng * k;
        for (int j = 0; j < k; j++) {
            const int e = local_expert(s[j], g, E, "expert_count");
            if (dr && dr[e]) continue; /* a filler slot of topk_select: gate 0, routes nothing */
            counts[(size_t)g * E + e]++;
        }
    }
}
