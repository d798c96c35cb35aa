/* predictions.jsonl reader, both layouts (see predictions_read.h). */
#include "pipeline/records/predictions_read.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "pipeline/base/atomic_file.h"
#include "pipeline/base/config.h"
#include "pipeline/base/limits.h"
#include "pipeline/base/log.h"
#include "pipeline/records/predictions.h"
#include "pipeline/records/result_record.h" /* copy_str */
#include "pipeline/records/run_identity.h"
#include "pipeline/base/sha256.h"

static unsigned long long fnv1a(unsigned long long h, const void *data, size_t n) {
    const unsigned char *p = data;
    for (size_t i = 0; i < n; i++) h = (h ^ p[i]) * 1099511628211ull;
    return h;
}
/* Fields are hashed with their terminating NUL so that ("ab","c") and ("a","bc") differ. */
static unsigned long long fnv1a_str(unsigned long long h, const char *s) { return fnv1a(h, s, strlen(s) + 1); }

static const char *str_field(const cJSON *o, const char *key) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    return cJSON_IsString(v) ? v->valuestring : NULL;
}

int prediction_table_module(const PredictionTable *t, const char *name) {
    for (int i = 0; i < t->n_modules; i++)
        if (strcmp(t->modules[i], name) == 0) return i;
    return -1;
}

/* The sidecar of the version-2 layout, checked as strictly as the version-1 header line was (schema and run), plus
 * that it describes these very bytes (predictions_sha256). Copies the run into t and gives the n_examples it
 * records. */
static int load_meta(PredictionTable *t, const char *path, const char *text, size_t size, long *n_examples, char *err,
                     size_t errlen) {
    char meta_path[4096];
    if (predictions_meta_path(path, meta_path, sizeof meta_path, err, errlen) != 0) return -1;
    if (!file_exists(meta_path)) {
        snprintf(err, errlen, "%s: no metadata: neither its sidecar %s nor a %s header as its first line (bin/evaluate "
                              "writes the two together: evaluate the run again)",
                 path, meta_path, PREDICTIONS_SCHEMA);
        return -1;
    }
    cJSON *m = json_load_file(meta_path, JSON_KIND_RECORD, err, errlen);
    if (!m) return -1;
    int rc = -1;
    const char *schema = str_field(m, "schema"), *run = str_field(m, "run"), *sha = str_field(m, "predictions_sha256"),
               *code_version = str_field(m, "code_version");
    const cJSON *version = cJSON_GetObjectItemCaseSensitive(m, "schema_version"),
                *n = cJSON_GetObjectItemCaseSensitive(m, "n_examples");
    char have[65];
    if (!cJSON_IsObject(m) || !schema || strcmp(schema, PREDICTIONS_SCHEMA) != 0 || !run) {
        snprintf(err, errlen, "%s: not a %s metadata file (schema, run)", meta_path, PREDICTIONS_SCHEMA);
    } else if (!cJSON_IsNumber(version) || version->valuedouble != PREDICTIONS_SCHEMA_VERSION) {
        snprintf(err, errlen, "%s: schema_version: expected %d", meta_path, PREDICTIONS_SCHEMA_VERSION);
    } else if (!code_version || copy_str(t->code_version, sizeof t->code_version, code_version) != 0) {
        snprintf(err, errlen, "%s: code_version: expected a string of at most %zu bytes", meta_path,
                 sizeof t->code_version - 1);
    } else if (!cJSON_IsNumber(n) || !(n->valuedouble >= 0 && n->valuedouble <= 1e15) ||
               n->valuedouble != floor(n->valuedouble)) {
        snprintf(err, errlen, "%s: n_examples: expected a whole number >= 0", meta_path);
    } else if (!sha || strlen(sha) != 64) {
        snprintf(err, errlen, "%s: predictions_sha256: expected a 64-digit hex string", meta_path);
    } else if (sha256_hex(text, size, have), strcmp(have, sha) != 0) {
        snprintf(err, errlen, "%s: sha256 %s differs from the predictions_sha256 %s recorded in %s (the file was "
                              "replaced or edited after evaluate wrote the two: evaluate the run again)",
                 path, have, sha, meta_path);
    } else {
        snprintf(t->run, sizeof t->run, "%s", run);
        snprintf(t->meta_source, sizeof t->meta_source, "%s", meta_path);
        *n_examples = (long)n->valuedouble;
        rc = 0;
    }
    cJSON_Delete(m);
    return rc;
}

/* Whether the first non-blank line of text is an object with a "schema" key: the version-1 layout's header (an
 * example line never has one). */
static bool first_line_is_header(const char *text) {
    const char *line = text + strspn(text, " \t\r\n");
    const char *end = strchr(line, '\n');
    cJSON *j = cJSON_ParseWithLength(line, end ? (size_t)(end - line) : strlen(line));
    bool header = cJSON_IsObject(j) && cJSON_GetObjectItemCaseSensitive(j, "schema") != NULL;
    cJSON_Delete(j);
    return header;
}

int prediction_table_load(PredictionTable *t, const char *path, char *err, size_t errlen) {
    memset(t, 0, sizeof *t);
    char *text = NULL;
    size_t size = 0;
    if (read_file_limited(path, LIMIT_JSONL_FILE_BYTES, "JSON-lines file", &text, &size, err, errlen)) return -1;
    if (json_check_strings(text, size, path, err, errlen) != 0) {
        free(text);
        return -1;
    }
    long cap = 1024, line_no = 0, expect_n = -1;
    /* Version 1: the metadata is the first line. Version 2: every line is an example, the metadata in the sidecar. */
    bool header_line = first_line_is_header(text), header = !header_line;
    int rc = -1;
    if (!header_line) {
        if (load_meta(t, path, text, size, &expect_n, err, errlen) != 0) {
            free(text);
            memset(t, 0, sizeof *t);
            return -1;
        }
    }
    t->set = xmalloc((size_t)cap);
    t->module = xmalloc((size_t)cap * sizeof *t->module);
    t->correct = xmalloc((size_t)cap);
    t->answer_loss = xmalloc((size_t)cap * sizeof *t->answer_loss);
    t->key = xmalloc((size_t)cap * sizeof *t->key);
    t->line = xmalloc((size_t)cap * sizeof *t->line);
    cJSON *j = NULL;
    for (char *line = text, *next; line && *line; line = next) {
        next = strchr(line, '\n');
        if (next) *next++ = '\0';
        line_no++;
        if (line[strspn(line, " \t\r")] == '\0') continue;
        j = cJSON_Parse(line);
        if (!cJSON_IsObject(j)) {
            snprintf(err, errlen, "%s:%ld: not a JSON object", path, line_no);
            goto out;
        }
        if (!header) {
            const char *schema = str_field(j, "schema"), *run = str_field(j, "run");
            if (!schema || strcmp(schema, PREDICTIONS_SCHEMA) != 0 || !run) {
                snprintf(err, errlen, "%s:%ld: not a %s header (schema, run)", path, line_no, PREDICTIONS_SCHEMA);
                goto out;
            }
            snprintf(t->run, sizeof t->run, "%s", run);
            const char *code_version = str_field(j, "code_version");
            snprintf(t->code_version, sizeof t->code_version, "%s", code_version ? code_version : "");
            snprintf(t->meta_source, sizeof t->meta_source, "%s", path);
            header = true;
            cJSON_Delete(j);
            j = NULL;
            continue;
        }
        const char *set = str_field(j, "set"), *module = str_field(j, "module"), *q = str_field(j, "question"),
                   *a = str_field(j, "answer");
        const cJSON *idx = cJSON_GetObjectItemCaseSensitive(j, "index"),
                    *ok = cJSON_GetObjectItemCaseSensitive(j, "correct"),
                    *loss = cJSON_GetObjectItemCaseSensitive(j, "answer_loss");
        int set_id = set && strcmp(set, "interpolate") == 0 ? 0 : set && strcmp(set, "extrapolate") == 0 ? 1 : -1;
        if (set_id < 0 || !module || !q || !a || !cJSON_IsNumber(idx) || !cJSON_IsBool(ok) || !cJSON_IsNumber(loss)) {
            snprintf(err, errlen, "%s:%ld: needs \"set\" (interpolate|extrapolate), numeric \"index\", string "
                                  "\"module\", \"question\", \"answer\", boolean \"correct\" and numeric "
                                  "\"answer_loss\"",
                     path, line_no);
            goto out;
        }
        /* A cross-entropy is finite and non-negative; anything else is a damaged file, not a result to average. */
        if (!(isfinite(loss->valuedouble) && loss->valuedouble >= 0)) {
            snprintf(err, errlen, "%s:%ld: answer_loss: expected a finite number >= 0, got %g", path, line_no,
                     loss->valuedouble);
            goto out;
        }
        /* The index is an example's position in its evaluation set: a whole number that fits a long (a huge or
         * fractional one is a damaged file, and converting it would be undefined behaviour). */
        double idx_value = idx->valuedouble;
        if (!(idx_value >= 0 && idx_value <= 1e15) || idx_value != (double)(long)idx_value) {
            snprintf(err, errlen, "%s:%ld: index: expected a whole number in [0, 1e15], got %g", path, line_no,
                     idx_value);
            goto out;
        }
        if (t->n == cap) {
            cap *= 2;
            t->set = xrealloc(t->set, (size_t)cap);
            t->module = xrealloc(t->module, (size_t)cap * sizeof *t->module);
            t->correct = xrealloc(t->correct, (size_t)cap);
            t->answer_loss = xrealloc(t->answer_loss, (size_t)cap * sizeof *t->answer_loss);
            t->key = xrealloc(t->key, (size_t)cap * sizeof *t->key);
            t->line = xrealloc(t->line, (size_t)cap * sizeof *t->line);
        }
        int m = prediction_table_module(t, module);
        if (m < 0) {
            t->modules = xrealloc(t->modules, (size_t)(t->n_modules + 1) * sizeof *t->modules);
            t->modules[t->n_modules] = xstrdup(module);
            m = t->n_modules++;
        }
        long index = (long)idx_value;
        unsigned long long h = 1469598103934665603ull;
        h = fnv1a_str(h, set);
        h = fnv1a(h, &index, sizeof index);
        h = fnv1a_str(fnv1a_str(fnv1a_str(h, module), q), a);
        t->set[t->n] = (unsigned char)set_id;
        t->module[t->n] = m;
        t->correct[t->n] = cJSON_IsTrue(ok) ? 1 : 0;
        t->answer_loss[t->n] = loss->valuedouble;
        t->key[t->n] = h;
        t->line[t->n] = line_no;
        t->n++;
        cJSON_Delete(j);
        j = NULL;
    }
    if (!header) {
        snprintf(err, errlen, "%s: empty (no header line)", path);
        goto out;
    }
    if (expect_n >= 0 && t->n != expect_n) { /* (a sidecar whose hash matches but whose count was edited) */
        snprintf(err, errlen, "%s: %ld example lines, but its metadata says n_examples %ld", path, t->n, expect_n);
        goto out;
    }
    rc = 0;
out:
    cJSON_Delete(j);
    free(text);
    if (rc) prediction_table_free(t);
    return rc;
}

void prediction_table_free(PredictionTable *t) {
    free(t->set);
    free(t->module);
    free(t->correct);
    free(t->answer_loss);
    free(t->key);
    free(t->line);
    for (int i = 0; i < t->n_modules; i++) free(t->modules[i]);
    free(t->modules);
    memset(t, 0, sizeof *t);
}

int prediction_table_check_record(const PredictionTable *t, const char *path, const char *run,
                                  const char *code_version, const char *record_path, char *err, size_t errlen) {
    if (record_owner_check(t->meta_source, t->run, "", run, "the directory", NULL, NULL, err, errlen) != 0) return -1;
    /* predictions of one evaluation beside the record of another would pair and bootstrap examples that this record's
     * numbers do not come from */
    if (strcmp(t->code_version, code_version) != 0) {
        snprintf(err, errlen, "%s: code_version \"%s\" differs from %s's code_version \"%s\": %s and its record come from "
                 "different evaluations (evaluate the run again)", t->meta_source, t->code_version, record_path,
                 code_version, path);
        return -1;
    }
    return 0;
}

int prediction_tables_match(const PredictionTable *a, const char *path_a, const PredictionTable *b,
                            const char *path_b, char *err, size_t errlen) {
    long n = a->n < b->n ? a->n : b->n;
    for (long i = 0; i < n; i++)
        if (a->key[i] != b->key[i]) {
            snprintf(err, errlen, "%s:%ld and %s:%ld: example %ld differs (set, index, module, question or answer): "
                                  "the runs were not evaluated on the same examples, so they cannot be paired",
                     path_a, a->line[i], path_b, b->line[i], i + 1);
            return -1;
        }
    if (a->n != b->n) {
        snprintf(err, errlen, "%s has %ld examples, %s has %ld: the runs were not evaluated on the same examples, so "
                              "they cannot be paired",
                 path_a, a->n, path_b, b->n);
        return -1;
    }
    return 0;
}
