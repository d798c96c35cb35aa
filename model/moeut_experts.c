/* The token-major routed experts of the MoEUT FFN ("topk" and "hash" routing; model/routing_kind.h):
 *   U = x1 Keys[sel] [N*K, S] (rows in plan order); A = ReLU(U); f = sum_j gate_j A_j Values[sel_j]   [N, C]
 * U, A, dA and dU stay in plan order: the values read A's rows where the keys wrote them, so neither projection
 * gathers or scatters them. */
#include "model/routing_kind.h"

void moeut_experts_forward(Model *m, const MoeutLayerOffsets *P, const MoeutFfnIO *io, const scalar_t *gate) {
    const ModelConfig *c = &m->cfg;
    Backend *be = m->be;
    const int N = io->N, C = c->d_model, S = c->ff_expert_size, K = c->ff_k;
    scalar_t *W = m->params;
    be->cvmm_forward(be, io->A, io->x1, W + P->keys, io->plan, NULL, K, 1, C, S, CVMM_OUT_SORTED);
    be->relu_forward(be, io->A, io->A, (size_t)N * K * S);
    be->cvmm_forward(be, io->f, io->A, W + P->values, io->plan, gate, 1, K, S, C, CVMM_IN_SORTED); /* [N, C] */
}

void moeut_experts_backward(Model *m, const MoeutLayerOffsets *P, const MoeutFfnGrad *g, const scalar_t *gate,
                            scalar_t *dgate) {
    const ModelConfig *c = &m->cfg;
    Backend *be = m->be;
    const int N = g->N, C = c->d_model, S = c->ff_expert_size, K = c->ff_k;
    scalar_t *W = m->params, *G = m->grads;
    const MoeutAppCache *ac = g->ac;
    scalar_t *dA = g->dA; /* [N*K, S] in plan_f order, as A */
    be->zero(be, dA, (size_t)N * K * S * sizeof(scalar_t));
    be->cvmm_backward(be, dA, G + P->values, dgate, g->dx1, ac->A, W + P->values, &ac->plan_f, gate, 1, K, S, C,
                      CVMM_IN_SORTED);
    be->relu_backward(be, dA, dA, ac->A, (size_t)N * K * S); /* dU = dA * (U > 0); A > 0 iff U > 0 */
    /* U_j = x1 @ Keys[sel_j]: dx1 += sum_j dU_j Keys^T */
    be->cvmm_backward(be, g->dx1, G + P->keys, NULL, dA, ac->x1, W + P->keys, &ac->plan_f, NULL, K, 1, C, S,
                      CVMM_OUT_SORTED);
}
