/* The model config's switch rules (switch_rules.h): the keys and their domains (KEYS), the rules that combine them
 * (RULES), and the checks that read both. Formulas and sources of the switches: experiments/README.md's switch table,
 * which names every key of KEYS (tests/unit/test_switch_rules.c). */
#include "model/switch_rules.h"

#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/routing_topk.h" /* ROUTING_MAX_GROUPS */
#include "pipeline/base/log.h"

/* ---- the values of the enum keys (index = enum value) ---- */

_Static_assert(sizeof(Arch) == sizeof(int) && sizeof(RouterKind) == sizeof(int) && sizeof(BalanceKind) == sizeof(int) &&
                   sizeof(RoutingKind) == sizeof(int) && sizeof(CapacityOrder) == sizeof(int),
               "SWITCH_ENUM fields are read and written as int");
#define N_NAMES(a) (sizeof(a) / sizeof((a)[0]) - 1)
static const char *const ARCH_NAMES[] = {"dense", "moeut", "moe", NULL};
_Static_assert(N_NAMES(ARCH_NAMES) == ARCH_MOE + 1, "one name per Arch");
static const char *const ROUTER_NAMES[] = {"sigmoid", "softmax", NULL};
_Static_assert(N_NAMES(ROUTER_NAMES) == ROUTER_SOFTMAX + 1, "one name per RouterKind");
static const char *const BALANCE_NAMES[] = {"entropy", "switch", "none", "bias", NULL};
_Static_assert(N_NAMES(BALANCE_NAMES) == BALANCE_BIAS + 1, "one name per BalanceKind");
static const char *const ROUTING_NAMES[] = {"topk", "expert_choice", "hash", NULL};
_Static_assert(N_NAMES(ROUTING_NAMES) == ROUTING_HASH + 1, "one name per RoutingKind");
static const char *const CAPACITY_ORDER_NAMES[] = {"position", "score", NULL};
_Static_assert(N_NAMES(CAPACITY_ORDER_NAMES) == CAPACITY_SCORE + 1, "one name per CapacityOrder");
/* What a refusal calls a routed layer of each arch (the dense model has none). */
static const char *const ROUTED_LAYER[] = {NULL, "MoEUT application", "MoE layer"};

const char *model_arch_name(Arch a) { return (unsigned)a <= ARCH_MOE ? ARCH_NAMES[a] : "?"; }

/* ---- the keys ----
 * Arch "moe" (a dense Transformer whose FFN is routed, model/moe_layer.c) takes the keys common to dense and MoEUT
 * and MoEUT's FFN-routing keys; every other MoEUT key (attention experts, groups, the entropy regularizer, shared
 * experts, ...) is refused for it. It requires ff_expert_size: an upcycled model's experts are as wide as the dense
 * FFN they copy, so there is no default width. */
#define F(field) offsetof(ModelConfig, field)
#define ROUTED (ARCHS_MOEUT | ARCHS_MOE)
/* name, type, archs that take it, archs that require it, field, names, domain (the further columns by name) */
#define KEY(name_, type_, archs_, required_, field_, names_, domain_)                                                 \
    .name = name_, .type = type_, .archs = archs_, .required = required_, .offset = F(field_), .names = names_,        \
    .domain = domain_
/* Order = serialisation order of model_config_to_json. */
static const SwitchKey KEYS[] = {
    {KEY("arch", SWITCH_ENUM, ARCHS_ALL, ARCHS_ALL, arch, ARCH_NAMES, DOMAIN_NAMES), .doc = DOC_SWITCH_TABLE},
    {KEY("n_tokens", SWITCH_INT, ARCHS_ALL, ARCHS_ALL, n_tokens, NULL, DOMAIN_SIZE)},
    {KEY("d_model", SWITCH_INT, ARCHS_ALL, ARCHS_ALL, d_model, NULL, DOMAIN_SIZE)},
    {KEY("n_layers", SWITCH_INT, ARCHS_ALL, ARCHS_ALL, n_layers, NULL, DOMAIN_SIZE)},
    {KEY("n_heads", SWITCH_INT, ARCHS_ALL, ARCHS_ALL, n_heads, NULL, DOMAIN_SIZE)},
    {KEY("d_head", SWITCH_INT, ARCHS_ALL, 0, d_head, NULL, DOMAIN_SIZE)},
    {KEY("d_ff", SWITCH_INT, ARCHS_ALL, ARCHS_DENSE, d_ff, NULL, DOMAIN_SIZE), .domain_where_applies = true,
     .doc = DOC_SWITCH_TABLE},
    {KEY("ff_n_experts", SWITCH_INT, ROUTED, ROUTED, ff_n_experts, NULL, DOMAIN_SIZE)},
    {KEY("ff_expert_size", SWITCH_INT, ROUTED, ARCHS_MOE, ff_expert_size, NULL, DOMAIN_SIZE)},
    {KEY("ff_k", SWITCH_INT, ROUTED, 0, ff_k, NULL, DOMAIN_SIZE)},
    {KEY("att_n_experts", SWITCH_INT, ARCHS_MOEUT, ARCHS_MOEUT, att_n_experts, NULL, DOMAIN_SIZE)},
    {KEY("att_k", SWITCH_INT, ARCHS_MOEUT, 0, att_k, NULL, DOMAIN_SIZE)},
    {KEY("group_size", SWITCH_INT, ARCHS_MOEUT, 0, group_size, NULL, DOMAIN_SIZE)},
    {KEY("n_dense_first", SWITCH_INT, ROUTED, 0, n_dense_first, NULL, DOMAIN_DENSE_PREFIX), .doc = DOC_SWITCH_TABLE},
    {KEY("n_shared_experts", SWITCH_INT, ARCHS_MOEUT, 0, n_shared_experts, NULL, DOMAIN_INT_RANGE), .lo = 0,
     .hi = MODEL_MAX_DIM, .doc = DOC_SWITCH_TABLE},
    {KEY("router", SWITCH_ENUM, ROUTED, 0, router, ROUTER_NAMES, DOMAIN_NAMES), .doc = DOC_SWITCH_TABLE},
    {KEY("router_renorm", SWITCH_BOOL, ROUTED, 0, router_renorm, NULL, DOMAIN_ANY), .doc = DOC_SWITCH_TABLE},
    {KEY("routed_scaling_factor", SWITCH_DOUBLE, ROUTED, 0, routed_scaling_factor, NULL, DOMAIN_POSITIVE),
     .doc = DOC_SWITCH_TABLE},
    {KEY("balance", SWITCH_ENUM, ROUTED, 0, balance, BALANCE_NAMES, DOMAIN_NAMES), .doc = DOC_SWITCH_TABLE},
    {KEY("balance_alpha", SWITCH_DOUBLE, ROUTED, 0, balance_alpha, NULL, DOMAIN_NONNEG), .domain_where_applies = true,
     .doc = DOC_SWITCH_TABLE},
    {KEY("balance_gamma", SWITCH_DOUBLE, ARCHS_MOEUT, 0, balance_gamma, NULL, DOMAIN_NONNEG),
     .domain_where_applies = true, .doc = DOC_SWITCH_TABLE},
    {KEY("entropy_reg", SWITCH_DOUBLE, ARCHS_MOEUT, 0, entropy_reg, NULL, DOMAIN_NONNEG)},
    {KEY("att_entropy_reg", SWITCH_DOUBLE, ARCHS_MOEUT, 0, att_entropy_reg, NULL, DOMAIN_NONNEG)},
    {KEY("ff_expert_dropout", SWITCH_DOUBLE, ARCHS_MOEUT, 0, ff_expert_dropout, NULL, DOMAIN_UNIT)},
    {KEY("att_expert_dropout", SWITCH_DOUBLE, ARCHS_MOEUT, 0, att_expert_dropout, NULL, DOMAIN_UNIT)},
    {KEY("dropout", SWITCH_DOUBLE, ARCHS_ALL, 0, dropout, NULL, DOMAIN_ZERO),
     .note = "dropout is not implemented; every paper run uses 0"},
    {KEY("lm_head_bias", SWITCH_BOOL, ARCHS_ALL, 0, lm_head_bias, NULL, DOMAIN_ANY)},
    {KEY("out_norm_affine", SWITCH_BOOL, ARCHS_ALL, 0, out_norm_affine, NULL, DOMAIN_ANY)},
    {KEY("routing", SWITCH_ENUM, ARCHS_MOEUT, 0, routing, ROUTING_NAMES, DOMAIN_NAMES), .doc = DOC_SWITCH_TABLE},
    {KEY("hash_seed", SWITCH_INT, ARCHS_MOEUT, 0, hash_seed, NULL, DOMAIN_INT_RANGE), .lo = 0, .hi = INT_MAX,
     .domain_where_applies = true, .doc = DOC_SWITCH_TABLE},
    {KEY("ff_capacity_factor", SWITCH_DOUBLE, ARCHS_MOEUT, 0, ff_capacity_factor, NULL, DOMAIN_NONNEG),
     .note = "0 = no capacity", .doc = DOC_SWITCH_TABLE},
    {KEY("ff_capacity_order", SWITCH_ENUM, ARCHS_MOEUT, 0, ff_capacity_order, CAPACITY_ORDER_NAMES, DOMAIN_NAMES),
     .doc = DOC_SWITCH_TABLE},
    {KEY("n_group", SWITCH_INT, ARCHS_MOEUT, 0, n_group, NULL, DOMAIN_INT_RANGE), .lo = 1, .hi = ROUTING_MAX_GROUPS,
     .doc = DOC_SWITCH_TABLE},
    {KEY("topk_group", SWITCH_INT, ARCHS_MOEUT, 0, topk_group, NULL, DOMAIN_ANY), .doc = DOC_SWITCH_TABLE},
    {KEY("seq_balance_alpha", SWITCH_DOUBLE, ARCHS_MOEUT, 0, seq_balance_alpha, NULL, DOMAIN_NONNEG),
     .doc = DOC_SWITCH_TABLE},
    {KEY("ff_residual_size", SWITCH_INT, ARCHS_MOEUT, 0, ff_residual_size, NULL, DOMAIN_INT_RANGE), .lo = 0,
     .hi = MODEL_MAX_DIM, .doc = DOC_SWITCH_TABLE},
    {KEY("ff_n_experts_per_layer", SWITCH_INT_LIST, ARCHS_MOEUT, 0, ff_n_experts_per_layer, NULL, DOMAIN_SIZE_LIST),
     .doc = DOC_SWITCH_TABLE},
};
#undef KEY
#define N_KEYS ((int)(sizeof KEYS / sizeof KEYS[0]))
_Static_assert(sizeof KEYS / sizeof KEYS[0] <= SWITCH_KEYS_MAX, "SWITCH_KEYS_MAX holds every key");

int switch_key_count(void) { return N_KEYS; }
const SwitchKey *switch_key(int i) { return i >= 0 && i < N_KEYS ? &KEYS[i] : NULL; }

const SwitchKey *switch_key_find(const char *name) {
    for (int i = 0; i < N_KEYS; i++)
        if (strcmp(KEYS[i].name, name) == 0) return &KEYS[i];
    return NULL;
}

/* The key of a ModelConfig field; rules name keys by field, so a misspelt one does not compile. */
static const SwitchKey *key_at(size_t offset) {
    for (int i = 0; i < N_KEYS; i++)
        if (KEYS[i].offset == offset) return &KEYS[i];
    die("switch rules: no key for ModelConfig offset %zu", offset);
}

bool switch_key_of_arch(const SwitchKey *k, Arch a) { return (unsigned)a <= ARCH_MOE && (k->archs & (1u << a)); }

/* ---- values ---- */

static int int_of(const ModelConfig *cfg, const SwitchKey *k) { return *(const int *)((const char *)cfg + k->offset); }

static double number_of(const ModelConfig *cfg, const SwitchKey *k) {
    const char *base = (const char *)cfg + k->offset;
    switch (k->type) {
    case SWITCH_DOUBLE: return *(const double *)base;
    case SWITCH_BOOL: return *(const bool *)base;
    case SWITCH_INT_LIST: return ((const ModelIntList *)base)->n;
    case SWITCH_INT:
    case SWITCH_ENUM: break;
    }
    return *(const int *)base;
}

static const char *enum_name(const SwitchKey *k, int v) {
    for (int i = 0; k->names[i]; i++)
        if (i == v) return k->names[i];
    return NULL;
}

/* The value as a config writes it: "\"softmax\"", true, 2, 0.5. */
static const char *value_text(const ModelConfig *cfg, const SwitchKey *k, char *buf, size_t n) {
    const char *name;
    switch (k->type) {
    case SWITCH_ENUM:
        if ((name = enum_name(k, int_of(cfg, k)))) snprintf(buf, n, "\"%s\"", name);
        else snprintf(buf, n, "%d", int_of(cfg, k));
        break;
    case SWITCH_BOOL: snprintf(buf, n, "%s", number_of(cfg, k) != 0.0 ? "true" : "false"); break;
    case SWITCH_INT: snprintf(buf, n, "%d", int_of(cfg, k)); break;
    case SWITCH_DOUBLE: snprintf(buf, n, "%g", number_of(cfg, k)); break;
    case SWITCH_INT_LIST: snprintf(buf, n, "%d entries", (int)number_of(cfg, k)); break;
    }
    return buf;
}

/* Whether the key's value is the one a rule names: an enum's name, true/false, or a number (compared as a number, so
 * -0 is 0). */
static bool value_is(const ModelConfig *cfg, const SwitchKey *k, const char *text) {
    if (k->type == SWITCH_ENUM) {
        const char *name = enum_name(k, int_of(cfg, k));
        return name && strcmp(name, text) == 0;
    }
    if (k->type == SWITCH_BOOL) return strcmp(text, number_of(cfg, k) != 0.0 ? "true" : "false") == 0;
    return number_of(cfg, k) == strtod(text, NULL);
}

/* "a", "a <last> b", "a, b <last> c" (quoted: "\"a\""). */
static const char *join(const char *const *names, bool quote, const char *last, char *buf, size_t n) {
    buf[0] = '\0';
    for (int i = 0; names[i]; i++) {
        const size_t used = strlen(buf);
        const char *sep = i == 0 ? "" : names[i + 1] ? ", " : last;
        const char *q = quote ? "\"" : "";
        snprintf(buf + used, n - used, "%s%s%s%s", sep, q, names[i], q);
    }
    return buf;
}

const char *switch_names_text(const char *const *names, char *buf, size_t buflen) {
    return join(names, true, " or ", buf, buflen);
}

/* "and": a key belongs to every arch named. */
const char *switch_archs_text(unsigned archs, char *buf, size_t buflen) {
    const char *names[ARCH_MOE + 2];
    int n = 0;
    for (int a = 0; a <= ARCH_MOE; a++)
        if (archs & (1u << a)) names[n++] = ARCH_NAMES[a];
    names[n] = NULL;
    return join(names, true, " and ", buf, buflen);
}

int switch_refusal(char *err, size_t errlen, const char *source, const char *key, const char *fmt, ...) {
    char problem[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(problem, sizeof problem, fmt, ap);
    va_end(ap);
    snprintf(err, errlen, "%s%smodel%s%s: %s", source ? source : "", source ? ": " : "", key ? "." : "",
             key ? key : "", problem);
    return -1;
}

/* ---- the combination rules ---- */

/* When a rule holds: always, while a switch has (or has not) a value, or while a list is given. */
typedef enum { WHEN_ALWAYS, WHEN_IS, WHEN_IS_NOT, WHEN_GIVEN } WhenOp;
typedef struct {
    WhenOp op;
    size_t field;      /* the switch's field */
    const char *value; /* WHEN_IS, WHEN_IS_NOT: as value_is reads it */
} When;

typedef enum {
    RULE_NO_EFFECT, /* while `when` holds the key has no effect: refused where given, not written */
    RULE_REQUIRES,  /* while `when` holds the key must have one of `values`, because of `note` */
    RULE_EXCLUDES,  /* the key (a list) is not supported, given, while `when` holds */
    RULE_AT_MOST,   /* the key's value is at most that of key `other` */
    RULE_CHECK,     /* while `when` holds the predicate `check` accepts the config */
} RuleKind;

/* 0, or -1 with the problem (without "model.<key>: ") in problem. */
typedef int (*RuleCheck)(const ModelConfig *cfg, char *problem, size_t n);

typedef struct {
    RuleKind kind;
    size_t key; /* the field of the key a refusal names */
    When when;
    const char *const *values; /* RULE_REQUIRES, NULL-terminated */
    const char *note;          /* RULE_NO_EFFECT: what the void-making value means; RULE_REQUIRES: why */
    size_t other;              /* RULE_AT_MOST */
    RuleCheck check;           /* RULE_CHECK */
} SwitchRule;

/* ---- the predicates of RULE_CHECK rows (each runs after every key's domain has been checked) ---- */

static int groups_whole(const ModelConfig *c, char *p, size_t n) {
    if (model_config_groups_whole(c)) return 0;
    if (c->n_dense_first == 0)
        snprintf(p, n, "n_layers %d is not a multiple of group_size %d", c->n_layers, c->group_size);
    else
        snprintf(p, n, "n_layers %d - n_dense_first %d = %d MoEUT applications is not a multiple of group_size %d",
                 c->n_layers, c->n_dense_first, c->n_layers - c->n_dense_first, c->group_size);
    return -1;
}

static int pyramid_one_per_layer(const ModelConfig *c, char *p, size_t n) {
    if (c->ff_n_experts_per_layer.n == c->group_size) return 0;
    snprintf(p, n, "%d entries, need one per distinct layer (group_size %d)", c->ff_n_experts_per_layer.n,
             c->group_size);
    return -1;
}

static int pyramid_holds_ff_k(const ModelConfig *c, char *p, size_t n) {
    const ModelIntList *l = &c->ff_n_experts_per_layer;
    for (int i = 0; i < l->n; i++)
        if (c->ff_k > l->v[i]) {
            snprintf(p, n, "%d is larger than ff_n_experts_per_layer[%d] %d", c->ff_k, i, l->v[i]);
            return -1;
        }
    return 0;
}

/* ff_n_experts sizes every buffer of a pyramid: its largest layer. */
static int pyramid_max_is_ff_n_experts(const ModelConfig *c, char *p, size_t n) {
    const ModelIntList *l = &c->ff_n_experts_per_layer;
    int max = 0;
    for (int i = 0; i < l->n; i++) max = l->v[i] > max ? l->v[i] : max;
    if (max == c->ff_n_experts) return 0;
    snprintf(p, n, "%d is not the largest ff_n_experts_per_layer entry %d", c->ff_n_experts, max);
    return -1;
}

static int topk_group_alone(const ModelConfig *c, char *p, size_t n) {
    if (c->topk_group == 1) return 0;
    snprintf(p, n, "must be 1 with n_group 1, got %d", c->topk_group);
    return -1;
}

/* The group settings topk_select accepts (kernels/backend_ops.h). */
static int groups_split_experts(const ModelConfig *c, char *p, size_t n) {
    const int E = c->ff_n_experts, G = c->n_group;
    if (E % G == 0 && E / G >= 2) return 0;
    snprintf(p, n, "ff_n_experts %d must split into %d groups of >= 2 experts", E, G);
    return -1;
}

static int groups_limit_something(const ModelConfig *c, char *p, size_t n) {
    const int E = c->ff_n_experts, G = c->n_group, T = c->topk_group;
    if (T < 1 || T > G) {
        snprintf(p, n, "must be in [1, n_group %d], got %d", G, T);
        return -1;
    }
    if (T == G) {
        snprintf(p, n, "%d of %d groups kept (topk_group defaults to n_group) limits nothing; set topk_group < n_group",
                 G, G);
        return -1;
    }
    if (c->ff_k > T * (E / G)) {
        snprintf(p, n, "%d groups of %d experts hold fewer than ff_k %d", T, E / G, c->ff_k);
        return -1;
    }
    return 0;
}

/* Hash routing gives every expert floor(V/E) or ceil(V/E) token ids (model/hash_routing.h). */
static int hash_ids_cover_experts(const ModelConfig *c, char *p, size_t n) {
    if (c->n_tokens >= c->ff_n_experts) return 0;
    snprintf(p, n,
             "routing \"hash\" gives every expert floor(n_tokens / ff_n_experts) token ids: %d experts for %d token "
             "ids would leave some without any",
             c->ff_n_experts, c->n_tokens);
    return -1;
}

/* Expert choice (Zhou et al. 2022 §3.1): every expert takes round(CF * n / E) of the n positions, at most all. */
static int expert_choice_capacity(const ModelConfig *c, char *p, size_t n) {
    const double cf = c->ff_capacity_factor;
    if (cf > 0.0 && cf <= c->ff_n_experts) return 0;
    snprintf(p, n,
             "routing \"expert_choice\" needs a capacity factor in (0, ff_n_experts %d] (Zhou et al. 2022: 2), got %g",
             c->ff_n_experts, cf);
    return -1;
}

/* The experts' choice reads later positions, so evaluation routes causally with k = round(CF). */
static int expert_choice_eval_k(const ModelConfig *c, char *p, size_t n) {
    const long k_eval = lround(c->ff_capacity_factor);
    if (c->ff_k == k_eval) return 0;
    snprintf(p, n,
             "with routing \"expert_choice\" evaluation routes each position causally to its top "
             "round(ff_capacity_factor) = %ld experts; set ff_k %ld, got %d",
             k_eval, k_eval, c->ff_k);
    return -1;
}

#define ALWAYS {WHEN_ALWAYS, 0, NULL}
#define IS(field, value) {WHEN_IS, F(field), value}
#define IS_NOT(field, value) {WHEN_IS_NOT, F(field), value}
#define GIVEN(field) {WHEN_GIVEN, F(field), NULL}
#define NO_EFFECT(key, when, note) {RULE_NO_EFFECT, F(key), when, NULL, note, 0, NULL}
#define REQUIRES(key, when, why, ...)                                                                                  \
    {RULE_REQUIRES, F(key), when, (const char *const[]){__VA_ARGS__, NULL}, why, 0, NULL}
#define EXCLUDES(key, when) {RULE_EXCLUDES, F(key), when, NULL, NULL, 0, NULL}
#define AT_MOST(key, other) {RULE_AT_MOST, F(key), ALWAYS, NULL, NULL, F(other), NULL}
#define CHECK(key, when, check) {RULE_CHECK, F(key), when, NULL, NULL, 0, check}
#define EC "expert_choice"

/* A rule holds for the archs that take its key and the switches it reads. model_config_validate checks the rules
 * other than RULE_NO_EFFECT in this order (the first refused one is reported); for one key the first RULE_NO_EFFECT
 * that holds is the one a refusal names. */
static const SwitchRule RULES[] = {
    /* coefficients of another balance */
    NO_EFFECT(entropy_reg, IS_NOT(balance, "entropy"), NULL),
    NO_EFFECT(balance_alpha, IS_NOT(balance, "switch"), NULL),
    NO_EFFECT(balance_gamma, IS_NOT(balance, "bias"), NULL),
    /* routing "hash" has no router: no gating transform, no gate to scale, no router choice for expert dropout, no
     * gate to drop over a capacity, no scores to group or to balance */
    NO_EFFECT(router, IS(routing, "hash"), NULL),
    NO_EFFECT(router_renorm, IS(routing, "hash"), NULL),
    NO_EFFECT(routed_scaling_factor, IS(routing, "hash"), NULL),
    NO_EFFECT(ff_expert_dropout, IS(routing, "hash"), NULL),
    NO_EFFECT(ff_capacity_factor, IS(routing, "hash"), NULL),
    NO_EFFECT(ff_capacity_order, IS(routing, "hash"), NULL),
    NO_EFFECT(n_group, IS(routing, "hash"), NULL),
    NO_EFFECT(topk_group, IS(routing, "hash"), NULL),
    NO_EFFECT(seq_balance_alpha, IS(routing, "hash"), NULL),
    /* routing "expert_choice": the experts choose (no token-choice capacity order, no groups of a token's choice, no
     * per-sequence token-choice balance: the loads are equal by construction) */
    NO_EFFECT(ff_capacity_order, IS(routing, EC), NULL),
    NO_EFFECT(n_group, IS(routing, EC), NULL),
    NO_EFFECT(topk_group, IS(routing, EC), NULL),
    NO_EFFECT(seq_balance_alpha, IS(routing, EC), NULL),
    NO_EFFECT(hash_seed, IS_NOT(routing, "hash"), NULL),
    NO_EFFECT(ff_capacity_order, IS(ff_capacity_factor, "0"), "no capacity"),
    NO_EFFECT(topk_group, IS(n_group, "1"), "no group limit"),
    NO_EFFECT(ff_n_experts, GIVEN(ff_n_experts_per_layer), "give one of the two"),
    NO_EFFECT(d_ff, IS(n_dense_first, "0"), "no dense layer"),

    /* sizes bounded by other sizes */
    AT_MOST(ff_k, ff_n_experts),
    AT_MOST(att_k, att_n_experts),
    CHECK(group_size, ALWAYS, groups_whole),
    /* Pyramid-MoE: a per-layer E reaches the router, the experts, the balancing terms and the records; the switches
     * excluded below size something by the one ff_n_experts (the hash table, the capacity, the groups, the
     * sequence-wise loss), so they are refused with a pyramid rather than run with the wrong E. */
    CHECK(ff_n_experts_per_layer, GIVEN(ff_n_experts_per_layer), pyramid_one_per_layer),
    CHECK(ff_k, GIVEN(ff_n_experts_per_layer), pyramid_holds_ff_k),
    CHECK(ff_n_experts, GIVEN(ff_n_experts_per_layer), pyramid_max_is_ff_n_experts),
    EXCLUDES(ff_n_experts_per_layer, IS_NOT(routing, "topk")),
    EXCLUDES(ff_n_experts_per_layer, IS_NOT(ff_capacity_factor, "0")),
    EXCLUDES(ff_n_experts_per_layer, IS_NOT(n_group, "1")),
    EXCLUDES(ff_n_experts_per_layer, IS_NOT(seq_balance_alpha, "0")),
    /* group-limited routing (DeepSeek-V3 §2.1.2): the settings topk_select accepts, and none without effect */
    CHECK(topk_group, IS(n_group, "1"), topk_group_alone),
    CHECK(n_group, IS_NOT(n_group, "1"), groups_split_experts),
    CHECK(topk_group, IS_NOT(n_group, "1"), groups_limit_something),
    /* routing "hash" (Roller et al. 2021): one expert by the token id, gate 1, no router */
    REQUIRES(ff_k, IS(routing, "hash"), "sends every position to exactly 1 expert", "1"),
    REQUIRES(balance, IS(routing, "hash"), "has no router to balance", "none"),
    REQUIRES(ff_expert_dropout, IS(routing, "hash"), "has no choice to drop experts from", "0"),
    CHECK(ff_n_experts, IS(routing, "hash"), hash_ids_cover_experts),
    /* routing "expert_choice" (Zhou et al. 2022 §3.1): gates are the softmax scores of the chosen (token, expert)
     * pairs, and the experts' loads are equal by construction, so no balancing term and none of the token-choice
     * gate switches */
    CHECK(ff_capacity_factor, IS(routing, EC), expert_choice_capacity),
    REQUIRES(router, IS(routing, EC), "gates by the softmax over the experts", "softmax"),
    REQUIRES(router_renorm, IS(routing, EC), "gates by the plain softmax scores", "false"),
    REQUIRES(routed_scaling_factor, IS(routing, EC), "gates by the plain softmax scores", "1"),
    REQUIRES(balance, IS(routing, EC), "balances the experts' loads by construction", "none"),
    REQUIRES(ff_expert_dropout, IS(routing, EC), "does not implement expert dropout", "0"),
    CHECK(ff_k, IS(routing, EC), expert_choice_eval_k),
    /* arch "moe": MoEUT's entropy regularizer and DeepSeek-V3's bias are not part of its layer (refused rather than
     * silently ignored) */
    REQUIRES(balance, IS(arch, "moe"), "has neither MoEUT's entropy regularizer nor DeepSeek-V3's bias", "switch",
             "none"),
};
#undef ALWAYS
#undef IS
#undef IS_NOT
#undef GIVEN
#undef NO_EFFECT
#undef REQUIRES
#undef EXCLUDES
#undef AT_MOST
#undef CHECK
#undef EC
#define N_RULES ((int)(sizeof RULES / sizeof RULES[0]))

static bool rule_of_arch(const SwitchRule *r, Arch a) {
    return switch_key_of_arch(key_at(r->key), a) &&
           (r->when.op == WHEN_ALWAYS || switch_key_of_arch(key_at(r->when.field), a)) &&
           (r->kind != RULE_AT_MOST || switch_key_of_arch(key_at(r->other), a));
}

static bool when_holds(const ModelConfig *cfg, const When *w) {
    switch (w->op) {
    case WHEN_ALWAYS: return true;
    case WHEN_IS: return value_is(cfg, key_at(w->field), w->value);
    case WHEN_IS_NOT: return !value_is(cfg, key_at(w->field), w->value);
    case WHEN_GIVEN: return number_of(cfg, key_at(w->field)) > 0;
    }
    return false;
}

/* The switch of a rule's `when` as a refusal names it, with an optional gloss: "routing \"hash\"",
 * "n_group 1 (no group limit)", "ff_n_experts_per_layer (give one of the two)". */
static const char *when_text(const ModelConfig *cfg, const When *w, const char *gloss, char *buf, size_t n) {
    const SwitchKey *s = key_at(w->field);
    char value[72] = "";
    if (w->op != WHEN_GIVEN) {
        char v[64];
        snprintf(value, sizeof value, " %s", value_text(cfg, s, v, sizeof v));
    }
    snprintf(buf, n, "%s%s%s%s%s", s->name, value, gloss ? " (" : "", gloss ? gloss : "", gloss ? ")" : "");
    return buf;
}

const char *switch_key_void_under(const ModelConfig *cfg, const SwitchKey *k, char *buf, size_t buflen) {
    for (int i = 0; i < N_RULES; i++) {
        const SwitchRule *r = &RULES[i];
        if (r->kind != RULE_NO_EFFECT || r->key != k->offset || !rule_of_arch(r, cfg->arch) ||
            !when_holds(cfg, &r->when))
            continue;
        char what[96];
        snprintf(buf, buflen, "model.%s", when_text(cfg, &r->when, r->note, what, sizeof what));
        return buf;
    }
    return NULL;
}

bool switch_key_applies(const ModelConfig *cfg, const SwitchKey *k) {
    char buf[128];
    return switch_key_of_arch(k, cfg->arch) && switch_key_void_under(cfg, k, buf, sizeof buf) == NULL;
}

/* ---- the checks ---- */

static int check_domain(const ModelConfig *cfg, const SwitchKey *k, char *err, size_t errlen) {
    const char *name = k->name;
    const double x = number_of(cfg, k);
    const int v = k->type == SWITCH_INT || k->type == SWITCH_ENUM ? int_of(cfg, k) : 0;
    switch (k->domain) {
    case DOMAIN_ANY: return 0;
    case DOMAIN_NAMES:
        return enum_name(k, v) ? 0 : switch_refusal(err, errlen, NULL, name, "invalid value %d", v);
    case DOMAIN_SIZE:
        if (v < 1) return switch_refusal(err, errlen, NULL, name, "must be >= 1 (got %d)", v);
        if (v > MODEL_MAX_DIM)
            return switch_refusal(err, errlen, NULL, name, "%d is larger than the limit %d", v, MODEL_MAX_DIM);
        return 0;
    case DOMAIN_INT_RANGE:
        if (v >= k->lo && v <= k->hi) return 0;
        if (k->hi == INT_MAX) return switch_refusal(err, errlen, NULL, name, "must be >= %d, got %d", k->lo, v);
        return switch_refusal(err, errlen, NULL, name, "must be in [%d, %d], got %d", k->lo, k->hi, v);
    case DOMAIN_DENSE_PREFIX:
        if (v >= 0 && v < cfg->n_layers) return 0;
        return switch_refusal(err, errlen, NULL, name, "must be in [0, n_layers %d) (at least one %s), got %d",
                              cfg->n_layers, ROUTED_LAYER[cfg->arch], v);
    case DOMAIN_POSITIVE:
        if (x > 0.0 && isfinite(x)) return 0;
        return switch_refusal(err, errlen, NULL, name, "must be a finite number > 0, got %g", x);
    case DOMAIN_NONNEG:
        if (x >= 0.0 && isfinite(x)) return 0;
        return switch_refusal(err, errlen, NULL, name, "must be a finite number >= 0%s%s%s, got %g",
                              k->note ? " (" : "", k->note ? k->note : "", k->note ? ")" : "", x);
    case DOMAIN_UNIT:
        if (x >= 0.0 && x < 1.0) return 0;
        return switch_refusal(err, errlen, NULL, name, "must be in [0, 1), got %g", x);
    case DOMAIN_ZERO:
        if (x == 0.0) return 0;
        return switch_refusal(err, errlen, NULL, name, "must be 0 (%s), got %g", k->note, x);
    case DOMAIN_SIZE_LIST: {
        const ModelIntList *l = (const ModelIntList *)((const char *)cfg + k->offset);
        if (l->n < 0 || l->n > MODEL_MAX_LIST)
            return switch_refusal(err, errlen, NULL, name, "%d entries, at most %d", l->n, MODEL_MAX_LIST);
        for (int i = 0; i < l->n; i++)
            if (l->v[i] < 1 || l->v[i] > MODEL_MAX_DIM)
                return switch_refusal(err, errlen, NULL, name, "entry %d must be in [1, %d], got %d", i, MODEL_MAX_DIM,
                                      l->v[i]);
        return 0;
    }
    }
    return 0;
}

static int check_rule(const ModelConfig *cfg, const SwitchRule *r, char *err, size_t errlen) {
    const SwitchKey *k = key_at(r->key);
    char problem[384], a[160], b[64];
    switch (r->kind) {
    case RULE_NO_EFFECT: return 0; /* a question of what a config gives: model_config_from_json */
    case RULE_REQUIRES:
        for (int i = 0; r->values[i]; i++)
            if (value_is(cfg, k, r->values[i])) return 0;
        return switch_refusal(err, errlen, NULL, k->name, "%s %s; set %s %s, got %s",
                              when_text(cfg, &r->when, NULL, a, sizeof a), r->note, k->name,
                              join(r->values, k->type == SWITCH_ENUM, " or ", problem, sizeof problem),
                              value_text(cfg, k, b, sizeof b));
    case RULE_EXCLUDES:
        if (number_of(cfg, k) == 0) return 0;
        return switch_refusal(err, errlen, NULL, k->name, "not supported together with model.%s",
                              key_at(r->when.field)->name);
    case RULE_AT_MOST: {
        const SwitchKey *o = key_at(r->other);
        if (int_of(cfg, k) <= int_of(cfg, o)) return 0;
        return switch_refusal(err, errlen, NULL, k->name, "%d is larger than %s %d", int_of(cfg, k), o->name,
                              int_of(cfg, o));
    }
    case RULE_CHECK:
        if (r->check(cfg, problem, sizeof problem) == 0) return 0;
        return switch_refusal(err, errlen, NULL, k->name, "%s", problem);
    }
    return 0;
}

int switch_rules_check(const ModelConfig *cfg, char *err, size_t errlen) {
    /* the arch first: it decides which keys and rules there are */
    if (check_domain(cfg, key_at(F(arch)), err, errlen)) return -1;
    /* the keys checked wherever the arch takes them, then those checked where they apply (which the others decide) */
    for (int i = 0; i < N_KEYS; i++)
        if (!KEYS[i].domain_where_applies && switch_key_of_arch(&KEYS[i], cfg->arch) &&
            check_domain(cfg, &KEYS[i], err, errlen))
            return -1;
    for (int i = 0; i < N_KEYS; i++)
        if (KEYS[i].domain_where_applies && switch_key_applies(cfg, &KEYS[i]) &&
            check_domain(cfg, &KEYS[i], err, errlen))
            return -1;
    for (int i = 0; i < N_RULES; i++)
        if (rule_of_arch(&RULES[i], cfg->arch) && when_holds(cfg, &RULES[i].when) &&
            check_rule(cfg, &RULES[i], err, errlen))
            return -1;
    return 0;
}
