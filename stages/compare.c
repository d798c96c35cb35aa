/* compare: checks each run's result.json against a recorded baseline record, metric by metric, with declared
 * per-metric tolerances.
 *
 *   bin/compare --baselines reports/baselines/EXP --runs runs/EXP [--tolerances FILE] [--only RUN,RUN] [--strict]
 *               [--config-change=error|note] [--only-failures]
 *
 * Baselines are files <NAME>.result.json (a copy of a result.json); each is compared with <runs>/<NAME>/result.json.
 * NAME is a run directory name: RUN for the config's own seed, RUN.seed<S> for another seed (INTERFACES.md §2).
 *
 * Verdict per metric: ok (within tolerance); WORSE (a loss or disagreement count higher, an accuracy lower, beyond
 * the tolerance); BETTER (the other direction: printed, a failure only with --strict); CHANGED (a count that is not
 * equal: always a failure).
 * Exit status: 0 nothing failed; 1 some metric WORSE or CHANGED (or BETTER with --strict); 2 the records cannot be
 * compared: a missing record, a different dataset or tokenizer sha256, a different config_sha256 (unless
 * --config-change=note, which prints one note line naming the run and the config keys that differ and counts the run
 * as passed: make reproduce's choice, where an edited config is the user's intent), or a bad tolerances file.
 *
 * Tolerances file (default <baselines>/tolerances.json):
 *   {"comment": "...",
 *    "tolerances": {"<class>": {"abs": A, ["rel": R,] "comment": "why", ["within_baseline_ci95": bool]}, ...},
 *    ["seed_spread": {"k": K, "comment": "why"}]}
 * with one entry for every class: accuracy, mean_answer_loss (per evaluation set), module_mean_answer_loss (per
 * module), final_train_loss, count, greedy_disagreements.
 * A metric passes when |new - baseline| <= max(A, R * |baseline|) (R defaults to 0; a relative slack of 1e-12 absorbs
 * printing round trips), or, for accuracies with within_baseline_ci95, when the new value lies inside the baseline's
 * Wilson 95% interval (for mean_accuracy: the mean of the two sets' interval ends).
 *
 * Seeds: when the baselines hold records of two or more seeds of one run config (RUN.result.json and
 * RUN.seed<S>.result.json), each of those names is compared against the seeds' statistics instead of its own record:
 * the baseline value is the mean over the seeds and the allowed distance max(A, R * |mean|, K * sd), sd being the
 * sample standard deviation over the seeds (counts and greedy disagreements stay exact). K comes from "seed_spread",
 * which the file must then have. */
#include <ctype.h>
#include <dirent.h>
#include <math.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pipeline/atomic_file.h"
#include "pipeline/cli.h"
#include "pipeline/config.h"
#include "pipeline/log.h"
#include "pipeline/result_record.h"

/* Pooled (per set) and per-module answer losses are separate classes: a module's mean over its ~100-200 examples
 * moves an order of magnitude more than the set's mean under the same perturbation (reports/baselines/EXP/spread.json). */
enum { M_ACCURACY, M_LOSS, M_MODULE_LOSS, M_TRAIN_LOSS, M_COUNT, M_GREEDY, M_N_CLASSES };
static const char *const CLASS_NAMES[M_N_CLASSES] = {"accuracy", "mean_answer_loss", "module_mean_answer_loss",
                                                     "final_train_loss", "count", "greedy_disagreements"};

typedef struct {
    double abs, rel;
    bool within_ci;
} Tolerance;

typedef struct {
    Tolerance cls[M_N_CLASSES];
    double seed_k; /* sd multiple for multi-seed baselines; 0 = the file has no "seed_spread" */
} Tolerances;

typedef enum { V_OK, V_BETTER, V_WORSE, V_CHANGED } Verdict;
static const char *const VERDICT_NAMES[] = {"ok", "BETTER", "WORSE", "CHANGED"};

typedef struct {
    bool strict;             /* BETTER fails too */
    bool config_change_note; /* a different config_sha256 is a note, not "not comparable" */
    bool only_failures;
} CompareOptions;

typedef struct {
    char name[384];
    int klass;
    double value;
    double ci95[2]; /* accuracies only */
    double seed_sd; /* multi-seed baselines: sample sd over the seeds; 0 otherwise */
} Metric;

typedef struct {
    Metric *m;
    int n, cap;
} MetricList;

static void add_metric(MetricList *l, int klass, double value, const double *ci, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));
static void add_metric(MetricList *l, int klass, double value, const double *ci, const char *fmt, ...) {
    if (l->n == l->cap) {
        l->cap = l->cap ? 2 * l->cap : 64;
        l->m = xrealloc(l->m, (size_t)l->cap * sizeof *l->m);
    }
    Metric *m = &l->m[l->n++];
    memset(m, 0, sizeof *m);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(m->name, sizeof m->name, fmt, ap);
    va_end(ap);
    m->klass = klass;
    m->value = value;
    if (ci) m->ci95[0] = ci[0], m->ci95[1] = ci[1];
}

/* Every compared number of a record. Wall times and throughput are deliberately absent: they vary run to run. */
static void collect_metrics(const ResultRecord *r, MetricList *l) {
    add_metric(l, M_COUNT, (double)r->n_params, NULL, "n_params");
    add_metric(l, M_COUNT, (double)r->training.steps, NULL, "training.steps");
    add_metric(l, M_COUNT, (double)r->training.tokens, NULL, "training.tokens");
    add_metric(l, M_TRAIN_LOSS, r->training.final_train_loss, NULL, "training.final_train_loss");
    /* mean_accuracy has no interval of its own: for the CI rule use the mean of the two sets' interval ends. */
    double mean_ci[2] = {0.5 * (r->evaluation.sets[0].ci95[0] + r->evaluation.sets[1].ci95[0]),
                         0.5 * (r->evaluation.sets[0].ci95[1] + r->evaluation.sets[1].ci95[1])};
    add_metric(l, M_ACCURACY, r->evaluation.mean_accuracy, mean_ci, "evaluation.mean_accuracy");
    for (int s = 0; s < EVAL_N_SETS; s++) {
        const SetEval *se = &r->evaluation.sets[s];
        const char *sn = EVAL_SET_NAMES[s];
        add_metric(l, M_COUNT, (double)se->n, NULL, "%s.n", sn);
        add_metric(l, M_ACCURACY, se->accuracy, se->ci95, "%s.accuracy", sn);
        add_metric(l, M_LOSS, se->mean_answer_loss, NULL, "%s.mean_answer_loss", sn);
        add_metric(l, M_COUNT, (double)se->greedy_n, NULL, "%s.greedy_n", sn);
        add_metric(l, M_GREEDY, (double)(se->greedy_n - se->greedy_agree), NULL, "%s.greedy_disagreements", sn);
        for (int i = 0; i < se->n_modules; i++) {
            const ModuleEval *me = &se->modules[i];
            add_metric(l, M_COUNT, (double)me->n, NULL, "%s.%s.n", sn, me->name);
            add_metric(l, M_ACCURACY, me->accuracy, me->ci95, "%s.%s.accuracy", sn, me->name);
            add_metric(l, M_MODULE_LOSS, me->mean_answer_loss, NULL, "%s.%s.mean_answer_loss", sn, me->name);
        }
    }
}

static const Metric *find_metric(const MetricList *l, const char *name) {
    for (int i = 0; i < l->n; i++)
        if (strcmp(l->m[i].name, name) == 0) return &l->m[i];
    return NULL;
}

/* A finite number >= 0 (> 0 when positive), else an error naming path.key. */
static int check_nonneg(double v, bool positive, const char *path, const char *key, char *err, size_t errlen) {
    if (isfinite(v) && (positive ? v > 0 : v >= 0)) return 0;
    snprintf(err, errlen, "%.700s: %.100s: must be a %s number (got %g)", path, key, positive ? "positive" : "non-negative",
             v);
    return -1;
}

/* Reads the tolerances file; returns -1 with a message in err on any problem (unknown keys included). */
static int load_tolerances(const char *path, Tolerances *tol, char *err, size_t errlen) {
    memset(tol, 0, sizeof *tol);
    cJSON *j = json_load_file(path, JSON_KIND_CONFIG, err, errlen);
    if (!j) return -1;
    JsonReader r;
    json_reader_init(&r, j, path, "");
    const char *comment = NULL;
    json_get_string(&r, "comment", &comment, true);
    const cJSON *t = json_get_object(&r, "tolerances", true);
    const cJSON *spread = json_get_object(&r, "seed_spread", false);
    int rc = json_reader_finish(&r, err, errlen);
    if (rc == 0 && spread) {
        JsonReader sr;
        json_reader_init(&sr, spread, path, "seed_spread");
        const char *why = NULL;
        json_get_double(&sr, "k", &tol->seed_k, true);
        json_get_string(&sr, "comment", &why, true);
        rc = json_reader_finish(&sr, err, errlen);
        if (rc == 0) rc = check_nonneg(tol->seed_k, true, path, "seed_spread.k", err, errlen);
    }
    if (rc == 0) {
        JsonReader tr;
        json_reader_init(&tr, t, path, "tolerances");
        const cJSON *cls[M_N_CLASSES];
        for (int c = 0; c < M_N_CLASSES; c++) cls[c] = json_get_object(&tr, CLASS_NAMES[c], true);
        rc = json_reader_finish(&tr, err, errlen);
        for (int c = 0; c < M_N_CLASSES && rc == 0; c++) {
            char p[64], k[96];
            snprintf(p, sizeof p, "tolerances.%s", CLASS_NAMES[c]);
            JsonReader cr;
            json_reader_init(&cr, cls[c], path, p);
            const char *why = NULL;
            Tolerance *tc = &tol->cls[c];
            json_get_double(&cr, "abs", &tc->abs, true);
            json_get_double(&cr, "rel", &tc->rel, false);
            json_get_string(&cr, "comment", &why, true);
            if (c == M_ACCURACY) json_get_bool(&cr, "within_baseline_ci95", &tc->within_ci, false);
            rc = json_reader_finish(&cr, err, errlen);
            snprintf(k, sizeof k, "%s.abs", p);
            if (rc == 0) rc = check_nonneg(tc->abs, false, path, k, err, errlen);
            snprintf(k, sizeof k, "%s.rel", p);
            if (rc == 0) rc = check_nonneg(tc->rel, false, path, k, err, errlen);
            /* A relative slack on an exact class would silently turn "must match" into "roughly". */
            if (rc == 0 && tc->rel != 0 && (c == M_COUNT || c == M_GREEDY)) {
                snprintf(err, errlen, "%.700s: %.100s: not allowed for %s (it must match exactly or by abs)", path, k,
                         CLASS_NAMES[c]);
                rc = -1;
            }
        }
    }
    cJSON_Delete(j);
    return rc;
}

/* The distance from the baseline a metric may move: max(abs, rel * |baseline|), and for multi-seed baselines at least
 * k * sd (losses and accuracies only: counts and disagreements stay exact). */
static double allowed_delta(const Tolerances *tol, const Metric *b) {
    const Tolerance *t = &tol->cls[b->klass];
    double a = fmax(t->abs, t->rel * fabs(b->value));
    if (b->klass != M_COUNT && b->klass != M_GREEDY) a = fmax(a, tol->seed_k * b->seed_sd);
    return a;
}

/* The verdict on one metric: b the baseline (or the seeds' mean), value the new number. */
static Verdict judge_metric(const Tolerances *tol, const Metric *b, double value) {
    double delta = value - b->value;
    /* The 1e-12 relative slack only absorbs decimal round trips of equal numbers, never a real change. */
    bool ok = fabs(delta) <= allowed_delta(tol, b) + 1e-12 * fmax(1.0, fabs(b->value));
    if (!ok && tol->cls[b->klass].within_ci && b->klass == M_ACCURACY && (b->ci95[0] != 0 || b->ci95[1] != 0))
        ok = value >= b->ci95[0] && value <= b->ci95[1];
    if (ok) return V_OK;
    if (b->klass == M_COUNT) return V_CHANGED;
    /* For losses and disagreement counts "worse" means larger; for accuracies, smaller. */
    bool worse = b->klass == M_ACCURACY ? delta < 0 : delta > 0;
    return worse ? V_WORSE : V_BETTER;
}

/* "" if the two records describe the same experiment inputs, else the name of the first difference. */
static const char *unlike_field(const ResultRecord *a, const ResultRecord *b) {
    if (strcmp(a->config_sha256, b->config_sha256) != 0) return "config_sha256";
    if (strcmp(a->train_sha256, b->train_sha256) != 0) return "dataset.train_sha256";
    if (strcmp(a->interpolate_sha256, b->interpolate_sha256) != 0) return "dataset.interpolate_sha256";
    if (strcmp(a->extrapolate_sha256, b->extrapolate_sha256) != 0) return "dataset.extrapolate_sha256";
    if (strcmp(a->tokenizer_sha256, b->tokenizer_sha256) != 0) return "tokenizer_sha256";
    return "";
}

static const char *field_value(const ResultRecord *r, const char *field) {
    if (strcmp(field, "config_sha256") == 0) return r->config_sha256;
    if (strcmp(field, "dataset.train_sha256") == 0) return r->train_sha256;
    if (strcmp(field, "dataset.interpolate_sha256") == 0) return r->interpolate_sha256;
    if (strcmp(field, "dataset.extrapolate_sha256") == 0) return r->extrapolate_sha256;
    return r->tokenizer_sha256;
}

/* Appends to out (size n) the dotted paths of the config keys whose values differ between a and b, as
 * "path base -> new" (a value at most 24 characters), separated by "; ". */
static void config_diff(const cJSON *a, const cJSON *b, const char *path, char *out, size_t n) {
    if (cJSON_IsObject(a) && cJSON_IsObject(b)) {
        for (const cJSON *x = a->child; x; x = x->next) {
            char p[256];
            snprintf(p, sizeof p, "%s%s%s", path, path[0] ? "." : "", x->string);
            config_diff(x, cJSON_GetObjectItemCaseSensitive(b, x->string), p, out, n);
        }
        for (const cJSON *y = b->child; y; y = y->next)
            if (!cJSON_GetObjectItemCaseSensitive(a, y->string)) {
                char p[256];
                snprintf(p, sizeof p, "%s%s%s", path, path[0] ? "." : "", y->string);
                config_diff(NULL, y, p, out, n);
            }
        return;
    }
    if (a && b && cJSON_Compare(a, b, true)) return;
    char *sa = a ? cJSON_PrintUnformatted(a) : NULL, *sb = b ? cJSON_PrintUnformatted(b) : NULL;
    size_t len = strlen(out);
    snprintf(out + len, n - len, "%s%s %.24s%s -> %.24s%s", len ? "; " : "", path, sa ? sa : "(absent)",
             sa && strlen(sa) > 24 ? "..." : "", sb ? sb : "(absent)", sb && strlen(sb) > 24 ? "..." : "");
    free(sa);
    free(sb);
}

/* The baseline a run is compared against: one record, or the mean and sd of several seeds' records. */
typedef struct {
    ResultRecord rec;   /* the baseline record of the same name (its hashes are checked against the new record) */
    MetricList metrics; /* values: that record's, or the seeds' means with seed_sd set */
    int n_seeds;        /* 1, or the number of seed records pooled */
} Baseline;

/* The run config a run directory name belongs to: "moeut_qa.seed2" -> length of "moeut_qa". */
static size_t run_config_len(const char *name) {
    const char *dot = strrchr(name, '.');
    if (!dot || strncmp(dot, ".seed", 5) != 0 || !dot[5]) return strlen(name);
    for (const char *p = dot + 5; *p; p++)
        if (!isdigit((unsigned char)*p)) return strlen(name);
    return (size_t)(dot - name);
}

static bool same_run_config(const char *a, const char *b) {
    size_t la = run_config_len(a);
    return la == run_config_len(b) && strncmp(a, b, la) == 0;
}

/* Loads the baseline for `name`; names[0..n) are all baseline names. Returns 0, or 2 after logging why not. */
static int load_baseline(Baseline *bl, const char *baselines, const char *name, char *const *names, int n) {
    char path[4096], err[1024];
    memset(bl, 0, sizeof *bl);
    snprintf(path, sizeof path, "%s/%s.result.json", baselines, name);
    if (result_record_load(&bl->rec, path, err, sizeof err)) {
        log_error("%s", err);
        return 2;
    }
    collect_metrics(&bl->rec, &bl->metrics);
    bl->n_seeds = 1;
    int n_group = 0;
    for (int i = 0; i < n; i++) n_group += same_run_config(names[i], name);
    if (n_group < 2) return 0; /* main checked that the tolerances file has seed_spread.k for groups */
    /* Sums of the deviations from this name's own record (shifted, so that a tiny sd of a large value survives). */
    int nm = bl->metrics.n;
    double *sum = xcalloc((size_t)nm, sizeof *sum), *sum2 = xcalloc((size_t)nm, sizeof *sum2);
    int rc = 0;
    for (int i = 0; i < n && rc == 0; i++) {
        if (!same_run_config(names[i], name)) continue;
        ResultRecord s;
        snprintf(path, sizeof path, "%s/%s.result.json", baselines, names[i]);
        if (result_record_load(&s, path, err, sizeof err)) {
            log_error("%s", err);
            rc = 2;
            break;
        }
        /* Seeds differ in config_sha256 (by their --set train.seed), never in the data they were trained on. */
        memcpy(s.config_sha256, bl->rec.config_sha256, sizeof s.config_sha256);
        const char *diff = unlike_field(&bl->rec, &s);
        if (diff[0]) {
            log_error("%s: cannot pool with %s/%s.result.json: %s differs", path, baselines, name, diff);
            rc = 2;
        }
        MetricList sm = {0};
        collect_metrics(&s, &sm);
        for (int k = 0; k < nm && rc == 0; k++) {
            const Metric *m = find_metric(&sm, bl->metrics.m[k].name);
            if (!m) {
                log_error("%s: no %s (the other seeds' baselines have it)", path, bl->metrics.m[k].name);
                rc = 2;
                break;
            }
            double d = m->value - bl->metrics.m[k].value;
            /* Counts must agree across seeds exactly: pooling unequal counts would hide a broken baseline. */
            if (bl->metrics.m[k].klass == M_COUNT && d != 0) {
                log_error("%s: %s differs from %s/%s.result.json's (%.0f vs %.0f)", path, m->name, baselines, name,
                          m->value, bl->metrics.m[k].value);
                rc = 2;
                break;
            }
            sum[k] += d;
            sum2[k] += d * d;
        }
        free(sm.m);
        result_record_free(&s);
    }
    if (rc == 0) {
        for (int k = 0; k < nm; k++) {
            Metric *m = &bl->metrics.m[k];
            double var = (sum2[k] - sum[k] * sum[k] / n_group) / (n_group - 1);
            m->value += sum[k] / n_group;
            m->seed_sd = var > 0 ? sqrt(var) : 0;
        }
        bl->n_seeds = n_group;
    }
    free(sum);
    free(sum2);
    return rc;
}

static void baseline_free(Baseline *bl) {
    free(bl->metrics.m);
    result_record_free(&bl->rec);
}

/* Compares one run. Returns 0 (nothing failed), 1 (some metric failed) or 2 (not comparable); *noted is set when the
 * run was passed with a note instead of compared (--config-change=note). */
static int compare_run(const char *run, const char *baselines, char *const *names, int n_names, const char *runs,
                       const Tolerances *tol, const CompareOptions *o, bool *noted) {
    char err[1024], baseline_path[4096], result_path[4096];
    snprintf(baseline_path, sizeof baseline_path, "%s/%s.result.json", baselines, run);
    snprintf(result_path, sizeof result_path, "%s/%s/result.json", runs, run);
    Baseline bl;
    if (load_baseline(&bl, baselines, run, names, n_names)) {
        baseline_free(&bl);
        return 2;
    }
    if (!file_exists(result_path)) {
        log_error("%s: missing result record (baseline %s exists)", result_path, baseline_path);
        baseline_free(&bl);
        return 2;
    }
    ResultRecord cur;
    if (result_record_load(&cur, result_path, err, sizeof err)) {
        log_error("%s", err);
        baseline_free(&bl);
        return 2;
    }
    const char *diff = unlike_field(&bl.rec, &cur);
    if (diff[0] && strcmp(diff, "config_sha256") == 0 && o->config_change_note) {
        char what[1024] = "";
        config_diff(bl.rec.config, cur.config, "", what, sizeof what);
        printf("note: %s: not compared: its config changed since the baseline (%s; config_sha256 %.12s... -> "
               "%.12s...)\n",
               run, what[0] ? what : "same settings, different file bytes or --set overrides", bl.rec.config_sha256,
               cur.config_sha256);
        /* Dataset and tokenizer must still match: a config edit does not explain other inputs changing. */
        ResultRecord tmp = cur;
        memcpy(tmp.config_sha256, bl.rec.config_sha256, sizeof tmp.config_sha256);
        diff = unlike_field(&bl.rec, &tmp);
        if (!diff[0]) {
            baseline_free(&bl);
            result_record_free(&cur);
            *noted = true;
            return 0;
        }
    }
    if (diff[0]) {
        log_error("%s: cannot compare with %s: %s differs (baseline %.12s..., new %.12s...)", result_path,
                  baseline_path, diff, field_value(&bl.rec, diff), field_value(&cur, diff));
        baseline_free(&bl);
        result_record_free(&cur);
        return 2;
    }
    MetricList cm = {0};
    collect_metrics(&cur, &cm);
    const MetricList *bm = &bl.metrics;
    int status = 0, n_better = 0;
    if (bl.n_seeds > 1)
        printf("== %s: mean of %d seeds' baselines (%s/%.*s[.seed<S>].result.json; tolerance at least %g sd) vs %s\n",
               run, bl.n_seeds, baselines, (int)run_config_len(run), run, tol->seed_k, result_path);
    else
        printf("== %s: %s vs %s\n", run, baseline_path, result_path);
    printf("%-62s %14s %14s %12s %10s  %s\n", "metric", bl.n_seeds > 1 ? "seeds' mean" : "baseline", "new", "delta",
           "tolerance", "status");
    for (int i = 0; i < bm->n; i++) {
        const Metric *b = &bm->m[i];
        const Metric *c = find_metric(&cm, b->name);
        if (!c) {
            printf("%-62s %14.6g %14s %12s %10s  MISSING\n", b->name, b->value, "-", "-", "-");
            status = 2;
            continue;
        }
        Verdict v = judge_metric(tol, b, c->value);
        bool fails = v == V_WORSE || v == V_CHANGED || (v == V_BETTER && o->strict);
        if (fails && status < 1) status = 1;
        n_better += v == V_BETTER;
        if (!o->only_failures || v != V_OK)
            printf("%-62s %14.6g %14.6g %+12.4g %10.4g  %s%s\n", b->name, b->value, c->value, c->value - b->value,
                   allowed_delta(tol, b), VERDICT_NAMES[v], v == V_BETTER && !o->strict ? " (not a failure)" : "");
    }
    for (int i = 0; i < cm.n; i++)
        if (!find_metric(bm, cm.m[i].name)) {
            printf("%-62s %14s %14.6g %12s %10s  NEW (not in baseline)\n", cm.m[i].name, "-", cm.m[i].value, "-", "-");
            status = 2;
        }
    if (status == 0 && n_better)
        printf("== %s: within tolerances or better (%d metric(s) BETTER than the baseline%s)\n\n", run, n_better,
               " - pass --strict to count them as failures");
    else
        printf("== %s: %s\n\n", run,
               status == 0 ? "within tolerances" : (status == 1 ? "OUTSIDE tolerances" : "not comparable"));
    free(cm.m);
    baseline_free(&bl);
    result_record_free(&cur);
    return status;
}

/* Whether name is in the comma-separated list (NULL list = everything); a seed's name RUN.seed<S> is in it when RUN
 * is (make reproduce passes --only with the run configs). */
static bool in_list(const char *list, const char *name) {
    if (!list) return true;
    size_t n = strlen(name), nc = run_config_len(name);
    for (const char *p = list; *p;) {
        const char *e = strchr(p, ',');
        size_t len = e ? (size_t)(e - p) : strlen(p);
        if ((len == n && strncmp(p, name, n) == 0) || (len == nc && strncmp(p, name, nc) == 0)) return true;
        if (!e) break;
        p = e + 1;
    }
    return false;
}

static int cmp_str(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

static const char *SUMMARY =
    "Compares each run's result.json with the baseline record <baselines>/<RUN>.result.json metric by metric, with "
    "the per-metric tolerances of the tolerances file (default <baselines>/tolerances.json); with baselines of "
    "several seeds (RUN.result.json, RUN.seed<S>.result.json), against the seeds' mean with a tolerance of at least "
    "seed_spread.k standard deviations. Prints a table (metric, baseline, new, delta, tolerance, status: ok, WORSE, "
    "BETTER, CHANGED). Exit 0: nothing WORSE or CHANGED (BETTER is reported, a failure only with --strict); 1: a "
    "metric WORSE or a count CHANGED; 2: a missing record or records of different config / dataset / tokenizer (not "
    "comparable; with --config-change=note a different config is one note line and passes).";

int compare_main(int argc, char **argv) {
    log_set_program("compare");
    const char *baselines = NULL, *runs = NULL, *tolerances = NULL, *only = NULL, *config_change = "error";
    CompareOptions o = {0};
    CliOption opts[] = {
        {"baselines", OPT_STRING, &baselines, "directory of <RUN>.result.json baseline records", true},
        {"runs", OPT_STRING, &runs, "directory of run directories <RUN>/result.json", true},
        {"tolerances", OPT_STRING, &tolerances, "tolerances file (default <baselines>/tolerances.json)", false},
        {"only", OPT_STRING, &only,
         "comma-separated runs to compare; RUN also selects its seeds RUN.seed<S> (default: every baseline record)",
         false},
        {"only-failures", OPT_FLAG, &o.only_failures,
         "print only metrics outside their tolerance (WORSE, BETTER, CHANGED; default: all)", false},
        {"strict", OPT_FLAG, &o.strict, "a metric BETTER than its baseline beyond the tolerance fails too", false},
        {"config-change", OPT_STRING, &config_change,
         "error (default): a run whose config_sha256 differs from its baseline's is not comparable (exit 2); note: "
         "print one note line naming the run and the changed config keys, and pass it",
         false},
    };
    cli_parse(argc, argv, "compare", SUMMARY, opts, (int)(sizeof opts / sizeof opts[0]));
    if (strcmp(config_change, "note") == 0) o.config_change_note = true;
    else if (strcmp(config_change, "error") != 0) {
        log_error("--config-change: expected error or note (got '%s')", config_change);
        return 2;
    }

    char tol_path[4096];
    if (tolerances) snprintf(tol_path, sizeof tol_path, "%s", tolerances);
    else snprintf(tol_path, sizeof tol_path, "%s/tolerances.json", baselines);
    Tolerances tol;
    char err[1024];
    if (load_tolerances(tol_path, &tol, err, sizeof err)) {
        log_error("%s", err);
        return 2;
    }

    DIR *d = opendir(baselines);
    if (!d) {
        log_error("%s: cannot open the baselines directory", baselines);
        return 2;
    }
    /* Every baseline name (seeds of runs left out by --only included: none is pooled, but all are listed). */
    char **all = NULL;
    int n_all = 0;
    const char *suffix = ".result.json";
    for (struct dirent *e; (e = readdir(d));) {
        size_t n = strlen(e->d_name), k = strlen(suffix);
        if (n > k && strcmp(e->d_name + n - k, suffix) == 0) {
            all = xrealloc(all, (size_t)(n_all + 1) * sizeof *all);
            all[n_all] = xstrdup(e->d_name);
            all[n_all][n - k] = '\0';
            n_all++;
        }
    }
    closedir(d);
    if (n_all) qsort(all, (size_t)n_all, sizeof *all, cmp_str);
    char **names = xcalloc((size_t)n_all + 1, sizeof *names); /* the selected ones (pointers into all) */
    int n_names = 0;
    for (int i = 0; i < n_all; i++)
        if (in_list(only, all[i])) names[n_names++] = all[i];
    int worst = 0;
    if (n_names == 0) {
        log_error("%s: no baseline records (<RUN>.result.json)%s%s", baselines, only ? " for --only " : "",
                  only ? only : "");
        worst = 2;
    }
    /* Baselines of several seeds of one run config are pooled with seed_spread.k, which the file must then declare. */
    for (int i = 0; i < n_names && worst == 0 && tol.seed_k <= 0; i++)
        for (int j = 0; j < n_all; j++)
            if (all[j] != names[i] && same_run_config(all[j], names[i])) {
                log_error("%s: %s holds several seeds of %.*s (%s.result.json, %s.result.json), so the tolerances file "
                          "needs \"seed_spread\": {\"k\": K, \"comment\": \"why\"}",
                          tol_path, baselines, (int)run_config_len(names[i]), names[i], names[i], all[j]);
                worst = 2;
                break;
            }
    /* Every run asked for with --only must have a baseline. */
    if (only && worst == 0) {
        char *copy = xstrdup(only);
        for (char *save = NULL, *tok = strtok_r(copy, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
            bool found = false;
            for (int i = 0; i < n_names && !found; i++) found = strcmp(names[i], tok) == 0;
            if (!found) {
                log_error("%s/%s.result.json: missing baseline record (asked for by --only)", baselines, tok);
                worst = 2;
            }
        }
        free(copy);
    }
    /* A run that cannot be compared stops nothing: the others are still reported. */
    bool selection_ok = worst == 0;
    int n_noted = 0;
    for (int i = 0; i < n_names && selection_ok; i++) {
        bool noted = false;
        int s = compare_run(names[i], baselines, all, n_all, runs, &tol, &o, &noted);
        n_noted += noted;
        if (s > worst) worst = s;
    }
    /* Runs without a baseline are reported, not compared: a new run is not a regression. */
    DIR *rd = selection_ok ? opendir(runs) : NULL;
    if (rd) {
        for (struct dirent *e; (e = readdir(rd));) {
            if (e->d_name[0] == '.') continue;
            char rpath[4096];
            snprintf(rpath, sizeof rpath, "%s/%s/result.json", runs, e->d_name);
            if (!file_exists(rpath)) continue;
            bool known = false;
            for (int i = 0; i < n_names && !known; i++) known = strcmp(names[i], e->d_name) == 0;
            if (known) continue;
            /* Left out by --only is not the same as having no baseline (make reproduce RUNS=... passes --only). */
            bool has_baseline = false;
            for (int i = 0; i < n_all && !has_baseline; i++) has_baseline = strcmp(all[i], e->d_name) == 0;
            if (has_baseline) printf("note: %s not compared (not in --only)\n", rpath);
            else printf("note: %s has no baseline in %s (not compared)\n", rpath, baselines);
        }
        closedir(rd);
    }
    if (selection_ok) {
        char noted_text[96] = "";
        if (n_noted)
            snprintf(noted_text, sizeof noted_text, " (%d of them not compared: config changed since the baseline)",
                     n_noted);
        printf("compare: %d run(s)%s: %s\n", n_names, noted_text,
               worst == 0 ? "all metrics within tolerances (or better)"
                          : (worst == 1 ? "some metric outside its tolerance" : "some records missing or not comparable"));
    }
    for (int i = 0; i < n_all; i++) free(all[i]);
    free(all);
    free(names);
    return worst;
}

#ifndef STAGE_NO_MAIN
int main(int argc, char **argv) { return compare_main(argc, argv); }
#endif
