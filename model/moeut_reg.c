/* MoEUT regularizers and the expert-dropout masks. The attention routers are balanced by the entropy of the mean
 * routing distribution (dm-math-training-code.md §B/§C.6: the masked [B,B]-broadcast form); the FFN router by the
 * term model.balance names: that entropy (MoEUT), the Switch loss (per application) or nothing. */
#include "model/moeut_internal.h"
#include "pipeline/base/log.h"

/* For every distinct layer, one history per router: FFN [R,B,T,1,E], attention v and o [R,B,T,H,EA] (each head its
 * own distribution). The backend op adds the unscaled value to its sum (sums[STEP_SUM_REG_*], backend memory) and
 * writes coef * d(value)/d(logits), in which each application's backward then makes its router-logit gradients
 * (moeut_router_logit_grad). */
void moeut_regularizers(Model *m, double grad_scale, double *sums) {
    MoeutState *st = moeut_state(m);
    const ModelConfig *c = &m->cfg;
    Backend *be = m->be;
    moeut_check_step(m, "regularizers", c->n_layers - 1); /* the last application is always a MoEUT one */
    const int R = st->R, H = c->n_heads, EA = c->att_n_experts;
    const uint8_t *valid = st->have_valid ? st->valid_dev : NULL;
    const scalar_t coef_ffn = (scalar_t)(model_config_ffn_balance_coef(c) * grad_scale);
    const int N = st->B * st->T, Gs = c->group_size;
    const scalar_t coef_att = (scalar_t)(c->att_entropy_reg * grad_scale);
    double *reg_ffn = sums + STEP_SUM_REG_FFN, *reg_att = sums + STEP_SUM_REG_ATT;
    for (int i = 0; i < c->group_size; i++) {
        const int E = model_config_ff_experts(c, i); /* E_l */
        const size_t NE = (size_t)N * E;
        switch (c->balance) {
        case BALANCE_ENTROPY:
            be->entropy_reg_add(be, reg_ffn, st->dreg_f[i], st->hist_f[i], valid, R, st->B, st->T, 1, E, coef_ffn);
            break;
        case BALANCE_SWITCH: /* one Switch loss per application, as each Switch layer adds its own */
            for (int r = 0; r < R; r++)
                be->switch_balance_add(be, reg_ffn, st->dreg_f[i] + (size_t)r * NE, st->hist_f[i] + (size_t)r * NE,
                                       st->apps[r * Gs + i].sel_f, valid, st->B, st->T, 1, E, c->ff_k, coef_ffn);
            break;
        case BALANCE_NONE:
        case BALANCE_BIAS: /* no loss term: the bias balances by selection (moeut_bias.c) */
            be->zero(be, st->dreg_f[i], (size_t)R * NE * sizeof(scalar_t));
            break;
        }
        be->entropy_reg_add(be, reg_att, st->dreg_v[i], st->hist_v[i], valid, R, st->B, st->T, H, EA, coef_att);
        be->entropy_reg_add(be, reg_att, st->dreg_o[i], st->hist_o[i], valid, R, st->B, st->T, H, EA, coef_att);
    }
    moeut_seq_balance(m, grad_scale, sums + STEP_SUM_REG_SEQ); /* model.seq_balance_alpha: beside the above */
    for (int a = 0; a < st->n_apps; a++) st->apps[a].dreg_spent = 0;
    st->reg_ready = 1;
}

void moeut_make_drop_mask(Rng *rng, uint8_t *mask, long rows, int E, int k, double p) {
    for (long r = 0; r < rows; r++) {
        uint8_t *row = mask + (size_t)r * (size_t)E;
        int kept = 0;
        for (int e = 0; e < E; e++) {
            row[e] = rng_uniform(rng) < p;
            kept += !row[e];
        }
        /* Too few survivors: re-enable a uniformly random subset of the dropped experts (selection sampling over
         * the dropped ones, in index order) so that exactly k can be picked. */
        if (kept < k) {
            int need = k - kept, dropped = E - kept;
            for (int e = 0; e < E && need > 0; e++) {
                if (!row[e]) continue;
                if (rng_below(rng, (uint64_t)dropped) < (uint64_t)need) {
                    row[e] = 0;
                    need--;
                }
                dropped--;
            }
        }
    }
}
