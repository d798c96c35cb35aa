/* ModelConfig <-> JSON "model" object: defaults, strict parsing, serialisation, validation.
 *
 * Keys are the reference constructors' argument names (moeut-spec.md §0, §7). Which arch takes which key, the values
 * each accepts and how keys combine are the switch rules (model/switch_rules.h); a key of another arch is an error, so
 * a config always means exactly one model. Error messages: "<source>: model.<key>: <problem>" (from_json) and
 * "model.<key>: <problem>" (validate).
 */
#include <limits.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "model/model.h"
#include "model/param_count.h"
#include "model/switch_rules.h"
#include "pipeline/base/config.h"

/* The reference constructors' defaults (MoEUTLM in moeut.py; the dense model of moeut-spec.md §5). Size keys without
 * a default stay 0 and must be given. */
static void set_defaults(ModelConfig *cfg, Arch arch) {
    memset(cfg, 0, sizeof *cfg);
    cfg->arch = arch;
    cfg->lm_head_bias = true;
    cfg->out_norm_affine = true;
    cfg->dropout = 0.0;
    if (arch == ARCH_MOEUT) {
        cfg->group_size = 2;
        cfg->ff_k = 8;
        cfg->att_k = 2;
        cfg->ff_expert_size = 128;
        cfg->entropy_reg = 0.01;
        cfg->att_entropy_reg = 0.001;
        cfg->router = ROUTER_SIGMOID;
        cfg->routed_scaling_factor = 1.0; /* MoEUT's gates as they are */
        cfg->balance = BALANCE_ENTROPY;
        cfg->balance_alpha = 0.01; /* Fedus et al. 2021 */
        cfg->balance_gamma = 0.001; /* DeepSeek-V3 §2.1.2 (the bias update speed of its first 14.3T tokens) */
        cfg->routing = ROUTING_TOPK;
        cfg->hash_seed = 1;
        cfg->n_group = 1; /* no group limit; topk_group defaults to n_group (from_json) */
        cfg->topk_group = 1;
    }
    if (arch == ARCH_MOE) { /* the Switch Transformer / Mixtral FFN router: softmax scores, top-2, the Switch loss */
        cfg->ff_k = 2;
        cfg->router = ROUTER_SOFTMAX;
        cfg->routed_scaling_factor = 1.0;
        cfg->balance = BALANCE_SWITCH;
        cfg->balance_alpha = 0.01; /* Fedus et al. 2021 */
    }
}

/* "<source>: model.<name>: unknown key", with the closest key of the archs in `archs` when one is close. */
static int unknown_key_error(const char *source, const char *name, unsigned archs, char *err, size_t errlen) {
    const char *names[SWITCH_KEYS_MAX];
    int n_names = 0;
    for (int i = 0; i < switch_key_count(); i++)
        if (switch_key(i)->archs & archs) names[n_names++] = switch_key(i)->name;
    const char *hint = json_closest_key(name, names, n_names);
    if (hint) return switch_refusal(err, errlen, source, name, "unknown key (did you mean model.%s?)", hint);
    return switch_refusal(err, errlen, source, name, "unknown key");
}

/* Reads one value into cfg; on a type problem writes it (without prefix) into problem and returns -1. */
static int read_value(ModelConfig *cfg, const SwitchKey *k, const cJSON *v, char *problem, size_t plen) {
    char *base = (char *)cfg + k->offset;
    switch (k->type) {
    case SWITCH_INT: {
        if (!cJSON_IsNumber(v)) {
            snprintf(problem, plen, "expected an integer, got %s", json_type_name(v));
            return -1;
        }
        double d = v->valuedouble;
        if (!isfinite(d) || d != floor(d)) {
            snprintf(problem, plen, "expected an integer, got %.17g", d);
            return -1;
        }
        if (d < (double)INT_MIN || d > (double)INT_MAX) {
            snprintf(problem, plen, "integer %.17g out of range", d);
            return -1;
        }
        *(int *)base = (int)d;
        return 0;
    }
    case SWITCH_DOUBLE:
        if (!cJSON_IsNumber(v)) {
            snprintf(problem, plen, "expected a number, got %s", json_type_name(v));
            return -1;
        }
        *(double *)base = v->valuedouble;
        return 0;
    case SWITCH_BOOL:
        if (!cJSON_IsBool(v)) {
            snprintf(problem, plen, "expected a boolean, got %s", json_type_name(v));
            return -1;
        }
        *(bool *)base = cJSON_IsTrue(v);
        return 0;
    case SWITCH_ENUM: {
        char accepted[160];
        switch_names_text(k->names, accepted, sizeof accepted);
        if (!cJSON_IsString(v) || !v->valuestring) {
            snprintf(problem, plen, "expected a string (%s), got %s", accepted, json_type_name(v));
            return -1;
        }
        for (int i = 0; k->names[i]; i++)
            if (strcmp(v->valuestring, k->names[i]) == 0) {
                *(int *)base = i;
                return 0;
            }
        snprintf(problem, plen, "unknown value \"%.40s\" (expected %s)", v->valuestring, accepted);
        return -1;
    }
    case SWITCH_INT_LIST: {
        ModelIntList *l = (ModelIntList *)base;
        const int n = cJSON_IsArray(v) ? cJSON_GetArraySize(v) : -1;
        if (n < 1 || n > MODEL_MAX_LIST) {
            snprintf(problem, plen, "expected an array of 1 to %d integers, got %s", MODEL_MAX_LIST,
                     n < 0 ? json_type_name(v) : n == 0 ? "an empty array" : "a longer array");
            return -1;
        }
        int i = 0;
        for (const cJSON *e = v->child; e; e = e->next, i++) {
            const double d = cJSON_IsNumber(e) ? e->valuedouble : NAN;
            if (!isfinite(d) || d != floor(d) || d < (double)INT_MIN || d > (double)INT_MAX) {
                snprintf(problem, plen, "entry %d: expected an integer, got %s", i, json_type_name(e));
                return -1;
            }
            l->v[i] = (int)d;
        }
        l->n = n;
        return 0;
    }
    }
    return -1;
}

int model_config_from_json(ModelConfig *cfg, const cJSON *obj, const char *source, char *err, size_t errlen) {
    char problem[256], names[96];
    if (!source) source = "<json>";
    if (!obj || !cJSON_IsObject(obj))
        return switch_refusal(err, errlen, source, NULL, "expected an object, got %s",
                              obj ? json_type_name(obj) : "nothing");
    /* The arch decides every other key's meaning: read first. */
    const SwitchKey *arch_key = switch_key_find("arch");
    const cJSON *arch_v = cJSON_GetObjectItemCaseSensitive(obj, "arch");
    if (!arch_v) {
        /* A misspelt "arch" ("arc") is the cause of the missing one: name it first, like the JsonReader does. */
        for (const cJSON *it = obj->child; it; it = it->next)
            if (it->string && !switch_key_find(it->string))
                return unknown_key_error(source, it->string, ARCHS_ALL, err, errlen);
        return switch_refusal(err, errlen, source, "arch", "missing required key (%s)",
                              switch_names_text(arch_key->names, names, sizeof names));
    }
    ModelConfig c = {0};
    if (read_value(&c, arch_key, arch_v, problem, sizeof problem) != 0)
        return switch_refusal(err, errlen, source, "arch", "%s", problem);
    const Arch arch = c.arch;
    set_defaults(&c, arch);
    bool d_head_given = false;
    for (const cJSON *it = obj->child; it; it = it->next) {
        const char *name = it->string ? it->string : "";
        for (const cJSON *d = it->next; d; d = d->next)
            if (d->string && strcmp(d->string, name) == 0)
                return switch_refusal(err, errlen, source, name, "duplicate key");
        const SwitchKey *k = switch_key_find(name);
        if (k == arch_key) continue;
        if (!k) return unknown_key_error(source, name, 1u << arch, err, errlen);
        if (!switch_key_of_arch(k, arch))
            return switch_refusal(err, errlen, source, name, "not a key of arch \"%s\" (it belongs to %s)",
                                  model_arch_name(arch), switch_archs_text(k->archs, names, sizeof names));
        if (read_value(&c, k, it, problem, sizeof problem) != 0)
            return switch_refusal(err, errlen, source, name, "%s", problem);
        if (strcmp(name, "d_head") == 0) d_head_given = true;
    }
    for (int i = 0; i < switch_key_count(); i++) {
        const SwitchKey *k = switch_key(i);
        const bool given = cJSON_GetObjectItemCaseSensitive(obj, k->name) != NULL;
        if ((k->required & (1u << arch)) && switch_key_applies(&c, k) && !given)
            return switch_refusal(err, errlen, source, k->name, "missing required key (arch \"%s\")",
                                  model_arch_name(arch));
    }
    /* A key whose value has no effect under the chosen switches is refused when given (and not written): a config
     * then says only what the model does. */
    for (int i = 0; i < switch_key_count(); i++) {
        const SwitchKey *k = switch_key(i);
        char why[128];
        const char *void_under = switch_key_of_arch(k, arch) ? switch_key_void_under(&c, k, why, sizeof why) : NULL;
        if (void_under && cJSON_GetObjectItemCaseSensitive(obj, k->name))
            return switch_refusal(err, errlen, source, k->name, "has no effect with %s (remove it)", void_under);
    }
    /* A pyramid sizes every buffer by its largest layer: ff_n_experts holds the maximum (not written, see above). */
    if (arch == ARCH_MOEUT && c.ff_n_experts_per_layer.n > 0) {
        c.ff_n_experts = c.ff_n_experts_per_layer.v[0];
        for (int i = 1; i < c.ff_n_experts_per_layer.n; i++)
            if (c.ff_n_experts_per_layer.v[i] > c.ff_n_experts) c.ff_n_experts = c.ff_n_experts_per_layer.v[i];
    }
    /* The dense prefix's FFN width defaults to the active FFN width of a MoE layer (K routed + K_s shared experts of
     * S, plus the residual MLP's W), so that a dense layer costs the FLOPs per token of the MoE layer it replaces. */
    if (arch != ARCH_DENSE && c.n_dense_first > 0 && !cJSON_GetObjectItemCaseSensitive(obj, "d_ff")) {
        double d_ff = ((double)c.ff_k + (double)c.n_shared_experts) * (double)c.ff_expert_size +
                      (double)c.ff_residual_size;
        c.d_ff = d_ff <= (double)INT_MAX ? (int)d_ff : INT_MAX;
    }
    /* topk_group defaults to n_group: all groups kept, which validate refuses for n_group > 1 (no effect) */
    if (arch == ARCH_MOEUT && !cJSON_GetObjectItemCaseSensitive(obj, "topk_group")) c.topk_group = c.n_group;
    if (!d_head_given) {
        /* Reference default d_head = d_model // n_heads; an uneven split would silently change the width, so it
         * must then be given explicitly. */
        if (c.n_heads >= 1 && c.d_model >= 1 && c.d_model % c.n_heads != 0)
            return switch_refusal(err, errlen, source, "d_head",
                                  "d_model %d is not divisible by n_heads %d; give d_head explicitly", c.d_model,
                                  c.n_heads);
        c.d_head = c.n_heads >= 1 ? c.d_model / c.n_heads : 0;
    }
    char verr[384];
    if (model_config_validate(&c, verr, sizeof verr) != 0) {
        snprintf(err, errlen, "%s: %s", source, verr);
        return -1;
    }
    *cfg = c;
    return 0;
}

cJSON *model_config_to_json(const ModelConfig *cfg) {
    cJSON *o = cJSON_CreateObject();
    if (!o) return NULL;
    bool ok = true;
    for (int i = 0; i < switch_key_count() && ok; i++) {
        const SwitchKey *k = switch_key(i);
        if (!switch_key_applies(cfg, k)) continue;
        /* no capacity (the default) is not written, so the configs of models without one keep their exact bytes */
        if (k->offset == offsetof(ModelConfig, ff_capacity_factor) && cfg->ff_capacity_factor == 0.0) continue;
        const char *base = (const char *)cfg + k->offset;
        switch (k->type) {
        case SWITCH_INT: ok = cJSON_AddNumberToObject(o, k->name, *(const int *)base) != NULL; break;
        case SWITCH_DOUBLE: ok = cJSON_AddNumberToObject(o, k->name, *(const double *)base) != NULL; break;
        case SWITCH_BOOL: ok = cJSON_AddBoolToObject(o, k->name, *(const bool *)base) != NULL; break;
        case SWITCH_ENUM: {
            int v = *(const int *)base, n = 0;
            while (k->names[n]) n++;
            ok = v >= 0 && v < n && cJSON_AddStringToObject(o, k->name, k->names[v]) != NULL;
            break;
        }
        case SWITCH_INT_LIST: { /* written only when given: absent means "every layer ff_n_experts" */
            const ModelIntList *l = (const ModelIntList *)base;
            if (l->n > 0) ok = cJSON_AddItemToObject(o, k->name, cJSON_CreateIntArray(l->v, l->n));
            break;
        }
        }
    }
    if (!ok) {
        cJSON_Delete(o);
        return NULL;
    }
    return o;
}

/* Largest accepted parameter count: 2^38 (1 TiB of fp32); anything bigger is a typo, not a model. */
#define MAX_PARAMS 274877906944.0

int model_config_validate(const ModelConfig *cfg, char *err, size_t errlen) {
    if (switch_rules_check(cfg, err, errlen) != 0) return -1;
    double n = model_count_params_double(cfg);
    if (n > MAX_PARAMS)
        return switch_refusal(err, errlen, NULL, NULL,
                              "the configuration has %.4g parameters, more than the limit %.4g", n, MAX_PARAMS);
    return 0;
}

int model_config_ff_experts(const ModelConfig *cfg, int layer) {
    const ModelIntList *l = &cfg->ff_n_experts_per_layer;
    return l->n > 0 && layer >= 0 && layer < l->n ? l->v[layer] : cfg->ff_n_experts;
}

bool model_config_groups_whole(const ModelConfig *cfg) {
    return cfg->group_size >= 1 && (cfg->n_layers - cfg->n_dense_first) % cfg->group_size == 0;
}

int model_config_n_rot(const ModelConfig *cfg) {
    int n = (int)(0.5 * cfg->d_head);
    return n - n % 2;
}

double model_config_objective(const ModelConfig *cfg, double mean_ce, double reg_ffn, double reg_att, double reg_seq) {
    double j = mean_ce + model_config_ffn_balance_coef(cfg) * reg_ffn + cfg->att_entropy_reg * reg_att;
    if (cfg->arch == ARCH_MOEUT && cfg->seq_balance_alpha > 0.0) j += cfg->seq_balance_alpha * reg_seq;
    return j;
}

double model_config_ffn_balance_coef(const ModelConfig *cfg) {
    if (cfg->arch == ARCH_DENSE) return 0.0;
    switch (cfg->balance) {
    case BALANCE_ENTROPY: return cfg->entropy_reg;
    case BALANCE_SWITCH: return cfg->balance_alpha;
    case BALANCE_NONE:
    case BALANCE_BIAS: return 0.0; /* the bias balances without a loss term */
    }
    return 0.0;
}

int model_config_ec_capacity(const ModelConfig *cfg, long n) {
    if (cfg->routing != ROUTING_EXPERT_CHOICE || n <= 0) return 0;
    const double c = round(cfg->ff_capacity_factor * (double)n / cfg->ff_n_experts); /* halves away from zero */
    return c >= (double)n ? (int)n : c < 1.0 ? 1 : (int)c;
}

int model_config_train_routing_k(const ModelConfig *cfg) {
    return cfg->routing == ROUTING_EXPERT_CHOICE ? cfg->ff_n_experts : cfg->ff_k;
}
