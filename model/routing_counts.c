/* The model's routing counts (see "routing statistics" in model.h): reading and resetting them. The counting itself
 * happens in the FFN blocks of the MoEUT layer (moeut_forward.c) and the "moe" layer (moe_ffn.c), one expert_count per
 * routing decision. */
#include "model/model_internal.h"

int model_routed_experts(const Model *m) { return m->routing_counts ? m->cfg.ff_n_experts : 0; }

int model_routed_applications(const Model *m, int *first_app) {
    if (first_app) *first_app = m->routing_counts ? m->n_apps_of[LAYER_DENSE] : 0;
    return m->routing_counts ? model_n_routed_apps(m) : 0;
}

int model_routed_experts_of(const Model *m, int a) {
    int first = 0;
    if (a < 0 || a >= model_routed_applications(m, &first)) return 0;
    /* routed application a is the model's application first + a (layer_schedule.c); arch "moe" has one E */
    return model_config_ff_experts(&m->cfg, m->apps[first + a].layer);
}

static size_t n_counts(const Model *m) { return (size_t)model_n_routed_apps(m) * (size_t)m->cfg.ff_n_experts; }

void model_reset_routing_counts(Model *m) {
    if (!m->routing_counts) return;
    m->be->zero(m->be, m->routing_counts, n_counts(m) * sizeof(int64_t));
    if (m->routing_dropped)
        m->be->zero(m->be, m->routing_dropped, (size_t)m->n_apps_of[LAYER_MOEUT] * sizeof(int64_t));
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

int model_routing_dropped(const Model *m, int64_t *dropped_host) {
    if (!m->routing_dropped) return 0;
    m->be->to_host(m->be, dropped_host, m->routing_dropped, (size_t)m->n_apps_of[LAYER_MOEUT] * sizeof(int64_t));
    return 1;
}
