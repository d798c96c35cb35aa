/* Arch "moe": the checks of its keys (model_config_validate calls these after the common ones).
 *   ff_n_experts E >= 1, ff_expert_size S >= 1, 1 <= ff_k K <= E, n_dense_first in [0, n_layers) (at least one MoE
 *   layer), d_ff >= 1 when there is a dense layer, router sigmoid | softmax, routed_scaling_factor finite > 0,
 *   balance "switch" (alpha finite >= 0) | "none": MoEUT's entropy regularizer and DeepSeek-V3's bias are not part of
 *   this layer (refused rather than silently ignored). */
#include "model/moe_config.h"

#include <math.h>
#include <stdio.h>

static int check_size(const char *name, int v, char *err, size_t errlen) {
    if (v < 1 || v > MODEL_MAX_DIM) {
        snprintf(err, errlen, "model.%s: must be in [1, %d] (got %d)", name, MODEL_MAX_DIM, v);
        return -1;
    }
    return 0;
}

int moe_config_validate(const ModelConfig *cfg, char *err, size_t errlen) {
    if (check_size("ff_n_experts", cfg->ff_n_experts, err, errlen) ||
        check_size("ff_expert_size", cfg->ff_expert_size, err, errlen) || check_size("ff_k", cfg->ff_k, err, errlen))
        return -1;
    if (cfg->ff_k > cfg->ff_n_experts) {
        snprintf(err, errlen, "model.ff_k: %d is larger than ff_n_experts %d", cfg->ff_k, cfg->ff_n_experts);
        return -1;
    }
    if (cfg->n_dense_first < 0 || cfg->n_dense_first >= cfg->n_layers) {
        snprintf(err, errlen, "model.n_dense_first: must be in [0, n_layers %d) (at least one MoE layer), got %d",
                 cfg->n_layers, cfg->n_dense_first);
        return -1;
    }
    if (cfg->n_dense_first > 0 && check_size("d_ff", cfg->d_ff, err, errlen)) return -1;
    if ((int)cfg->router < 0 || (int)cfg->router > ROUTER_SOFTMAX) {
        snprintf(err, errlen, "model.router: invalid value %d", (int)cfg->router);
        return -1;
    }
    if (!(cfg->routed_scaling_factor > 0.0) || !isfinite(cfg->routed_scaling_factor)) {
        snprintf(err, errlen, "model.routed_scaling_factor: must be a finite number > 0, got %g",
                 cfg->routed_scaling_factor);
        return -1;
    }
    if (cfg->balance != BALANCE_SWITCH && cfg->balance != BALANCE_NONE) {
        static const char *const names[] = {"entropy", "switch", "none", "bias"};
        const int b = (int)cfg->balance;
        snprintf(err, errlen,
                 "model.balance: \"%s\" is not a balance of arch \"moe\" (expected \"switch\" or \"none\")",
                 b >= 0 && b < 4 ? names[b] : "?");
        return -1;
    }
    if (cfg->balance == BALANCE_SWITCH && (!(cfg->balance_alpha >= 0.0) || !isfinite(cfg->balance_alpha))) {
        snprintf(err, errlen, "model.balance_alpha: must be a finite number >= 0, got %g", cfg->balance_alpha);
        return -1;
    }
    return 0;
}

const char *model_arch_name(Arch a) { return a == ARCH_MOEUT ? "moeut" : a == ARCH_MOE ? "moe" : "dense"; }
