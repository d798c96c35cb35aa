/* The token-major routed experts of the MoEUT FFN ("topk" and "hash" routing; model/routing_kind.h): the layer's
 * buffers handed to the one definition of the expert computation, model/routed_experts.h (the "moe" layer's too).
 * U, A, dA and dU stay in plan order. */
#include "model/routed_experts.h"
#include "model/routing_kind.h"

static RoutedExpertParams moeut_expert_params(const MoeutLayerOffsets *P) {
    return (RoutedExpertParams){.keys = P->keys, .values = P->values, .has_keys_bias = false};
}

void moeut_experts_forward(Model *m, const MoeutLayerOffsets *P, const MoeutFfnIO *io, const scalar_t *gate) {
    const ModelConfig *c = &m->cfg;
    const RoutedExpertParams params = moeut_expert_params(P);
    const RoutedExpertBatch b = {io->N, c->ff_k, c->d_model, c->ff_expert_size, io->plan, gate};
    routed_experts_forward(m, &params, &b, io->x1, io->A, io->f, io->residual);
}

void moeut_experts_backward(Model *m, const MoeutLayerOffsets *P, const MoeutFfnGrad *g, const scalar_t *gate,
                            scalar_t *dgate) {
    const ModelConfig *c = &m->cfg;
    const RoutedExpertParams params = moeut_expert_params(P);
    const RoutedExpertBatch b = {g->N, c->ff_k, c->d_model, c->ff_expert_size, &g->ac->plan_f, gate};
    /* dx1 = df + the experts' input gradient: the residual path's start fused into the up projection's backward */
    routed_experts_backward(m, &params, &b, g->df, g->ac->x1, g->ac->A, g->dA, dgate, g->dx1, g->df);
}
