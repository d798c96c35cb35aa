/* Routing kind "hash" of MoEUT's FFN (Roller et al. 2021; model/hash_routing.h, model/routing_kind.h): sel = the
 * expert of the position's input token id, K = 1, gate 1; no router and no LN2 (it feeds only the router), so the
 * backward has no router part: y = x1 + ReLU(x1 Keys[sel]) Values[sel] (+ shared experts, residual MLP). */
#include "model/hash_routing.h"
#include "model/routing_kind.h"

static size_t train_entries(const ModelConfig *c, size_t n) { return n * (size_t)c->ff_k; }

static void plan_nothing(const ModelConfig *c, ActivationPlan *p, void *buffers, size_t nt, size_t M) {
    (void)c, (void)p, (void)buffers, (void)nt, (void)M;
}
static void plan_app(const ModelConfig *c, ActivationPlan *p, MoeutAppCache *ac, size_t nt, size_t M) {
    plan_nothing(c, p, ac, nt, M);
}
static void plan_scratch(const ModelConfig *c, ActivationPlan *p, MoeutScratch *s, size_t nt, size_t M) {
    plan_nothing(c, p, s, nt, M);
}

/* The experts of the positions' input token ids, which every layer call hands over (io->tokens). */
static void route(Model *m, const MoeutLayerOffsets *P, const MoeutFfnIO *io) {
    (void)P;
    Backend *be = m->be;
    const int N = io->N, E = io->E, K = m->cfg.ff_k;
    hash_routing_upload(m->hash, be, io->sel, io->tokens, N);
    be->routing_plan(be, io->plan, io->sel, N * K, E);
    if (io->counts) be->expert_count(be, io->counts, io->sel, io->drop, io->valid, N, 1, E, K);
}

static void experts(Model *m, const MoeutLayerOffsets *P, const MoeutFfnIO *io) {
    moeut_experts_forward(m, P, io, NULL); /* gate 1: no reduction weights */
}

static void experts_backward(Model *m, const MoeutLayerOffsets *P, const MoeutFfnGrad *g) {
    moeut_experts_backward(m, P, g, NULL, NULL); /* no gate, no gate gradient */
}

static void route_backward(Model *m, const MoeutLayerOffsets *P, const MoeutFfnGrad *g) {
    (void)m, (void)P, (void)g; /* no router parameters */
}

const MoeutRouting moeut_routing_hash = {
    .name = "hash",
    .has_router = false,
    .capacity_drops = false,
    .inference = &moeut_routing_hash,
    .train_entries = train_entries,
    .plan_app = plan_app,
    .plan_scratch = plan_scratch,
    .route = route,
    .experts = experts,
    .experts_backward = experts_backward,
    .route_backward = route_backward,
};
