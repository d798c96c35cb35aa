/* The runs of an experiment as one tidy CSV (see runs_csv.h). */
#include "pipeline/records/runs_csv.h"

#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "pipeline/base/atomic_file.h"
#include "pipeline/base/config.h"
#include "pipeline/base/exact_number.h"
#include "pipeline/base/log.h"
#include "pipeline/records/result_record.h"
#include "pipeline/records/run_dirs.h"
#include "pipeline/records/run_identity.h"
#include "pipeline/records/run_metrics.h"

/* ---------------------------------------------------------------- names and values ------------------------ */

typedef struct {
    int n;
    char **keys, **vals; /* owned */
} KeyValues;

static void kv_add(KeyValues *kv, const char *key, char *val /* taken */) {
    kv->keys = xrealloc(kv->keys, (size_t)(kv->n + 1) * sizeof *kv->keys);
    kv->vals = xrealloc(kv->vals, (size_t)(kv->n + 1) * sizeof *kv->vals);
    kv->keys[kv->n] = xstrdup(key);
    kv->vals[kv->n] = val;
    kv->n++;
}
static void kv_free(KeyValues *kv) {
    for (int i = 0; i < kv->n; i++) {
        free(kv->keys[i]);
        free(kv->vals[i]);
    }
    free(kv->keys);
    free(kv->vals);
    memset(kv, 0, sizeof *kv);
}
static int kv_find(const KeyValues *kv, const char *key) {
    for (int i = 0; i < kv->n; i++)
        if (strcmp(kv->keys[i], key) == 0) return i;
    return -1;
}

static char *number_text(double v) {
    char buf[EXACT_NUMBER_CAP];
    exact_number_format(v, buf); /* "" when not finite: a missing value */
    return xstrdup(buf);
}
static char *long_text(long v) {
    char buf[32];
    snprintf(buf, sizeof buf, "%ld", v);
    return xstrdup(buf);
}

/* A config value as a cell: strings as they are, numbers exact, booleans true/false, null empty, arrays and empty
 * objects as their compact JSON text. */
static char *json_value_text(const cJSON *v) {
    if (cJSON_IsString(v)) return xstrdup(v->valuestring);
    if (cJSON_IsNumber(v)) return number_text(v->valuedouble);
    if (cJSON_IsBool(v)) return xstrdup(cJSON_IsTrue(v) ? "true" : "false");
    if (cJSON_IsNull(v)) return xstrdup("");
    char *text = cJSON_PrintUnformatted(v);
    CHECK_ALLOC(text);
    char *copy = xstrdup(text);
    cJSON_free(text);
    return copy;
}

/* Every leaf of a config object under its dotted path ("model.d_model"). */
static void flatten(KeyValues *kv, const char *prefix, const cJSON *obj) {
    for (const cJSON *c = obj->child; c; c = c->next) {
        size_t len = strlen(prefix) + strlen(c->string) + 2;
        char *key = xmalloc(len);
        snprintf(key, len, "%s%s%s", prefix, prefix[0] ? "." : "", c->string);
        if (cJSON_IsObject(c) && c->child)
            flatten(kv, key, c);
        else
            kv_add(kv, key, json_value_text(c));
        free(key);
    }
}

/* ---------------------------------------------------------------- one run ---------------------------------- */

enum { COL_RUN, COL_RUN_CONFIG, COL_VARIANT, COL_SEED, COL_OVERRIDES, COL_ARCH, COL_LOSS_MODE, COL_BACKEND,
       COL_CODE_VERSION, COL_N_PARAMS, N_FIXED };
static const char *const FIXED_COLS[N_FIXED] = {"run",     "run_config", "variant",      "seed",    "overrides",
                                                "arch",    "loss_mode",  "backend",      "code_version", "n_params"};

typedef struct {
    char *name;               /* directory name */
    char *fixed[N_FIXED];
    KeyValues config, metrics;
    char experiment[128];
} RunRow;

static void row_free(RunRow *r) {
    free(r->name);
    for (int i = 0; i < N_FIXED; i++) free(r->fixed[i]);
    kv_free(&r->config);
    kv_free(&r->metrics);
}

/* The run's named numbers (run_metrics.h: the names make diff shows too), less those that are identity columns
 * (n_params). */
static void add_metrics(KeyValues *m, const ResultRecord *rec, const AnalysisRecord *analysis,
                        const DepthPromptsRecord *depth) {
    RunMetricList l = {0};
    run_metrics_all(rec, analysis, depth, &l);
    for (int i = 0; i < l.n; i++) {
        bool fixed = false;
        for (int f = 0; f < N_FIXED && !fixed; f++) fixed = strcmp(FIXED_COLS[f], l.m[i].name) == 0;
        if (!fixed) kv_add(m, l.m[i].name, number_text(l.m[i].value));
    }
    run_metrics_free(&l);
}

/* The run's depth records beside result.json: analysis.json where present, and depth_prompts.json where present
 * beside an enabled analysis (the report's rule). A record that does not load, or of another run or experiment, is an
 * error naming the file, as for result.json. */
static int load_depth_records(const char *dir, const char *name, const char *experiment, AnalysisRecord *ana,
                              bool *has_ana, DepthPromptsRecord *depth, bool *has_depth, char *err, size_t errlen) {
    char path[4500];
    snprintf(path, sizeof path, "%s/analysis.json", dir);
    if (!run_file_present(path)) return 0;
    if (analysis_record_load(ana, path, err, errlen) != 0) return -1;
    *has_ana = true;
    if (record_owner_check(path, ana->run, ana->experiment, name, "the directory", experiment, "result.json", err,
                           errlen) != 0)
        return -1;
    snprintf(path, sizeof path, "%s/%s", dir, DEPTH_PROMPTS_FILE_NAME);
    if (!ana->enabled || !run_file_present(path)) return 0;
    if (depth_prompts_load(depth, path, err, errlen) != 0) return -1;
    *has_depth = true;
    return record_owner_check(path, depth->run, depth->experiment, name, "the directory", experiment, "result.json",
                              err, errlen);
}

/* Reads runs_dir/name/result.json into row. 0 or -1 with err naming the file. */
static int row_load(RunRow *row, const char *runs_dir, const char *name, char *err, size_t errlen) {
    memset(row, 0, sizeof *row);
    row->name = xstrdup(name);
    char path[4400];
    snprintf(path, sizeof path, "%s/%s/result.json", runs_dir, name);
    cJSON *j = json_load_file(path, JSON_KIND_RECORD, err, errlen);
    if (!j) return -1;
    ResultRecord rec;
    memset(&rec, 0, sizeof rec);
    RecordIdentity id;
    AnalysisRecord ana;
    DepthPromptsRecord depth;
    bool has_ana = false, has_depth = false;
    int rc = -1;
    if (result_record_from_json(&rec, j, path, err, errlen) != 0) goto out;
    if (record_identity_read(j, path, &id, err, errlen) != 0) goto out;
    /* a record of this directory carries its name (its experiment: one per table, checked by the caller) */
    if (record_owner_check(path, rec.run, rec.experiment, name, "the directory", NULL, NULL, err, errlen) != 0)
        goto out;
    char run_config[128], variant[RUN_VARIANT_LEN + 1];
    long seed = -1;
    if (run_identity_resolve(name, &id, rec.config, path, run_config, sizeof run_config, &seed, err, errlen) != 0)
        goto out;
    if (run_variant_key(rec.config, variant) != 0) {
        set_err(err, errlen, "%s: config: not an object", path);
        goto out;
    }
    StrBuf ov;
    sb_init(&ov);
    for (int i = 0; i < rec.prov.n_overrides; i++) sb_printf(&ov, "%s%s", i ? ";" : "", rec.prov.overrides[i]);
    row->fixed[COL_RUN] = xstrdup(name);
    row->fixed[COL_RUN_CONFIG] = xstrdup(run_config);
    row->fixed[COL_VARIANT] = xstrdup(variant);
    row->fixed[COL_SEED] = seed >= 0 ? long_text(seed) : xstrdup("");
    row->fixed[COL_OVERRIDES] = xstrdup(ov.data ? ov.data : "");
    sb_free(&ov);
    row->fixed[COL_ARCH] = xstrdup(rec.arch);
    row->fixed[COL_LOSS_MODE] = xstrdup(rec.loss_mode);
    row->fixed[COL_BACKEND] = xstrdup(rec.backend);
    row->fixed[COL_CODE_VERSION] = xstrdup(rec.code_version);
    row->fixed[COL_N_PARAMS] = long_text(rec.n_params);
    snprintf(row->experiment, sizeof row->experiment, "%s", rec.experiment);
    flatten(&row->config, "", rec.config);
    char dir[4400];
    snprintf(dir, sizeof dir, "%s/%s", runs_dir, name); /* as path above: runs_dir and a directory name fit */
    if (load_depth_records(dir, name, rec.experiment, &ana, &has_ana, &depth, &has_depth, err, errlen) != 0) goto out;
    add_metrics(&row->metrics, &rec, has_ana ? &ana : NULL, has_depth ? &depth : NULL);
    /* a config key is never a fixed or metric column's name (cannot happen with the project's configs: their
     * top-level keys are sections and "description"), so no cell is ambiguous */
    for (int i = 0; i < row->config.n; i++) {
        const char *k = row->config.keys[i];
        bool clash = kv_find(&row->metrics, k) >= 0;
        for (int f = 0; f < N_FIXED && !clash; f++) clash = strcmp(FIXED_COLS[f], k) == 0;
        if (clash) {
            set_err(err, errlen, "%s: config key %s has the name of a column of its own", path, k);
            goto out;
        }
    }
    rc = 0;
out:
    if (has_ana) analysis_record_free(&ana);
    if (has_depth) depth_prompts_free(&depth);
    result_record_free(&rec);
    cJSON_Delete(j);
    return rc;
}

/* ---------------------------------------------------------------- the table -------------------------------- */

typedef struct {
    int n;
    char **names;
} NameList;

static int names_find(const NameList *l, const char *s) {
    for (int i = 0; i < l->n; i++)
        if (strcmp(l->names[i], s) == 0) return i;
    return -1;
}

/* Adds a run's keys to the union u, each new one right after the run's previous key, so that related keys stay
 * together whichever run brings them (a key only the third run has lands beside its neighbours, not at the end). */
static void names_merge(NameList *u, char *const *keys, int n) {
    int after = -1;
    for (int i = 0; i < n; i++) {
        int at = names_find(u, keys[i]);
        if (at < 0) {
            at = after + 1;
            u->names = xrealloc(u->names, (size_t)(u->n + 1) * sizeof *u->names);
            memmove(u->names + at + 1, u->names + at, (size_t)(u->n - at) * sizeof *u->names);
            u->names[at] = keys[i]; /* borrowed from the row */
            u->n++;
        }
        after = at;
    }
}

static int cmp_names(const void *a, const void *b) {
    return strverscmp(*(char *const *)a, *(char *const *)b);
}

/* The evaluated runs of runs_dir (run_dirs.h: the rule report and compare share; a run that cannot be read is an
 * error, never a missing row), in natural order. */
static char **list_runs(const char *runs_dir, int *n_out, char *err, size_t errlen) {
    char **names = NULL;
    int n = 0;
    if (run_dirs_list(runs_dir, &names, &n, err, errlen) != 0) return NULL;
    if (n > 1) qsort(names, (size_t)n, sizeof *names, cmp_names);
    *n_out = n;
    return names;
}

void runs_table_free(RunsTable *t) {
    for (int r = 0; r < t->n_rows; r++) {
        for (int c = 0; c < t->n_cols; c++) free(t->cells[r][c]);
        free(t->cells[r]);
    }
    free(t->cells);
    for (int c = 0; c < t->n_cols; c++) free(t->cols[c]);
    free(t->cols);
    memset(t, 0, sizeof *t);
}

int runs_table_load(RunsTable *t, const char *runs_dir, char *err, size_t errlen) {
    memset(t, 0, sizeof *t);
    int n = 0;
    char **names = list_runs(runs_dir, &n, err, errlen);
    if (!names) return -1;
    int rc = -1, loaded = 0;
    RunRow *rows = xcalloc((size_t)n + 1, sizeof *rows);
    NameList config = {0}, metrics = {0};
    if (n == 0) {
        set_err(err, errlen, "%s: no run directory with a result.json: nothing to export", runs_dir);
        goto out;
    }
    for (int i = 0; i < n; i++) {
        if (row_load(&rows[i], runs_dir, names[i], err, errlen) != 0) {
            loaded = i + 1;
            goto out;
        }
        loaded = i + 1;
        if (strcmp(rows[i].experiment, rows[0].experiment) != 0) {
            set_err(err, errlen, "%s/%s/result.json: experiment \"%s\", but %s/%s/result.json has \"%s\": one "
                                 "experiment per table",
                    runs_dir, names[i], rows[i].experiment, runs_dir, names[0], rows[0].experiment);
            goto out;
        }
        names_merge(&config, rows[i].config.keys, rows[i].config.n);
        names_merge(&metrics, rows[i].metrics.keys, rows[i].metrics.n);
    }
    t->n_cols = N_FIXED + config.n + metrics.n;
    t->cols = xmalloc((size_t)t->n_cols * sizeof *t->cols);
    for (int c = 0; c < N_FIXED; c++) t->cols[c] = xstrdup(FIXED_COLS[c]);
    for (int c = 0; c < config.n; c++) t->cols[N_FIXED + c] = xstrdup(config.names[c]);
    for (int c = 0; c < metrics.n; c++) t->cols[N_FIXED + config.n + c] = xstrdup(metrics.names[c]);
    t->n_rows = n;
    t->cells = xmalloc((size_t)n * sizeof *t->cells);
    for (int r = 0; r < n; r++) {
        t->cells[r] = xmalloc((size_t)t->n_cols * sizeof *t->cells[r]);
        for (int c = 0; c < N_FIXED; c++) t->cells[r][c] = xstrdup(rows[r].fixed[c]);
        for (int c = 0; c < config.n; c++) {
            int k = kv_find(&rows[r].config, config.names[c]);
            t->cells[r][N_FIXED + c] = xstrdup(k >= 0 ? rows[r].config.vals[k] : "");
        }
        for (int c = 0; c < metrics.n; c++) {
            int k = kv_find(&rows[r].metrics, metrics.names[c]);
            t->cells[r][N_FIXED + config.n + c] = xstrdup(k >= 0 ? rows[r].metrics.vals[k] : "");
        }
    }
    rc = 0;
out:
    free(config.names);
    free(metrics.names);
    for (int i = 0; i < loaded; i++) row_free(&rows[i]);
    free(rows);
    for (int i = 0; i < n; i++) free(names[i]);
    free(names);
    if (rc) runs_table_free(t);
    return rc;
}

/* ---------------------------------------------------------------- CSV text --------------------------------- */

void csv_put_field(StrBuf *out, const char *s) {
    if (strpbrk(s, ",\"\r\n") == NULL) {
        sb_puts(out, s);
        return;
    }
    sb_puts(out, "\"");
    for (const char *p = s; *p; p++) sb_puts(out, *p == '"' ? "\"\"" : (char[2]){*p, '\0'});
    sb_puts(out, "\"");
}

static void put_record(StrBuf *out, char *const *fields, int n) {
    for (int i = 0; i < n; i++) {
        if (i) sb_puts(out, ",");
        csv_put_field(out, fields[i]);
    }
    sb_puts(out, "\r\n");
}

void runs_table_csv(const RunsTable *t, StrBuf *out) {
    put_record(out, t->cols, t->n_cols);
    for (int r = 0; r < t->n_rows; r++) put_record(out, t->cells[r], t->n_cols);
}

int runs_csv_export(const char *runs_dir, const char *out_path, int *n_rows, int *n_cols, char *err, size_t errlen) {
    RunsTable t;
    if (runs_table_load(&t, runs_dir, err, errlen) != 0) return -1;
    StrBuf b;
    sb_init(&b);
    runs_table_csv(&t, &b);
    int rc = write_file_atomic(out_path, b.data, b.len, err, errlen);
    *n_rows = t.n_rows;
    *n_cols = t.n_cols;
    sb_free(&b);
    runs_table_free(&t);
    return rc;
}
