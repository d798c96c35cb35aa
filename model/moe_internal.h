/* Private state of the "moe" layer (model/moe_layer.c, model/moe_ffn.c): a dense pre-LN Transformer layer whose FFN is
 * a routed mixture of experts (Switch Transformer arXiv 2101.03961 §2; GShard; Mixtral arXiv 2401.04088 eq. 1-2):
 *   x1 = x + Attn(LN1(x))                                  (model/preln_attention.c, the dense model's block)
 *   u = LN2(x1);  l = u expert_sel^T  [N, E];  sel = topk_select(l, K)
 *   gate = router_gates(l, sel) (model.router sigmoid | softmax, model.router_renorm) * model.routed_scaling_factor
 *   y = x1 + sum_j gate_j * ( ReLU(u keys[e_j] + keys_bias[e_j]) values[e_j] + values_bias[e_j] )
 * With router_renorm and every expert a copy of one dense FFN (keys[e] = linear1.weight^T, keys_bias[e] = linear1.bias,
 * values[e] = linear2.weight^T, values_bias[e] = linear2.bias, S = d_ff), y is the dense layer's output: sparse
 * upcycling by copying preserves the function.
 *
 * One distinct layer per application (no sharing): MoE layer i = application n_dense_first + i, tensors
 * "transformer.layers.<i>.". N = B*T tokens, C = d_model, HD = n_heads * d_head, E experts of width S, K active.
 * The FFN's hidden rows (U, A = ReLU(U), dA, dU) stay in the routing plan's order (sorted by expert), so that expert
 * e's rows are the contiguous range host_offset[e] .. host_offset[e+1] where keys_bias[e] is added (add_bias per
 * expert). The experts' computation (keys, ReLU, values) is model/routed_experts.h, shared with MoEUT's FFN; the
 * gated values_bias term is a cvmm of a column of ones against values_bias viewed as [E, 1, C]. Every backend buffer lives in the model's activation arena (moe_plan_activations).
 */
#ifndef MODEL_MOE_INTERNAL_H
#define MODEL_MOE_INTERNAL_H

#include "model/model_internal.h"
#include "model/preln_attention.h"

/* Element offsets of one MoE layer's tensors in Model.params / Model.grads. */
typedef struct {
    PrelnAttnParams att;  /* q, k, v [H*D, C], o [C, H*D], ln1 [C] */
    size_t expert_sel;    /* [E, C] */
    size_t keys;          /* [E, C, S] */
    size_t keys_bias;     /* [E, S] */
    size_t values;        /* [E, S, C] */
    size_t values_bias;   /* [E, C] */
    size_t ln2_w, ln2_b;  /* [C] */
} MoeLayerOffsets;

/* What the backward of one training application needs. */
typedef struct {
    PrelnAttnCache att;   /* q, k, v, att [N, H*D], lse [B, H, T], LN1 mean/rstd [N] */
    const scalar_t *x;    /* [N, C] layer input (the wrapper's residual stream, alive until the backward) */
    scalar_t *x1;         /* [N, C] x + attention */
    scalar_t *mean2, *rstd2; /* [N] LN2 statistics */
    scalar_t *l;          /* [N, E] raw router logits */
    scalar_t *dreg;       /* [N, E] the balance loss's gradient w.r.t. l (regularizers()) */
    int32_t *sel;         /* [N, K] */
    scalar_t *gate;       /* [N, K] */
    scalar_t *A;          /* [N*K, S] ReLU(U), rows in plan order; A > 0 exactly where U > 0 */
    RoutingPlan plan;     /* of sel: built in the forward, reused by the backward */
} MoeAppCache;

typedef struct {
    MoeLayerOffsets *layers; /* [n_moe] */
    MoeAppCache *apps;       /* [n_moe] */
    int n_moe;               /* MoE layers = applications (n_layers - n_dense_first) */
    int n_registered;
    int B, T;                /* training step geometry (0: none prepared) */
    unsigned plan_gen;       /* m->arena_generation at train_begin */
    uint8_t *valid_dev;      /* [N] the regularizer mask (training); NULL contents unused when !have_valid */
    int have_valid;
    int reg_ready;           /* regularizers() has run since train_begin */
    /* scratch of both paths, planned for max(train, eval) tokens */
    scalar_t *c0, *c1, *c2;  /* [N, C]: LN outputs | the experts' output f, their gradients | the bias term, dx1 */
    scalar_t *hd[4];         /* [N, H*D] */
    scalar_t *lse;           /* [N*H] */
    scalar_t *mean, *rstd;   /* [N] */
    scalar_t *l;             /* [N, E] router logits (inference) | their gradient */
    int32_t *sel;            /* [N, K] (inference) */
    scalar_t *gate, *gate2, *gate3; /* [N, K]: gates (inference) | dgate, the bias term's dgate, unscaled gates */
    scalar_t *A;             /* [N*K, S] ReLU(U) (inference) | dA, dU */
    scalar_t *ones;          /* [N*K] all 1 (filled before each use: the arena keeps nothing across calls) */
    scalar_t *ones_host;     /* host copy, [ones_cap] */
    size_t ones_cap;
    RoutingPlan plan;        /* inference */
    int32_t *plan_host;      /* host offsets of every RoutingPlan above */
} MoeState;

static inline MoeState *moe_state(Model *m) { return (MoeState *)m->layer_state[LAYER_MOE]; }

/* moe_layer.c: dies unless train_begin prepared a step whose buffers are still in place and app is a MoE
 * application. Returns the application's cache. */
MoeAppCache *moe_check_step(Model *m, const char *what, int app);

/* moe_ffn.c */
void moe_forward_train(Model *m, int app, const scalar_t *h_in, scalar_t *h_out);
void moe_forward_infer(Model *m, int app, scalar_t *h, int B, int T, const int32_t *tokens, LayerKV *kv, int kv_len);
void moe_backward(Model *m, int app, const scalar_t *dh_out, scalar_t *dh_in);

#endif
