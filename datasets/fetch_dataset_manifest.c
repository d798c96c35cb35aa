/* Strict loader for the dataset manifest (see fetch_dataset_manifest.h). */
#include "datasets/fetch_dataset_manifest.h"

#include <ctype.h>
#include <stdio.h>
#include <string.h>

#include "pipeline/base/config.h"

int is_sha256_hex(const char *s) {
    if (!s || strlen(s) != 64) return 0;
    for (int i = 0; i < 64; i++)
        if (!isxdigit((unsigned char)s[i])) return 0;
    return 1;
}

/* Every element of arr must be a string starting with prefix (may be ""). Returns the count or -1 with err. */
static int check_names(const cJSON *arr, const char *path, const char *key, const char *prefix, char *err, size_t errlen) {
    int n = 0;
    for (const cJSON *c = arr ? arr->child : NULL; c; c = c->next, n++) {
        if (!cJSON_IsString(c) || strncmp(c->valuestring, prefix, strlen(prefix)) != 0 || !strstr(c->valuestring, "__")) {
            snprintf(err, errlen, "%s: %s[%d]: expected a module name \"%s<area>__<module>\"", path, key, n, prefix);
            return -1;
        }
    }
    return n;
}

static int contains_name(const cJSON *arr, const char *name) {
    for (const cJSON *c = arr ? arr->child : NULL; c; c = c->next)
        if (cJSON_IsString(c) && strcmp(c->valuestring, name) == 0) return 1;
    return 0;
}

int dataset_manifest_load(const char *path, DatasetManifest *m, char *err, size_t errlen) {
    memset(m, 0, sizeof *m);
    m->root = json_load_file(path, JSON_KIND_MANIFEST, err, errlen);
    if (!m->root) return -1;
    JsonReader r;
    json_reader_init(&r, m->root, path, "");
    const char *schema = NULL, *name = NULL, *note = NULL;
    long version = 0, size = 0;
    json_get_string(&r, "schema", &schema, true);
    json_get_int(&r, "schema_version", &version, true);
    json_get_string(&r, "name", &name, true);
    json_get_string(&r, "url", &m->url, true);
    json_get_int(&r, "size", &size, true);
    json_get_string_or_null(&r, "sha256", &m->sha256, true);
    json_get_string(&r, "sha256_note", &note, false);
    json_get_string(&r, "archive_root", &m->archive_root, true);
    const cJSON *splits = json_get_array(&r, "splits", true);
    const cJSON *pairs = json_get_object(&r, "pairs_per_file", false);
    m->train_modules = json_get_object(&r, "train_modules", true);
    m->extrapolate_modules = json_get_array(&r, "extrapolate_modules", true);
    json_get_string(&r, "paper_filter", &m->paper_filter, true);
    m->arithmetic_modules = json_get_array(&r, "arithmetic_modules", true);
    m->arithmetic_extrapolate_modules = json_get_array(&r, "arithmetic_extrapolate_modules", true);
    const cJSON *emb = json_get_object(&r, "embedded_sample", true);
    if (json_reader_finish(&r, err, errlen) != 0) goto fail;
    (void)splits;
    (void)pairs;
    if (strcmp(schema, "dm-math-dataset") != 0 || version != 1) {
        snprintf(err, errlen, "%s: schema: expected \"dm-math-dataset\" version 1, got \"%s\" version %ld", path, schema,
                 version);
        goto fail;
    }
    if (size <= 0) {
        snprintf(err, errlen, "%s: size: must be positive, got %ld", path, size);
        goto fail;
    }
    m->size = size;
    if (m->sha256 && !is_sha256_hex(m->sha256)) {
        snprintf(err, errlen, "%s: sha256: expected 64 hex digits or null, got \"%s\"", path, m->sha256);
        goto fail;
    }
    JsonReader er;
    json_reader_init(&er, emb, path, "embedded_sample");
    const char *prov = NULL;
    long esize = 0;
    json_get_string(&er, "path", &m->embedded_path, true);
    json_get_int(&er, "size", &esize, true);
    json_get_string(&er, "sha256", &m->embedded_sha256, true);
    json_get_object(&er, "pairs_per_file", false);
    json_get_string(&er, "provenance", &prov, false);
    if (json_reader_finish(&er, err, errlen) != 0) goto fail;
    m->embedded_size = esize;
    if (!is_sha256_hex(m->embedded_sha256)) {
        snprintf(err, errlen, "%s: embedded_sample.sha256: expected 64 hex digits", path);
        goto fail;
    }
    /* Module lists: names must carry their area prefix, and the arithmetic lists must be subsets. */
    for (const cJSON *area = m->train_modules->child; area; area = area->next) {
        char key[128], prefix[128];
        snprintf(key, sizeof key, "train_modules.%s", area->string);
        snprintf(prefix, sizeof prefix, "%s__", area->string);
        if (!cJSON_IsArray(area)) {
            snprintf(err, errlen, "%s: %s: expected an array", path, key);
            goto fail;
        }
        int n = check_names(area, path, key, prefix, err, errlen);
        if (n < 0) goto fail;
        m->n_train_modules += n;
    }
    if (check_names(m->extrapolate_modules, path, "extrapolate_modules", "", err, errlen) < 0 ||
        check_names(m->arithmetic_modules, path, "arithmetic_modules", "arithmetic__", err, errlen) < 0 ||
        check_names(m->arithmetic_extrapolate_modules, path, "arithmetic_extrapolate_modules", "arithmetic__", err,
                    errlen) < 0)
        goto fail;
    const cJSON *arith_area = cJSON_GetObjectItemCaseSensitive(m->train_modules, "arithmetic");
    for (const cJSON *c = m->arithmetic_modules->child; c; c = c->next)
        if (!contains_name(arith_area, c->valuestring)) {
            snprintf(err, errlen, "%s: arithmetic_modules: '%s' is not in train_modules.arithmetic", path, c->valuestring);
            goto fail;
        }
    for (const cJSON *c = m->arithmetic_extrapolate_modules->child; c; c = c->next)
        if (!contains_name(m->extrapolate_modules, c->valuestring)) {
            snprintf(err, errlen, "%s: arithmetic_extrapolate_modules: '%s' is not in extrapolate_modules", path,
                     c->valuestring);
            goto fail;
        }
    return 0;
fail:
    dataset_manifest_free(m);
    return -1;
}

void dataset_manifest_free(DatasetManifest *m) {
    cJSON_Delete(m->root);
    memset(m, 0, sizeof *m);
}
