/* Routing kind "expert_choice" of MoEUT's FFN (Zhou et al. 2022, arXiv 2202.09368 §3.1-3.2; model/routing_kind.h):
 * in training each expert chooses its positions. Evaluation and decoding route causally, each position alone to its
 * top-ff_k experts of the same softmax: the "topk" kind, which the config makes exactly that (router "softmax", no
 * renormalisation, ff_k = round(ff_capacity_factor)).
 *
 *   l = LN2(x1) Sel^T [N, E]; S = softmax_e(l)
 *   each expert e takes the c positions of largest S[:, e] among the valid ones: entries p = e*c + j, pos[p], gate[p]
 *   f[n] = sum_{p: pos[p] = n} gate[p] * (ReLU(x1[n] Keys[e_p]) Values[e_p])     (a position gets 0..E experts)
 *
 * The entries are grouped by expert (p = e*c + j), so routing_plan over their expert ids is the identity and the
 * plan's cvmm calls read and write rows in entry order: the chosen rows of x1 are gathered with embedding_forward
 * (h[p] = table[pos[p]] is a row gather), and the gated expert outputs scattered back with embedding_backward
 * (dtable[pos[p]] += dh[p]); the backward mirrors both. */
#include "model/routing_kind.h"

/* M = E * c entries: every expert takes c positions */
static size_t train_entries(const ModelConfig *c, size_t n) {
    return (size_t)c->ff_n_experts * (size_t)model_config_ec_capacity(c, (long)n);
}

/* c of the step: the experts choose among the valid positions */
static int step_capacity(const ModelConfig *c, const uint8_t *valid, int N) {
    long n_valid = N;
    if (valid) {
        n_valid = 0;
        for (int i = 0; i < N; i++) n_valid += valid[i] != 0;
    }
    return model_config_ec_capacity(c, n_valid);
}

static void plan_app(const ModelConfig *c, ActivationPlan *p, MoeutAppCache *ac, size_t nt, size_t M) {
    (void)c;
    (void)nt;
    plan_int32(p, &ac->entry_pos, M); /* [E*c] */
}

static void plan_scratch(const ModelConfig *c, ActivationPlan *p, MoeutScratch *s, size_t nt, size_t M) {
    const size_t C = (size_t)c->d_model, E = (size_t)c->ff_n_experts;
    plan_scalars(p, &s->gather_x, M * C); /* [E*c, C] */
    plan_scalars(p, &s->gather_y, M * C); /* [E*c, C] */
    plan_scalars(p, &s->choice_q, nt * E); /* [N, E] */
}

/* Selects (each expert its top-c of the valid positions), plans and counts: every entry is a real (token, expert)
 * pair, so expert e counts its c positions. */
static void route(Model *m, const MoeutLayerOffsets *P, const MoeutFfnIO *io) {
    Backend *be = m->be;
    const int E = m->cfg.ff_n_experts, M = E * io->choice_c;
    moeut_router_forward(m, P, io);
    if (io->choice_c == 0) return; /* no valid position: nothing to route */
    be->expert_choice_select(be, io->pos, io->sel, io->gate, io->l, io->valid, io->N, E, io->choice_c);
    be->routing_plan(be, io->plan, io->sel, M, E);
    if (io->counts) be->expert_count(be, io->counts, io->sel, NULL, NULL, M, 1, E, 1);
}

static void experts(Model *m, const MoeutLayerOffsets *P, const MoeutFfnIO *io) {
    const ModelConfig *c = &m->cfg;
    Backend *be = m->be;
    const int C = c->d_model, E = c->ff_n_experts, S = c->ff_expert_size, M = E * io->choice_c;
    scalar_t *W = m->params;
    if (io->choice_c == 0) { /* nothing routed */
        be->zero(be, io->f, (size_t)io->N * C * sizeof(scalar_t));
        if (io->residual) be->add_inplace(be, io->f, io->residual, (size_t)io->N * C); /* 0 + x1, as before */
        return;
    }
    be->embedding_forward(be, io->xg, io->pos, io->x1, M, C);                               /* xg[M, C] = x1[pos] */
    /* A = ReLU(U) [M, S]; yg [M, C] the gated rows (f is their scatter, not cvmm's output: the residual after it) */
    be->cvmm_forward(be, io->A, io->xg, W + P->keys, io->plan, NULL, 1, 1, C, S, CVMM_RELU_Y, NULL);
    be->cvmm_forward(be, io->yg, io->A, W + P->values, io->plan, io->gate, 1, 1, S, C, CVMM_ENTRY_ORDER, NULL);
    be->zero(be, io->f, (size_t)io->N * C * sizeof(scalar_t));
    be->embedding_backward(be, io->f, io->yg, io->pos, M, C, io->N); /* f[pos[p]] += gate[p] y_p */
    if (io->residual) be->add_inplace(be, io->f, io->residual, (size_t)io->N * C); /* after the scatter, as before */
}

/* dx1 [N, C] = df + the experts' input gradient (df copied in first: no cvmm writes dx1 here), parameter gradients
 * +=, dgate [M] = dL/dgate. */
static void experts_backward(Model *m, const MoeutLayerOffsets *P, const MoeutFfnGrad *g) {
    const ModelConfig *c = &m->cfg;
    Backend *be = m->be;
    const int C = c->d_model, E = c->ff_n_experts, S = c->ff_expert_size, M = E * g->choice_c;
    scalar_t *W = m->params, *G = m->grads;
    const MoeutAppCache *ac = g->ac;
    be->copy(be, g->dx1, g->df, (size_t)g->N * C * sizeof(scalar_t));
    if (g->choice_c == 0) return;
    scalar_t *dA = g->dA; /* [M, S] */
    be->embedding_forward(be, g->yg, ac->entry_pos, g->df, M, C); /* dy_p = df[pos[p]] */
    /* dU = dA (U > 0), written over dA (A > 0 iff U > 0), dValues, dgate */
    be->cvmm_backward(be, dA, G + P->values, g->dgate, g->yg, ac->A, W + P->values, &ac->plan_f, ac->gate_f, 1, 1, S,
                      C, CVMM_DX_THROUGH_RELU, NULL);
    be->embedding_forward(be, g->xg, ac->entry_pos, ac->x1, M, C); /* the forward's gathered rows again */
    scalar_t *dxg = g->yg; /* [M, C], free again */
    be->cvmm_backward(be, dxg, G + P->keys, NULL, dA, g->xg, W + P->keys, &ac->plan_f, NULL, 1, 1, C, S,
                      CVMM_DX_OVERWRITE, NULL); /* dxg written, no zero fill first */
    be->embedding_backward(be, g->dx1, dxg, ac->entry_pos, M, C, g->N); /* dx1[pos[p]] += dxg[p] */
}

/* dl = the regularizers' gradient + the softmax Jacobian of the chosen entries' gates; then the router's backward. */
static void route_backward(Model *m, const MoeutLayerOffsets *P, const MoeutFfnGrad *g) {
    moeut_router_logit_grad(m, g->dl, (size_t)g->N * g->E);
    if (g->choice_c > 0)
        m->be->expert_choice_gates_backward(m->be, g->dl, g->choice_q, g->dgate, g->ac->entry_pos, g->l, g->N, g->E,
                                            g->choice_c);
    moeut_router_backward(m, P, g);
}

const MoeutRouting moeut_routing_expert_choice = {
    .name = "expert_choice",
    .has_router = true,
    .capacity_drops = false,
    .inference = &moeut_routing_topk,
    .train_entries = train_entries,
    .step_capacity = step_capacity,
    .plan_app = plan_app,
    .plan_scratch = plan_scratch,
    .route = route,
    .experts = experts,
    .experts_backward = experts_backward,
    .route_backward = route_backward,
};
