/* The routed experts' computation, one definition for every layer that has them: the MoEUT FFN (routing kinds "topk"
 * and "hash", model/routing_kind.h) and the "moe" layer (model/moe_ffn.c). It takes a routing decision made elsewhere
 * (the plan of the M = N*K selected entries, their gates) and computes, with rows of U and A in plan order:
 *   U = x Keys[sel] (+ keys_bias[sel])   [M, S]
 *   A = ReLU(U)                           [M, S]
 *   f = sum_j gate_j A_j Values[sel_j]    [N, C]
 * The values read A's rows where the keys wrote them, so neither projection gathers or scatters them (ScatterMoE's
 * "route once, sort once"). What a layer adds around f (a values bias, shared experts, the residual) stays its own. */
#ifndef MODEL_ROUTED_EXPERTS_H
#define MODEL_ROUTED_EXPERTS_H

#include <stdbool.h>
#include <stddef.h>

#include "model/model_internal.h"

/* Where the experts' parameters sit in m->params (their gradients at the same offsets in m->grads). */
typedef struct {
    size_t keys;           /* [E, C, S] */
    size_t values;         /* [E, S, C] */
    size_t keys_bias;      /* [E, S], read only with has_keys_bias */
    bool has_keys_bias;
} RoutedExpertParams;

/* One routing decision of N positions with K entries each. */
typedef struct {
    int N, K;
    int C, S;                   /* d_model, the expert size */
    const RoutingPlan *plan;    /* built from the selection (host offsets filled where keys_bias is used) */
    const scalar_t *gate;       /* [N, K] the reduction weights; NULL = every gate 1 */
} RoutedExpertBatch;

/* A [M, S] and f [N, C] from x [N, C] (f overwritten). A is in cvmm's narrow form (kernels/backend_ops.h) unless the
 * keys have a bias: read it only through routed_experts_backward. residual [N, C] (NULL = none, else disjoint from
 * f): f = (the experts' sum) + residual, the layer's residual add fused into the down projection's reduction where
 * there is one (gate given), the same bits as the add after it. */
void routed_experts_forward(Model *m, const RoutedExpertParams *P, const RoutedExpertBatch *b, const scalar_t *x,
                            scalar_t *A, scalar_t *f, const scalar_t *residual);

/* From df [N, C]: the experts' parameter gradients (+=), dgate [N, K] (written; NULL = not wanted) and dx [N, C]
 * (written; it may be df itself, which is read before dx is written). x and A are the forward's; dA [M, S] is
 * scratch. dx = dx_base + the input gradient, or the input gradient alone where dx_base is NULL (dx_base [N, C]: dx
 * itself or disjoint from it, may be df); dx's contents not read unless it is dx_base (the same bits as copying
 * dx_base, or zeros, into dx first). */
void routed_experts_backward(Model *m, const RoutedExpertParams *P, const RoutedExpertBatch *b, const scalar_t *df,
                             const scalar_t *x, const scalar_t *A, scalar_t *dA, scalar_t *dgate, scalar_t *dx,
                             const scalar_t *dx_base);

#endif
