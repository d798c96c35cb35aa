/* MoEUT layer forward (moeut-spec.md §1.3, §2.2, §3.2, §8.1), training and inference.
 *
 *   xn = LN1(x); q = (xn Wq^T) D^-1/4; k = (xn Wk^T) D^-1/4; lv = xn Sel_v^T; lo = xn Sel_o^T
 *   sel_v = topk_select(lv, KA) per head; gate_v = sigmoid(lv[sel_v]); (sel_o, gate_o) likewise
 *   v = sum_j gate_v * (x V[sel_v])             (V experts read the RAW x)
 *   q, k = RoPE(q, k); r = causal_softmax(q k^T) v (scale 1)
 *   x1 = x + sum_{h,j} gate_o * (r_h O[sel_o])
 *   f = the routed experts of x1, selected, gated and planned by the routing kind (model.routing; the kinds:
 *       model/routing_kind.h); MoEUT's σ-MoE: f = sum_j gate * (ReLU(x1 Keys[sel]) Values[sel]), the keys reading
 *       the RAW x1
 *   y = x1 + f + sum_{s < K_s} ReLU(x1 SharedKeys[s]) SharedValues[s]   (shared experts, gate 1; none by default)
 *          + ReLU(x1 ResKeys) ResValues   (residual MLP of width W, weight 1; model.ff_residual_size, 0 = none)
 */
#include <math.h>

#include "model/moeut_internal.h"
#include "model/routing_kind.h"
#include "pipeline/base/log.h"

/* Buffers of one attention-block forward. k_all/v_all hold the keys/values the queries attend to, [B, Tk, H, D];
 * this call writes its own T rows at time offset pos_offset (pos_offset > 0 only for the KV cache, B = 1). */
typedef struct {
    const scalar_t *x;          /* [N, C] layer input */
    scalar_t *xn;               /* [N, C] LN1(x) (training: kept for the backward) */
    scalar_t *mean, *rstd;      /* [N] */
    scalar_t *q;                /* [N, H*D] */
    scalar_t *k_all, *v_all;    /* [B, Tk, H, D] */
    int Tk, pos_offset;
    scalar_t *lv, *lo;          /* [N, H*EA] raw router logits */
    const uint8_t *drop_v, *drop_o; /* [N, H*EA] or NULL */
    int32_t *sel_v, *sel_o;     /* [N, H, KA] */
    scalar_t *gate_v, *gate_o;  /* [N, H, KA] */
    RoutingPlan *plan_v, *plan_o; /* built here from sel_v, sel_o */
    scalar_t *r;                /* [N, H*D] attention output */
    scalar_t *lse;              /* [B, H, T] */
    scalar_t *att;              /* [N, C] block output: att_residual + the attention output */
    const scalar_t *att_residual; /* [N, C] the residual added in the O projection's reduction (att itself: in place,
                                   * or disjoint; x may be it: read before the O projection writes att) */
} AttnIO;

/* Buffers of one FFN block forward: the routed part's (MoeutFfnIO) and what the kinds share. */
typedef struct {
    MoeutFfnIO r;               /* the routing decision and its experts; r.f is the block output, r.residual + the
                                 * FFN's (ffn_block sets r.residual) */
    scalar_t *A_shared;         /* [K_s, N, S] ReLU(x1 SharedKeys[s]) (training: kept for the backward), or [N, S]
                                 * scratch reused by every shared expert (shared_stride 0) */
    size_t shared_stride;       /* elements between the shared experts' A blocks: N*S, or 0 */
    scalar_t *A_res;            /* [N, W] ReLU(x1 ResKeys) of the residual MLP (NULL without one) */
} FfnIO;

static void attention_block(Model *m, const MoeutLayerOffsets *P, int B, int T, const AttnIO *io) {
    const ModelConfig *c = &m->cfg;
    Backend *be = m->be;
    const int N = B * T, C = c->d_model, H = c->n_heads, D = c->d_head, HD = H * D;
    const int EA = c->att_n_experts, KA = c->att_k, n_rot = model_config_n_rot(c);
    scalar_t *W = m->params;
    const scalar_t qk_scale = (scalar_t)pow((double)D, -0.25); /* D^-1/4 on q and on k: scores scaled by 1/sqrt(D) */

    /* xn feeds the four matmuls below only: kept in matmul's narrow operand form */
    be->layernorm_forward_narrow(be, io->xn, io->mean, io->rstd, io->x, W + P->ln1_w, W + P->ln1_b, N, C,
                                 (scalar_t)MOEUT_LN_EPS);
    scalar_t *k_new = io->k_all + (size_t)io->pos_offset * HD; /* [B, T, H, D] rows of this call */
    scalar_t *v_new = io->v_all + (size_t)io->pos_offset * HD;
    be->matmul(be, io->q, io->xn, W + P->q, N, HD, C, 0, 1, qk_scale, 0);   /* [N, H*D] */
    be->matmul(be, k_new, io->xn, W + P->k, N, HD, C, 0, 1, qk_scale, 0);
    be->matmul(be, io->lv, io->xn, W + P->sel_v, N, H * EA, C, 0, 1, 1, 0); /* [N, H*EA] */
    be->matmul(be, io->lo, io->xn, W + P->sel_o, N, H * EA, C, 0, 1, 1, 0);
    /* SwitchHead keeps MoEUT's routing: sigmoid gates, not renormalised */
    be->topk_select(be, io->sel_v, io->lv, io->drop_v, NULL, ROUTER_SIGMOID, N, H, EA, KA, 1, 1);
    be->routing_plan(be, io->plan_v, io->sel_v, N * H * KA, H * EA);
    be->router_gates(be, io->gate_v, io->lv, io->sel_v, io->drop_v, N, H, EA, KA, ROUTER_SIGMOID, 0);
    be->topk_select(be, io->sel_o, io->lo, io->drop_o, NULL, ROUTER_SIGMOID, N, H, EA, KA, 1, 1);
    be->routing_plan(be, io->plan_o, io->sel_o, N * H * KA, H * EA);
    be->router_gates(be, io->gate_o, io->lo, io->sel_o, io->drop_o, N, H, EA, KA, ROUTER_SIGMOID, 0);
    /* v[n,h] = sum_j gate_v[n,h,j] * x[n] @ V[sel_v[n,h,j]]   -> [N*H, D] */
    be->cvmm_forward(be, v_new, io->x, W + P->v, io->plan_v, io->gate_v, H * KA, KA, C, D, CVMM_ENTRY_ORDER, NULL);
    if (n_rot > 0) {
        be->rope(be, io->q, B, T, H, D, n_rot, io->pos_offset, (scalar_t)MOEUT_ROPE_BASE, 0);
        be->rope(be, k_new, B, T, H, D, n_rot, io->pos_offset, (scalar_t)MOEUT_ROPE_BASE, 0);
    }
    be->attention_forward(be, io->r, io->lse, io->q, io->k_all, io->v_all, B, T, io->Tk, H, D, 1);
    /* att[n] = sum_{h,j} gate_o[n,h,j] * r[n,h] @ O[sel_o[n,h,j]]   -> [N, C] */
    be->cvmm_forward(be, io->att, io->r, W + P->o, io->plan_o, io->gate_o, KA, H * KA, D, C, CVMM_ENTRY_ORDER,
                     io->att_residual);
}

/* route, then experts (the kind's), then the parts every kind shares: the shared experts and the residual MLP */
static void ffn_block(Model *m, const MoeutRouting *kind, const MoeutLayerOffsets *P, const FfnIO *io) {
    const ModelConfig *c = &m->cfg;
    Backend *be = m->be;
    const int N = io->r.N, C = c->d_model, S = c->ff_expert_size;
    scalar_t *W = m->params;
    /* f = residual + the FFN: in the experts' reduction when nothing else adds into f (the shared experts and the
     * residual MLP add into f first, then the residual as before: their order of additions kept) */
    const bool fused = c->n_shared_experts == 0 && c->ff_residual_size <= 0;
    const scalar_t *residual = io->r.residual;
    MoeutFfnIO r = io->r;
    r.residual = fused ? residual : NULL;
    kind->route(m, P, &r);
    kind->experts(m, P, &r);
    /* shared experts: f += ReLU(x1 SharedKeys[s]) SharedValues[s], every token, gate 1 */
    for (int sh = 0; sh < c->n_shared_experts; sh++) {
        scalar_t *A_s = io->A_shared + (size_t)sh * io->shared_stride; /* [N, S] */
        be->matmul(be, A_s, io->r.x1, W + P->shared_keys + (size_t)sh * C * S, N, S, C, 0, 0, 1, 0);
        be->relu_forward(be, A_s, A_s, (size_t)N * S);
        be->matmul(be, io->r.f, A_s, W + P->shared_values + (size_t)sh * S * C, N, C, S, 0, 0, 1, 1);
    }
    if (c->ff_residual_size > 0) moeut_residual_forward(m, P, N, io->r.x1, io->A_res, io->r.f); /* f += MLP_W(x1) */
    if (!fused && residual) be->add_inplace(be, io->r.f, residual, (size_t)N * C);
}

/* Draws an expert-dropout mask on the host and uploads it; returns NULL when p == 0 (no dropout). */
static const uint8_t *dropout_mask(Model *m, uint8_t *dev, long rows, int E, int k, double p) {
    if (p <= 0.0) return NULL;
    MoeutScratch *s = &moeut_state(m)->s;
    const size_t need = (size_t)rows * (size_t)E;
    if (need > s->host_drop_cap) {
        s->host_drop = xrealloc(s->host_drop, need);
        s->host_drop_cap = need;
    }
    moeut_make_drop_mask(&m->dropout_rng, s->host_drop, rows, E, k, p);
    m->be->to_device(m->be, dev, s->host_drop, (size_t)rows * (size_t)E);
    return dev;
}

void moeut_forward_train(Model *m, int app, const scalar_t *h_in, scalar_t *h_out) {
    MoeutState *st = moeut_state(m);
    const ModelConfig *c = &m->cfg;
    moeut_check_step(m, "forward_train", app);
    const int B = st->B, T = st->T, N = B * T, H = c->n_heads;
    const int layer = m->apps[app].layer, rep = m->apps[app].rep, slot = m->apps[app].slot;
    /* E_l experts in this layer; the counts keep the stride Emax = ff_n_experts of every layer (their buffers' size) */
    const size_t HEA = (size_t)H * c->att_n_experts, E = (size_t)model_config_ff_experts(c, layer);
    const size_t Emax = (size_t)c->ff_n_experts;
    const MoeutLayerOffsets *P = &st->layers[layer];
    MoeutAppCache *ac = &st->apps[slot];
    MoeutScratch *s = &st->s;

    ac->x = h_in; /* [N, C], kept by the caller until this application's backward */
    /* x and x1 are read whole by cvmm here and again by the weight gradients of this application's backward */
    m->be->keep_operand(m->be, ac->x, (size_t)N * c->d_model);
    /* Dropout masks in a fixed order (v, o, ffn) so a run is reproducible from the RNG state. */
    const uint8_t *drop_v = dropout_mask(m, s->drop_v, (long)N * H, c->att_n_experts, c->att_k, c->att_expert_dropout);
    const uint8_t *drop_o = dropout_mask(m, s->drop_o, (long)N * H, c->att_n_experts, c->att_k, c->att_expert_dropout);
    AttnIO a = {
        .x = ac->x, .xn = ac->xn, .mean = ac->mean1, .rstd = ac->rstd1, .q = ac->q, .k_all = ac->k,
        .v_all = ac->v, .Tk = T, .pos_offset = 0,
        .lv = st->hist_v[layer] + (size_t)rep * N * HEA, /* written straight into the regularizer history */
        .lo = st->hist_o[layer] + (size_t)rep * N * HEA, .drop_v = drop_v, .drop_o = drop_o, .sel_v = ac->sel_v,
        .sel_o = ac->sel_o, .gate_v = ac->gate_v, .gate_o = ac->gate_o, .plan_v = &ac->plan_v, .plan_o = &ac->plan_o,
        .r = ac->r, .lse = ac->lse, .att = ac->x1, .att_residual = ac->x, /* x1 = att + x */
    };
    attention_block(m, P, B, T, &a);
    m->be->keep_operand(m->be, ac->x1, (size_t)N * c->d_model); /* before the router's LayerNorm, which copies it */

    const uint8_t *drop_f = dropout_mask(m, s->drop_f, N, (int)E, c->ff_k, c->ff_expert_dropout);
    FfnIO f = {
        .r = {
            .x1 = ac->x1, .N = N, .tokens = st->tokens, .E = (int)E, .xs = ac->xs, .mean = ac->mean2,
            .rstd = ac->rstd2,
            .l = st->hist_f[layer] + (size_t)rep * N * E, .drop = drop_f, .sel = ac->sel_f, .gate = ac->gate_f,
            .plan = &ac->plan_f, .pos = ac->entry_pos, .choice_c = st->choice_c,
            .counts = m->routing_counts + (size_t)slot * Emax,
            .bias_counts = st->bias_counts ? st->bias_counts + (size_t)layer * Emax : NULL,
            .valid = st->have_valid ? st->valid_dev : NULL, .cap_dropped = ac->cap_dropped,
            .n_dropped = m->routing_dropped ? m->routing_dropped + slot : NULL, .A = ac->A, .xg = s->gather_x,
            .yg = s->gather_y, .f = h_out, .residual = ac->x1, /* y = x1 + f (= f + x1: the same bits) */
        },
        .A_shared = ac->A_shared, .shared_stride = (size_t)N * c->ff_expert_size, .A_res = ac->A_res,
    };
    ffn_block(m, st->routing, P, &f);
}

void moeut_forward_infer(Model *m, int app, scalar_t *h, int B, int T, const int32_t *tokens, LayerKV *kv,
                         int kv_len) {
    MoeutState *st = moeut_state(m);
    const ModelConfig *c = &m->cfg;
    Backend *be = m->be;
    if (st == NULL || app < 0 || app >= c->n_layers || m->apps[app].kind != LAYER_MOEUT)
        die("moeut: forward_infer: bad application %d", app);
    if (kv != NULL && B != 1) die("moeut: forward_infer with a KV cache needs B == 1 (got %d)", B);
    if (kv_len < 0 || (kv == NULL && kv_len != 0)) die("moeut: forward_infer: bad kv_len %d", kv_len);
    const int N = B * T, C = c->d_model;
    const MoeutLayerOffsets *P = &st->layers[m->apps[app].layer];
    model_reserve_activations(m, 0, N);
    MoeutScratch *s = &st->s;

    AttnIO a = {
        .x = h, .xn = s->nc[0], .mean = s->mean, .rstd = s->rstd, .q = s->hd[0],
        .k_all = kv ? kv->k : s->hd[1], .v_all = kv ? kv->v : s->hd[2],
        .Tk = kv ? kv_len + T : T, .pos_offset = kv ? kv_len : 0,
        .lv = s->lv, .lo = s->lo, .drop_v = NULL, .drop_o = NULL, .sel_v = s->sel_v, .sel_o = s->sel_o,
        .gate_v = s->gate_v, .gate_o = s->gate_o, .plan_v = &s->plan_v, .plan_o = &s->plan_o, .r = s->hd[3],
        .lse = s->lse, .att = h, .att_residual = h, /* h = x1 = h + att, in place */
    };
    attention_block(m, P, B, T, &a);
    /* inference routes each position alone (expert choice: as "topk"): no pos, no capacity, no bias counts */
    FfnIO f = {
        .r = {
            .x1 = h, .N = N, .tokens = tokens, .E = model_config_ff_experts(c, m->apps[app].layer), .xs = s->nc[1],
            .mean = s->mean, .rstd = s->rstd, .l = s->lf, .sel = s->sel_f, .gate = s->gate_f, .plan = &s->plan_f,
            .counts = (m->counting_eval && kv == NULL)
                          ? m->routing_counts + (size_t)m->apps[app].slot * c->ff_n_experts
                          : NULL,
            .A = s->A, .f = s->nc[2],
        },
        .A_shared = s->shared_A, .shared_stride = 0, .A_res = s->res_A,
    };
    ffn_block(m, st->routing->inference, P, &f);
    be->add_inplace(be, h, s->nc[2], (size_t)N * C); /* h = x1 + f */
}
