/* compare: checks each run's result.json against a recorded baseline record, metric by metric, with declared
 * per-metric tolerances.
 *
 *   bin/compare --baselines reports/baselines/EXP --runs runs/EXP [--tolerances FILE] [--only RUN,RUN]
 *
 * Baselines are files <RUN>.result.json (a copy of a result.json); each is compared with <runs>/<RUN>/result.json.
 * Exit status: 0 every metric within tolerance; 1 some metric outside its tolerance (a regression, or an unexplained
 * change); 2 the records cannot be compared: a missing record, different config_sha256, dataset or tokenizer
 * sha256 (one line naming what differs), or a bad tolerances file.
 *
 * Tolerances file (default <baselines>/tolerances.json):
 *   {"comment": "...", "tolerances": {"<class>": {"abs": X, "comment": "why", ["within_baseline_ci95": bool]}}}
 * with one entry for every class: accuracy, mean_answer_loss, final_train_loss, count, greedy_disagreements.
 * A metric passes when |new - baseline| <= abs (with a relative slack of 1e-12 for printing round trips), or, for
 * accuracies with within_baseline_ci95, when the new value lies inside the baseline's Wilson 95% interval (for
 * mean_accuracy: the mean of the two sets' interval ends). */
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

enum { M_ACCURACY, M_LOSS, M_TRAIN_LOSS, M_COUNT, M_GREEDY, M_N_CLASSES };
static const char *const CLASS_NAMES[M_N_CLASSES] = {"accuracy", "mean_answer_loss", "final_train_loss", "count",
                                                     "greedy_disagreements"};

typedef struct {
    double abs;
    bool within_ci;
    char comment[512];
} Tolerance;

typedef struct {
    char name[384];
    int klass;
    double value;
    double ci95[2]; /* accuracies only */
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
            add_metric(l, M_LOSS, me->mean_answer_loss, NULL, "%s.%s.mean_answer_loss", sn, me->name);
        }
    }
}

static const Metric *find_metric(const MetricList *l, const char *name) {
    for (int i = 0; i < l->n; i++)
        if (strcmp(l->m[i].name, name) == 0) return &l->m[i];
    return NULL;
}

/* Reads the tolerances file; returns -1 with a message in err on any problem. */
static int load_tolerances(const char *path, Tolerance tol[M_N_CLASSES], char *err, size_t errlen) {
    cJSON *j = json_load_file(path, err, errlen);
    if (!j) return -1;
    JsonReader r;
    json_reader_init(&r, j, path, "");
    const char *comment = NULL;
    json_get_string(&r, "comment", &comment, true);
    const cJSON *t = json_get_object(&r, "tolerances", true);
    int rc = json_reader_finish(&r, err, errlen);
    if (rc == 0) {
        JsonReader tr;
        json_reader_init(&tr, t, path, "tolerances");
        const cJSON *cls[M_N_CLASSES];
        for (int c = 0; c < M_N_CLASSES; c++) cls[c] = json_get_object(&tr, CLASS_NAMES[c], true);
        rc = json_reader_finish(&tr, err, errlen);
        for (int c = 0; c < M_N_CLASSES && rc == 0; c++) {
            char p[64];
            snprintf(p, sizeof p, "tolerances.%s", CLASS_NAMES[c]);
            JsonReader cr;
            json_reader_init(&cr, cls[c], path, p);
            const char *why = NULL;
            tol[c].within_ci = false;
            json_get_double(&cr, "abs", &tol[c].abs, true);
            json_get_string(&cr, "comment", &why, true);
            if (c == M_ACCURACY) json_get_bool(&cr, "within_baseline_ci95", &tol[c].within_ci, false);
            rc = json_reader_finish(&cr, err, errlen);
            if (rc == 0 && !(tol[c].abs >= 0)) {
                snprintf(err, errlen, "%.900s: %s.abs: must be a non-negative number", path, p);
                rc = -1;
            }
            if (rc == 0) snprintf(tol[c].comment, sizeof tol[c].comment, "%s", why);
        }
    }
    cJSON_Delete(j);
    return rc;
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

/* Compares one run. Returns 0 (all within), 1 (some metric outside) or 2 (not comparable). */
static int compare_run(const char *run, const char *baseline_path, const char *result_path,
                       const Tolerance tol[M_N_CLASSES], bool only_failures) {
    char err[1024];
    ResultRecord base, cur;
    if (result_record_load(&base, baseline_path, err, sizeof err)) {
        log_error("%s", err);
        return 2;
    }
    if (!file_exists(result_path)) {
        log_error("%s: missing result record (baseline %s exists)", result_path, baseline_path);
        result_record_free(&base);
        return 2;
    }
    if (result_record_load(&cur, result_path, err, sizeof err)) {
        log_error("%s", err);
        result_record_free(&base);
        return 2;
    }
    const char *diff = unlike_field(&base, &cur);
    if (diff[0]) {
        log_error("%s: cannot compare with %s: %s differs (baseline %.12s..., new %.12s...)", result_path,
                  baseline_path, diff, field_value(&base, diff), field_value(&cur, diff));
        result_record_free(&base);
        result_record_free(&cur);
        return 2;
    }
    MetricList bm = {0}, cm = {0};
    collect_metrics(&base, &bm);
    collect_metrics(&cur, &cm);
    int status = 0;
    printf("== %s: %s vs %s\n", run, baseline_path, result_path);
    printf("%-62s %14s %14s %12s %10s  %s\n", "metric", "baseline", "new", "delta", "tolerance", "status");
    for (int i = 0; i < bm.n; i++) {
        const Metric *b = &bm.m[i];
        const Metric *c = find_metric(&cm, b->name);
        if (!c) {
            printf("%-62s %14.6g %14s %12s %10s  MISSING\n", b->name, b->value, "-", "-", "-");
            status = 2;
            continue;
        }
        const Tolerance *t = &tol[b->klass];
        double delta = c->value - b->value;
        /* The 1e-12 relative slack only absorbs decimal round trips of equal numbers, never a real change. */
        bool ok = fabs(delta) <= t->abs + 1e-12 * fmax(1.0, fabs(b->value));
        if (!ok && t->within_ci && b->klass == M_ACCURACY && (b->ci95[0] != 0 || b->ci95[1] != 0))
            ok = c->value >= b->ci95[0] && c->value <= b->ci95[1];
        /* For counts of disagreements and losses, "worse" means larger; for accuracies, smaller. */
        const char *verdict = "ok";
        if (!ok) {
            bool higher_is_better = b->klass == M_ACCURACY;
            bool worse = higher_is_better ? delta < 0 : delta > 0;
            verdict = b->klass == M_COUNT ? "CHANGED" : (worse ? "WORSE" : "BETTER");
            if (status < 1) status = 1;
        }
        if (!only_failures || !ok)
            printf("%-62s %14.6g %14.6g %+12.4g %10.4g  %s\n", b->name, b->value, c->value, delta, t->abs, verdict);
    }
    for (int i = 0; i < cm.n; i++)
        if (!find_metric(&bm, cm.m[i].name)) {
            printf("%-62s %14s %14.6g %12s %10s  NEW (not in baseline)\n", cm.m[i].name, "-", cm.m[i].value, "-", "-");
            status = 2;
        }
    printf("== %s: %s\n\n", run, status == 0 ? "within tolerances" : (status == 1 ? "OUTSIDE tolerances" : "not comparable"));
    free(bm.m);
    free(cm.m);
    result_record_free(&base);
    result_record_free(&cur);
    return status;
}

/* Whether name[0..n) is in the comma-separated list (NULL list = everything). */
static bool in_list(const char *list, const char *name, size_t n) {
    if (!list) return true;
    for (const char *p = list; *p;) {
        const char *e = strchr(p, ',');
        size_t len = e ? (size_t)(e - p) : strlen(p);
        if (len == n && strncmp(p, name, n) == 0) return true;
        if (!e) break;
        p = e + 1;
    }
    return false;
}

static int cmp_str(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

static const char *SUMMARY =
    "Compares each run's result.json with the baseline record <baselines>/<RUN>.result.json metric by metric, with "
    "the per-metric tolerances of the tolerances file (default <baselines>/tolerances.json). Prints a table (metric, "
    "baseline, new, delta, tolerance, status). Exit 0: all within tolerance; 1: a metric outside its tolerance; "
    "2: a missing record or records of different config / dataset / tokenizer (not comparable).";

int compare_main(int argc, char **argv) {
    log_set_program("compare");
    const char *baselines = NULL, *runs = NULL, *tolerances = NULL, *only = NULL;
    bool only_failures = false;
    CliOption opts[] = {
        {"baselines", OPT_STRING, &baselines, "directory of <RUN>.result.json baseline records", true},
        {"runs", OPT_STRING, &runs, "directory of run directories <RUN>/result.json", true},
        {"tolerances", OPT_STRING, &tolerances, "tolerances file (default <baselines>/tolerances.json)", false},
        {"only", OPT_STRING, &only, "comma-separated runs to compare (default: every baseline record)", false},
        {"only-failures", OPT_FLAG, &only_failures, "print only metrics outside their tolerance (default: all)", false},
    };
    cli_parse(argc, argv, "compare", SUMMARY, opts, (int)(sizeof opts / sizeof opts[0]));

    char tol_path[4096];
    if (tolerances) snprintf(tol_path, sizeof tol_path, "%s", tolerances);
    else snprintf(tol_path, sizeof tol_path, "%s/tolerances.json", baselines);
    Tolerance tol[M_N_CLASSES];
    char err[1024];
    if (load_tolerances(tol_path, tol, err, sizeof err)) {
        log_error("%s", err);
        return 2;
    }

    DIR *d = opendir(baselines);
    if (!d) {
        log_error("%s: cannot open the baselines directory", baselines);
        return 2;
    }
    char **names = NULL;
    int n_names = 0;
    const char *suffix = ".result.json";
    for (struct dirent *e; (e = readdir(d));) {
        size_t n = strlen(e->d_name), k = strlen(suffix);
        if (n > k && strcmp(e->d_name + n - k, suffix) == 0 && in_list(only, e->d_name, n - k)) {
            names = xrealloc(names, (size_t)(n_names + 1) * sizeof *names);
            names[n_names] = xstrdup(e->d_name);
            names[n_names][n - k] = '\0';
            n_names++;
        }
    }
    closedir(d);
    if (n_names == 0) {
        log_error("%s: no baseline records (<RUN>.result.json)%s%s", baselines, only ? " for --only " : "",
                  only ? only : "");
        return 2;
    }
    /* Every run asked for with --only must have a baseline. */
    if (only) {
        char *copy = xstrdup(only);
        int missing = 0;
        for (char *save = NULL, *tok = strtok_r(copy, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
            bool found = false;
            for (int i = 0; i < n_names && !found; i++) found = strcmp(names[i], tok) == 0;
            if (!found) {
                log_error("%s/%s.result.json: missing baseline record (asked for by --only)", baselines, tok);
                missing = 1;
            }
        }
        free(copy);
        if (missing) {
            for (int i = 0; i < n_names; i++) free(names[i]);
            free(names);
            return 2;
        }
    }
    qsort(names, (size_t)n_names, sizeof *names, cmp_str);

    int worst = 0;
    for (int i = 0; i < n_names; i++) {
        char bpath[4096], rpath[4096];
        snprintf(bpath, sizeof bpath, "%s/%s%s", baselines, names[i], suffix);
        snprintf(rpath, sizeof rpath, "%s/%s/result.json", runs, names[i]);
        int s = compare_run(names[i], bpath, rpath, tol, only_failures);
        if (s > worst) worst = s;
    }
    /* Runs without a baseline are reported, not compared: a new run is not a regression. */
    DIR *rd = opendir(runs);
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
            char bpath[4096];
            snprintf(bpath, sizeof bpath, "%s/%s%s", baselines, e->d_name, suffix);
            if (file_exists(bpath)) printf("note: %s not compared (not in --only)\n", rpath);
            else printf("note: %s has no baseline in %s (not compared)\n", rpath, baselines);
        }
        closedir(rd);
    }
    for (int i = 0; i < n_names; i++) free(names[i]);
    free(names);
    printf("compare: %d run(s): %s\n", n_names,
           worst == 0 ? "all metrics within tolerances"
                      : (worst == 1 ? "some metric outside its tolerance" : "some records missing or not comparable"));
    return worst;
}

#ifndef STAGE_NO_MAIN
int main(int argc, char **argv) { return compare_main(argc, argv); }
#endif
