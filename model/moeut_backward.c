/* MoEUT layer backward (moeut-spec.md §8.2): the exact reverse of moeut_forward.c for one training application.
 * Parameter gradients accumulate (+=) into Model.grads, so a shared layer receives the sum over its R applications.
 * Router-logit gradients = the gating transform's backward of the gate gradients + the stored regularizer gradients,
 * made in the stored slots themselves.
 * The expert-dropout masks are not kept for the backward: moeut_make_drop_mask always leaves k experts, so no slot
 * is a filler of topk_select and router_gates_backward needs no mask (NULL). */
#include <math.h>

#include "model/moeut_internal.h"
#include "model/routing_kind.h"
#include "pipeline/base/log.h"

scalar_t *moeut_router_logit_grad(Model *m, scalar_t *dreg_slot, size_t n) {
    if (!moeut_state(m)->reg_ready) m->be->zero(m->be, dreg_slot, n * sizeof(scalar_t));
    return dreg_slot;
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
    const int n_rot = model_config_n_rot(c);
    const MoeutLayerOffsets *P = &st->layers[layer];
    MoeutAppCache *ac = &st->apps[m->apps[app].slot];
    /* the router-logit gradients are made in the dreg_* slots, over the regularizer gradients they start from */
    if (st->reg_ready && ac->dreg_spent)
        die("moeut: backward of application %d ran again before regularizers() rewrote its regularizer gradients",
            app);
    ac->dreg_spent = 1;
    MoeutScratch *s = &st->s;
    scalar_t *W = m->params, *G = m->grads;
    const scalar_t qk_scale = (scalar_t)pow((double)D, -0.25);
    const size_t NC = (size_t)N * C;

    /* [N, C] gradient w.r.t. x1; starts as the residual path of y = x1 + f, dh_out, which the experts' backward
     * writes into it as it adds their input gradient (no copy first). It is made in dh_in itself, which it
     * becomes through the residual path x -> x1 once the attention output's backward has read it, unless dh_in
     * aliases dh_out (which the FFN's backward still reads while dx1 grows). */
    scalar_t *dx1 = dh_in != dh_out ? dh_in : s->nc[3];

    /* ---- the routed FFN (df = dy = dh_out): the experts (dx1 = df + ...), then the router (the routing kind's) */
    const MoeutFfnGrad g = {
        .ac = ac, .N = N, .E = E, .choice_c = st->choice_c, .df = dh_out, .dx1 = dx1, .dgate = s->gate_f, .dA = s->A,
        .xg = s->gather_x, .yg = s->gather_y, .choice_q = s->choice_q, .dl = st->dreg_f[layer] + (size_t)rep * N * E,
        .l = st->hist_f[layer] + (size_t)rep * N * E, .dxs = s->nc[4],
    };
    st->routing->experts_backward(m, P, &g);
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
    /* the router: dl = the regularizers' gradient + the gates' path; dSel, dLN2, dx1 += through LN2 */
    st->routing->route_backward(m, P, &g);

    /* ---- attention output: x1 = x + sum_{h,j} gate_o * r_h @ O[sel_o] ---- */
    scalar_t *dr = s->hd[3];        /* [N, H*D] */
    scalar_t *dgate_o = s->gate_o;  /* [N, H, KA] */
    be->cvmm_backward(be, dr, G + P->o, dgate_o, dx1, ac->r, W + P->o, &ac->plan_o, ac->gate_o, KA, H * KA, D, C,
                      CVMM_DX_OVERWRITE, NULL); /* dr written, no zero fill first */
    if (dx1 != dh_in) be->copy(be, dh_in, dx1, NC * sizeof(scalar_t)); /* residual path x -> x1 */

    /* ---- softmax attention, RoPE ---- */
    scalar_t *dq = s->hd[0], *dk = s->hd[1], *dv = s->hd[2];
    be->attention_backward(be, dq, dk, dv, dr, ac->r, ac->lse, ac->q, ac->k, ac->v, B, T, H, D, 1);
    const scalar_t *xn = ac->xn; /* LN1(x), kept by the forward (narrow form): read by linear_backward only */
    /* ---- V experts: v_h = sum_j gate_v * x @ V[sel_v] (reads the raw x) ---- */
    scalar_t *dgate_v = s->gate_v;
    be->cvmm_backward(be, dh_in, G + P->v, dgate_v, dv, ac->x, W + P->v, &ac->plan_v, ac->gate_v, H * KA, KA, C, D,
                      CVMM_ENTRY_ORDER, NULL);

    /* ---- attention routers: lv = xn Sel_v^T, lo = xn Sel_o^T ---- */
    scalar_t *dlv = moeut_router_logit_grad(m, st->dreg_v[layer] + (size_t)rep * N * HEA, (size_t)N * HEA);
    const scalar_t *lv = st->hist_v[layer] + (size_t)rep * N * HEA, *lo = st->hist_o[layer] + (size_t)rep * N * HEA;
    be->router_gates_backward(be, dlv, dgate_v, ac->gate_v, lv, ac->sel_v, NULL, N, H, EA, KA, ROUTER_SIGMOID, 0);
    scalar_t *dlo = moeut_router_logit_grad(m, st->dreg_o[layer] + (size_t)rep * N * HEA, (size_t)N * HEA);
    be->router_gates_backward(be, dlo, dgate_o, ac->gate_o, lo, ac->sel_o, NULL, N, H, EA, KA, ROUTER_SIGMOID, 0);

    /* ---- the maps of xn: q = rope(qk_scale xn Wq^T), k likewise, lv = xn Sel_v^T, lo = xn Sel_o^T; their weight
     * gradients and dxn = qk_scale (R^T dq Wq + R^T dk Wk) + dlv Sel_v + dlo Sel_o in one op (R^T: the rotation's
     * transpose, applied as the op reads dq and dk) ---- */
    const RopeSpec rot = {B, T, H, D, n_rot, 0, (scalar_t)MOEUT_ROPE_BASE};
    const RopeSpec *qk_rope = n_rot > 0 ? &rot : NULL;
    const LinearTerm maps[] = {
        {.dy = dq, .w = W + P->q, .dw = G + P->q, .m = HD, .alpha = qk_scale, .rope = qk_rope},
        {.dy = dk, .w = W + P->k, .dw = G + P->k, .m = HD, .alpha = qk_scale, .rope = qk_rope},
        {.dy = dlv, .w = W + P->sel_v, .dw = G + P->sel_v, .m = HEA, .alpha = 1},
        {.dy = dlo, .w = W + P->sel_o, .dw = G + P->sel_o, .m = HEA, .alpha = 1},
    };
    scalar_t *dxn = s->nc[4];
    be->linear_backward(be, dxn, xn, maps, 4, N, C, 0);
    be->layernorm_backward(be, dh_in, G + P->ln1_w, G + P->ln1_b, dxn, ac->x, W + P->ln1_w, ac->mean1, ac->rstd1, N,
                           C);
}
