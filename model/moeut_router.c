/* The FFN router of the MoEUT routing kinds that have one ("topk", "expert_choice"; model/routing_kind.h):
 *   xs = LN2(x1); l = xs Sel^T   ([N, E] raw logits; the kinds select and gate from them)
 * xs is read by the router's matmuls alone, so it stays in matmul's narrow operand form (layernorm_forward_narrow);
 * in training it is the application's cache's xs, which the backward's matmuls read again (not recomputed).
 * LN2 feeds only the router, so a kind without one (hash) has no LN2 either. */
#include "model/routing_kind.h"

void moeut_router_forward(Model *m, const MoeutLayerOffsets *P, const MoeutFfnIO *io) {
    const int C = m->cfg.d_model;
    Backend *be = m->be;
    scalar_t *W = m->params;
    be->layernorm_forward_narrow(be, io->xs, io->mean, io->rstd, io->x1, W + P->ln2_w, W + P->ln2_b, io->N, C,
                                 (scalar_t)MOEUT_LN_EPS);
    be->matmul(be, io->l, io->xs, W + P->expert_sel, io->N, io->E, C, 0, 1, 1, 0); /* [N, E] */
}

void moeut_router_backward(Model *m, const MoeutLayerOffsets *P, const MoeutFfnGrad *g) {
    const int C = m->cfg.d_model, N = g->N, E = g->E;
    Backend *be = m->be;
    scalar_t *W = m->params, *G = m->grads;
    const MoeutAppCache *ac = g->ac;
    be->matmul(be, G + P->expert_sel, g->dl, ac->xs, E, C, N, 1, 0, 1, 1); /* dSel[E,C] += dl^T xs (the forward's) */
    be->matmul(be, g->dxs, g->dl, W + P->expert_sel, N, C, E, 0, 0, 1, 0); /* dxs[N,C] = dl Sel */
    be->layernorm_backward(be, g->dx1, G + P->ln2_w, G + P->ln2_b, g->dxs, ac->x1, W + P->ln2_w, ac->mean2,
                           ac->rstd2, N, C);
}
