/* Config difference table (see config_diff.h). */
#include "pipeline/records/config_diff.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pipeline/base/log.h"

typedef struct {
    char **keys, **values;
    int n, cap;
} Flat;

static void flat_add(Flat *f, const char *key, char *value) {
    if (f->n == f->cap) {
        f->cap = f->cap ? 2 * f->cap : 64;
        f->keys = xrealloc(f->keys, (size_t)f->cap * sizeof *f->keys);
        f->values = xrealloc(f->values, (size_t)f->cap * sizeof *f->values);
    }
    f->keys[f->n] = xstrdup(key);
    f->values[f->n++] = value;
}

static void flatten(const cJSON *node, const char *prefix, Flat *f) {
    if (cJSON_IsObject(node)) {
        const cJSON *c;
        cJSON_ArrayForEach(c, node) {
            size_t len = strlen(prefix) + strlen(c->string) + 2;
            char *key = xmalloc(len);
            snprintf(key, len, "%s%s%s", prefix, prefix[0] ? "." : "", c->string);
            flatten(c, key, f);
            free(key);
        }
        return;
    }
    char *text = cJSON_PrintUnformatted(node);
    CHECK_ALLOC(text);
    char *copy = xstrdup(text); /* cJSON's allocator may differ from free() */
    cJSON_free(text);
    flat_add(f, prefix, copy);
}

static const char *flat_get(const Flat *f, const char *key) {
    for (int i = 0; i < f->n; i++)
        if (strcmp(f->keys[i], key) == 0) return f->values[i];
    return NULL;
}

static int cmp_str(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

static bool skipped(const char *const *skip, const char *key) {
    for (int i = 0; skip && skip[i]; i++)
        if (strcmp(skip[i], key) == 0) return true;
    return false;
}

void config_diff(const cJSON *const *configs, int n, const char *const *skip, ConfigDiff *out) {
    memset(out, 0, sizeof *out);
    out->n_configs = n;
    Flat *flat = xcalloc((size_t)n + 1, sizeof *flat);
    for (int i = 0; i < n; i++)
        if (configs[i]) flatten(configs[i], "", &flat[i]);
    /* The union of the keys, sorted. */
    char **keys = NULL;
    int n_keys = 0;
    for (int i = 0; i < n; i++)
        for (int k = 0; k < flat[i].n; k++) {
            bool seen = false;
            for (int j = 0; j < n_keys && !seen; j++) seen = strcmp(keys[j], flat[i].keys[k]) == 0;
            if (seen || skipped(skip, flat[i].keys[k])) continue;
            keys = xrealloc(keys, (size_t)(n_keys + 1) * sizeof *keys);
            keys[n_keys++] = flat[i].keys[k];
        }
    if (n_keys) qsort(keys, (size_t)n_keys, sizeof *keys, cmp_str);
    for (int j = 0; j < n_keys; j++) {
        bool differs = false;
        const char *v0 = flat_get(&flat[0], keys[j]);
        for (int i = 1; i < n && !differs; i++) {
            const char *v = flat_get(&flat[i], keys[j]);
            differs = (v == NULL) != (v0 == NULL) || (v && strcmp(v, v0) != 0);
        }
        if (!differs) continue;
        out->rows = xrealloc(out->rows, (size_t)(out->n_rows + 1) * sizeof *out->rows);
        ConfigDiffRow *row = &out->rows[out->n_rows++];
        row->key = xstrdup(keys[j]);
        row->values = xcalloc((size_t)n + 1, sizeof *row->values);
        for (int i = 0; i < n; i++) {
            const char *v = flat_get(&flat[i], keys[j]);
            row->values[i] = v ? xstrdup(v) : NULL;
        }
    }
    free(keys);
    for (int i = 0; i < n; i++) {
        for (int k = 0; k < flat[i].n; k++) {
            free(flat[i].keys[k]);
            free(flat[i].values[k]);
        }
        free(flat[i].keys);
        free(flat[i].values);
    }
    free(flat);
}

void config_diff_free(ConfigDiff *d) {
    for (int r = 0; r < d->n_rows; r++) {
        for (int i = 0; i < d->n_configs; i++) free(d->rows[r].values[i]);
        free(d->rows[r].values);
        free(d->rows[r].key);
    }
    free(d->rows);
    memset(d, 0, sizeof *d);
}

bool config_key_is_analysis_only(const char *key) {
    return strcmp(key, "description") == 0 || strncmp(key, "analyze.", 8) == 0 || strstr(key, "comment") != NULL;
}
