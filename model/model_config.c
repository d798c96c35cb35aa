/* ModelConfig <-> JSON "model" object: defaults, strict parsing, validation, serialisation.
 *
 * Keys are the reference constructors' argument names (moeut-spec.md §0, §7). Each key belongs to one or both
 * architectures; a key of the other architecture is an error, so a config always means exactly one model.
 * Error messages: "<source>: model.<key>: <problem>" (from_json) and "model.<key>: <problem>" (validate).
 */
#include <limits.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "model/hash_routing.h"
#include "kernels/routing_topk.h" /* ROUTING_MAX_GROUPS */
#include "model/model.h"
#include "model/moe_config.h"
#include "model/param_count.h"
#include "pipeline/base/config.h"

typedef enum { KEY_INT, KEY_DOUBLE, KEY_BOOL, KEY_ENUM, KEY_INT_LIST } KeyType;

enum { FOR_DENSE = 1, FOR_MOEUT = 2, FOR_BOTH = 3, FOR_MOE = 4 };

typedef struct {
    const char *name;
    KeyType type;
    int archs;      /* FOR_* mask */
    int required;   /* FOR_* mask of the archs that require it */
    size_t offset;  /* into ModelConfig */
    const char *const *names; /* KEY_ENUM: the accepted strings, index = enum value, NULL-terminated */
} KeyDesc;

_Static_assert(sizeof(RouterKind) == sizeof(int) && sizeof(BalanceKind) == sizeof(int) &&
                   sizeof(CapacityOrder) == sizeof(int),
               "KEY_ENUM fields are read and written as int");
static const char *const ROUTER_NAMES[] = {"sigmoid", "softmax", NULL};
static const char *const BALANCE_NAMES[] = {"entropy", "switch", "none", "bias", NULL};
_Static_assert(sizeof(RoutingKind) == sizeof(int), "KEY_ENUM fields are read and written as int");
static const char *const ROUTING_NAMES[] = {"topk", "expert_choice", "hash", NULL};
static const char *const CAPACITY_ORDER_NAMES[] = {"position", "score", NULL};

#define F(field) offsetof(ModelConfig, field)
/* Order = serialisation order of model_config_to_json. "arch" is handled separately. */
static const KeyDesc KEYS[] = {
    {"n_tokens", KEY_INT, FOR_BOTH, FOR_BOTH, F(n_tokens), NULL},
    {"d_model", KEY_INT, FOR_BOTH, FOR_BOTH, F(d_model), NULL},
    {"n_layers", KEY_INT, FOR_BOTH, FOR_BOTH, F(n_layers), NULL},
    {"n_heads", KEY_INT, FOR_BOTH, FOR_BOTH, F(n_heads), NULL},
    {"d_head", KEY_INT, FOR_BOTH, 0, F(d_head), NULL},
    {"d_ff", KEY_INT, FOR_BOTH, FOR_DENSE, F(d_ff), NULL},
    {"ff_n_experts", KEY_INT, FOR_MOEUT, FOR_MOEUT, F(ff_n_experts), NULL},
    {"ff_expert_size", KEY_INT, FOR_MOEUT, 0, F(ff_expert_size), NULL},
    {"ff_k", KEY_INT, FOR_MOEUT, 0, F(ff_k), NULL},
    {"att_n_experts", KEY_INT, FOR_MOEUT, FOR_MOEUT, F(att_n_experts), NULL},
    {"att_k", KEY_INT, FOR_MOEUT, 0, F(att_k), NULL},
    {"group_size", KEY_INT, FOR_MOEUT, 0, F(group_size), NULL},
    {"n_dense_first", KEY_INT, FOR_MOEUT, 0, F(n_dense_first), NULL},
    {"n_shared_experts", KEY_INT, FOR_MOEUT, 0, F(n_shared_experts), NULL},
    {"router", KEY_ENUM, FOR_MOEUT, 0, F(router), ROUTER_NAMES},
    {"router_renorm", KEY_BOOL, FOR_MOEUT, 0, F(router_renorm), NULL},
    {"routed_scaling_factor", KEY_DOUBLE, FOR_MOEUT, 0, F(routed_scaling_factor), NULL},
    {"balance", KEY_ENUM, FOR_MOEUT, 0, F(balance), BALANCE_NAMES},
    {"balance_alpha", KEY_DOUBLE, FOR_MOEUT, 0, F(balance_alpha), NULL},
    {"balance_gamma", KEY_DOUBLE, FOR_MOEUT, 0, F(balance_gamma), NULL},
    {"entropy_reg", KEY_DOUBLE, FOR_MOEUT, 0, F(entropy_reg), NULL},
    {"att_entropy_reg", KEY_DOUBLE, FOR_MOEUT, 0, F(att_entropy_reg), NULL},
    {"ff_expert_dropout", KEY_DOUBLE, FOR_MOEUT, 0, F(ff_expert_dropout), NULL},
    {"att_expert_dropout", KEY_DOUBLE, FOR_MOEUT, 0, F(att_expert_dropout), NULL},
    {"dropout", KEY_DOUBLE, FOR_BOTH, 0, F(dropout), NULL},
    {"lm_head_bias", KEY_BOOL, FOR_BOTH, 0, F(lm_head_bias), NULL},
    {"out_norm_affine", KEY_BOOL, FOR_BOTH, 0, F(out_norm_affine), NULL},
    {"routing", KEY_ENUM, FOR_MOEUT, 0, F(routing), ROUTING_NAMES},
    {"hash_seed", KEY_INT, FOR_MOEUT, 0, F(hash_seed), NULL},
    {"ff_capacity_factor", KEY_DOUBLE, FOR_MOEUT, 0, F(ff_capacity_factor), NULL},
    {"ff_capacity_order", KEY_ENUM, FOR_MOEUT, 0, F(ff_capacity_order), CAPACITY_ORDER_NAMES},
    {"n_group", KEY_INT, FOR_MOEUT, 0, F(n_group), NULL},
    {"topk_group", KEY_INT, FOR_MOEUT, 0, F(topk_group), NULL},
    {"seq_balance_alpha", KEY_DOUBLE, FOR_MOEUT, 0, F(seq_balance_alpha), NULL},
    {"ff_residual_size", KEY_INT, FOR_MOEUT, 0, F(ff_residual_size), NULL},
    {"ff_n_experts_per_layer", KEY_INT_LIST, FOR_MOEUT, 0, F(ff_n_experts_per_layer), NULL},
};
#undef F
#define N_KEYS ((int)(sizeof KEYS / sizeof KEYS[0]))

static const char *arch_name(Arch a) { return model_arch_name(a); }
static int arch_bit(Arch a) { return a == ARCH_MOEUT ? FOR_MOEUT : a == ARCH_MOE ? FOR_MOE : FOR_DENSE; }

/* Arch "moe" (a dense Transformer whose FFN is routed, model/moe_layer.c) takes the keys common to dense and MoEUT
 * (FOR_BOTH in KEYS) and these FFN-routing keys of MoEUT; every other MoEUT key (attention experts, groups, the
 * entropy regularizer, shared experts, ...) is refused for it. */
static const char *const MOE_FFN_KEYS[] = {"ff_n_experts", "ff_expert_size", "ff_k", "n_dense_first", "router",
                                           "router_renorm", "routed_scaling_factor", "balance", "balance_alpha", NULL};
static int key_archs(const KeyDesc *k) {
    int a = k->archs;
    if ((a & FOR_BOTH) == FOR_BOTH) a |= FOR_MOE;
    for (int i = 0; MOE_FFN_KEYS[i]; i++)
        if (strcmp(k->name, MOE_FFN_KEYS[i]) == 0) a |= FOR_MOE;
    return a;
}
/* "moe" requires what both other archs require, and ff_n_experts and ff_expert_size (no default width: an upcycled
 * model's experts are as wide as the dense FFN they copy). */
static int key_required(const KeyDesc *k) {
    int r = k->required;
    if ((r & FOR_BOTH) == FOR_BOTH || strcmp(k->name, "ff_n_experts") == 0 || strcmp(k->name, "ff_expert_size") == 0)
        r |= FOR_MOE;
    return r;
}

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

/* A key whose value has no effect under the chosen switches is refused when given and not written: a config then
 * says only what the model does. Returns NULL when the key applies, else the switch that makes it void (for the
 * error message, e.g. "model.balance \"switch\""). */
static const char *key_void_under(const ModelConfig *cfg, const KeyDesc *k, char *buf, size_t buflen) {
    if ((strcmp(k->name, "entropy_reg") == 0 && cfg->balance != BALANCE_ENTROPY) ||
        (strcmp(k->name, "balance_alpha") == 0 && cfg->balance != BALANCE_SWITCH) ||
        (strcmp(k->name, "balance_gamma") == 0 && cfg->balance != BALANCE_BIAS)) {
        snprintf(buf, buflen, "model.balance \"%s\"", BALANCE_NAMES[cfg->balance]);
        return buf;
    }
    /* routing "hash" has no router: no gating transform, no gate to scale, no router choice for expert dropout, no
     * gate to drop over a capacity, no scores to group or to balance */
    if (cfg->routing == ROUTING_HASH &&
        (strcmp(k->name, "router") == 0 || strcmp(k->name, "router_renorm") == 0 ||
         strcmp(k->name, "routed_scaling_factor") == 0 || strcmp(k->name, "ff_expert_dropout") == 0 ||
         strcmp(k->name, "ff_capacity_factor") == 0 || strcmp(k->name, "ff_capacity_order") == 0 ||
         strcmp(k->name, "n_group") == 0 || strcmp(k->name, "topk_group") == 0 ||
         strcmp(k->name, "seq_balance_alpha") == 0)) {
        snprintf(buf, buflen, "model.routing \"hash\"");
        return buf;
    }
    /* routing "expert_choice": the experts choose (no token-choice capacity order, no groups of a token's choice, no
     * per-sequence token-choice balance: the loads are equal by construction) */
    if (cfg->routing == ROUTING_EXPERT_CHOICE &&
        (strcmp(k->name, "ff_capacity_order") == 0 || strcmp(k->name, "n_group") == 0 ||
         strcmp(k->name, "topk_group") == 0 || strcmp(k->name, "seq_balance_alpha") == 0)) {
        snprintf(buf, buflen, "model.routing \"expert_choice\"");
        return buf;
    }
    if (strcmp(k->name, "hash_seed") == 0 && cfg->routing != ROUTING_HASH) {
        snprintf(buf, buflen, "model.routing \"%s\"", ROUTING_NAMES[cfg->routing]);
        return buf;
    }
    if (strcmp(k->name, "ff_capacity_order") == 0 && cfg->ff_capacity_factor == 0.0) {
        snprintf(buf, buflen, "model.ff_capacity_factor 0 (no capacity)");
        return buf;
    }
    if (strcmp(k->name, "topk_group") == 0 && cfg->n_group == 1) {
        snprintf(buf, buflen, "model.n_group 1 (no group limit)");
        return buf;
    }
    if (strcmp(k->name, "ff_n_experts") == 0 && cfg->arch == ARCH_MOEUT && cfg->ff_n_experts_per_layer.n > 0) {
        snprintf(buf, buflen, "model.ff_n_experts_per_layer (give one of the two)");
        return buf;
    }
    if (strcmp(k->name, "d_ff") == 0 && cfg->arch != ARCH_DENSE && cfg->n_dense_first == 0) {
        snprintf(buf, buflen, "model.n_dense_first 0 (no dense layer)");
        return buf;
    }
    return NULL;
}

static bool key_applies(const ModelConfig *cfg, const KeyDesc *k) {
    char buf[64];
    return key_void_under(cfg, k, buf, sizeof buf) == NULL;
}

static const KeyDesc *find_key(const char *name) {
    for (int i = 0; i < N_KEYS; i++)
        if (strcmp(KEYS[i].name, name) == 0) return &KEYS[i];
    return NULL;
}

/* "<source>: model.<name>: unknown key", with the closest key of the archs in arch_mask (and "arch") when one is
 * close. */
static void unknown_key_error(const char *source, const char *name, int arch_mask, char *err, size_t errlen) {
    const char *names[N_KEYS + 1];
    int n_names = 0;
    names[n_names++] = "arch";
    for (int i = 0; i < N_KEYS; i++)
        if (key_archs(&KEYS[i]) & arch_mask) names[n_names++] = KEYS[i].name;
    const char *hint = json_closest_key(name, names, n_names);
    if (hint) snprintf(err, errlen, "%s: model.%s: unknown key (did you mean model.%s?)", source, name, hint);
    else snprintf(err, errlen, "%s: model.%s: unknown key", source, name);
}

/* Reads one value into cfg; on a type problem writes it (without prefix) into problem and returns -1. */
static int read_value(ModelConfig *cfg, const KeyDesc *k, const cJSON *v, char *problem, size_t plen) {
    char *base = (char *)cfg + k->offset;
    switch (k->type) {
    case KEY_INT: {
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
    case KEY_DOUBLE:
        if (!cJSON_IsNumber(v)) {
            snprintf(problem, plen, "expected a number, got %s", json_type_name(v));
            return -1;
        }
        *(double *)base = v->valuedouble;
        return 0;
    case KEY_BOOL:
        if (!cJSON_IsBool(v)) {
            snprintf(problem, plen, "expected a boolean, got %s", json_type_name(v));
            return -1;
        }
        *(bool *)base = cJSON_IsTrue(v);
        return 0;
    case KEY_ENUM: {
        char accepted[160] = "";
        for (int i = 0; k->names[i]; i++) {
            size_t used = strlen(accepted);
            snprintf(accepted + used, sizeof accepted - used, "%s\"%s\"", i ? ", " : "", k->names[i]);
        }
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
    case KEY_INT_LIST: {
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
    char problem[256];
    if (!source) source = "<json>";
    if (!obj || !cJSON_IsObject(obj)) {
        snprintf(err, errlen, "%s: model: expected an object, got %s", source, obj ? json_type_name(obj) : "nothing");
        return -1;
    }
    const cJSON *arch_v = cJSON_GetObjectItemCaseSensitive(obj, "arch");
    if (!arch_v) {
        /* A misspelt "arch" ("arc") is the cause of the missing one: name it first, like the JsonReader does. */
        for (const cJSON *it = obj->child; it; it = it->next)
            if (it->string && !find_key(it->string)) {
                unknown_key_error(source, it->string, FOR_BOTH | FOR_MOE, err, errlen);
                return -1;
            }
        snprintf(err, errlen, "%s: model.arch: missing required key (\"dense\", \"moeut\" or \"moe\")", source);
        return -1;
    }
    if (!cJSON_IsString(arch_v) || !arch_v->valuestring) {
        snprintf(err, errlen, "%s: model.arch: expected a string, got %s", source, json_type_name(arch_v));
        return -1;
    }
    Arch arch;
    if (strcmp(arch_v->valuestring, "dense") == 0) arch = ARCH_DENSE;
    else if (strcmp(arch_v->valuestring, "moeut") == 0) arch = ARCH_MOEUT;
    else if (strcmp(arch_v->valuestring, "moe") == 0) arch = ARCH_MOE;
    else {
        snprintf(err, errlen,
                 "%s: model.arch: unknown architecture \"%s\" (expected \"dense\", \"moeut\" or \"moe\")", source,
                 arch_v->valuestring);
        return -1;
    }
    ModelConfig c;
    set_defaults(&c, arch);
    bool d_head_given = false;
    for (const cJSON *it = obj->child; it; it = it->next) {
        const char *name = it->string ? it->string : "";
        for (const cJSON *d = it->next; d; d = d->next)
            if (d->string && strcmp(d->string, name) == 0) {
                snprintf(err, errlen, "%s: model.%s: duplicate key", source, name);
                return -1;
            }
        if (strcmp(name, "arch") == 0) continue;
        const KeyDesc *k = find_key(name);
        if (!k) {
            unknown_key_error(source, name, arch_bit(arch), err, errlen);
            return -1;
        }
        if (!(key_archs(k) & arch_bit(arch))) {
            const int a = key_archs(k);
            const char *owner = a == FOR_MOEUT ? "\"moeut\""
                                : a == FOR_DENSE ? "\"dense\""
                                : a == (FOR_MOEUT | FOR_MOE) ? "\"moeut\" and \"moe\""
                                                             : "another arch";
            snprintf(err, errlen, "%s: model.%s: not a key of arch \"%s\" (it belongs to %s)", source, name,
                     arch_name(arch), owner);
            return -1;
        }
        if (read_value(&c, k, it, problem, sizeof problem) != 0) {
            snprintf(err, errlen, "%s: model.%s: %s", source, name, problem);
            return -1;
        }
        if (strcmp(name, "d_head") == 0) d_head_given = true;
    }
    for (int i = 0; i < N_KEYS; i++)
        if ((key_required(&KEYS[i]) & arch_bit(arch)) && !cJSON_GetObjectItemCaseSensitive(obj, KEYS[i].name) &&
            !(strcmp(KEYS[i].name, "ff_n_experts") == 0 && c.ff_n_experts_per_layer.n > 0)) {
            snprintf(err, errlen, "%s: model.%s: missing required key (arch \"%s\")", source, KEYS[i].name,
                     arch_name(arch));
            return -1;
        }
    for (int i = 0; i < N_KEYS; i++) {
        char why[64];
        const char *void_under =
            (key_archs(&KEYS[i]) & arch_bit(arch)) ? key_void_under(&c, &KEYS[i], why, sizeof why) : NULL;
        if (void_under && cJSON_GetObjectItemCaseSensitive(obj, KEYS[i].name)) {
            snprintf(err, errlen, "%s: model.%s: has no effect with %s (remove it)", source, KEYS[i].name, void_under);
            return -1;
        }
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
        if (c.n_heads >= 1 && c.d_model >= 1 && c.d_model % c.n_heads != 0) {
            snprintf(err, errlen, "%s: model.d_head: d_model %d is not divisible by n_heads %d; give d_head explicitly",
                     source, c.d_model, c.n_heads);
            return -1;
        }
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
    bool ok = cJSON_AddStringToObject(o, "arch", arch_name(cfg->arch)) != NULL;
    for (int i = 0; i < N_KEYS && ok; i++) {
        const KeyDesc *k = &KEYS[i];
        if (!(key_archs(k) & arch_bit(cfg->arch)) || !key_applies(cfg, k)) continue;
        /* no capacity (the default) is not written, so the configs of models without one keep their exact bytes */
        if (k->offset == offsetof(ModelConfig, ff_capacity_factor) && cfg->ff_capacity_factor == 0.0) continue;
        const char *base = (const char *)cfg + k->offset;
        switch (k->type) {
        case KEY_INT: ok = cJSON_AddNumberToObject(o, k->name, *(const int *)base) != NULL; break;
        case KEY_DOUBLE: ok = cJSON_AddNumberToObject(o, k->name, *(const double *)base) != NULL; break;
        case KEY_BOOL: ok = cJSON_AddBoolToObject(o, k->name, *(const bool *)base) != NULL; break;
        case KEY_ENUM: {
            int v = *(const int *)base, n = 0;
            while (k->names[n]) n++;
            ok = v >= 0 && v < n && cJSON_AddStringToObject(o, k->name, k->names[v]) != NULL;
            break;
        }
        case KEY_INT_LIST: { /* written only when given: absent means "every layer ff_n_experts" */
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

static int check_dim(const char *name, int v, char *err, size_t errlen) {
    if (v < 1) {
        snprintf(err, errlen, "model.%s: must be >= 1 (got %d)", name, v);
        return -1;
    }
    if (v > MODEL_MAX_DIM) {
        snprintf(err, errlen, "model.%s: %d is larger than the limit %d", name, v, MODEL_MAX_DIM);
        return -1;
    }
    return 0;
}

/* Group-limited routing (DeepSeek-V3 §2.1.2): the settings topk_select accepts (kernels/backend_ops.h), and none that
 * has no effect. */
static int validate_groups(const ModelConfig *cfg, char *err, size_t errlen) {
    const int E = cfg->ff_n_experts, G = cfg->n_group;
    if (G < 1 || G > ROUTING_MAX_GROUPS) {
        snprintf(err, errlen, "model.n_group: must be in [1, %d], got %d", ROUTING_MAX_GROUPS, G);
        return -1;
    }
    if (G == 1) {
        if (cfg->topk_group != 1) {
            snprintf(err, errlen, "model.topk_group: must be 1 with n_group 1, got %d", cfg->topk_group);
            return -1;
        }
        return 0;
    }
    if (E % G != 0 || E / G < 2) {
        snprintf(err, errlen, "model.n_group: ff_n_experts %d must split into %d groups of >= 2 experts", E, G);
        return -1;
    }
    if (cfg->topk_group < 1 || cfg->topk_group > G) {
        snprintf(err, errlen, "model.topk_group: must be in [1, n_group %d], got %d", G, cfg->topk_group);
        return -1;
    }
    if (cfg->topk_group == G) {
        snprintf(err, errlen,
                 "model.topk_group: %d of %d groups kept (topk_group defaults to n_group) limits nothing; "
                 "set topk_group < n_group",
                 G, G);
        return -1;
    }
    if (cfg->ff_k > cfg->topk_group * (E / G)) {
        snprintf(err, errlen, "model.topk_group: %d groups of %d experts hold fewer than ff_k %d", cfg->topk_group,
                 E / G, cfg->ff_k);
        return -1;
    }
    return 0;
}

/* model.routing "expert_choice" and the keys it constrains (MoEUT only; "hash": model_config_validate_routing). */
static int validate_expert_choice(const ModelConfig *cfg, char *err, size_t errlen) {
    if (cfg->routing != ROUTING_EXPERT_CHOICE) return 0;
    /* Expert choice (Zhou et al. 2022 §3.1): gates are the softmax scores of the chosen (token, expert) pairs, and the
     * experts' loads are equal by construction, so no balancing term and none of the token-choice gate switches. */
    const double cf = cfg->ff_capacity_factor;
    if (!(cf > 0.0) || !isfinite(cf) || cf > cfg->ff_n_experts) {
        snprintf(err, errlen, "model.ff_capacity_factor: routing \"expert_choice\" needs a capacity factor in (0, "
                 "ff_n_experts %d] (Zhou et al. 2022: 2), got %g", cfg->ff_n_experts, cf);
        return -1;
    }
    if (cfg->router != ROUTER_SOFTMAX) {
        snprintf(err, errlen, "model.router: routing \"expert_choice\" gates by the softmax over the experts; set "
                 "router \"softmax\"");
        return -1;
    }
    if (cfg->router_renorm) {
        snprintf(err, errlen, "model.router_renorm: routing \"expert_choice\" gates by the plain softmax scores");
        return -1;
    }
    if (cfg->routed_scaling_factor != 1.0) {
        snprintf(err, errlen, "model.routed_scaling_factor: routing \"expert_choice\" gates by the plain softmax scores");
        return -1;
    }
    if (cfg->balance != BALANCE_NONE) {
        snprintf(err, errlen, "model.balance: routing \"expert_choice\" balances the experts' loads by construction; "
                 "set balance \"none\"");
        return -1;
    }
    if (cfg->ff_expert_dropout != 0.0) {
        snprintf(err, errlen, "model.ff_expert_dropout: not implemented with routing \"expert_choice\"");
        return -1;
    }
    const long k_eval = lround(cf);
    if (cfg->ff_k != k_eval) {
        snprintf(err, errlen, "model.ff_k: with routing \"expert_choice\" evaluation routes each position causally to "
                 "its top round(ff_capacity_factor) = %ld experts; set ff_k %ld, got %d", k_eval, k_eval, cfg->ff_k);
        return -1;
    }
    return 0;
}

int model_config_validate(const ModelConfig *cfg, char *err, size_t errlen) {
    if (cfg->arch != ARCH_DENSE && cfg->arch != ARCH_MOEUT && cfg->arch != ARCH_MOE) {
        snprintf(err, errlen, "model.arch: invalid value %d", (int)cfg->arch);
        return -1;
    }
    if (check_dim("n_tokens", cfg->n_tokens, err, errlen) || check_dim("d_model", cfg->d_model, err, errlen) ||
        check_dim("n_layers", cfg->n_layers, err, errlen) || check_dim("n_heads", cfg->n_heads, err, errlen) ||
        check_dim("d_head", cfg->d_head, err, errlen))
        return -1;
    if (!(cfg->dropout == 0.0)) {
        snprintf(err, errlen, "model.dropout: must be 0 (dropout is not implemented; every paper run uses 0), got %g",
                 cfg->dropout);
        return -1;
    }
    if (cfg->arch == ARCH_DENSE) {
        if (check_dim("d_ff", cfg->d_ff, err, errlen)) return -1;
    } else if (cfg->arch == ARCH_MOE) {
        if (moe_config_validate(cfg, err, errlen) != 0) return -1;
    } else {
        if (check_dim("ff_n_experts", cfg->ff_n_experts, err, errlen) ||
            check_dim("ff_expert_size", cfg->ff_expert_size, err, errlen) ||
            check_dim("ff_k", cfg->ff_k, err, errlen) || check_dim("att_n_experts", cfg->att_n_experts, err, errlen) ||
            check_dim("att_k", cfg->att_k, err, errlen) || check_dim("group_size", cfg->group_size, err, errlen))
            return -1;
        if (cfg->ff_k > cfg->ff_n_experts) {
            snprintf(err, errlen, "model.ff_k: %d is larger than ff_n_experts %d", cfg->ff_k, cfg->ff_n_experts);
            return -1;
        }
        if (cfg->att_k > cfg->att_n_experts) {
            snprintf(err, errlen, "model.att_k: %d is larger than att_n_experts %d", cfg->att_k, cfg->att_n_experts);
            return -1;
        }
        if (cfg->n_dense_first < 0 || cfg->n_dense_first >= cfg->n_layers) {
            snprintf(err, errlen, "model.n_dense_first: must be in [0, n_layers %d) (at least one MoEUT application), got %d",
                     cfg->n_layers, cfg->n_dense_first);
            return -1;
        }
        if (!model_config_groups_whole(cfg)) {
            if (cfg->n_dense_first == 0)
                snprintf(err, errlen, "model.group_size: n_layers %d is not a multiple of group_size %d", cfg->n_layers,
                         cfg->group_size);
            else
                snprintf(err, errlen,
                         "model.group_size: n_layers %d - n_dense_first %d = %d MoEUT applications is not a multiple of "
                         "group_size %d",
                         cfg->n_layers, cfg->n_dense_first, cfg->n_layers - cfg->n_dense_first, cfg->group_size);
            return -1;
        }
        if (cfg->n_dense_first > 0 && check_dim("d_ff", cfg->d_ff, err, errlen)) return -1;
        if (cfg->n_shared_experts < 0 || cfg->n_shared_experts > MODEL_MAX_DIM) {
            snprintf(err, errlen, "model.n_shared_experts: must be in [0, %d], got %d", MODEL_MAX_DIM, cfg->n_shared_experts);
            return -1;
        }
        const ModelIntList *pl = &cfg->ff_n_experts_per_layer;
        if (pl->n < 0 || pl->n > MODEL_MAX_LIST || (pl->n > 0 && pl->n != cfg->group_size)) {
            snprintf(err, errlen, "model.ff_n_experts_per_layer: %d entries, need one per distinct layer (group_size %d)",
                     pl->n, cfg->group_size);
            return -1;
        }
        for (int i = 0, max = 0; i < pl->n; i++) {
            if (pl->v[i] < 1 || pl->v[i] > MODEL_MAX_DIM) {
                snprintf(err, errlen, "model.ff_n_experts_per_layer: entry %d must be in [1, %d], got %d", i, MODEL_MAX_DIM,
                         pl->v[i]);
                return -1;
            }
            if (cfg->ff_k > pl->v[i]) {
                snprintf(err, errlen, "model.ff_k: %d is larger than ff_n_experts_per_layer[%d] %d", cfg->ff_k, i,
                         pl->v[i]);
                return -1;
            }
            max = pl->v[i] > max ? pl->v[i] : max;
            if (i == pl->n - 1 && max != cfg->ff_n_experts) {
                snprintf(err, errlen, "model.ff_n_experts: %d is not the largest ff_n_experts_per_layer entry %d",
                         cfg->ff_n_experts, max);
                return -1;
            }
        }
        /* A pyramid's per-layer E reaches the router, the experts, the balancing terms and the records; the switches
         * below size something by the one ff_n_experts (the hash table, the capacity, the groups, the sequence-wise
         * loss), so they are refused with a pyramid rather than run with the wrong E. */
        if (pl->n > 0) {
            const char *other = cfg->routing != ROUTING_TOPK ? "routing"
                                : cfg->ff_capacity_factor > 0.0 ? "ff_capacity_factor"
                                : cfg->n_group > 1              ? "n_group"
                                : cfg->seq_balance_alpha > 0.0  ? "seq_balance_alpha"
                                                                : NULL;
            if (other) {
                snprintf(err, errlen, "model.ff_n_experts_per_layer: not supported together with model.%s", other);
                return -1;
            }
        }
        if (cfg->ff_residual_size < 0 || cfg->ff_residual_size > MODEL_MAX_DIM) {
            snprintf(err, errlen, "model.ff_residual_size: must be in [0, %d], got %d", MODEL_MAX_DIM, cfg->ff_residual_size);
            return -1;
        }
        if ((int)cfg->router < 0 || (int)cfg->router > ROUTER_SOFTMAX) {
            snprintf(err, errlen, "model.router: invalid value %d", (int)cfg->router);
            return -1;
        }
        if (!(cfg->routed_scaling_factor > 0.0) || !isfinite(cfg->routed_scaling_factor)) {
            snprintf(err, errlen, "model.routed_scaling_factor: must be a finite number > 0, got %g",
                     cfg->routed_scaling_factor);
            return -1;
        }
        if (validate_groups(cfg, err, errlen)) return -1;
        if (!(cfg->seq_balance_alpha >= 0.0) || !isfinite(cfg->seq_balance_alpha)) {
            snprintf(err, errlen, "model.seq_balance_alpha: must be a finite number >= 0, got %g", cfg->seq_balance_alpha);
            return -1;
        }
        if ((int)cfg->balance < 0 || (int)cfg->balance > BALANCE_BIAS) {
            snprintf(err, errlen, "model.balance: invalid value %d", (int)cfg->balance);
            return -1;
        }
        if (cfg->balance == BALANCE_SWITCH && (!(cfg->balance_alpha >= 0.0) || !isfinite(cfg->balance_alpha))) {
            snprintf(err, errlen, "model.balance_alpha: must be a finite number >= 0, got %g", cfg->balance_alpha);
            return -1;
        }
        if (cfg->balance == BALANCE_BIAS && (!(cfg->balance_gamma >= 0.0) || !isfinite(cfg->balance_gamma))) {
            snprintf(err, errlen, "model.balance_gamma: must be a finite number >= 0, got %g", cfg->balance_gamma);
            return -1;
        }
        if (!(cfg->entropy_reg >= 0.0) || !isfinite(cfg->entropy_reg)) {
            snprintf(err, errlen, "model.entropy_reg: must be a finite number >= 0, got %g", cfg->entropy_reg);
            return -1;
        }
        if (!(cfg->att_entropy_reg >= 0.0) || !isfinite(cfg->att_entropy_reg)) {
            snprintf(err, errlen, "model.att_entropy_reg: must be a finite number >= 0, got %g", cfg->att_entropy_reg);
            return -1;
        }
        if (!(cfg->ff_expert_dropout >= 0.0 && cfg->ff_expert_dropout < 1.0)) {
            snprintf(err, errlen, "model.ff_expert_dropout: must be in [0, 1), got %g", cfg->ff_expert_dropout);
            return -1;
        }
        if (!(cfg->att_expert_dropout >= 0.0 && cfg->att_expert_dropout < 1.0)) {
            snprintf(err, errlen, "model.att_expert_dropout: must be in [0, 1), got %g", cfg->att_expert_dropout);
            return -1;
        }
        if (model_config_validate_routing(cfg, err, errlen) != 0) return -1;
        if (!(cfg->ff_capacity_factor >= 0.0) || !isfinite(cfg->ff_capacity_factor)) {
            snprintf(err, errlen, "model.ff_capacity_factor: must be a finite number >= 0 (0 = no capacity), got %g",
                     cfg->ff_capacity_factor);
            return -1;
        }
        if ((int)cfg->ff_capacity_order < 0 || (int)cfg->ff_capacity_order > CAPACITY_SCORE) {
            snprintf(err, errlen, "model.ff_capacity_order: invalid value %d", (int)cfg->ff_capacity_order);
            return -1;
        }
        if (validate_expert_choice(cfg, err, errlen)) return -1;
    }
    double n = model_count_params_double(cfg);
    if (n > MAX_PARAMS) {
        snprintf(err, errlen, "model: the configuration has %.4g parameters, more than the limit %.4g", n, MAX_PARAMS);
        return -1;
    }
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
