/* Strict JSON readers and writers for result.json, analysis.json and (read-only) train_summary.json. */
#include "pipeline/records/result_record.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pipeline/base/config.h"
#include "pipeline/base/log.h"
#include "pipeline/base/sha256.h"
#include "pipeline/base/stats.h"
#include "pipeline/records/config_diff.h"
#include "pipeline/records/config_override.h"
#include "pipeline/records/run_identity.h"

const char *const EVAL_SET_NAMES[EVAL_N_SETS] = {"interpolate", "extrapolate"};

int copy_str(char *dst, size_t cap, const char *src) {
    size_t n = strlen(src);
    snprintf(dst, cap, "%s", src);
    return n < cap ? 0 : -1;
}

void module_eval_finish(ModuleEval *m) {
    m->accuracy = safe_ratio(m->correct, m->n);
    wilson_interval(m->correct, m->n, STATS_Z95, &m->ci95[0], &m->ci95[1]);
}

void set_eval_finish(SetEval *s) {
    s->accuracy = safe_ratio(s->correct, s->n);
    wilson_interval(s->correct, s->n, STATS_Z95, &s->ci95[0], &s->ci95[1]);
    for (int i = 0; i < s->n_modules; i++) module_eval_finish(&s->modules[i]);
}

const ModuleEval *set_eval_find_module(const SetEval *s, const char *name) {
    for (int i = 0; i < s->n_modules; i++)
        if (strcmp(s->modules[i].name, name) == 0) return &s->modules[i];
    return NULL;
}

/* ---------------------------------------------------------------- writing ---------------------------------- */

/* cJSON_Add* return NULL only when out of memory: one check per object keeps the writers readable. */
static cJSON *must(cJSON *x) {
    CHECK_ALLOC(x);
    return x;
}

static char *must_text(char *x) {
    CHECK_ALLOC(x);
    return x;
}

static void add_ci(cJSON *obj, const double ci[2]) {
    cJSON *a = must(cJSON_AddArrayToObject(obj, "ci95"));
    cJSON_AddItemToArray(a, must(cJSON_CreateNumber(ci[0])));
    cJSON_AddItemToArray(a, must(cJSON_CreateNumber(ci[1])));
}

static cJSON *set_to_json(const SetEval *s) {
    cJSON *o = must(cJSON_CreateObject());
    must(cJSON_AddNumberToObject(o, "n", (double)s->n));
    must(cJSON_AddNumberToObject(o, "correct", (double)s->correct));
    must(cJSON_AddNumberToObject(o, "accuracy", s->accuracy));
    add_ci(o, s->ci95);
    must(cJSON_AddNumberToObject(o, "mean_answer_loss", s->mean_answer_loss));
    must(cJSON_AddNumberToObject(o, "greedy_n", (double)s->greedy_n));
    must(cJSON_AddNumberToObject(o, "greedy_agree", (double)s->greedy_agree));
    cJSON *mods = must(cJSON_AddObjectToObject(o, "modules"));
    for (int i = 0; i < s->n_modules; i++) {
        const ModuleEval *m = &s->modules[i];
        cJSON *mo = must(cJSON_AddObjectToObject(mods, m->name));
        must(cJSON_AddNumberToObject(mo, "n", (double)m->n));
        must(cJSON_AddNumberToObject(mo, "correct", (double)m->correct));
        must(cJSON_AddNumberToObject(mo, "accuracy", m->accuracy));
        add_ci(mo, m->ci95);
        must(cJSON_AddNumberToObject(mo, "mean_answer_loss", m->mean_answer_loss));
    }
    if (s->routing) cJSON_AddItemToObject(o, "routing", routing_stats_to_json(s->routing));
    return o;
}

cJSON *result_record_to_json(const ResultRecord *r) {
    cJSON *o = must(cJSON_CreateObject());
    must(cJSON_AddStringToObject(o, "schema", RESULT_SCHEMA));
    must(cJSON_AddNumberToObject(o, "schema_version", RESULT_SCHEMA_VERSION));
    must(cJSON_AddStringToObject(o, "experiment", r->experiment));
    must(cJSON_AddStringToObject(o, "run", r->run));
    must(cJSON_AddStringToObject(o, "arch", r->arch));
    must(cJSON_AddStringToObject(o, "loss_mode", r->loss_mode));
    cJSON_AddItemToObject(o, "config", r->config ? must(cJSON_Duplicate(r->config, 1)) : must(cJSON_CreateObject()));
    must(cJSON_AddStringToObject(o, "config_sha256", r->config_sha256));
    must(cJSON_AddStringToObject(o, "config_text", r->config_text ? r->config_text : ""));
    run_provenance_to_json(o, &r->prov);
    must(cJSON_AddStringToObject(o, "code_version", r->code_version));
    cJSON *ds = must(cJSON_AddObjectToObject(o, "dataset"));
    must(cJSON_AddStringToObject(ds, "train_sha256", r->train_sha256));
    must(cJSON_AddStringToObject(ds, "interpolate_sha256", r->interpolate_sha256));
    must(cJSON_AddStringToObject(ds, "extrapolate_sha256", r->extrapolate_sha256));
    if (r->dataset_source) cJSON_AddItemToObject(ds, "source", must(cJSON_Duplicate(r->dataset_source, 1)));
    must(cJSON_AddStringToObject(o, "tokenizer_sha256", r->tokenizer_sha256));
    must(cJSON_AddStringToObject(o, "backend", r->backend));
    must(cJSON_AddStringToObject(o, "hardware", r->hardware));
    must(cJSON_AddStringToObject(o, "precision", r->precision));
    must(cJSON_AddNumberToObject(o, "n_params", (double)r->n_params));
    cJSON *tr = must(cJSON_AddObjectToObject(o, "training"));
    must(cJSON_AddNumberToObject(tr, "steps", (double)r->training.steps));
    must(cJSON_AddNumberToObject(tr, "tokens", (double)r->training.tokens));
    must(cJSON_AddNumberToObject(tr, "wall_time_s", r->training.wall_time_s));
    must(cJSON_AddNumberToObject(tr, "final_train_loss", r->training.final_train_loss));
    must(cJSON_AddNumberToObject(tr, "tokens_per_s", r->training.tokens_per_s));
    must(cJSON_AddStringToObject(tr, "backend", r->training.backend));
    must(cJSON_AddStringToObject(tr, "hardware", r->training.hardware));
    must(cJSON_AddStringToObject(tr, "precision", r->training.precision));
    cJSON *ev = must(cJSON_AddObjectToObject(o, "evaluation"));
    must(cJSON_AddNumberToObject(ev, "wall_time_s", r->evaluation.wall_time_s));
    must(cJSON_AddNumberToObject(ev, "mean_accuracy", r->evaluation.mean_accuracy));
    cJSON *sets = must(cJSON_AddObjectToObject(ev, "sets"));
    for (int i = 0; i < EVAL_N_SETS; i++) cJSON_AddItemToObject(sets, EVAL_SET_NAMES[i], set_to_json(&r->evaluation.sets[i]));
    return o;
}

int result_record_save(const ResultRecord *r, const char *path, char *err, size_t errlen) {
    cJSON *j = result_record_to_json(r);
    int rc = json_save_file(path, j, err, errlen);
    cJSON_Delete(j);
    return rc;
}


/* ---------------------------------------------------------------- domains ---------------------------------- */
/* A well-formed record can still hold an impossible number (an accuracy of 2, a loss of -5, 1e999 read as inf);
 * compare and the report must never see one, so every value is checked against its domain here, naming the file,
 * the field and the value. 0 when it lies in the domain; -1 with err set. */

static int domain_err(char *err, size_t errlen, const char *source, const char *path, const char *key,
                      const char *domain, double value) {
    set_err(err, errlen, "%s: %s%s%s: %.17g is not %s", source, path, path[0] ? "." : "", key, value, domain);
    return -1;
}

static int record_check_fraction(double v, const char *source, const char *path, const char *key, char *err, size_t errlen) {
    return v >= 0 && v <= 1 ? 0 : domain_err(err, errlen, source, path, key, "a fraction in [0, 1]", v);
}

static int record_check_nonneg(double v, const char *source, const char *path, const char *key, char *err, size_t errlen) {
    return isfinite(v) && v >= 0 ? 0 : domain_err(err, errlen, source, path, key, "a finite number >= 0", v);
}

static int record_check_count(long v, const char *source, const char *path, const char *key, char *err, size_t errlen) {
    return v >= 0 ? 0 : domain_err(err, errlen, source, path, key, "a count >= 0", (double)v);
}

/* The training numbers result.json copies from train_summary.json: one check for both readers. */
static int check_training_numbers(long steps, long tokens, double wall_time_s, double final_train_loss,
                                  double tokens_per_s, const char *source, const char *path, char *err,
                                  size_t errlen) {
    return record_check_count(steps, source, path, "steps", err, errlen) ||
                   record_check_count(tokens, source, path, "tokens", err, errlen) ||
                   record_check_nonneg(wall_time_s, source, path, "wall_time_s", err, errlen) ||
                   record_check_nonneg(final_train_loss, source, path, "final_train_loss", err, errlen) ||
                   record_check_nonneg(tokens_per_s, source, path, "tokens_per_s", err, errlen)
               ? -1
               : 0;
}

/* The stored accuracy agrees with its counts (the writer computes it as correct / n; 1e-9 absorbs printing). */
static int check_accuracy(double acc, long correct, long n, const char *source, const char *path, char *err,
                          size_t errlen) {
    if (record_check_fraction(acc, source, path, "accuracy", err, errlen)) return -1;
    if (fabs(acc - safe_ratio(correct, n)) > 1e-9) {
        set_err(err, errlen, "%s: %s.accuracy: %.17g disagrees with correct / n = %ld / %ld", source, path, acc,
                correct, n);
        return -1;
    }
    return 0;
}

static int check_ci(const double ci[2], const char *source, const char *path, char *err, size_t errlen) {
    if (record_check_fraction(ci[0], source, path, "ci95[0]", err, errlen) ||
        record_check_fraction(ci[1], source, path, "ci95[1]", err, errlen))
        return -1;
    if (ci[0] > ci[1]) {
        set_err(err, errlen, "%s: %s.ci95: [%.17g, %.17g] has lo > hi", source, path, ci[0], ci[1]);
        return -1;
    }
    return 0;
}

/* One evaluated set or module: counts, accuracy, interval, answer loss. */
static int check_eval_values(long n, long correct, double acc, const double ci[2], double loss, const char *source,
                             const char *path, char *err, size_t errlen) {
    if (record_check_count(n, source, path, "n", err, errlen) ||
        record_check_count(correct, source, path, "correct", err, errlen))
        return -1;
    if (correct > n) {
        set_err(err, errlen, "%s: %s: correct %ld exceeds n %ld", source, path, correct, n);
        return -1;
    }
    if (check_accuracy(acc, correct, n, source, path, err, errlen) || check_ci(ci, source, path, err, errlen) ||
        record_check_nonneg(loss, source, path, "mean_answer_loss", err, errlen))
        return -1;
    return 0;
}

/* ---------------------------------------------------------------- reading ---------------------------------- */

/* A string field copied into a fixed buffer; too long is an error rather than a silent truncation. */
static void get_str(JsonReader *r, const char *key, char *dst, size_t cap, bool required) {
    const char *s = NULL;
    if (!json_get_string(r, key, &s, required)) return;
    if (copy_str(dst, cap, s) != 0 && !r->error[0])
        snprintf(r->error, sizeof r->error, "%s: %s%s%s: string longer than %zu bytes", r->source, r->path,
                 r->path[0] ? "." : "", key, cap - 1);
}

static void get_sha(JsonReader *r, const char *key, char dst[65]) {
    get_str(r, key, dst, 65, true);
    if (r->error[0]) return;
    bool ok = strlen(dst) == 64;
    for (int i = 0; ok && i < 64; i++) ok = (dst[i] >= '0' && dst[i] <= '9') || (dst[i] >= 'a' && dst[i] <= 'f');
    if (!ok)
        snprintf(r->error, sizeof r->error, "%s: %s%s%s: expected 64 lowercase hex digits", r->source, r->path,
                 r->path[0] ? "." : "", key);
}

static void get_ci(JsonReader *r, const char *key, double ci[2]) {
    const cJSON *a = json_get_array(r, key, true);
    if (!a) return;
    if (cJSON_GetArraySize(a) != 2 || !cJSON_IsNumber(cJSON_GetArrayItem(a, 0)) ||
        !cJSON_IsNumber(cJSON_GetArrayItem(a, 1))) {
        if (!r->error[0])
            snprintf(r->error, sizeof r->error, "%s: %s.%s: expected [lo, hi]", r->source, r->path, key);
        return;
    }
    ci[0] = cJSON_GetArrayItem(a, 0)->valuedouble;
    ci[1] = cJSON_GetArrayItem(a, 1)->valuedouble;
}

/* Finishes a nested reader, carrying its error (if any) into err. Returns -1 on error. */
static int finish(JsonReader *r, char *err, size_t errlen) { return json_reader_finish(r, err, errlen); }

static int set_from_json(SetEval *s, const cJSON *obj, const char *source, const char *path, char *err, size_t errlen) {
    JsonReader r;
    json_reader_init(&r, obj, source, path);
    json_get_int(&r, "n", &s->n, true);
    json_get_int(&r, "correct", &s->correct, true);
    json_get_double(&r, "accuracy", &s->accuracy, true);
    get_ci(&r, "ci95", s->ci95);
    json_get_double(&r, "mean_answer_loss", &s->mean_answer_loss, true);
    json_get_int(&r, "greedy_n", &s->greedy_n, true);
    json_get_int(&r, "greedy_agree", &s->greedy_agree, true);
    const cJSON *mods = json_get_object(&r, "modules", true);
    const cJSON *routing = json_get_object(&r, "routing", false);
    if (finish(&r, err, errlen)) return -1;
    if (routing) {
        char rpath[512];
        snprintf(rpath, sizeof rpath, "%s.routing", path);
        s->routing = xcalloc(1, sizeof *s->routing);
        if (routing_stats_from_json(s->routing, routing, source, rpath, err, errlen) != 0) return -1;
    }
    s->n_modules = cJSON_GetArraySize(mods);
    s->modules = xcalloc((size_t)s->n_modules + 1, sizeof *s->modules);
    int i = 0;
    for (const cJSON *m = mods->child; m; m = m->next, i++) {
        ModuleEval *me = &s->modules[i];
        me->name = xstrdup(m->string);
        char mpath[512];
        snprintf(mpath, sizeof mpath, "%s.modules.%s", path, m->string);
        JsonReader mr;
        json_reader_init(&mr, m, source, mpath);
        json_get_int(&mr, "n", &me->n, true);
        json_get_int(&mr, "correct", &me->correct, true);
        json_get_double(&mr, "accuracy", &me->accuracy, true);
        get_ci(&mr, "ci95", me->ci95);
        json_get_double(&mr, "mean_answer_loss", &me->mean_answer_loss, true);
        if (finish(&mr, err, errlen)) return -1;
        if (check_eval_values(me->n, me->correct, me->accuracy, me->ci95, me->mean_answer_loss, source, mpath, err,
                              errlen))
            return -1;
    }
    if (s->correct < 0 || s->correct > s->n || s->greedy_n < 0 || s->greedy_agree < 0 ||
        s->greedy_agree > s->greedy_n || s->greedy_n > s->n) {
        set_err(err, errlen, "%s: %s: inconsistent counts (correct %ld of n %ld, greedy_agree %ld of greedy_n %ld)",
                source, path, s->correct, s->n, s->greedy_agree, s->greedy_n);
        return -1;
    }
    if (check_eval_values(s->n, s->correct, s->accuracy, s->ci95, s->mean_answer_loss, source, path, err, errlen))
        return -1;
    /* The modules partition the set: their counts add up to the set's. */
    if (s->n_modules > 0) {
        long n = 0, correct = 0;
        for (int m = 0; m < s->n_modules; m++) {
            n += s->modules[m].n;
            correct += s->modules[m].correct;
        }
        if (n != s->n || correct != s->correct) {
            set_err(err, errlen, "%s: %s.modules: counts add up to %ld correct of %ld, the set says %ld of %ld", source,
                    path, correct, n, s->correct, s->n);
            return -1;
        }
    }
    return 0;
}

/* The first config key whose value differs between a and b, as "KEY is A, but ... gives B" into out ("" when the
 * flattened values agree: the two then differ only in key order or a duplicated key). */
static void first_config_difference(const cJSON *recorded, const cJSON *effective, char *out, size_t n) {
    const cJSON *configs[2] = {recorded, effective};
    ConfigDiff d;
    config_diff(configs, 2, NULL, &d);
    out[0] = '\0';
    if (d.n_rows > 0) {
        const char *a = d.rows[0].values[0], *b = d.rows[0].values[1];
        snprintf(out, n, "%s is %.40s, but config_text with the overrides gives %.40s", d.rows[0].key,
                 a ? a : "absent", b ? b : "absent");
    }
    config_diff_free(&d);
}

/* "config" and "config_sha256" are what config_from_text computes from "config_text" and the overrides: an edited
 * config (another lr, another arch) under the hash of the original is refused here, in the one reader that compare,
 * diff, the report and export share. Both are compared exactly: the hash as text, the config as its printed JSON
 * (key order and duplicate keys included, which the writer reproduces and a forger might not). */
static int check_config_identity(const ResultRecord *rec, const char *source, char *err, size_t errlen) {
    char where[4200], hex[65];
    snprintf(where, sizeof where, "%s: config_text", source);
    cJSON *effective = NULL;
    char why[2048];
    if (config_from_text(rec->config_text, strlen(rec->config_text), &rec->prov, where, &effective, hex, why,
                         sizeof why) != 0) {
        /* an override the record lists that cannot be applied says "--set ...": the line still names the file */
        if (strncmp(why, source, strlen(source)) == 0) set_err(err, errlen, "%s", why);
        else set_err(err, errlen, "%s: overrides: %s", source, why);
        return -1;
    }
    int rc = 0;
    char *want = must_text(cJSON_PrintUnformatted(effective)), *have = must_text(cJSON_PrintUnformatted(rec->config));
    if (strcmp(hex, rec->config_sha256) != 0) {
        set_err(err, errlen, "%s: config_sha256: %s is not the hash of config_text and the overrides (%s): the record "
                "was edited", source, rec->config_sha256, hex);
        rc = -1;
    } else if (strcmp(want, have) != 0) {
        char what[256];
        first_config_difference(rec->config, effective, what, sizeof what);
        set_err(err, errlen, "%s: config: differs from config_text with the overrides applied (%s): the record was "
                "edited", source, what[0] ? what : "in key order or a duplicated key");
        rc = -1;
    }
    cJSON_free(want);
    cJSON_free(have);
    cJSON_Delete(effective);
    return rc;
}

int result_record_from_json(ResultRecord *rec, const cJSON *json, const char *source, char *err, size_t errlen) {
    memset(rec, 0, sizeof *rec);
    JsonReader r;
    json_reader_init(&r, json, source, "");
    const char *schema = "";
    long version = 0;
    json_get_string(&r, "schema", &schema, true);
    json_get_int(&r, "schema_version", &version, true);
    if (!r.error[0] && (strcmp(schema, RESULT_SCHEMA) != 0 || version != RESULT_SCHEMA_VERSION)) {
        const bool older = strcmp(schema, RESULT_SCHEMA) == 0 && version >= 1 && version < RESULT_SCHEMA_VERSION;
        set_err(err, errlen, "%s: schema is \"%s\" version %ld, expected \"%s\" version %d%s", source, schema, version,
                RESULT_SCHEMA, RESULT_SCHEMA_VERSION,
                older ? " (written before records carried config_text: evaluate the run again)" : "");
        return -1;
    }
    get_str(&r, "experiment", rec->experiment, sizeof rec->experiment, true);
    get_str(&r, "run", rec->run, sizeof rec->run, true);
    get_str(&r, "arch", rec->arch, sizeof rec->arch, true);
    get_str(&r, "loss_mode", rec->loss_mode, sizeof rec->loss_mode, true);
    const cJSON *config = json_get_object(&r, "config", true);
    get_sha(&r, "config_sha256", rec->config_sha256);
    const char *config_text = NULL;
    json_get_string(&r, "config_text", &config_text, true);
    run_provenance_read(&r, &rec->prov);
    get_str(&r, "code_version", rec->code_version, sizeof rec->code_version, true);
    const cJSON *ds = json_get_object(&r, "dataset", true);
    get_sha(&r, "tokenizer_sha256", rec->tokenizer_sha256);
    get_str(&r, "backend", rec->backend, sizeof rec->backend, true);
    get_str(&r, "hardware", rec->hardware, sizeof rec->hardware, true);
    get_str(&r, "precision", rec->precision, sizeof rec->precision, true);
    json_get_int(&r, "n_params", &rec->n_params, true);
    const cJSON *tr = json_get_object(&r, "training", true);
    const cJSON *ev = json_get_object(&r, "evaluation", true);
    if (finish(&r, err, errlen)) return -1;
    rec->config = must(cJSON_Duplicate(config, 1));
    rec->config_text = xstrdup(config_text);
    if (check_config_identity(rec, source, err, errlen)) return -1;

    JsonReader d;
    json_reader_init(&d, ds, source, "dataset");
    get_sha(&d, "train_sha256", rec->train_sha256);
    get_sha(&d, "interpolate_sha256", rec->interpolate_sha256);
    get_sha(&d, "extrapolate_sha256", rec->extrapolate_sha256);
    const cJSON *src = cJSON_GetObjectItemCaseSensitive(ds, "source");
    if (src) {
        json_get_object(&d, "source", false); /* marks it known; any JSON object is accepted as provenance */
        if (cJSON_IsObject(src)) rec->dataset_source = must(cJSON_Duplicate(src, 1));
    }
    if (finish(&d, err, errlen)) return -1;

    JsonReader t;
    json_reader_init(&t, tr, source, "training");
    json_get_int(&t, "steps", &rec->training.steps, true);
    json_get_int(&t, "tokens", &rec->training.tokens, true);
    json_get_double(&t, "wall_time_s", &rec->training.wall_time_s, true);
    json_get_double(&t, "final_train_loss", &rec->training.final_train_loss, true);
    json_get_double(&t, "tokens_per_s", &rec->training.tokens_per_s, true);
    get_str(&t, "backend", rec->training.backend, sizeof rec->training.backend, true);
    get_str(&t, "hardware", rec->training.hardware, sizeof rec->training.hardware, true);
    get_str(&t, "precision", rec->training.precision, sizeof rec->training.precision, true);
    if (finish(&t, err, errlen)) return -1;

    JsonReader e;
    json_reader_init(&e, ev, source, "evaluation");
    json_get_double(&e, "wall_time_s", &rec->evaluation.wall_time_s, true);
    json_get_double(&e, "mean_accuracy", &rec->evaluation.mean_accuracy, true);
    const cJSON *sets = json_get_object(&e, "sets", true);
    if (finish(&e, err, errlen)) return -1;
    JsonReader s;
    json_reader_init(&s, sets, source, "evaluation.sets");
    const cJSON *set_obj[EVAL_N_SETS];
    for (int i = 0; i < EVAL_N_SETS; i++) set_obj[i] = json_get_object(&s, EVAL_SET_NAMES[i], true);
    if (finish(&s, err, errlen)) return -1;
    for (int i = 0; i < EVAL_N_SETS; i++) {
        char path[64];
        snprintf(path, sizeof path, "evaluation.sets.%s", EVAL_SET_NAMES[i]);
        if (set_from_json(&rec->evaluation.sets[i], set_obj[i], source, path, err, errlen)) return -1;
    }
    if (record_check_count(rec->n_params, source, "", "n_params", err, errlen) ||
        check_training_numbers(rec->training.steps, rec->training.tokens, rec->training.wall_time_s,
                               rec->training.final_train_loss, rec->training.tokens_per_s, source, "training", err,
                               errlen) ||
        record_check_nonneg(rec->evaluation.wall_time_s, source, "evaluation", "wall_time_s", err, errlen) ||
        record_check_fraction(rec->evaluation.mean_accuracy, source, "evaluation", "mean_accuracy", err, errlen))
        return -1;
    {
        double mean = 0;
        for (int i = 0; i < EVAL_N_SETS; i++) mean += rec->evaluation.sets[i].accuracy / EVAL_N_SETS;
        if (fabs(mean - rec->evaluation.mean_accuracy) > 1e-9) {
            set_err(err, errlen, "%s: evaluation.mean_accuracy: %.17g disagrees with the mean of the sets' accuracies "
                                 "%.17g", source, rec->evaluation.mean_accuracy, mean);
            return -1;
        }
    }
    if (strcmp(rec->loss_mode, "qa") != 0 && strcmp(rec->loss_mode, "answer_only") != 0) {
        set_err(err, errlen, "%s: loss_mode: expected \"qa\" or \"answer_only\", got \"%s\"", source, rec->loss_mode);
        return -1;
    }
    return 0;
}

int result_record_load(ResultRecord *r, const char *path, char *err, size_t errlen) {
    memset(r, 0, sizeof *r);
    cJSON *j = json_load_file(path, JSON_KIND_RECORD, err, errlen);
    if (!j) return -1;
    int rc = result_record_from_json(r, j, path, err, errlen);
    cJSON_Delete(j);
    if (rc) result_record_free(r);
    return rc;
}

int result_record_load_in(ResultRecord *r, const char *path, const char *dir, const char *name, bool is_baseline,
                          char *err, size_t errlen) {
    char experiment[256];
    if (result_record_load(r, path, err, errlen) != 0) return -1;
    if (dir_own_name(dir, experiment, sizeof experiment, err, errlen) != 0 ||
        record_owner_check(path, r->run, r->experiment, name, is_baseline ? "its file name" : "the directory",
                           experiment, is_baseline ? "the baselines directory" : "the runs directory", err,
                           errlen) != 0) {
        result_record_free(r);
        return -1;
    }
    return 0;
}

void set_eval_free(SetEval *s) {
    for (int m = 0; m < s->n_modules; m++) free(s->modules[m].name);
    free(s->modules);
    routing_stats_free(s->routing);
    free(s->routing);
    memset(s, 0, sizeof *s);
}

void result_record_free(ResultRecord *r) {
    if (!r) return;
    cJSON_Delete(r->config);
    free(r->config_text);
    cJSON_Delete(r->dataset_source);
    for (int i = 0; i < EVAL_N_SETS; i++) set_eval_free(&r->evaluation.sets[i]);
    memset(r, 0, sizeof *r);
}

/* ---------------------------------------------------------------- train_summary.json ----------------------- */

int train_summary_load(TrainSummary *s, const char *path, char *err, size_t errlen) {
    memset(s, 0, sizeof *s);
    cJSON *j = json_load_file(path, JSON_KIND_RECORD, err, errlen);
    if (!j) return -1;
    JsonReader r;
    json_reader_init(&r, j, path, "");
    json_get_int(&r, "steps", &s->steps, true);
    json_get_int(&r, "tokens", &s->tokens, true);
    json_get_double(&r, "wall_time_s", &s->wall_time_s, true);
    json_get_double(&r, "final_train_loss", &s->final_train_loss, true);
    json_get_double(&r, "tokens_per_s", &s->tokens_per_s, true);
    get_str(&r, "backend", s->backend, sizeof s->backend, true);
    get_str(&r, "hardware", s->hardware, sizeof s->hardware, true);
    get_str(&r, "precision", s->precision, sizeof s->precision, true);
    get_sha(&r, "config_sha256", s->config_sha256);
    json_get_int(&r, "n_params", &s->n_params, true);
    get_str(&r, "code_version", s->code_version, sizeof s->code_version, true);
    if (cJSON_GetObjectItemCaseSensitive(j, "tokenizer_sha256")) get_sha(&r, "tokenizer_sha256", s->tokenizer_sha256);
    run_provenance_read(&r, &s->prov);
    /* train owns this file and may add fields: only the reader's own errors count, not unknown keys. */
    int rc = 0;
    if (r.error[0]) {
        set_err(err, errlen, "%s", r.error);
        rc = -1;
    } else if (check_training_numbers(s->steps, s->tokens, s->wall_time_s, s->final_train_loss, s->tokens_per_s, path,
                                      "", err, errlen) ||
               record_check_count(s->n_params, path, "", "n_params", err, errlen)) {
        rc = -1;
    }
    cJSON_Delete(j);
    return rc;
}

/* ---------------------------------------------------------------- analysis.json ---------------------------- */

cJSON *analysis_record_to_json(const AnalysisRecord *a) {
    cJSON *o = must(cJSON_CreateObject());
    must(cJSON_AddStringToObject(o, "schema", ANALYSIS_SCHEMA));
    must(cJSON_AddNumberToObject(o, "schema_version", ANALYSIS_SCHEMA_VERSION));
    must(cJSON_AddStringToObject(o, "experiment", a->experiment));
    must(cJSON_AddStringToObject(o, "run", a->run));
    must(cJSON_AddStringToObject(o, "arch", a->arch));
    must(cJSON_AddStringToObject(o, "loss_mode", a->loss_mode));
    run_provenance_to_json(o, &a->prov);
    must(cJSON_AddStringToObject(o, "code_version", a->code_version));
    must(cJSON_AddStringToObject(o, "backend", a->backend));
    must(cJSON_AddStringToObject(o, "hardware", a->hardware));
    must(cJSON_AddBoolToObject(o, "enabled", a->enabled));
    if (!a->enabled) return o; /* "analyze": {"enabled": false}: a record that says so, nothing else */
    must(cJSON_AddNumberToObject(o, "n_layers", a->n_layers));
    must(cJSON_AddStringToObject(o, "counterfactual", a->counterfactual ? a->counterfactual : ""));
    cJSON *ps = must(cJSON_AddArrayToObject(o, "prompts"));
    for (int k = 0; k < a->n_prompts; k++) {
        const AnalysisPrompt *p = &a->prompts[k];
        cJSON *po = must(cJSON_CreateObject());
        cJSON_AddItemToArray(ps, po);
        must(cJSON_AddStringToObject(po, "question", p->question));
        must(cJSON_AddStringToObject(po, "answer", p->answer));
        cJSON *pieces = must(cJSON_AddArrayToObject(po, "pieces"));
        for (int t = 0; t < p->n_positions; t++) cJSON_AddItemToArray(pieces, must(cJSON_CreateString(p->pieces[t])));
        must(cJSON_AddNumberToObject(po, "n_answer", p->n_answer));
        must(cJSON_AddBoolToObject(po, "model_correct", p->model_correct));
        cJSON *rows = must(cJSON_AddArrayToObject(po, "scores"));
        for (int l = 0; l < p->n_layers; l++)
            cJSON_AddItemToArray(rows, must(cJSON_CreateDoubleArray(p->scores + (size_t)l * p->n_positions, p->n_positions)));
        must(cJSON_AddNumberToObject(po, "depth_value", p->depth_value));
        must(cJSON_AddStringToObject(po, "svg", p->svg));
    }
    cJSON *ds = must(cJSON_AddObjectToObject(o, "depth_summary"));
    must(cJSON_AddStringToObject(ds, "name", a->summary_name));
    must(cJSON_AddNumberToObject(ds, "value", a->summary_value));
    must(cJSON_AddStringToObject(ds, "definition", a->summary_definition ? a->summary_definition : ""));
    return o;
}

int analysis_record_save(const AnalysisRecord *a, const char *path, char *err, size_t errlen) {
    cJSON *j = analysis_record_to_json(a);
    int rc = json_save_file(path, j, err, errlen);
    cJSON_Delete(j);
    return rc;
}

static int prompt_from_json(AnalysisPrompt *p, const cJSON *obj, const char *source, int k, int n_layers, char *err,
                            size_t errlen) {
    char path[64];
    snprintf(path, sizeof path, "prompts[%d]", k);
    JsonReader r;
    json_reader_init(&r, obj, source, path);
    const char *q = NULL, *ans = NULL;
    long n_answer = 0;
    json_get_string(&r, "question", &q, true);
    json_get_string(&r, "answer", &ans, true);
    const cJSON *pieces = json_get_array(&r, "pieces", true);
    json_get_int(&r, "n_answer", &n_answer, true);
    json_get_bool(&r, "model_correct", &p->model_correct, true);
    const cJSON *scores = json_get_array(&r, "scores", true);
    json_get_double(&r, "depth_value", &p->depth_value, true);
    get_str(&r, "svg", p->svg, sizeof p->svg, true);
    if (finish(&r, err, errlen)) return -1;
    p->question = xstrdup(q);
    p->answer = xstrdup(ans);
    p->n_positions = cJSON_GetArraySize(pieces);
    p->n_answer = (int)n_answer;
    p->n_layers = n_layers;
    if (record_check_fraction(p->depth_value, source, path, "depth_value", err, errlen)) return -1;
    if (p->n_answer < 1 || p->n_answer >= p->n_positions) {
        set_err(err, errlen, "%s: %s.n_answer: %ld is not in [1, %d)", source, path, n_answer, p->n_positions);
        return -1;
    }
    p->pieces = xcalloc((size_t)p->n_positions + 1, sizeof *p->pieces);
    int t = 0;
    for (const cJSON *c = pieces->child; c; c = c->next, t++) {
        if (!cJSON_IsString(c)) {
            set_err(err, errlen, "%s: %s.pieces[%d]: expected a string", source, path, t);
            return -1;
        }
        p->pieces[t] = xstrdup(c->valuestring);
    }
    if (cJSON_GetArraySize(scores) != n_layers) {
        set_err(err, errlen, "%s: %s.scores: %d rows, expected n_layers = %d", source, path, cJSON_GetArraySize(scores),
                n_layers);
        return -1;
    }
    p->scores = xcalloc((size_t)n_layers * p->n_positions + 1, sizeof *p->scores);
    int l = 0;
    for (const cJSON *row = scores->child; row; row = row->next, l++) {
        if (!cJSON_IsArray(row) || cJSON_GetArraySize(row) != p->n_positions) {
            set_err(err, errlen, "%s: %s.scores[%d]: expected an array of %d numbers (one per input position)", source,
                    path, l, p->n_positions);
            return -1;
        }
        int c = 0;
        for (const cJSON *v = row->child; v; v = v->next, c++) {
            if (!cJSON_IsNumber(v)) {
                set_err(err, errlen, "%s: %s.scores[%d][%d]: expected a number", source, path, l, c);
                return -1;
            }
            /* A score is an L2 norm of a change in answer distributions: finite and >= 0. */
            char key[64];
            snprintf(key, sizeof key, "scores[%d][%d]", l, c);
            if (record_check_nonneg(v->valuedouble, source, path, key, err, errlen)) return -1;
            p->scores[(size_t)l * p->n_positions + c] = v->valuedouble;
        }
    }
    return 0;
}

int analysis_record_from_json(AnalysisRecord *a, const cJSON *json, const char *source, char *err, size_t errlen) {
    memset(a, 0, sizeof *a);
    JsonReader r;
    json_reader_init(&r, json, source, "");
    const char *schema = "";
    long version = 0, n_layers = 0;
    json_get_string(&r, "schema", &schema, true);
    json_get_int(&r, "schema_version", &version, true);
    if (!r.error[0] && (strcmp(schema, ANALYSIS_SCHEMA) != 0 || version != ANALYSIS_SCHEMA_VERSION)) {
        set_err(err, errlen, "%s: schema is \"%s\" version %ld, expected \"%s\" version %d", source, schema, version,
                ANALYSIS_SCHEMA, ANALYSIS_SCHEMA_VERSION);
        return -1;
    }
    get_str(&r, "experiment", a->experiment, sizeof a->experiment, true);
    get_str(&r, "run", a->run, sizeof a->run, true);
    get_str(&r, "arch", a->arch, sizeof a->arch, true);
    get_str(&r, "loss_mode", a->loss_mode, sizeof a->loss_mode, true);
    run_provenance_read(&r, &a->prov);
    /* optional: records written before the provenance fields existed still load */
    get_str(&r, "code_version", a->code_version, sizeof a->code_version, false);
    get_str(&r, "backend", a->backend, sizeof a->backend, false);
    get_str(&r, "hardware", a->hardware, sizeof a->hardware, false);
    json_get_bool(&r, "enabled", &a->enabled, true);
    if (!r.error[0] && !a->enabled) return finish(&r, err, errlen);
    json_get_int(&r, "n_layers", &n_layers, true);
    const char *cf = NULL;
    json_get_string(&r, "counterfactual", &cf, true);
    const cJSON *prompts = json_get_array(&r, "prompts", true);
    const cJSON *ds = json_get_object(&r, "depth_summary", true);
    if (finish(&r, err, errlen)) return -1;
    if (n_layers < 1 || n_layers > 4096) {
        set_err(err, errlen, "%s: n_layers: %ld is out of range", source, n_layers);
        return -1;
    }
    a->n_layers = (int)n_layers;
    a->counterfactual = xstrdup(cf);
    JsonReader d;
    json_reader_init(&d, ds, source, "depth_summary");
    const char *def = NULL;
    get_str(&d, "name", a->summary_name, sizeof a->summary_name, true);
    json_get_double(&d, "value", &a->summary_value, true);
    json_get_string(&d, "definition", &def, true);
    if (finish(&d, err, errlen)) return -1;
    if (record_check_fraction(a->summary_value, source, "depth_summary", "value", err, errlen)) return -1;
    a->summary_definition = xstrdup(def);
    a->n_prompts = cJSON_GetArraySize(prompts);
    a->prompts = xcalloc((size_t)a->n_prompts + 1, sizeof *a->prompts);
    int k = 0;
    for (const cJSON *p = prompts->child; p; p = p->next, k++)
        if (prompt_from_json(&a->prompts[k], p, source, k, a->n_layers, err, errlen)) return -1;
    return 0;
}

int analysis_record_load(AnalysisRecord *a, const char *path, char *err, size_t errlen) {
    memset(a, 0, sizeof *a);
    cJSON *j = json_load_file(path, JSON_KIND_RECORD, err, errlen);
    if (!j) return -1;
    int rc = analysis_record_from_json(a, j, path, err, errlen);
    cJSON_Delete(j);
    if (rc) analysis_record_free(a);
    return rc;
}

void analysis_record_free(AnalysisRecord *a) {
    if (!a) return;
    for (int k = 0; k < a->n_prompts; k++) {
        AnalysisPrompt *p = &a->prompts[k];
        free(p->question);
        free(p->answer);
        if (p->pieces)
            for (int t = 0; t < p->n_positions; t++) free(p->pieces[t]);
        free(p->pieces);
        free(p->scores);
    }
    free(a->prompts);
    free(a->counterfactual);
    free(a->summary_definition);
    memset(a, 0, sizeof *a);
}
