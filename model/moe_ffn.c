/* The "moe" layer's forward (training and eval, with the KV cache) and backward (formulas in model/moe_internal.h). */
#include "model/moe_internal.h"
#include "model/routed_experts.h"
#include "pipeline/base/log.h"

/* Buffers of one routed-FFN forward on N tokens. */
typedef struct {
    const scalar_t *x1;     /* [N, C] block input */
    scalar_t *u;            /* [N, C] LN2(x1) */
    scalar_t *mean, *rstd;  /* [N] */
    scalar_t *l;            /* [N, E] router logits */
    int32_t *sel;           /* [N, K] */
    scalar_t *gate;         /* [N, K] */
    RoutingPlan *plan;      /* built here from sel */
    scalar_t *A;            /* [N*K, S] ReLU(U), rows in plan order */
    scalar_t *fb;           /* [N, C] scratch: the gated values_bias term */
    scalar_t *f;            /* [N, C] scratch: the experts' output */
    int64_t *counts;        /* [E] the application's routing counts, NULL = not counted */
    const uint8_t *valid;   /* [N] positions the counts cover, NULL = all */
    scalar_t *y;            /* [N, C] output: x1 + FFN (may be x1 itself) */
} FfnIO;

/* Uploads N*K ones into the arena's ones buffer (its contents do not outlive a call). */
static void fill_ones(Model *m, size_t n) {
    MoeState *st = moe_state(m);
    if (n > st->ones_cap) die("moe layer: %zu ones needed, %zu planned", n, st->ones_cap);
    m->be->to_device(m->be, st->ones, st->ones_host, n * sizeof(scalar_t));
}

static RoutedExpertParams moe_expert_params(const MoeLayerOffsets *P) {
    return (RoutedExpertParams){.keys = P->keys, .values = P->values, .keys_bias = P->keys_bias, .has_keys_bias = true};
}

static void ffn_forward(Model *m, const MoeLayerOffsets *P, int N, const FfnIO *io) {
    const ModelConfig *c = &m->cfg;
    Backend *be = m->be;
    const int C = c->d_model, E = c->ff_n_experts, S = c->ff_expert_size, K = c->ff_k;
    scalar_t *W = m->params;
    be->layernorm_forward(be, io->u, io->mean, io->rstd, io->x1, W + P->ln2_w, W + P->ln2_b, N, C,
                          (scalar_t)PRELN_LN_EPS);
    be->matmul(be, io->l, io->u, W + P->expert_sel, N, E, C, 0, 1, 1, 0); /* l[N,E] = u Sel^T */
    be->topk_select(be, io->sel, io->l, NULL, NULL, c->router, N, 1, E, K, 1, 1); /* no group limit */
    be->routing_plan(be, io->plan, io->sel, N * K, E);
    be->routing_plan_to_host(be, io->plan); /* keys_bias is added per expert on the host offsets (routed_experts.c) */
    be->router_gates(be, io->gate, io->l, io->sel, NULL, N, 1, E, K, c->router, c->router_renorm);
    if (c->routed_scaling_factor != 1.0)
        be->scale_inplace(be, io->gate, (scalar_t)c->routed_scaling_factor, (size_t)N * K);
    if (io->counts) be->expert_count(be, io->counts, io->sel, NULL, io->valid, N, 1, E, K);
    /* A [N*K, S] = ReLU(u Keys[sel] + keys_bias[sel]), plan order; f [N, C] = sum_j gate_j A_j Values[sel_j] */
    const RoutedExpertParams params = moe_expert_params(P);
    const RoutedExpertBatch b = {N, K, C, S, io->plan, io->gate};
    routed_experts_forward(m, &params, &b, io->u, io->A, io->f, NULL);
    /* fb[N, C] = sum_j gate_j values_bias[sel_j]: ones[N*K, 1] @ values_bias[sel] as [1, C], reduced with the gates */
    fill_ones(m, (size_t)N * K);
    be->cvmm_forward(be, io->fb, moe_state(m)->ones, W + P->values_bias, io->plan, io->gate, 1, K, 1, C,
                     CVMM_ENTRY_ORDER, NULL);
    /* y = (x1 + fb) + f: this order of additions is the layer's (its records stay bit-identical) */
    if (io->y != io->x1) be->copy(be, io->y, io->x1, (size_t)N * C * sizeof(scalar_t));
    be->add_inplace(be, io->y, io->fb, (size_t)N * C);
    be->add_inplace(be, io->y, io->f, (size_t)N * C);
}

void moe_forward_train(Model *m, int app, const scalar_t *h_in, scalar_t *h_out) {
    MoeAppCache *ac = moe_check_step(m, "forward_train", app);
    MoeState *st = moe_state(m);
    const int B = st->B, T = st->T, N = B * T;
    const MoeLayerOffsets *P = &st->layers[m->apps[app].layer];
    ac->x = h_in;
    preln_attention_forward_train(m, &P->att, &ac->att, h_in, ac->x1, st->c0, B, T);
    FfnIO f = {.x1 = ac->x1, .u = st->c0, .mean = ac->mean2, .rstd = ac->rstd2, .l = ac->l, .sel = ac->sel,
               .gate = ac->gate, .plan = &ac->plan, .A = ac->A, .fb = st->c2, .f = st->c1,
               .counts = m->routing_counts + (size_t)m->apps[app].slot * m->cfg.ff_n_experts,
               .valid = st->have_valid ? st->valid_dev : NULL, .y = h_out};
    ffn_forward(m, P, N, &f);
}

void moe_forward_infer(Model *m, int app, scalar_t *h, int B, int T, const int32_t *tokens, LayerKV *kv, int kv_len) {
    MoeState *st = moe_state(m);
    if (st == NULL || app < 0 || app >= m->cfg.n_layers || m->apps[app].kind != LAYER_MOE)
        die("moe layer: forward_infer of application %d, not a MoE one", app);
    const int N = B * T;
    model_reserve_activations(m, 0, N);
    const MoeLayerOffsets *P = &st->layers[m->apps[app].layer];
    preln_attention_forward_infer(m, &P->att, h, B, T, kv, kv_len, st->c0, st->hd[0], st->hd[1], st->hd[2], st->hd[3],
                                  st->lse, st->mean, st->rstd); /* h = x1 */
    FfnIO f = {.x1 = h, .u = st->c0, .mean = st->mean, .rstd = st->rstd, .l = st->l, .sel = st->sel,
               .gate = st->gate, .plan = &st->plan, .A = st->A, .fb = st->c2, .f = st->c1,
               .counts = (m->counting_eval && kv == NULL)
                             ? m->routing_counts + (size_t)m->apps[app].slot * m->cfg.ff_n_experts
                             : NULL,
               .valid = NULL, .y = h};
    ffn_forward(m, P, N, &f);
}

void moe_backward(Model *m, int app, const scalar_t *dh_out, scalar_t *dh_in) {
    const MoeAppCache *ac = moe_check_step(m, "backward", app);
    MoeState *st = moe_state(m);
    const ModelConfig *c = &m->cfg;
    Backend *be = m->be;
    const int B = st->B, T = st->T, N = B * T, C = c->d_model, E = c->ff_n_experts, S = c->ff_expert_size;
    const int K = c->ff_k;
    const MoeLayerOffsets *P = &st->layers[m->apps[app].layer];
    scalar_t *W = m->params, *G = m->grads;
    const size_t NC = (size_t)N * C, NK = (size_t)N * K;
    scalar_t *u = st->c0, *du = st->c1; /* LN2(x1) recomputed, and its gradient */
    be->layernorm_forward(be, u, st->mean, st->rstd, ac->x1, W + P->ln2_w, W + P->ln2_b, N, C, (scalar_t)PRELN_LN_EPS);

    /* ---- experts: f = sum_j gate_j (A_j Values[e_j] + values_bias[e_j]); df = dy = dh_out ---- */
    scalar_t *dA = st->A, *dgate = st->gate, *dgate_b = st->gate2; /* [N*K, S], [N, K], [N, K] */
    fill_ones(m, NK);
    be->cvmm_backward(be, NULL, G + P->values_bias, dgate_b, dh_out, st->ones, W + P->values_bias, &ac->plan,
                      ac->gate, 1, K, 1, C, CVMM_ENTRY_ORDER, NULL);
    /* U_j = u Keys[e_j] + keys_bias[e_j]: du = sum_j dU_j Keys^T, written (and dgate from the values) */
    const RoutedExpertParams params = moe_expert_params(P);
    const RoutedExpertBatch b = {N, K, C, S, &ac->plan, ac->gate};
    routed_experts_backward(m, &params, &b, dh_out, u, ac->A, dA, dgate, du, NULL);
    be->add_inplace(be, dgate, dgate_b, NK);

    /* ---- router: l = u Sel^T; dl = the balance gradient + the gates' backward ---- */
    scalar_t *dl = st->l; /* [N, E] */
    if (st->reg_ready)
        be->copy(be, dl, ac->dreg, (size_t)N * E * sizeof(scalar_t));
    else
        be->zero(be, dl, (size_t)N * E * sizeof(scalar_t));
    /* router_gates_backward wants the transform's own output: with a routed scaling factor rsf the cached gates are
     * rsf times it, so the unscaled gates are recomputed (the same kernel on the same logits), dL/dg = rsf dL/dgate */
    const scalar_t *gate = ac->gate;
    if (c->routed_scaling_factor != 1.0) {
        be->router_gates(be, st->gate3, ac->l, ac->sel, NULL, N, 1, E, K, c->router, c->router_renorm);
        be->scale_inplace(be, dgate, (scalar_t)c->routed_scaling_factor, NK);
        gate = st->gate3;
    }
    be->router_gates_backward(be, dl, dgate, gate, ac->l, ac->sel, NULL, N, 1, E, K, c->router, c->router_renorm);
    be->matmul(be, G + P->expert_sel, dl, u, E, C, N, 1, 0, 1, 1); /* dSel[E,C] += dl^T u */
    be->matmul(be, du, dl, W + P->expert_sel, N, C, E, 0, 0, 1, 1); /* du += dl Sel */

    /* ---- LN2 and the residual: dx1 = dy + LN2 backward ---- */
    be->copy(be, dh_in, dh_out, NC * sizeof(scalar_t));
    be->layernorm_backward(be, dh_in, G + P->ln2_w, G + P->ln2_b, du, ac->x1, W + P->ln2_w, ac->mean2, ac->rstd2, N, C);

    /* ---- attention ---- */
    preln_attention_backward(m, &P->att, &ac->att, ac->x, dh_in, st->c0, st->c1, st->hd[0], st->hd[1], st->hd[2],
                             st->hd[3], B, T);
}
