/* balance "bias": DeepSeek-V3's auxiliary-loss-free load balancing (arXiv 2412.19437 §2.1.2; Wang et al. 2024,
 * arXiv 2408.15664), for MoEUT's FFN router. Each distinct layer has a buffer expert_bias[E], added to the routing
 * scores by topk_select only (the gates never see it). After every optimizer step each bias moves by gamma towards
 * equal load: down for an expert that got more than the mean number of selections of the step, up for one that got
 * fewer, unchanged at exactly the mean. The counts cover all R applications of the (shared) layer: the bias belongs
 * to the router, which every application of the layer uses. The counting is in moeut_forward.c (expert_count). */
#include "model/moeut_internal.h"
#include "pipeline/base/log.h"

int model_bias_count_len(const Model *m) {
    const MoeutState *st = m->impls[LAYER_MOEUT] ? moeut_state((Model *)m) : NULL;
    return st && st->bias_counts ? m->cfg.group_size * m->cfg.ff_n_experts : 0;
}

void model_take_bias_counts(Model *m, double *counts_host) {
    const int n = model_bias_count_len(m);
    if (n == 0) return;
    MoeutState *st = moeut_state(m);
    int64_t *c = st->bias_host_counts;
    m->be->to_host(m->be, c, st->bias_counts, (size_t)n * sizeof *c);
    for (int i = 0; i < n; i++) counts_host[i] = (double)c[i]; /* exact below 2^53 selections */
    m->be->zero(m->be, st->bias_counts, (size_t)n * sizeof(int64_t));
}

void model_apply_bias_update(Model *m, const double *counts) {
    const int n = model_bias_count_len(m);
    if (n == 0) return;
    MoeutState *st = moeut_state(m);
    const int Emax = m->cfg.ff_n_experts; /* the counts' stride; layer i has its first E_l entries */
    const double gamma = m->cfg.balance_gamma;
    scalar_t *b = st->bias_host;
    for (int i = 0; i < m->cfg.group_size; i++) {
        const int E = model_config_ff_experts(&m->cfg, i);
        const double *c = counts + (size_t)i * Emax;
        double total = 0;
        for (int e = 0; e < E; e++) total += c[e];
        const size_t off = st->layers[i].expert_bias;
        m->be->to_host(m->be, b, m->params + off, (size_t)E * sizeof *b);
        for (int e = 0; e < E; e++) {
            /* sign(c_e - total / E) from integers: E * c_e - total is exact, so "at the mean" is exact too */
            const double d = (double)E * c[e] - total;
            const double step = d > 0 ? -gamma : d < 0 ? gamma : 0.0;
            b[e] = (scalar_t)((double)b[e] + step);
        }
        m->be->to_device(m->be, m->params + off, b, (size_t)E * sizeof *b);
    }
}
