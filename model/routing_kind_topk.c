/* Routing kind "topk" of MoEUT's FFN (the default; model/routing_kind.h), moeut-spec.md §2.2 with the MoE-variant
 * switches of experiments/README.md:
 *   l = LN2(x1) Sel^T; sel = topk_select(l, K) (with balance "bias": of l + expert_bias, which the gates do not see;
 *   with n_group > 1: among the topk_group best groups); gate = router_gates(l, sel): sigmoid or softmax of l at sel,
 *   renormalised over the K selected or not (model.router, model.router_renorm), times model.routed_scaling_factor
 *   (model.ff_capacity_factor > 0, training only: the assignments over an expert's capacity get gate 0 after the
 *   scaling, capacity_drop; evaluation and decoding drop nothing, so a token's output never depends on the batch) */
#include "model/routing_kind.h"

static size_t train_entries(const ModelConfig *c, size_t n) { return n * (size_t)c->ff_k; }

static void plan_app(const ModelConfig *c, ActivationPlan *p, MoeutAppCache *ac, size_t nt, size_t M) {
    (void)M;
    if (c->ff_capacity_factor > 0.0) plan_u8(p, &ac->cap_dropped, nt * (size_t)c->ff_k); /* [N, K] */
}

static void plan_scratch(const ModelConfig *c, ActivationPlan *p, MoeutScratch *s, size_t nt, size_t M) {
    (void)c, (void)p, (void)s, (void)nt, (void)M; /* the token-major experts use the common scratch only */
}

static void route(Model *m, const MoeutLayerOffsets *P, const MoeutFfnIO *io) {
    const ModelConfig *c = &m->cfg;
    Backend *be = m->be;
    const int N = io->N, E = io->E, K = c->ff_k;
    scalar_t *W = m->params;
    moeut_router_forward(m, P, io);
    const scalar_t *bias = P->expert_bias != SIZE_MAX ? W + P->expert_bias : NULL; /* [E] balance "bias" */
    be->topk_select(be, io->sel, io->l, io->drop, bias, c->router, N, 1, E, K, c->n_group, c->topk_group);
    be->routing_plan(be, io->plan, io->sel, N * K, E);
    be->router_gates(be, io->gate, io->l, io->sel, io->drop, N, 1, E, K, c->router, c->router_renorm);
    /* DeepSeek-V3's routed scaling factor: the routed gates times a constant (the shared experts keep gate 1). Skipped
     * at 1 so that the default model's numbers do not move by a bit. */
    if (c->routed_scaling_factor != 1.0)
        be->scale_inplace(be, io->gate, (scalar_t)c->routed_scaling_factor, (size_t)N * K);
    /* expert capacity: the counts are then the kept assignments; the bias counts stay the router's selections */
    if (io->cap_dropped)
        be->capacity_drop(be, io->cap_dropped, io->gate, io->counts, io->n_dropped, io->sel, io->valid, N, E, K,
                          moeut_capacity(c, N), c->ff_capacity_order);
    else if (io->counts) be->expert_count(be, io->counts, io->sel, io->drop, io->valid, N, 1, E, K);
    if (io->bias_counts) be->expert_count(be, io->bias_counts, io->sel, io->drop, io->valid, N, 1, E, K);
}

static void experts(Model *m, const MoeutLayerOffsets *P, const MoeutFfnIO *io) {
    moeut_experts_forward(m, P, io, io->gate);
}

static void experts_backward(Model *m, const MoeutLayerOffsets *P, const MoeutFfnGrad *g) {
    moeut_experts_backward(m, P, g, g->ac->gate_f, g->dgate);
}

/* dl = the regularizers' gradient + the gating transform's backward of dgate; then the router's backward.
 * router_gates_backward wants the gating transform's own output; with a routed scaling factor rsf the cached gates
 * are rsf times it, so the unscaled gates are recomputed (exactly: the same kernel on the same logits; the dropout
 * masks leave no filler slot, moeut_backward.c) into dA's buffer, free since the experts' backward, and dgate is taken
 * w.r.t. them: dL/dg = rsf * dL/d(rsf g). Expert capacity: a dropped slot's gate was set to 0 after the gating
 * transform, so no gradient reaches its gate (mask_zero); the transform's backward still wants its output before the
 * dropping (a renormalised kept gate depends on the dropped expert's logit), recomputed as for rsf. */
static void route_backward(Model *m, const MoeutLayerOffsets *P, const MoeutFfnGrad *g) {
    const ModelConfig *c = &m->cfg;
    Backend *be = m->be;
    const int N = g->N, E = g->E, K = c->ff_k;
    const MoeutAppCache *ac = g->ac;
    moeut_router_logit_grad(m, g->dl, (size_t)N * E);
    if (ac->cap_dropped) be->mask_zero(be, g->dgate, ac->cap_dropped, (size_t)N * K);
    const scalar_t *gate_f = ac->gate_f;
    if (c->routed_scaling_factor != 1.0 || ac->cap_dropped) {
        scalar_t *unscaled = g->dA; /* [N*K*S] >= [N*K] */
        be->router_gates(be, unscaled, g->l, ac->sel_f, NULL, N, 1, E, K, c->router, c->router_renorm);
        if (c->routed_scaling_factor != 1.0)
            be->scale_inplace(be, g->dgate, (scalar_t)c->routed_scaling_factor, (size_t)N * K);
        gate_f = unscaled;
    }
    be->router_gates_backward(be, g->dl, g->dgate, gate_f, g->l, ac->sel_f, NULL, N, 1, E, K, c->router,
                              c->router_renorm);
    moeut_router_backward(m, P, g);
}

const MoeutRouting moeut_routing_topk = {
    .name = "topk",
    .has_router = true,
    .capacity_drops = true,
    .inference = &moeut_routing_topk,
    .train_entries = train_entries,
    .plan_app = plan_app,
    .plan_scratch = plan_scratch,
    .route = route,
    .experts = experts,
    .experts_backward = experts_backward,
    .route_backward = route_backward,
};
