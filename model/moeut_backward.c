/* MoEUT layer backward (moeut-spec.md §8.2): the exact reverse of moeut_forward.c for one training application.
 * Parameter gradients accumulate (+=) into Model.grads, so a shared layer receives the sum over its R applications.
 * Router-logit gradients = the gating transform's backward of the gate gradients + the stored regularizer gradients.
 * The expert-dropout masks are not kept for the backward: moeut_make_drop_mask always leaves k experts, so no slot
 * is a filler of topk_select and router_gates_backward needs no mask (NULL). */
#include <math.h>

#include "model/moeut_internal.h"
#include "pipeline/base/log.h"

/* dl = this application's regularizer gradient (or 0 before regularizers() ran), then the gate path is added. */
static void router_logit_grad(Model *m, scalar_t *dl, const scalar_t *dreg_slot, size_t n) {
    MoeutState *st = moeut_state(m);
    if (st->reg_ready)
        m->be->copy(m->be, dl, dreg_slot, n * sizeof(scalar_t));
    else
        m->be->zero(m->be, dl, n * sizeof(scalar_t));
}

void moeut_backward(Model *m, int app, const scalar_t *dh_out, scalar_t *dh_in) {
    MoeutState *st = moeut_state(m);
    const ModelConfig *c = &m->cfg;
    Backend *be = m->be;
    moeut_check_step(m, "backward", app);
    const int B = st->B, T = st->T, N = B * T, C = c->d_model, H = c->n_heads, D = c->d_head, HD = H * D;
    const int layer = m->apps[app].layer, rep = m->apps[app].rep;
    const int EA = c->att_n_experts, KA = c->att_k, HEA = H * EA, S = c->ff_expert_size;
    const int E = model_config_ff_experts(c, layer); /* E_l */
    const int K = c->ff_k, n_rot = model_config_n_rot(c);
    const MoeutLayerOffsets *P = &st->layers[layer];
    const MoeutAppCache *ac = &st->apps[m->apps[app].slot];
    MoeutScratch *s = &st->s;
    scalar_t *W = m->params, *G = m->grads;
    const scalar_t qk_scale = (scalar_t)pow((double)D, -0.25);
    const scalar_t eps = (scalar_t)MOEUT_LN_EPS;
    const size_t NC = (size_t)N * C;

    scalar_t *dx1 = s->nc[3]; /* [N, C] gradient w.r.t. x1; starts as the residual path of y = x1 + f */
    be->copy(be, dx1, dh_out, NC * sizeof(scalar_t)); /* dh_out is not read again: dh_in may alias it */

    /* ---- σ-MoE: f = sum_j gate_j * A_j @ Values[sel_j] (df = dy = dx1 at this point) ---- */
    scalar_t *dA = s->A;          /* [N*K, S] in plan_f order, as A */
    scalar_t *dgate_f = s->gate_f; /* [N, K] */
    const bool hash = c->routing == ROUTING_HASH; /* gate 1 (no reduction weights), no router, no LN2 */
    const MoeutEcIO ec = {.pos = ac->pos_f, .sel = ac->sel_f, .gate = ac->gate_f, .plan = &ac->plan_f,
                          .xg = s->ec_xg, .yg = s->ec_yg, .A = ac->A, .dA = dA};
    if (ac->pos_f) { /* routing "expert_choice": dgate_f [E*c] */
        moeut_ec_backward(m, P, st->ec_c, ac->x1, &ec, dx1, dgate_f);
    } else {
        be->zero(be, dA, (size_t)N * K * S * sizeof(scalar_t));
        be->cvmm_backward(be, dA, G + P->values, hash ? NULL : dgate_f, dx1, ac->A, W + P->values, &ac->plan_f,
                          hash ? NULL : ac->gate_f, 1, K, S, C, CVMM_IN_SORTED);
        be->relu_backward(be, dA, dA, ac->A, (size_t)N * K * S); /* dU = dA * (U > 0); A > 0 iff U > 0 */
        /* U_j = x1 @ Keys[sel_j]: dx1 += sum_j dU_j Keys^T */
        be->cvmm_backward(be, dx1, G + P->keys, NULL, dA, ac->x1, W + P->keys, &ac->plan_f, NULL, K, 1, C, S,
                          CVMM_OUT_SORTED);
    }
    /* shared experts: f += A_s SharedValues[s], A_s = ReLU(x1 SharedKeys[s]) (df = dy = dh_out, intact until dh_in is
     * written below) */
    for (int sh = 0; sh < c->n_shared_experts; sh++) {
        const scalar_t *A_s = ac->A_shared + (size_t)sh * N * S; /* [N, S] */
        const size_t ks = P->shared_keys + (size_t)sh * C * S, vs = P->shared_values + (size_t)sh * S * C;
        scalar_t *dU = s->shared_A; /* [N, S] */
        be->matmul(be, dU, dh_out, W + vs, N, S, C, 0, 1, 1, 0);  /* dA[N,S] = df @ SharedValues[s]^T */
        be->matmul(be, G + vs, A_s, dh_out, S, C, N, 1, 0, 1, 1); /* dSharedValues[s][S,C] += A_s^T df */
        be->relu_backward(be, dU, dU, A_s, (size_t)N * S);        /* dU = dA * (U > 0); A_s > 0 iff U > 0 */
        be->matmul(be, G + ks, ac->x1, dU, C, S, N, 1, 0, 1, 1);  /* dSharedKeys[s][C,S] += x1^T dU */
        be->matmul(be, dx1, dU, W + ks, N, C, S, 0, 1, 1, 1);     /* dx1 += dU SharedKeys[s]^T */
    }
    /* residual MLP: f += ReLU(x1 ResKeys) ResValues (df = dh_out likewise) */
    if (c->ff_residual_size > 0) moeut_residual_backward(m, P, N, ac->x1, ac->A_res, dh_out, dx1, s->res_A);
    /* router: l = xs Sel^T (routing "hash" has none) */
    if (!hash) {
        scalar_t *dl = s->lf; /* [N, E] */
        router_logit_grad(m, dl, st->dreg_f[layer] + (size_t)rep * N * E, (size_t)N * E);
        const scalar_t *lf = st->hist_f[layer] + (size_t)rep * N * E; /* this application's raw router logits */
        /* router_gates_backward wants the gating transform's own output; with a routed scaling factor rsf the
         * cached gates are rsf times it, so the unscaled gates are recomputed (exactly: the same kernel on the same
         * logits; no filler slot exists, see above) into dA's buffer, free since the keys' backward, and dgate is
         * taken w.r.t. them: dL/dg = rsf * dL/d(rsf g). */
        /* Expert capacity: a dropped slot's gate was set to 0 after the gating transform, so no gradient reaches its
         * gate (mask_zero); the transform's backward still wants its output before the dropping (a renormalised
         * kept gate depends on the dropped expert's logit), recomputed as for rsf. */
        if (ac->cap_dropped) be->mask_zero(be, dgate_f, ac->cap_dropped, (size_t)N * K);
        const scalar_t *gate_f = ac->gate_f;
        if (ac->pos_f) { /* expert choice: the softmax Jacobian of the chosen entries' gates */
            if (st->ec_c > 0)
                be->expert_choice_gates_backward(be, dl, s->ec_q, dgate_f, ac->pos_f, lf, N, E, st->ec_c);
        } else if (c->routed_scaling_factor != 1.0 || ac->cap_dropped) {
            scalar_t *unscaled = s->A; /* [N*K*S] >= [N*K] */
            be->router_gates(be, unscaled, lf, ac->sel_f, NULL, N, 1, E, K, c->router, c->router_renorm);
            if (c->routed_scaling_factor != 1.0)
                be->scale_inplace(be, dgate_f, (scalar_t)c->routed_scaling_factor, (size_t)N * K);
            gate_f = unscaled;
        }
        if (!ac->pos_f)
            be->router_gates_backward(be, dl, dgate_f, gate_f, lf, ac->sel_f, NULL, N, 1, E, K, c->router,
                                      c->router_renorm);
        scalar_t *xs = s->nc[1]; /* recompute LN2(x1) (identical to the forward's) */
        be->layernorm_forward(be, xs, s->mean, s->rstd, ac->x1, W + P->ln2_w, W + P->ln2_b, N, C, eps);
        be->matmul(be, G + P->expert_sel, dl, xs, E, C, N, 1, 0, 1, 1); /* dSel[E,C] += dl^T xs */
        scalar_t *dxs = s->nc[4];
        be->matmul(be, dxs, dl, W + P->expert_sel, N, C, E, 0, 0, 1, 0); /* dxs[N,C] = dl Sel */
        be->layernorm_backward(be, dx1, G + P->ln2_w, G + P->ln2_b, dxs, ac->x1, W + P->ln2_w, ac->mean2,
                               ac->rstd2, N, C);
    }

    /* ---- attention output: x1 = x + sum_{h,j} gate_o * r_h @ O[sel_o] ---- */
    scalar_t *dr = s->hd[3];        /* [N, H*D] */
    scalar_t *dgate_o = s->gate_o;  /* [N, H, KA] */
    be->zero(be, dr, (size_t)N * HD * sizeof(scalar_t));
    be->cvmm_backward(be, dr, G + P->o, dgate_o, dx1, ac->r, W + P->o, &ac->plan_o, ac->gate_o, KA, H * KA, D, C,
                      CVMM_ENTRY_ORDER);
    be->copy(be, dh_in, dx1, NC * sizeof(scalar_t)); /* residual path x -> x1 */

    /* ---- softmax attention, RoPE, q/k projections ---- */
    scalar_t *dq = s->hd[0], *dk = s->hd[1], *dv = s->hd[2];
    be->zero(be, dq, (size_t)N * HD * sizeof(scalar_t));
    be->zero(be, dk, (size_t)N * HD * sizeof(scalar_t));
    be->zero(be, dv, (size_t)N * HD * sizeof(scalar_t));
    be->attention_backward(be, dq, dk, dv, dr, ac->r, ac->lse, ac->q, ac->k, ac->v, B, T, H, D, 1);
    if (n_rot > 0) { /* the transpose of the rotation */
        be->rope(be, dq, B, T, H, D, n_rot, 0, (scalar_t)MOEUT_ROPE_BASE, 1);
        be->rope(be, dk, B, T, H, D, n_rot, 0, (scalar_t)MOEUT_ROPE_BASE, 1);
    }
    scalar_t *xn = s->nc[0]; /* recompute LN1(x) */
    be->layernorm_forward(be, xn, s->mean, s->rstd, ac->x, W + P->ln1_w, W + P->ln1_b, N, C, eps);
    /* q = qk_scale * xn Wq^T: dWq += qk_scale dq^T xn; dxn = qk_scale (dq Wq + dk Wk) */
    be->matmul(be, G + P->q, dq, xn, HD, C, N, 1, 0, qk_scale, 1);
    be->matmul(be, G + P->k, dk, xn, HD, C, N, 1, 0, qk_scale, 1);
    scalar_t *dxn = s->nc[4];
    be->matmul(be, dxn, dq, W + P->q, N, C, HD, 0, 0, qk_scale, 0);
    be->matmul(be, dxn, dk, W + P->k, N, C, HD, 0, 0, qk_scale, 1);

    /* ---- V experts: v_h = sum_j gate_v * x @ V[sel_v] (reads the raw x) ---- */
    scalar_t *dgate_v = s->gate_v;
    be->cvmm_backward(be, dh_in, G + P->v, dgate_v, dv, ac->x, W + P->v, &ac->plan_v, ac->gate_v, H * KA, KA, C, D,
                      CVMM_ENTRY_ORDER);

    /* ---- attention routers: lv = xn Sel_v^T, lo = xn Sel_o^T ---- */
    scalar_t *dlv = s->lv, *dlo = s->lo; /* [N, H*EA] */
    router_logit_grad(m, dlv, st->dreg_v[layer] + (size_t)rep * N * HEA, (size_t)N * HEA);
    const scalar_t *lv = st->hist_v[layer] + (size_t)rep * N * HEA, *lo = st->hist_o[layer] + (size_t)rep * N * HEA;
    be->router_gates_backward(be, dlv, dgate_v, ac->gate_v, lv, ac->sel_v, NULL, N, H, EA, KA, ROUTER_SIGMOID, 0);
    router_logit_grad(m, dlo, st->dreg_o[layer] + (size_t)rep * N * HEA, (size_t)N * HEA);
    be->router_gates_backward(be, dlo, dgate_o, ac->gate_o, lo, ac->sel_o, NULL, N, H, EA, KA, ROUTER_SIGMOID, 0);
    be->matmul(be, G + P->sel_v, dlv, xn, HEA, C, N, 1, 0, 1, 1);
    be->matmul(be, G + P->sel_o, dlo, xn, HEA, C, N, 1, 0, 1, 1);
    be->matmul(be, dxn, dlv, W + P->sel_v, N, C, HEA, 0, 0, 1, 1);
    be->matmul(be, dxn, dlo, W + P->sel_o, N, C, HEA, 0, 0, 1, 1);
    be->layernorm_backward(be, dh_in, G + P->ln1_w, G + P->ln1_b, dxn, ac->x, W + P->ln1_w, ac->mean1, ac->rstd1, N,
                           C);
}
