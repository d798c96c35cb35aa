/* Parameter count of a configuration without allocating anything: the sum of the tensor sizes the wrapper
 * (model.c) and the layer implementations (dense_layer.c, moeut_layer.c) register. A unit test checks it against
 * model_n_params of created models, so the two cannot drift apart silently.
 *
 * Formulas (moeut-spec.md §5, §6.9; dm-math-training-code.md §A):
 *   wrapper : V*C (embedding) + V*C (lm_head.weight) [+ V (lm_head.bias)] [+ 2C (out_norm affine)]
 *   dense   : per layer 4*H*D*C (q,k,v,o) + 2*d_ff*C + d_ff + C (FFN with biases) + 4C (ln1, ln2); L layers
 *   moeut   : per distinct layer 2*H*D*C (q,k) + 2*H*EA*C*D (v,o experts) + 2*H*EA*C (sel_v, sel_o)
 *             + 2*E*S*C (keys, values) + E*C (expert_sel) + 2*K_s*C*S (shared experts)
 *             + 2*W*C (residual MLP, W = ff_residual_size) + 4C (ln1, ln2);
 *             summed over the group_size layers (E = E_l, ff_n_experts_per_layer), plus n_dense_first dense
 *             layers of width d_ff (the dense formula)
 *             a routing kind without a router (model/routing_kind.h: "hash"): no expert_sel and no ln2 (the router
 *             and its LayerNorm), E*C + 2C fewer per layer
 *   moe     : per MoE layer 4*H*D*C (q,k,v,o) + E*C (expert_sel) + E*C*S + E*S (keys, keys_bias)
 *             + E*S*C + E*C (values, values_bias) + 4C (ln1, ln2); n_layers - n_dense_first layers, plus the
 *             n_dense_first dense layers of width d_ff
 * Buffers (balance "bias"'s expert_bias) are state, not parameters: not counted.
 * Computed in double (for the validator's overflow bound, before any size_t product could wrap) and in size_t.
 */
#include "model/param_count.h"

#include "model/model.h"
#include "model/routing_kind.h"

/* One formula, instantiated for double and size_t. */
#define DEFINE_COUNT(NAME, T)                                                                                          \
    static T NAME##_dense_layer(T C, T H, T D, T F) { return 4 * H * D * C + 2 * F * C + F + C + 4 * C; }              \
    static T NAME(const ModelConfig *cfg) {                                                                            \
        T V = (T)cfg->n_tokens, C = (T)cfg->d_model, H = (T)cfg->n_heads, D = (T)cfg->d_head;                          \
        T total = 2 * V * C;                                                                                           \
        if (cfg->lm_head_bias) total += V;                                                                             \
        if (cfg->out_norm_affine) total += 2 * C;                                                                      \
        if (cfg->arch == ARCH_DENSE) return total + (T)cfg->n_layers * NAME##_dense_layer(C, H, D, (T)cfg->d_ff);      \
        if (cfg->arch == ARCH_MOE) {                                                                                   \
            T E = (T)cfg->ff_n_experts, S = (T)cfg->ff_expert_size, Ld = (T)cfg->n_dense_first;                        \
            T moe = 4 * H * D * C + E * C + E * C * S + E * S + E * S * C + E * C + 4 * C;                             \
            return total + ((T)cfg->n_layers - Ld) * moe + Ld * NAME##_dense_layer(C, H, D, (T)cfg->d_ff);             \
        }                                                                                                              \
        T EA = (T)cfg->att_n_experts, S = (T)cfg->ff_expert_size;                                                      \
        T att = 2 * H * D * C + 2 * H * EA * C * D + 2 * H * EA * C;                                                   \
        const int router = moeut_routing_of(cfg)->has_router; /* expert_sel and ln2 */                                 \
        for (int l = 0; l < cfg->group_size; l++) { /* E_l: a pyramid's layers differ */                               \
            T E = (T)model_config_ff_experts(cfg, l);                                                                  \
            T ffn = 2 * E * S * C + (router ? E * C : 0) + 2 * (T)cfg->n_shared_experts * C * S;                       \
            ffn += 2 * (T)cfg->ff_residual_size * C;                                                                   \
            total += att + ffn + (router ? 4 : 2) * C;                                                                 \
        }                                                                                                              \
        if (cfg->n_dense_first > 0) total += (T)cfg->n_dense_first * NAME##_dense_layer(C, H, D, (T)cfg->d_ff);        \
        return total;                                                                                                  \
    }

DEFINE_COUNT(count_double, double)
DEFINE_COUNT(count_size, size_t)

double model_count_params_double(const ModelConfig *cfg) { return count_double(cfg); }
size_t model_count_params(const ModelConfig *cfg) { return count_size(cfg); }
