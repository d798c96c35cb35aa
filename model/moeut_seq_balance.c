/* DeepSeek-V3's sequence-wise balance loss (model.seq_balance_alpha > 0; arXiv 2412.19437 §2.1.2, eqs. 17-20), added
 * to the FFN balance model.balance chooses (DeepSeek-V3 pairs it with the bias balancing). */
#include "model/moeut_internal.h"

/* For every distinct layer i and application r: seq_balance of that application's FFN router logits and selection,
 * per sequence of the micro-batch over its valid positions (the positions the other balancing terms count), averaged
 * over the sequences; the gradient, times alpha * grad_scale, is ADDED to dreg_f, which moeut_regularizers has just
 * written for model.balance. Adds the unscaled values, over layers and applications, to *sum (backend memory; nothing
 * when alpha is 0). */
void moeut_seq_balance(Model *m, double grad_scale, double *sum) {
    MoeutState *st = moeut_state(m);
    const ModelConfig *c = &m->cfg;
    if (!(c->seq_balance_alpha > 0.0)) return;
    Backend *be = m->be;
    const int R = st->R, E = c->ff_n_experts, Gs = c->group_size;
    const size_t NE = (size_t)st->B * st->T * E;
    const uint8_t *valid = st->have_valid ? st->valid_dev : NULL;
    const scalar_t coef = (scalar_t)(c->seq_balance_alpha * grad_scale);
    for (int i = 0; i < Gs; i++)
        for (int r = 0; r < R; r++) /* one loss per application, as each of V3's MoE layers adds its own */
            be->seq_balance_add(be, sum, st->dreg_f[i] + (size_t)r * NE, st->hist_f[i] + (size_t)r * NE,
                                st->apps[r * Gs + i].sel_f, valid, st->B, st->T, E, c->ff_k, c->router, coef);
}
