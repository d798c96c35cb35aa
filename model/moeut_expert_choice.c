/* Expert-choice routing of MoEUT's FFN in training (model.routing "expert_choice"; Zhou et al. 2022, arXiv 2202.09368
 * §3.1-3.2), forward and backward of the routed part. Evaluation and decoding do not come here: they route causally,
 * each position alone to its top-ff_k experts of the same softmax (moeut_forward.c's token-choice path, which the
 * config makes exactly that: router "softmax", no renormalisation, ff_k = round(ff_capacity_factor)).
 *
 *   l = LN2(x1) Sel^T [N, E]; S = softmax_e(l)
 *   each expert e takes the c positions of largest S[:, e] among the valid ones: entries p = e*c + j, pos[p], gate[p]
 *   f[n] = sum_{p: pos[p] = n} gate[p] * (ReLU(x1[n] Keys[e_p]) Values[e_p])     (a position gets 0..E experts)
 *
 * The entries are grouped by expert (p = e*c + j), so routing_plan over their expert ids is the identity and the
 * plan's cvmm calls read and write rows in entry order: the chosen rows of x1 are gathered with embedding_forward
 * (h[p] = table[pos[p]] is a row gather), and the gated expert outputs scattered back with embedding_backward
 * (dtable[pos[p]] += dh[p]); the backward mirrors both. */
#include "model/moeut_internal.h"
#include "pipeline/base/log.h"

void moeut_ec_forward(Model *m, const MoeutLayerOffsets *P, int N, int ec_c, const scalar_t *l, const uint8_t *valid,
                      RoutingPlan *plan, const MoeutEcIO *io) {
    const ModelConfig *c = &m->cfg;
    Backend *be = m->be;
    const int C = c->d_model, E = c->ff_n_experts, S = c->ff_expert_size, M = E * ec_c;
    scalar_t *W = m->params;
    if (ec_c == 0) { /* no valid position: nothing to route */
        be->zero(be, io->f, (size_t)N * C * sizeof(scalar_t));
        return;
    }
    be->expert_choice_select(be, io->pos, io->sel, io->gate, l, valid, N, E, ec_c);
    be->routing_plan(be, plan, io->sel, M, E); /* io->plan == plan */
    /* every entry is a real (token, expert) pair: expert e counts its c positions */
    if (io->counts) be->expert_count(be, io->counts, io->sel, NULL, NULL, M, 1, E, 1);
    be->embedding_forward(be, io->xg, io->pos, io->x1, M, C);                               /* xg[M, C] = x1[pos] */
    be->cvmm_forward(be, io->A, io->xg, W + P->keys, io->plan, NULL, 1, 1, C, S, CVMM_ENTRY_ORDER); /* [M, S] */
    be->relu_forward(be, io->A, io->A, (size_t)M * S);
    be->cvmm_forward(be, io->yg, io->A, W + P->values, io->plan, io->gate, 1, 1, S, C, CVMM_ENTRY_ORDER); /* [M, C] */
    be->zero(be, io->f, (size_t)N * C * sizeof(scalar_t));
    be->embedding_backward(be, io->f, io->yg, io->pos, M, C); /* f[pos[p]] += gate[p] y_p */
}

void moeut_ec_backward(Model *m, const MoeutLayerOffsets *P, int ec_c, const scalar_t *x1, const MoeutEcIO *io,
                       scalar_t *dx1, scalar_t *dgate) {
    const ModelConfig *c = &m->cfg;
    Backend *be = m->be;
    const int C = c->d_model, E = c->ff_n_experts, S = c->ff_expert_size, M = E * ec_c;
    scalar_t *W = m->params, *G = m->grads;
    if (ec_c == 0) return;
    scalar_t *dA = io->dA; /* [M, S] */
    be->embedding_forward(be, io->yg, io->pos, dx1, M, C); /* dy_p = df[pos[p]] (df = dx1 at this point) */
    be->zero(be, dA, (size_t)M * S * sizeof(scalar_t));
    be->cvmm_backward(be, dA, G + P->values, dgate, io->yg, io->A, W + P->values, io->plan, io->gate, 1, 1, S, C,
                      CVMM_ENTRY_ORDER);
    be->relu_backward(be, dA, dA, io->A, (size_t)M * S); /* dU = dA * (U > 0); A > 0 iff U > 0 */
    be->embedding_forward(be, io->xg, io->pos, x1, M, C); /* the forward's gathered rows again */
    scalar_t *dxg = io->yg; /* [M, C], free again */
    be->zero(be, dxg, (size_t)M * C * sizeof(scalar_t));
    be->cvmm_backward(be, dxg, G + P->keys, NULL, dA, io->xg, W + P->keys, io->plan, NULL, 1, 1, C, S,
                      CVMM_ENTRY_ORDER);
    be->embedding_backward(be, dx1, dxg, io->pos, M, C); /* dx1[pos[p]] += dxg[p] */
}
