/* The model config's switch rules, one table (model/switch_rules.c): every key of the JSON "model" object with the
 * architectures that take it, the values it accepts on its own, and every rule that combines keys (a key that has no
 * effect under another switch's value, a value another switch requires, switches not supported together).
 * model_config.c reads and writes the keys by this table; model_config_validate checks a config against it.
 * Every refused key is reported as one line: "[<source>: ]model.<key>: <problem>" (switch_refusal). */
#ifndef MODEL_SWITCH_RULES_H
#define MODEL_SWITCH_RULES_H

#include <stdbool.h>
#include <stddef.h>

#include "model/model.h"

/* A set of architectures: bit 1 << Arch. */
#define ARCHS_DENSE (1u << ARCH_DENSE)
#define ARCHS_MOEUT (1u << ARCH_MOEUT)
#define ARCHS_MOE (1u << ARCH_MOE)
#define ARCHS_ALL (ARCHS_DENSE | ARCHS_MOEUT | ARCHS_MOE)

typedef enum { SWITCH_INT, SWITCH_DOUBLE, SWITCH_BOOL, SWITCH_ENUM, SWITCH_INT_LIST } SwitchType;

/* The values a key accepts on its own; the combination rules (switch_rules.c) come on top. */
typedef enum {
    DOMAIN_ANY,          /* every value of its type (booleans; a key bounded by combination rules only) */
    DOMAIN_NAMES,        /* one of the key's names */
    DOMAIN_SIZE,         /* an integer in [1, MODEL_MAX_DIM] */
    DOMAIN_INT_RANGE,    /* an integer in [lo, hi] */
    DOMAIN_DENSE_PREFIX, /* an integer in [0, n_layers): at least one routed layer remains */
    DOMAIN_POSITIVE,     /* a finite number > 0 */
    DOMAIN_NONNEG,       /* a finite number >= 0 */
    DOMAIN_UNIT,         /* a number in [0, 1) */
    DOMAIN_ZERO,         /* 0 only */
    DOMAIN_SIZE_LIST,    /* absent (no entries) or 1..MODEL_MAX_LIST integers, each in [1, MODEL_MAX_DIM] */
} SwitchDomain;

/* Where experiments/README.md documents a key (tests/unit/test_switch_rules.c holds the README to it). */
typedef enum {
    DOC_MODEL_KEYS,   /* the list of model keys that opens the README */
    DOC_SWITCH_TABLE, /* the table of MoE-variant switches */
} SwitchDoc;

typedef struct {
    const char *name;
    SwitchType type;
    unsigned archs;           /* ARCHS_* that take the key */
    unsigned required;        /* ARCHS_* that require it (where it applies) */
    size_t offset;            /* of its field in ModelConfig */
    const char *const *names; /* SWITCH_ENUM: the accepted strings, index = enum value, NULL-terminated */
    SwitchDomain domain;
    int lo, hi;               /* DOMAIN_INT_RANGE; hi = INT_MAX: no upper bound */
    const char *note;         /* said in a refusal of the domain: what 0 means, why only 0 */
    /* true: where another switch makes the key void its value is never read (d_ff is 0 without a dense prefix), so
     * the domain is checked only where the key applies; false: everywhere the arch takes the key */
    bool domain_where_applies;
    SwitchDoc doc;
} SwitchKey;

/* At least the number of keys (room for a list of their names). */
#define SWITCH_KEYS_MAX 64
/* The table, in serialisation order (model_config_to_json), "arch" first. */
int switch_key_count(void);
const SwitchKey *switch_key(int i);
const SwitchKey *switch_key_find(const char *name); /* NULL: not a model key */

bool switch_key_of_arch(const SwitchKey *k, Arch a);
/* Whether the key has an effect in cfg (its arch takes it and no other switch makes it void). Where it has none it is
 * refused when given and not written. */
bool switch_key_applies(const ModelConfig *cfg, const SwitchKey *k);
/* NULL when k applies under cfg's other switches, else the switch that makes it void as a refusal names it, e.g.
 * "model.balance \"switch\"" or "model.n_group 1 (no group limit)" (written into buf). */
const char *switch_key_void_under(const ModelConfig *cfg, const SwitchKey *k, char *buf, size_t buflen);
/* The archs of a mask as a refusal names them: "\"moeut\"", "\"moeut\" and \"moe\"". */
const char *switch_archs_text(unsigned archs, char *buf, size_t buflen);
/* Names as a refusal lists them: "\"a\"", "\"a\" or \"b\"", "\"a\", \"b\" or \"c\"". */
const char *switch_names_text(const char *const *names, char *buf, size_t buflen);

/* Every key's domain, then every combination rule, in the table's order: 0, or -1 with the first refusal in err. */
int switch_rules_check(const ModelConfig *cfg, char *err, size_t errlen);

/* The one form of a refusal line: "[<source>: ]model.<key>: <problem>" ("model: <problem>" when key is NULL) into
 * err; returns -1. */
int switch_refusal(char *err, size_t errlen, const char *source, const char *key, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));

#endif
