/* The dense model's pre-LN attention block, shared by the dense layer (model/dense_layer.c) and the "moe" layer
 * (model/moe_layer.c), which differ only in their FFN:
 *   xn = LN1(x);  q = xn Wq^T * D^-1/4;  k = xn Wk^T * D^-1/4;  v = xn Wv^T      (no biases)
 *   q, k <- RoPE (n_rot = model_config_n_rot, base 1e4, NeoX layout);  a = causal softmax attention, scale 1
 *   x1 = x + a Wo^T
 * N = B*T tokens, C = d_model, HD = n_heads * d_head. */
#ifndef MODEL_PRELN_ATTENTION_H
#define MODEL_PRELN_ATTENTION_H

#include "model/model_internal.h"

#define PRELN_LN_EPS 1e-5
#define PRELN_ROPE_BASE 10000.0

/* Element offsets of the block's tensors in Model.params / Model.grads. */
typedef struct {
    size_t q, k, v, o;   /* [H*D, C] x3, [C, H*D] */
    size_t ln_w, ln_b;   /* [C] LN1 */
} PrelnAttnParams;

/* The training cache of one application (backend memory). */
typedef struct {
    scalar_t *q, *k, *v, *att; /* [N, H*D] q, k after RoPE; att = the attention output before Wo */
    scalar_t *lse;             /* [B, H, T] */
    scalar_t *mean, *rstd;     /* [N] LN1 statistics */
} PrelnAttnCache;

/* Training forward: fills the cache, x1[N,C] = x + a Wo^T (x1 must not alias x). xn[N,C] is scratch. */
void preln_attention_forward_train(Model *m, const PrelnAttnParams *p, const PrelnAttnCache *c, const scalar_t *x,
                                   scalar_t *x1, scalar_t *xn, int B, int T);
/* Backward: dx[N,C] holds d/dx1 on entry (the residual path) and gets the attention's and LN1's contributions
 * added; parameter gradients accumulate. x is the block's input; scratch: xn, dxn [N,C], dq, dk, dv, datt [N,H*D]. */
void preln_attention_backward(Model *m, const PrelnAttnParams *p, const PrelnAttnCache *c, const scalar_t *x,
                              scalar_t *dx, scalar_t *xn, scalar_t *dxn, scalar_t *dq, scalar_t *dk, scalar_t *dv,
                              scalar_t *datt, int B, int T);
/* Eval forward in place: h[N,C] += a Wo^T. With kv (B = 1) the new keys/values are appended at kv_len and the queries
 * attend to the whole cache (RoPE offset kv_len). Scratch: xn [N,C], q, k, v, att [N,H*D], lse [N*H], mean and
 * rstd [N]. */
void preln_attention_forward_infer(Model *m, const PrelnAttnParams *p, scalar_t *h, int B, int T, LayerKV *kv,
                                   int kv_len, scalar_t *xn, scalar_t *q, scalar_t *k, scalar_t *v, scalar_t *att,
                                   scalar_t *lse, scalar_t *mean, scalar_t *rstd);

#endif
