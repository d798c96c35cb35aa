/* Parsing, applying and hashing --set KEY=VALUE overrides (see config_override.h). */
#include "pipeline/records/config_override.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pipeline/base/atomic_file.h"
#include "pipeline/base/config.h"
#include "pipeline/base/log.h"
#include "pipeline/base/sha256.h"

void config_overrides_free(ConfigOverrides *o) {
    for (int i = 0; i < o->n; i++) {
        free(o->items[i].key);
        cJSON_Delete(o->items[i].value);
    }
    free(o->items);
    memset(o, 0, sizeof *o);
}

static int by_key(const void *a, const void *b) {
    return strcmp(((const ConfigOverride *)a)->key, ((const ConfigOverride *)b)->key);
}

/* KEY is section.key[.more]: at least two parts, none empty. */
static bool valid_key(const char *key, size_t len) {
    if (len == 0 || key[0] == '.' || key[len - 1] == '.') return false;
    bool dotted = false;
    for (size_t i = 0; i < len; i++)
        if (key[i] == '.') {
            if (key[i + 1] == '.') return false;
            dotted = true;
        }
    return dotted;
}

int config_overrides_parse(ConfigOverrides *o, const char *const *args, int n_args, char *err, size_t errlen) {
    memset(o, 0, sizeof *o);
    o->items = xcalloc((size_t)n_args + 1, sizeof *o->items);
    for (int i = 0; i < n_args; i++) {
        const char *arg = args[i];
        const char *eq = strchr(arg, '=');
        if (!eq) {
            set_err(err, errlen, "--set '%s': expected KEY=VALUE (e.g. train.lr=1e-3)", arg);
            return CONFIG_USAGE_ERROR;
        }
        size_t klen = (size_t)(eq - arg);
        if (!valid_key(arg, klen)) {
            set_err(err, errlen, "--set '%s': KEY must be a dotted path section.key (e.g. train.lr)", arg);
            return CONFIG_USAGE_ERROR;
        }
        ConfigOverride *it = &o->items[o->n];
        it->key = xmalloc(klen + 1);
        memcpy(it->key, arg, klen);
        it->key[klen] = '\0';
        /* JSON when the text is JSON; otherwise the text itself as a string (precision=bf16). */
        it->value = cJSON_ParseWithOpts(eq + 1, NULL, 1);
        o->n++;
        char why[512];
        if (it->value && json_check_strings(eq + 1, strlen(eq + 1), "VALUE", why, sizeof why) != 0) {
            set_err(err, errlen, "--set '%s': a JSON string in VALUE holds \\u0000 (a NUL character, which would cut "
                    "it short): refused", arg);
            return CONFIG_USAGE_ERROR;
        }
        if (!it->value) it->value = cJSON_CreateString(eq + 1);
        CHECK_ALLOC(it->value);
        for (int k = 0; k < o->n - 1; k++)
            if (strcmp(o->items[k].key, it->key) == 0) {
                set_err(err, errlen, "--set '%s': %s is already set by an earlier --set (give each KEY once)", arg,
                        it->key);
                return CONFIG_USAGE_ERROR;
            }
    }
    qsort(o->items, (size_t)o->n, sizeof *o->items, by_key);
    return 0;
}

int config_overrides_apply(const ConfigOverrides *o, cJSON *root, const char *source, char *err, size_t errlen) {
    for (int i = 0; i < o->n; i++) {
        const char *key = o->items[i].key;
        char *path = xstrdup(key);
        cJSON *obj = root;
        char *part = path, *dot;
        int depth = 0;
        int rc = 0;
        while ((dot = strchr(part, '.')) != NULL) {
            *dot = '\0';
            cJSON *next = cJSON_GetObjectItemCaseSensitive(obj, part);
            if (!next && depth == 0) {
                set_err(err, errlen, "--set %s: %s has no section \"%s\"", key, source, part);
                rc = CONFIG_USAGE_ERROR;
                break;
            }
            if (!next) { /* a nested object the file lacks: created, so the strict reader names the key */
                next = cJSON_AddObjectToObject(obj, part);
                CHECK_ALLOC(next);
            }
            if (!cJSON_IsObject(next)) {
                set_err(err, errlen, "--set %s: %.*s in %s is %s, not an object with keys", key, (int)(dot - path),
                        key, source, json_type_name(next));
                rc = CONFIG_USAGE_ERROR;
                break;
            }
            obj = next;
            part = dot + 1;
            depth++;
        }
        if (rc == 0 && cJSON_IsNull(o->items[i].value)) {
            cJSON_DeleteItemFromObjectCaseSensitive(obj, part); /* null removes the key (absent: nothing to do) */
        } else if (rc == 0) {
            cJSON *value = cJSON_Duplicate(o->items[i].value, 1);
            CHECK_ALLOC(value);
            if (cJSON_GetObjectItemCaseSensitive(obj, part)) cJSON_ReplaceItemInObjectCaseSensitive(obj, part, value);
            else cJSON_AddItemToObject(obj, part, value);
        }
        free(path);
        if (rc) return rc;
    }
    return 0;
}

int config_overrides_canonical(const ConfigOverrides *o, RunProvenance *p, char *err, size_t errlen) {
    if (o->n > RUN_MAX_OVERRIDES) {
        set_err(err, errlen, "--set: %d overrides, at most %d", o->n, RUN_MAX_OVERRIDES);
        return CONFIG_USAGE_ERROR;
    }
    p->n_overrides = 0;
    for (int i = 0; i < o->n; i++) {
        char *v = cJSON_PrintUnformatted(o->items[i].value);
        CHECK_ALLOC(v);
        int n = snprintf(p->overrides[i], RUN_OVERRIDE_MAX, "%s=%s", o->items[i].key, v);
        cJSON_free(v);
        if (n < 0 || n >= RUN_OVERRIDE_MAX) {
            set_err(err, errlen, "--set %s: longer than %d bytes", o->items[i].key, RUN_OVERRIDE_MAX - 1);
            return CONFIG_USAGE_ERROR;
        }
        p->n_overrides = i + 1;
    }
    return 0;
}

void config_overrides_sha256(const void *bytes, size_t n, const RunProvenance *p, char hex[65]) {
    Sha256 *h = sha256_new();
    CHECK_ALLOC(h);
    sha256_update(h, bytes, n);
    for (int i = 0; i < p->n_overrides; i++) {
        sha256_update(h, "\n--set ", 7);
        sha256_update(h, p->overrides[i], strlen(p->overrides[i]));
    }
    sha256_final_hex(h, hex);
}

int config_from_text(const char *text, size_t n, const RunProvenance *p, const char *source, cJSON **json,
                     char hex[65], char *err, size_t errlen) {
    *json = NULL;
    cJSON *root = json_parse_text(text, n, JSON_KIND_CONFIG, source, err, errlen);
    if (!root) return -1;
    config_overrides_sha256(text, n, p, hex);
    /* The canonical forms are what is hashed and recorded, so they are what is applied: a record read back gives
     * the config its writer applied, never one that a different spelling of the same --set would give. */
    const char *args[RUN_MAX_OVERRIDES];
    for (int i = 0; i < p->n_overrides; i++) args[i] = p->overrides[i];
    ConfigOverrides o;
    int rc = config_overrides_parse(&o, args, p->n_overrides, err, errlen);
    if (rc == 0) rc = config_overrides_apply(&o, root, source, err, errlen);
    config_overrides_free(&o);
    if (rc) cJSON_Delete(root);
    else *json = root;
    return rc;
}

int config_load_with_overrides(LoadedConfig *c, const char *path, const char *const *sets, int n_sets, char *err,
                               size_t errlen) {
    memset(c, 0, sizeof *c);
    run_provenance_init(&c->prov);
    run_provenance_set_config_name(&c->prov, path);
    ConfigOverrides o;
    int rc = config_overrides_parse(&o, sets, n_sets, err, errlen);
    if (rc == 0) rc = config_overrides_canonical(&o, &c->prov, err, errlen);
    config_overrides_free(&o);
    /* One read: the bytes hashed are the bytes parsed (a second read could see another file). */
    if (rc == 0) rc = json_read_text(path, JSON_KIND_CONFIG, &c->text, &c->text_len, err, errlen);
    if (rc == 0) rc = config_from_text(c->text, c->text_len, &c->prov, path, &c->json, c->sha256, err, errlen);
    if (rc) loaded_config_free(c);
    return rc;
}

void loaded_config_free(LoadedConfig *c) {
    cJSON_Delete(c->json);
    c->json = NULL;
    free(c->text);
    c->text = NULL;
    c->text_len = 0;
}
