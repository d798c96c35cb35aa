/* The residual MLP of a MoEUT FFN block (model.ff_residual_size W > 0): a dense ReLU MLP of its own width applied to
 * every token with weight 1, beside the routed experts (and any shared experts):
 *
 *   y = x1 + MLP_W(x1) + sum_j g_j FFN_j(x1),   MLP_W(x1) = ReLU(x1 ResKeys) ResValues
 *
 * DeepSpeed-MoE's Residual-MoE (Rajbhandari et al. 2022, arXiv 2201.05596 §4.1.2: a fixed MLP plus one routed expert
 * as its error correction) and Snowflake Arctic (2024: a dense MLP in parallel with a residual MoE MLP in every
 * layer). It reads the raw x1, as MoEUT's experts and shared experts do (moeut-spec.md: keys read the raw x), and
 * stays outside the router and its statistics. Tensors: ffn.residual_keys [C, W], ffn.residual_values [W, C]. */
#include "model/moeut_internal.h"

void moeut_residual_forward(Model *m, const MoeutLayerOffsets *P, int N, const scalar_t *x1, scalar_t *A,
                            scalar_t *f) {
    Backend *be = m->be;
    const int C = m->cfg.d_model, W = m->cfg.ff_residual_size;
    const scalar_t *Wp = m->params;
    be->matmul(be, A, x1, Wp + P->residual_keys, N, W, C, 0, 0, 1, 0);   /* U[N,W] = x1 ResKeys */
    be->relu_forward(be, A, A, (size_t)N * W);                           /* A = ReLU(U) */
    be->matmul(be, f, A, Wp + P->residual_values, N, C, W, 0, 0, 1, 1); /* f[N,C] += A ResValues */
}

void moeut_residual_backward(Model *m, const MoeutLayerOffsets *P, int N, const scalar_t *x1, const scalar_t *A,
                             const scalar_t *df, scalar_t *dx1, scalar_t *dU) {
    Backend *be = m->be;
    const int C = m->cfg.d_model, W = m->cfg.ff_residual_size;
    const scalar_t *Wp = m->params;
    scalar_t *G = m->grads;
    const size_t ks = P->residual_keys, vs = P->residual_values;
    be->matmul(be, dU, df, Wp + vs, N, W, C, 0, 1, 1, 0); /* dA[N,W] = df ResValues^T */
    be->matmul(be, G + vs, A, df, W, C, N, 1, 0, 1, 1);   /* dResValues[W,C] += A^T df */
    be->relu_backward(be, dU, dU, A, (size_t)N * W);      /* dU = dA * (U > 0); A > 0 iff U > 0 */
    be->matmul(be, G + ks, x1, dU, C, W, N, 1, 0, 1, 1);  /* dResKeys[C,W] += x1^T dU */
    be->matmul(be, dx1, dU, Wp + ks, N, C, W, 0, 1, 1, 1); /* dx1 += dU ResKeys^T */
}
