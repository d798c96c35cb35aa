/* The model's routing counts (see "routing statistics" in model.h): reading and resetting them. The counting itself
 * happens in the MoEUT layer's FFN block (moeut_forward.c), one expert_count per routing decision. */
#include "model/model_internal.h"

int model_routed_experts(const Model *m) { return m->routing_counts ? m->cfg.ff_n_experts : 0; }

int model_routed_applications(const Model *m, int *first_app) {
    if (first_app) *first_app = m->routing_counts ? m->n_apps_of[LAYER_DENSE] : 0;
    return m->routing_counts ? m->n_apps_of[LAYER_MOEUT] : 0;
}

int model_routed_experts_of(const Model *m, int a) {
    if (!m->routing_counts || a < 0 || a >= m->n_apps_of[LAYER_MOEUT]) return 0;
    /* routed application a is the model's application n_dense_first + a (layer_schedule.c) */
    return model_config_ff_experts(&m->cfg, m->apps[m->n_apps_of[LAYER_DENSE] + a].layer);
}

static size_t n_counts(const Model *m) { return (size_t)m->n_apps_of[LAYER_MOEUT] * (size_t)m->cfg.ff_n_experts; }

void model_reset_routing_counts(Model *m) {
    if (!m->routing_counts) return;
    m->be->zero(m->be, m->routing_counts, n_counts(m) * sizeof(int64_t));
    m->routing_tokens = 0;
}

void model_take_routing_counts(Model *m, int64_t *counts_host, int64_t *tokens_out) {
    if (!m->routing_counts) {
        *tokens_out = 0;
        return;
    }
    m->be->to_host(m->be, counts_host, m->routing_counts, n_counts(m) * sizeof(int64_t));
    *tokens_out = m->routing_tokens;
    model_reset_routing_counts(m);
}
