/* Parameter count of a configuration without allocating anything: the sum of the tensor sizes the wrapper
 * (model.c) and the layer implementations (dense_layer.c, moeut_layer.c) register. A unit test checks it against
 * model_n_params of created models, so the two cannot drift apart silently.
 *
 * Formulas (moeut-spec.md §5, §6.9; dm-math-training-code.md §A):
 *   wrapper : V*C (embedding) + V*C (lm_head.weight) [+ V (lm_head.bias)] [+ 2C (out_norm affine)]
 *   dense   : per layer 4*H*D*C (q,k,v,o) + 2*d_ff*C + d_ff + C (FFN with biases) + 4C (ln1, ln2); L layers
 *   moeut   : per distinct layer 2*H*D*C (q,k) + 2*H*EA*C*D (v,o experts) + 2*H*EA*C (sel_v, sel_o)
 *             + 2*E*S*C (keys, values) + E*C (expert_sel) + 4C (ln1, ln2); group_size layers
 */
#include "model/param_count.h"

#include "model/model.h"

double model_count_params_double(const ModelConfig *cfg) {
    double V = cfg->n_tokens, C = cfg->d_model, H = cfg->n_heads, D = cfg->d_head;
    double total = 2.0 * V * C;
    if (cfg->lm_head_bias) total += V;
    if (cfg->out_norm_affine) total += 2.0 * C;
    if (cfg->arch == ARCH_DENSE) {
        double F = cfg->d_ff;
        double layer = 4.0 * H * D * C + 2.0 * F * C + F + C + 4.0 * C;
        total += cfg->n_layers * layer;
    } else {
        double EA = cfg->att_n_experts, E = cfg->ff_n_experts, S = cfg->ff_expert_size;
        double att = 2.0 * H * D * C + 2.0 * H * EA * C * D + 2.0 * H * EA * C;
        double ffn = 2.0 * E * S * C + E * C;
        total += cfg->group_size * (att + ffn + 4.0 * C);
    }
    return total;
}

size_t model_count_params(const ModelConfig *cfg) {
    size_t V = (size_t)cfg->n_tokens, C = (size_t)cfg->d_model, H = (size_t)cfg->n_heads, D = (size_t)cfg->d_head;
    size_t total = 2 * V * C;
    if (cfg->lm_head_bias) total += V;
    if (cfg->out_norm_affine) total += 2 * C;
    if (cfg->arch == ARCH_DENSE) {
        size_t F = (size_t)cfg->d_ff;
        size_t layer = 4 * H * D * C + 2 * F * C + F + C + 4 * C;
        total += (size_t)cfg->n_layers * layer;
    } else {
        size_t EA = (size_t)cfg->att_n_experts, E = (size_t)cfg->ff_n_experts, S = (size_t)cfg->ff_expert_size;
        size_t att = 2 * H * D * C + 2 * H * EA * C * D + 2 * H * EA * C;
        size_t ffn = 2 * E * S * C + E * C;
        total += (size_t)cfg->group_size * (att + ffn + 4 * C);
    }
    return total;
}
