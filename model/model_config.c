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

#include "model/model.h"
#include "model/param_count.h"
#include "pipeline/base/config.h"

typedef enum { KEY_INT, KEY_DOUBLE, KEY_BOOL, KEY_ENUM } KeyType;

enum { FOR_DENSE = 1, FOR_MOEUT = 2, FOR_BOTH = 3 };

typedef struct {
    const char *name;
    KeyType type;
    int archs;      /* FOR_* mask */
    int required;   /* FOR_* mask of the archs that require it */
    size_t offset;  /* into ModelConfig */
    const char *const *names; /* KEY_ENUM: the accepted strings, index = enum value, NULL-terminated */
} KeyDesc;

_Static_assert(sizeof(RouterKind) == sizeof(int) && sizeof(BalanceKind) == sizeof(int),
               "KEY_ENUM fields are read and written as int");
static const char *const ROUTER_NAMES[] = {"sigmoid", "softmax", NULL};
static const char *const BALANCE_NAMES[] = {"entropy", "switch", "none", "bias", NULL};
_Static_assert(sizeof(RoutingKind) == sizeof(int), "KEY_ENUM fields are read and written as int");
static const char *const ROUTING_NAMES[] = {"topk", "expert_choice", "hash", NULL};

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
    {"ff_capacity_factor", KEY_DOUBLE, FOR_MOEUT, 0, F(ff_capacity_factor), NULL},
};
#undef F
#define N_KEYS ((int)(sizeof KEYS / sizeof KEYS[0]))

static const char *arch_name(Arch a) { return a == ARCH_MOEUT ? "moeut" : "dense"; }
static int arch_bit(Arch a) { return a == ARCH_MOEUT ? FOR_MOEUT : FOR_DENSE; }

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
    if (strcmp(k->name, "ff_capacity_factor") == 0 && cfg->routing != ROUTING_EXPERT_CHOICE) {
        snprintf(buf, buflen, "model.routing \"%s\"", ROUTING_NAMES[cfg->routing]);
        return buf;
    }
    if (strcmp(k->name, "d_ff") == 0 && cfg->arch == ARCH_MOEUT && cfg->n_dense_first == 0) {
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
        if (KEYS[i].archs & arch_mask) names[n_names++] = KEYS[i].name;
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
                unknown_key_error(source, it->string, FOR_BOTH, err, errlen);
                return -1;
            }
        snprintf(err, errlen, "%s: model.arch: missing required key (\"dense\" or \"moeut\")", source);
        return -1;
    }
    if (!cJSON_IsString(arch_v) || !arch_v->valuestring) {
        snprintf(err, errlen, "%s: model.arch: expected a string, got %s", source, json_type_name(arch_v));
        return -1;
    }
    Arch arch;
    if (strcmp(arch_v->valuestring, "dense") == 0) arch = ARCH_DENSE;
    else if (strcmp(arch_v->valuestring, "moeut") == 0) arch = ARCH_MOEUT;
    else {
        snprintf(err, errlen, "%s: model.arch: unknown architecture \"%s\" (expected \"dense\" or \"moeut\")", source,
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
        if (!(k->archs & arch_bit(arch))) {
            snprintf(err, errlen, "%s: model.%s: not a key of arch \"%s\" (it belongs to \"%s\")", source, name,
                     arch_name(arch), arch_name(arch == ARCH_DENSE ? ARCH_MOEUT : ARCH_DENSE));
            return -1;
        }
        if (read_value(&c, k, it, problem, sizeof problem) != 0) {
            snprintf(err, errlen, "%s: model.%s: %s", source, name, problem);
            return -1;
        }
        if (strcmp(name, "d_head") == 0) d_head_given = true;
    }
    for (int i = 0; i < N_KEYS; i++)
        if ((KEYS[i].required & arch_bit(arch)) && !cJSON_GetObjectItemCaseSensitive(obj, KEYS[i].name)) {
            snprintf(err, errlen, "%s: model.%s: missing required key (arch \"%s\")", source, KEYS[i].name,
                     arch_name(arch));
            return -1;
        }
    for (int i = 0; i < N_KEYS; i++) {
        char why[64];
        const char *void_under = (KEYS[i].archs & arch_bit(arch)) ? key_void_under(&c, &KEYS[i], why, sizeof why) : NULL;
        if (void_under && cJSON_GetObjectItemCaseSensitive(obj, KEYS[i].name)) {
            snprintf(err, errlen, "%s: model.%s: has no effect with %s (remove it)", source, KEYS[i].name, void_under);
            return -1;
        }
    }
    /* The dense prefix's FFN width defaults to the active FFN width of a MoE layer (K routed + K_s shared experts of
     * S), so that a dense layer costs the FLOPs per token of the MoE layer it replaces. */
    if (arch == ARCH_MOEUT && c.n_dense_first > 0 && !cJSON_GetObjectItemCaseSensitive(obj, "d_ff")) {
        double d_ff = ((double)c.ff_k + (double)c.n_shared_experts) * (double)c.ff_expert_size;
        c.d_ff = d_ff <= (double)INT_MAX ? (int)d_ff : INT_MAX;
    }
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
        if (!(k->archs & arch_bit(cfg->arch)) || !key_applies(cfg, k)) continue;
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
        }
    }
    if (!ok) {
        cJSON_Delete(o);
        return NULL;
    }
    return o;
}

/* Largest accepted value of any size field; with it no count below overflows a double's exact range checks. */
#define MAX_DIM (1 << 24)
/* Largest accepted parameter count: 2^38 (1 TiB of fp32); anything bigger is a typo, not a model. */
#define MAX_PARAMS 274877906944.0

static int check_dim(const char *name, int v, char *err, size_t errlen) {
    if (v < 1) {
        snprintf(err, errlen, "model.%s: must be >= 1 (got %d)", name, v);
        return -1;
    }
    if (v > MAX_DIM) {
        snprintf(err, errlen, "model.%s: %d is larger than the limit %d", name, v, MAX_DIM);
        return -1;
    }
    return 0;
}

/* model.routing and the keys it constrains (MoEUT only). */
static int validate_routing(const ModelConfig *cfg, char *err, size_t errlen) {
    if ((int)cfg->routing < 0 || (int)cfg->routing > ROUTING_HASH) {
        snprintf(err, errlen, "model.routing: invalid value %d", (int)cfg->routing);
        return -1;
    }
    if (cfg->routing == ROUTING_HASH) {
        snprintf(err, errlen, "model.routing: \"hash\" (hash routing) is not implemented; use \"topk\" or \"expert_choice\"");
        return -1;
    }
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
    if (cfg->arch != ARCH_DENSE && cfg->arch != ARCH_MOEUT) {
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
        if (cfg->n_shared_experts < 0 || cfg->n_shared_experts > MAX_DIM) {
            snprintf(err, errlen, "model.n_shared_experts: must be in [0, %d], got %d", MAX_DIM, cfg->n_shared_experts);
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
        if (validate_routing(cfg, err, errlen)) return -1;
    }
    double n = model_count_params_double(cfg);
    if (n > MAX_PARAMS) {
        snprintf(err, errlen, "model: the configuration has %.4g parameters, more than the limit %.4g", n, MAX_PARAMS);
        return -1;
    }
    return 0;
}

bool model_config_groups_whole(const ModelConfig *cfg) {
    return cfg->group_size >= 1 && (cfg->n_layers - cfg->n_dense_first) % cfg->group_size == 0;
}

int model_config_n_rot(const ModelConfig *cfg) {
    int n = (int)(0.5 * cfg->d_head);
    return n - n % 2;
}

double model_config_objective(const ModelConfig *cfg, double mean_ce, double reg_ffn, double reg_att) {
    return mean_ce + model_config_ffn_balance_coef(cfg) * reg_ffn + cfg->att_entropy_reg * reg_att;
}

double model_config_ffn_balance_coef(const ModelConfig *cfg) {
    if (cfg->arch != ARCH_MOEUT) return 0.0;
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
