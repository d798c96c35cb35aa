/* The pre-LN attention block of the dense model and the "moe" layer (formulas in model/preln_attention.h).
 * Moved here unchanged from the dense layer: the op sequence is the same, so the dense model's numbers are too. */
#include "model/preln_attention.h"

#include <math.h>

#include "pipeline/base/log.h"

static scalar_t *P(Model *m, size_t off) { return m->params + off; }
static scalar_t *G(Model *m, size_t off) { return m->grads + off; }

/* The q/k/v projections of xn[N,C] into q, k, v [N, H*D], with the D^-1/4 scale folded into the q and k matmuls.
 * xn = LN(x) is read by these matmuls and their backward (linear_backward) alone: layernorm_forward_narrow makes it. */
static void project_qkv(Model *m, const PrelnAttnParams *p, const scalar_t *xn, scalar_t *q, scalar_t *k, scalar_t *v,
                        int N) {
    Backend *be = m->be;
    const int C = m->cfg.d_model, HD = m->cfg.n_heads * m->cfg.d_head;
    const scalar_t qk_scale = (scalar_t)pow((double)m->cfg.d_head, -0.25);
    be->matmul(be, q, xn, P(m, p->q), N, HD, C, 0, 1, qk_scale, 0);
    be->matmul(be, k, xn, P(m, p->k), N, HD, C, 0, 1, qk_scale, 0);
    be->matmul(be, v, xn, P(m, p->v), N, HD, C, 0, 1, 1, 0);
}

void preln_attention_forward_train(Model *m, const PrelnAttnParams *p, const PrelnAttnCache *c, const scalar_t *x,
                                   scalar_t *x1, scalar_t *xn, int B, int T) {
    Backend *be = m->be;
    const int N = B * T, C = m->cfg.d_model, H = m->cfg.n_heads, D = m->cfg.d_head, HD = H * D;
    const int n_rot = model_config_n_rot(&m->cfg);
    be->layernorm_forward_narrow(be, xn, c->mean, c->rstd, x, P(m, p->ln_w), P(m, p->ln_b), N, C,
                                 (scalar_t)PRELN_LN_EPS);
    project_qkv(m, p, xn, c->q, c->k, c->v, N);
    be->rope(be, c->q, B, T, H, D, n_rot, 0, (scalar_t)PRELN_ROPE_BASE, 0);
    be->rope(be, c->k, B, T, H, D, n_rot, 0, (scalar_t)PRELN_ROPE_BASE, 0);
    be->attention_forward(be, c->att, c->lse, c->q, c->k, c->v, B, T, T, H, D, 1);
    be->copy(be, x1, x, (size_t)N * C * sizeof(scalar_t));
    be->matmul(be, x1, c->att, P(m, p->o), N, C, HD, 0, 1, 1, 1); // x1 = x + att @ Wo^T
}

void preln_attention_backward(Model *m, const PrelnAttnParams *p, const PrelnAttnCache *c, const scalar_t *x,
                              scalar_t *dx, scalar_t *xn, scalar_t *dxn, scalar_t *dq, scalar_t *dk, scalar_t *dv,
                              scalar_t *datt, int B, int T) {
    Backend *be = m->be;
    const int N = B * T, C = m->cfg.d_model, H = m->cfg.n_heads, D = m->cfg.d_head, HD = H * D;
    const int n_rot = model_config_n_rot(&m->cfg);
    const scalar_t qk_scale = (scalar_t)pow((double)D, -0.25);
    be->matmul(be, G(m, p->o), dx, c->att, C, HD, N, 1, 0, 1, 1); // dWo[C,HD] += dx1^T @ att
    be->matmul(be, datt, dx, P(m, p->o), N, HD, C, 0, 0, 1, 0);   // datt[N,HD] = dx1 @ Wo
    be->attention_backward(be, dq, dk, dv, datt, c->att, c->lse, c->q, c->k, c->v, B, T, H, D, 1);
    be->layernorm_forward_narrow(be, xn, c->mean, c->rstd, x, P(m, p->ln_w), P(m, p->ln_b), N, C,
                                 (scalar_t)PRELN_LN_EPS);
    /* dWq += s (R^T dq)^T xn, dWk, dWv likewise; dxn = s R^T dq Wq + s R^T dk Wk + dv Wv (R^T: the transpose of the
     * queries' and keys' rotation, applied as linear_backward reads dq and dk) */
    const RopeSpec rot = {B, T, H, D, n_rot, 0, (scalar_t)PRELN_ROPE_BASE};
    const LinearTerm maps[] = {
        {.dy = dq, .w = P(m, p->q), .dw = G(m, p->q), .m = HD, .alpha = qk_scale, .rope = n_rot > 0 ? &rot : NULL},
        {.dy = dk, .w = P(m, p->k), .dw = G(m, p->k), .m = HD, .alpha = qk_scale, .rope = n_rot > 0 ? &rot : NULL},
        {.dy = dv, .w = P(m, p->v), .dw = G(m, p->v), .m = HD, .alpha = 1},
    };
    be->linear_backward(be, dxn, xn, maps, 3, N, C, 0);
    be->layernorm_backward(be, dx, G(m, p->ln_w), G(m, p->ln_b), dxn, x, P(m, p->ln_w), c->mean, c->rstd, N, C);
}

void preln_attention_forward_infer(Model *m, const PrelnAttnParams *p, scalar_t *h, int B, int T, LayerKV *kv,
                                   int kv_len, scalar_t *xn, scalar_t *q, scalar_t *k, scalar_t *v, scalar_t *att,
                                   scalar_t *lse, scalar_t *mean, scalar_t *rstd) {
    Backend *be = m->be;
    const int N = B * T, C = m->cfg.d_model, H = m->cfg.n_heads, D = m->cfg.d_head, HD = H * D;
    const int n_rot = model_config_n_rot(&m->cfg);
    if (kv && B != 1) die("attention: KV-cache decoding needs batch 1 (got %d)", B);
    const int pos = kv ? kv_len : 0;
    be->layernorm_forward_narrow(be, xn, mean, rstd, h, P(m, p->ln_w), P(m, p->ln_b), N, C, (scalar_t)PRELN_LN_EPS);
    project_qkv(m, p, xn, q, k, v, N);
    be->rope(be, q, B, T, H, D, n_rot, pos, (scalar_t)PRELN_ROPE_BASE, 0);
    be->rope(be, k, B, T, H, D, n_rot, pos, (scalar_t)PRELN_ROPE_BASE, 0);
    if (kv) {
        // Append the new keys/values at kv_len.. and attend over the whole cache.
        size_t at = (size_t)kv_len * HD, bytes = (size_t)T * HD * sizeof(scalar_t);
        be->copy(be, kv->k + at, k, bytes);
        be->copy(be, kv->v + at, v, bytes);
        be->attention_forward(be, att, lse, q, kv->k, kv->v, 1, T, kv_len + T, H, D, 1);
    } else {
        be->attention_forward(be, att, lse, q, k, v, B, T, T, H, D, 1);
    }
    be->matmul(be, h, att, P(m, p->o), N, C, HD, 0, 1, 1, 1); // h += att @ Wo^T
}
