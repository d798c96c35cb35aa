/* The layer schedule of a model: which layer every application a = 0..n_layers-1 runs (model_internal.h, LayerApp).
 * The one place that knows how applications map to parameters: the dense model has one layer per application; MoEUT
 * runs its n_dense_first dense layers (DeepSeekMoE's dense early layers, each with its own weights) and then its
 * group_size shared layers in ABAB order (moeut-spec.md §1.2: application j of the group uses layer j % group_size). */
#include <string.h>

#include "model/model_internal.h"
#include "pipeline/base/log.h"

void model_layer_schedule(const ModelConfig *cfg, LayerApp *apps, int n_distinct[N_LAYER_KINDS],
                          int n_apps[N_LAYER_KINDS]) {
    memset(n_distinct, 0, N_LAYER_KINDS * sizeof *n_distinct);
    memset(n_apps, 0, N_LAYER_KINDS * sizeof *n_apps);
    const int L = cfg->n_layers;
    const int n_dense = cfg->arch == ARCH_DENSE ? L : cfg->n_dense_first;
    if (n_dense < 0 || n_dense > L) die("model: %d dense layers for %d applications", n_dense, L);
    for (int a = 0; a < n_dense; a++) apps[a] = (LayerApp){LAYER_DENSE, a, 0, a};
    n_distinct[LAYER_DENSE] = n_apps[LAYER_DENSE] = n_dense;
    if (cfg->arch == ARCH_MOE) { /* arch "moe": one MoE layer per application after the dense ones */
        for (int a = n_dense; a < L; a++) apps[a] = (LayerApp){LAYER_MOE, a - n_dense, 0, a - n_dense};
        n_distinct[LAYER_MOE] = n_apps[LAYER_MOE] = L - n_dense;
        return;
    }
    if (cfg->arch != ARCH_MOEUT) return;
    const int Gs = cfg->group_size;
    if (!model_config_groups_whole(cfg)) die("model: %d MoEUT applications in groups of %d", L - n_dense, Gs);
    for (int a = n_dense; a < L; a++) {
        const int j = a - n_dense;
        apps[a] = (LayerApp){LAYER_MOEUT, j % Gs, j / Gs, j};
    }
    n_distinct[LAYER_MOEUT] = Gs;
    n_apps[LAYER_MOEUT] = L - n_dense;
}
