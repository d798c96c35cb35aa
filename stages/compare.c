/* compare: checks each run's result.json against a recorded baseline record, metric by metric, with declared
 * per-metric tolerances; and, as --diff, shows what differs between two runs.
 *
 *   bin/compare --baselines reports/baselines/EXP --runs runs/EXP [--tolerances FILE] [--only RUN,RUN] [--strict]
 *               [--config-change=error|note] [--only-failures]
 *   bin/compare --diff A B [--replicates N]
 *
 * Baselines are files <NAME>.result.json (a copy of a result.json); each is compared with <runs>/<NAME>/result.json.
 * NAME is a run directory name: RUN for the config's own seed, RUN.seed<S> for another seed (INTERFACES.md §2).
 * Without --only every baseline record is asked for; --only RUN asks for RUN and its seeds RUN.seed<S>.
 *
 * Verdict per metric: ok (within tolerance); WORSE (a loss or disagreement count higher, an accuracy lower, beyond
 * the tolerance); BETTER (the other direction: printed, a failure only with --strict); CHANGED (a count that is not
 * equal: always a failure); not gated (a class the tolerances file declares "gated": false: printed, never judged).
 *
 * What was compared is counted, never assumed. The last line is
 *   compare: N compared, M not compared (NAME: why; ...): verdict
 * where "not compared" lists every run asked for whose metrics were not judged, with the reason, and counts the
 * run directories that were not asked for (no baseline, left out by --only, another variant CONFIG@VARIANT of a
 * run: each one "note:" line above). The verdict "all metrics within tolerances (or better)" is printed only when
 * every run asked for was compared and passed. Rules:
 *  - Nothing compared (N = 0) is a failure, exit 2, whatever the reasons: a gate that checked nothing must not pass.
 *  - A run asked for (by --only, or by having a baseline) that has no result record, or whose dataset or tokenizer
 *    differs, or whose record cannot be read: an error line, listed as not compared, exit 2 (the others are still
 *    compared and printed).
 *  - A run asked for whose config changed since its baseline (config_sha256 differs): with --config-change=error
 *    (the default, `make compare`) an error as above; with --config-change=note (make reproduce, where an edited
 *    config is the user's intent) one "note:" line naming the changed keys, and a counted note: listed as not
 *    compared ("... (a note: --config-change=note)"), not a failure while some other run was compared, and the verdict
 *    then reads "the N compared are within tolerances (or better); K asked for was/were only noted, not checked".
 *  - A run directory that was not asked for is never a failure (a new run is not a regression).
 * Exit status: 0 something was compared and nothing failed; 1 some metric WORSE or CHANGED (or BETTER with --strict);
 * 2 nothing compared, or some run asked for could not be compared (above), or a bad tolerances file or selection
 * (--only naming a run without a baseline); 3 nothing compared because every run asked for was a counted note
 * (--config-change=note, every config changed: e.g. make reproduce SET=...), so a caller can say so without
 * mistaking it for a broken comparison. Never 0 when nothing was compared.
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
 * A class that cannot catch a realistic defect at the experiment's size (a tolerance no wider than the measured
 * seed spread would still let every such defect pass) is declared {"gated": false, "comment": "why"} instead, with
 * no abs/rel: its metrics are printed as "not gated", and compare prints "compare: CLASS is not gated by FILE: why"
 * and ends its verdict with "; not gated at this size: CLASS", so the gate says what it would not catch. count and
 * greedy_disagreements are exact and always gated.
 *
 * Seeds: when the baselines hold records of two or more seeds of one run config (RUN.result.json and
 * RUN.seed<S>.result.json), each of those names is compared against the seeds' statistics instead of its own record:
 * the baseline value is the mean over the seeds and the allowed distance max(A, R * |mean|, K * sd), sd being the
 * sample standard deviation over the seeds (counts and greedy disagreements stay exact). K comes from "seed_spread",
 * which the file must then have.
 *
 * --diff A B (pipeline/run_diff.h): A and B are run directories (runs/EXP/RUN, runs/EXP/RUN@VARIANT, any path) or
 * baseline record prefixes (reports/baselines/EXP/RUN for RUN.result.json). Prints the config keys that differ, then
 * every metric above (and training throughput, and the analysis' depth summary when both have analysis.json) with A,
 * B and B-A, and, where both have predictions.jsonl listing the same examples that add up to their records, a paired
 * 95% percentile bootstrap interval of B-A over those examples. A diff judges nothing: exit 0, or 2 when A or B
 * cannot be read. */
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
#include "pipeline/compare_metrics.h"
#include "pipeline/config.h"
#include "pipeline/config_diff.h"
#include "pipeline/log.h"
#include "pipeline/result_record.h"
#include "pipeline/run_diff.h"
#include "pipeline/run_identity.h"

typedef struct {
    double abs, rel;
    bool within_ci;
    bool gated; /* false: the class is shown but never judged ("gated": false, with the reason in its comment) */
    const char *why; /* the class's comment (points into Tolerances.doc) */
} Tolerance;

typedef struct {
    Tolerance cls[MC_N_CLASSES];
    double seed_k; /* sd multiple for multi-seed baselines; 0 = the file has no "seed_spread" */
    cJSON *doc;    /* the parsed file (owns the comments) */
} Tolerances;

typedef enum { V_OK, V_BETTER, V_WORSE, V_CHANGED, V_NOT_GATED } Verdict;
static const char *const VERDICT_NAMES[] = {"ok", "BETTER", "WORSE", "CHANGED", "not gated"};

typedef struct {
    bool strict;             /* BETTER fails too */
    bool config_change_note; /* a different config_sha256 is a note, not "not comparable" */
    bool only_failures;
} CompareOptions;

/* A finite number >= 0 (> 0 when positive), else an error naming path.key. */
static int check_nonneg(double v, bool positive, const char *path, const char *key, char *err, size_t errlen) {
    if (isfinite(v) && (positive ? v > 0 : v >= 0)) return 0;
    snprintf(err, errlen, "%.700s: %.100s: must be a %s number (got %g)", path, key, positive ? "positive" : "non-negative",
             v);
    return -1;
}

/* Reads the tolerances file; returns -1 with a message in err on any problem (unknown keys included). On success
 * tol->doc holds the parsed file (tolerances_free). */
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
        const cJSON *cls[MC_N_CLASSES];
        for (int c = 0; c < MC_N_CLASSES; c++) cls[c] = json_get_object(&tr, METRIC_CLASS_NAMES[c], true);
        rc = json_reader_finish(&tr, err, errlen);
        for (int c = 0; c < MC_N_CLASSES && rc == 0; c++) {
            char p[64], k[96];
            snprintf(p, sizeof p, "tolerances.%s", METRIC_CLASS_NAMES[c]);
            Tolerance *tc = &tol->cls[c];
            /* "gated": false declares that the class cannot catch a realistic defect at this size: it then has no
             * tolerance at all (a number there would read as a check that is not made). Counts and greedy
             * disagreements are exact and always gated. */
            tc->gated = true;
            const cJSON *g = cJSON_GetObjectItemCaseSensitive(cls[c], "gated");
            if (g && !cJSON_IsBool(g)) {
                snprintf(err, errlen, "%.700s: %.100s.gated: must be true or false", path, p);
                rc = -1;
                break;
            }
            if (g && cJSON_IsFalse(g)) {
                if (c == MC_COUNT || c == MC_GREEDY) {
                    snprintf(err, errlen, "%.700s: %.100s.gated: %s is exact and cannot be not gated", path, p,
                             METRIC_CLASS_NAMES[c]);
                    rc = -1;
                    break;
                }
                tc->gated = false;
                const char *num = cJSON_GetObjectItemCaseSensitive(cls[c], "abs")   ? "abs"
                                  : cJSON_GetObjectItemCaseSensitive(cls[c], "rel") ? "rel"
                                  : cJSON_GetObjectItemCaseSensitive(cls[c], "within_baseline_ci95")
                                      ? "within_baseline_ci95"
                                      : NULL;
                if (num) {
                    snprintf(err, errlen, "%.700s: %.100s.%s: a class with \"gated\": false has no tolerance", path, p,
                             num);
                    rc = -1;
                    break;
                }
            }
            JsonReader cr;
            json_reader_init(&cr, cls[c], path, p);
            bool gated_field = true;
            json_get_bool(&cr, "gated", &gated_field, false);
            json_get_string(&cr, "comment", &tc->why, true);
            if (tc->gated) {
                json_get_double(&cr, "abs", &tc->abs, true);
                json_get_double(&cr, "rel", &tc->rel, false);
                if (c == MC_ACCURACY) json_get_bool(&cr, "within_baseline_ci95", &tc->within_ci, false);
            }
            rc = json_reader_finish(&cr, err, errlen);
            if (rc != 0) break;
            snprintf(k, sizeof k, "%s.abs", p);
            if (rc == 0) rc = check_nonneg(tc->abs, false, path, k, err, errlen);
            snprintf(k, sizeof k, "%s.rel", p);
            if (rc == 0) rc = check_nonneg(tc->rel, false, path, k, err, errlen);
            /* A relative slack on an exact class would silently turn "must match" into "roughly". */
            if (rc == 0 && tc->rel != 0 && (c == MC_COUNT || c == MC_GREEDY)) {
                snprintf(err, errlen, "%.700s: %.100s: not allowed for %s (it must match exactly or by abs)", path, k,
                         METRIC_CLASS_NAMES[c]);
                rc = -1;
            }
        }
    }
    if (rc != 0) {
        cJSON_Delete(j);
        memset(tol, 0, sizeof *tol);
        return rc;
    }
    tol->doc = j;
    return 0;
}

static void tolerances_free(Tolerances *tol) {
    cJSON_Delete(tol->doc);
    tol->doc = NULL;
}

/* The distance from the baseline a metric may move: max(abs, rel * |baseline|), and for multi-seed baselines at least
 * k * sd (losses and accuracies only: counts and disagreements stay exact). */
static double allowed_delta(const Tolerances *tol, const RecordMetric *b) {
    const Tolerance *t = &tol->cls[b->klass];
    double a = fmax(t->abs, t->rel * fabs(b->value));
    if (b->klass != MC_COUNT && b->klass != MC_GREEDY) a = fmax(a, tol->seed_k * b->seed_sd);
    return a;
}

/* The verdict on one metric: b the baseline (or the seeds' mean), value the new number. */
static Verdict judge_metric(const Tolerances *tol, const RecordMetric *b, double value) {
    if (!tol->cls[b->klass].gated) return V_NOT_GATED;
    double delta = value - b->value;
    /* The 1e-12 relative slack only absorbs decimal round trips of equal numbers, never a real change. */
    bool ok = fabs(delta) <= allowed_delta(tol, b) + 1e-12 * fmax(1.0, fabs(b->value));
    if (!ok && tol->cls[b->klass].within_ci && b->klass == MC_ACCURACY && (b->ci95[0] != 0 || b->ci95[1] != 0))
        ok = value >= b->ci95[0] && value <= b->ci95[1];
    if (ok) return V_OK;
    if (b->klass == MC_COUNT) return V_CHANGED;
    /* For losses and disagreement counts "worse" means larger; for accuracies, smaller. */
    bool worse = b->klass == MC_ACCURACY ? delta < 0 : delta > 0;
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

/* The config keys whose values differ between a (the baseline's) and b, as "key base -> new" (a value at most 24
 * characters) separated by "; ", into out (size n). */
static void config_change_text(const cJSON *a, const cJSON *b, char *out, size_t n) {
    const cJSON *configs[2] = {a, b};
    ConfigDiff d;
    config_diff(configs, 2, NULL, &d);
    out[0] = '\0';
    for (int i = 0; i < d.n_rows; i++) {
        const char *sa = d.rows[i].values[0], *sb = d.rows[i].values[1];
        size_t len = strlen(out);
        snprintf(out + len, n - len, "%s%s %.24s%s -> %.24s%s", len ? "; " : "", d.rows[i].key, sa ? sa : "(absent)",
                 sa && strlen(sa) > 24 ? "..." : "", sb ? sb : "(absent)", sb && strlen(sb) > 24 ? "..." : "");
    }
    config_diff_free(&d);
}

/* The baseline a run is compared against: one record, or the mean and sd of several seeds' records. */
typedef struct {
    ResultRecord rec;   /* the baseline record of the same name (its hashes are checked against the new record) */
    RecordMetricList metrics; /* values: that record's, or the seeds' means with seed_sd set */
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
    record_metrics_collect(&bl->rec, &bl->metrics);
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
        RecordMetricList sm = {0};
        record_metrics_collect(&s, &sm);
        for (int k = 0; k < nm && rc == 0; k++) {
            const RecordMetric *m = record_metrics_find(&sm, bl->metrics.m[k].name);
            if (!m) {
                log_error("%s: no %s (the other seeds' baselines have it)", path, bl->metrics.m[k].name);
                rc = 2;
                break;
            }
            double d = m->value - bl->metrics.m[k].value;
            /* Counts must agree across seeds exactly: pooling unequal counts would hide a broken baseline. */
            if (bl->metrics.m[k].klass == MC_COUNT && d != 0) {
                log_error("%s: %s differs from %s/%s.result.json's (%.0f vs %.0f)", path, m->name, baselines, name,
                          m->value, bl->metrics.m[k].value);
                rc = 2;
                break;
            }
            sum[k] += d;
            sum2[k] += d * d;
        }
        record_metrics_free(&sm);
        result_record_free(&s);
    }
    if (rc == 0) {
        for (int k = 0; k < nm; k++) {
            RecordMetric *m = &bl->metrics.m[k];
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
    record_metrics_free(&bl->metrics);
    result_record_free(&bl->rec);
}

/* What happened to one run asked for. */
typedef struct {
    bool compared;     /* its metrics were judged (status then says how) */
    bool noted;        /* not compared, and by --config-change=note that is a counted note, not an error */
    char why[160];     /* when not compared: the short reason for the summary */
} RunOutcome;

/* Compares one run. Returns 0 (nothing failed), 1 (some metric failed) or 2 (not comparable); *out says whether it
 * was compared and, if not, why. */
static int compare_run(const char *run, const char *baselines, char *const *names, int n_names, const char *runs,
                       const Tolerances *tol, const CompareOptions *o, RunOutcome *out) {
    char err[1024], baseline_path[4096], result_path[4096];
    memset(out, 0, sizeof *out);
    snprintf(baseline_path, sizeof baseline_path, "%s/%s.result.json", baselines, run);
    snprintf(result_path, sizeof result_path, "%s/%s/result.json", runs, run);
    Baseline bl;
    if (load_baseline(&bl, baselines, run, names, n_names)) {
        snprintf(out->why, sizeof out->why, "its baseline cannot be read");
        baseline_free(&bl);
        return 2;
    }
    if (!file_exists(result_path)) {
        log_error("%s: missing result record (baseline %s exists)", result_path, baseline_path);
        snprintf(out->why, sizeof out->why, "no result record");
        baseline_free(&bl);
        return 2;
    }
    ResultRecord cur;
    if (result_record_load(&cur, result_path, err, sizeof err)) {
        log_error("%s", err);
        snprintf(out->why, sizeof out->why, "its result record cannot be read");
        baseline_free(&bl);
        return 2;
    }
    const char *diff = unlike_field(&bl.rec, &cur);
    if (diff[0] && strcmp(diff, "config_sha256") == 0 && o->config_change_note) {
        char what[1024] = "";
        config_change_text(bl.rec.config, cur.config, what, sizeof what);
        printf("note: %s: not compared: its config changed since the baseline (%s; config_sha256 %.12s... -> "
               "%.12s...)\n",
               run, what[0] ? what : "same settings, different file bytes or --set overrides", bl.rec.config_sha256,
               cur.config_sha256);
        /* Dataset and tokenizer must still match: a config edit does not explain other inputs changing. */
        ResultRecord tmp = cur;
        memcpy(tmp.config_sha256, bl.rec.config_sha256, sizeof tmp.config_sha256);
        diff = unlike_field(&bl.rec, &tmp);
        if (!diff[0]) {
            snprintf(out->why, sizeof out->why, "config changed since the baseline");
            out->noted = true;
            baseline_free(&bl);
            result_record_free(&cur);
            return 0;
        }
    }
    if (diff[0]) {
        log_error("%s: cannot compare with %s: %s differs (baseline %.12s..., new %.12s...)", result_path,
                  baseline_path, diff, field_value(&bl.rec, diff), field_value(&cur, diff));
        snprintf(out->why, sizeof out->why, "%s differs from the baseline's", diff);
        baseline_free(&bl);
        result_record_free(&cur);
        return 2;
    }
    out->compared = true;
    RecordMetricList cm = {0};
    record_metrics_collect(&cur, &cm);
    const RecordMetricList *bm = &bl.metrics;
    int status = 0, n_better = 0, n_not_gated = 0;
    if (bl.n_seeds > 1)
        printf("== %s: mean of %d seeds' baselines (%s/%.*s[.seed<S>].result.json; tolerance at least %g sd) vs %s\n",
               run, bl.n_seeds, baselines, (int)run_config_len(run), run, tol->seed_k, result_path);
    else
        printf("== %s: %s vs %s\n", run, baseline_path, result_path);
    printf("%-62s %14s %14s %12s %10s  %s\n", "metric", bl.n_seeds > 1 ? "seeds' mean" : "baseline", "new", "delta",
           "tolerance", "status");
    for (int i = 0; i < bm->n; i++) {
        const RecordMetric *b = &bm->m[i];
        const RecordMetric *c = record_metrics_find(&cm, b->name);
        if (!c) {
            printf("%-62s %14.6g %14s %12s %10s  MISSING\n", b->name, b->value, "-", "-", "-");
            status = 2;
            continue;
        }
        Verdict v = judge_metric(tol, b, c->value);
        bool fails = v == V_WORSE || v == V_CHANGED || (v == V_BETTER && o->strict);
        if (fails && status < 1) status = 1;
        n_better += v == V_BETTER;
        n_not_gated += v == V_NOT_GATED;
        if (o->only_failures && (v == V_OK || v == V_NOT_GATED)) continue;
        if (v == V_NOT_GATED)
            printf("%-62s %14.6g %14.6g %+12.4g %10s  %s\n", b->name, b->value, c->value, c->value - b->value, "-",
                   VERDICT_NAMES[v]);
        else
            printf("%-62s %14.6g %14.6g %+12.4g %10.4g  %s%s\n", b->name, b->value, c->value, c->value - b->value,
                   allowed_delta(tol, b), VERDICT_NAMES[v], v == V_BETTER && !o->strict ? " (not a failure)" : "");
    }
    for (int i = 0; i < cm.n; i++)
        if (!record_metrics_find(bm, cm.m[i].name)) {
            printf("%-62s %14s %14.6g %12s %10s  NEW (not in baseline)\n", cm.m[i].name, "-", cm.m[i].value, "-", "-");
            status = 2;
        }
    char gated_note[96] = "";
    if (n_not_gated) snprintf(gated_note, sizeof gated_note, " (%d metric(s) not gated at this size)", n_not_gated);
    if (status == 0 && n_better)
        printf("== %s: within tolerances or better (%d metric(s) BETTER than the baseline%s)%s\n\n", run, n_better,
               " - pass --strict to count them as failures", gated_note);
    else
        printf("== %s: %s%s\n\n", run,
               status == 0 ? "within tolerances" : (status == 1 ? "OUTSIDE tolerances" : "not comparable"), gated_note);
    record_metrics_free(&cm);
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
    "BETTER, CHANGED, or 'not gated' for a class the tolerances file declares \"gated\": false), then one line "
    "'compare: N compared, M not compared (...): verdict'. Exit 0: something was compared and nothing WORSE or CHANGED "
    "(BETTER is reported, a failure only with --strict); 1: a metric WORSE or a count CHANGED; 2: nothing compared, "
    "or a missing record or records of different config / dataset / tokenizer (not comparable; with "
    "--config-change=note a different config is one counted note, not a failure while another run is compared); 3: "
    "nothing compared because every run asked for was such a note. "
    "bin/compare --diff A B shows what differs between two runs instead (--diff --help).";

static const char *DIFF_SUMMARY =
    "bin/compare --diff A B: what differs between two runs. A and B are run directories (runs/EXP/RUN, with "
    "result.json, and predictions.jsonl and analysis.json when present) or baseline record prefixes "
    "(reports/baselines/EXP/RUN for RUN.result.json). Prints the config keys whose values differ (each result.json's "
    "\"config\"), then every metric with A, B, B-A and, where both runs have predictions.jsonl on the same examples, "
    "a paired 95% bootstrap interval of B-A over the examples. Judges nothing: exit 0 (2 when A or B cannot be read).";

/* bin/compare --diff A B [--replicates N]. */
static int diff_main(int argc, char **argv, int at) {
    /* A and B follow --diff; the other arguments go through the ordinary parser (which takes no positional
     * arguments), so --help and --replicates work anywhere. */
    int n_pos = 0;
    while (n_pos < 2 && at + 1 + n_pos < argc && strncmp(argv[at + 1 + n_pos], "--", 2) != 0) n_pos++;
    char **rest = xcalloc((size_t)argc + 1, sizeof *rest);
    int n_rest = 0;
    for (int i = 0; i < argc; i++)
        if (i < at || i > at + n_pos) rest[n_rest++] = argv[i];
    long replicates = RUN_DIFF_BOOT_REPLICATES;
    CliOption opts[] = {
        {"replicates", OPT_INT, &replicates, "bootstrap replicates of the paired intervals (default 2000)", false},
    };
    cli_parse(n_rest, rest, "compare --diff A B", DIFF_SUMMARY, opts, 1);
    free(rest);
    if (n_pos < 2)
        cli_usage_die("compare", "--diff needs two runs: --diff A B (run directories or baseline record prefixes)");
    const char *a_arg = argv[at + 1], *b_arg = argv[at + 2];
    if (replicates < 1 || replicates > 1000000) {
        log_error("--replicates: expected 1 to 1000000 (got %ld)", replicates);
        return 2;
    }
    DiffSide a, b;
    char err[2200];
    if (diff_side_load(&a, a_arg, err, sizeof err) != 0) {
        log_error("A: %s", err);
        return 2;
    }
    if (diff_side_load(&b, b_arg, err, sizeof err) != 0) {
        log_error("B: %s", err);
        diff_side_free(&a);
        return 2;
    }
    RunDiff d;
    run_diff_compute(&a, &b, (int)replicates, RUN_DIFF_BOOT_RNG_SEED, &d);
    run_diff_print(stdout, &a, &b, &d, (int)replicates, RUN_DIFF_BOOT_RNG_SEED);
    run_diff_free(&d);
    diff_side_free(&a);
    diff_side_free(&b);
    return 0;
}

int compare_main(int argc, char **argv) {
    log_set_program("compare");
    for (int i = 1; i < argc; i++)
        if (strcmp(argv[i], "--diff") == 0) return diff_main(argc, argv, i);
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
        tolerances_free(&tol);
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
    int n_compared = 0, n_noted = 0, n_asked_not = 0, n_other = 0;
    char asked_not[2048] = ""; /* "name: why; ..." of the runs asked for but not compared */
    for (int i = 0; i < n_names && selection_ok; i++) {
        RunOutcome out;
        int s = compare_run(names[i], baselines, all, n_all, runs, &tol, &o, &out);
        if (s > worst) worst = s;
        n_compared += out.compared;
        if (out.compared) continue;
        n_asked_not++;
        n_noted += out.noted;
        size_t len = strlen(asked_not);
        snprintf(asked_not + len, sizeof asked_not - len, "%s%s: %s%s", len ? "; " : "", names[i], out.why,
                 out.noted ? " (a note: --config-change=note)" : "");
    }
    /* Runs without a baseline are reported, not compared: a new run is not a regression. */
    DIR *rd = selection_ok ? opendir(runs) : NULL;
    if (rd) {
        char **others = NULL;
        for (struct dirent *e; (e = readdir(rd));) {
            if (e->d_name[0] == '.') continue;
            char rpath[4096];
            snprintf(rpath, sizeof rpath, "%s/%s/result.json", runs, e->d_name);
            if (!file_exists(rpath)) continue;
            bool known = false;
            for (int i = 0; i < n_names && !known; i++) known = strcmp(names[i], e->d_name) == 0;
            if (known) continue;
            others = xrealloc(others, (size_t)(n_other + 1) * sizeof *others);
            others[n_other++] = xstrdup(e->d_name);
        }
        closedir(rd);
        if (n_other) qsort(others, (size_t)n_other, sizeof *others, cmp_str);
        for (int k = 0; k < n_other; k++) {
            /* Left out by --only is not the same as having no baseline (make reproduce RUNS=... passes --only). */
            bool has_baseline = false;
            for (int i = 0; i < n_all && !has_baseline; i++) has_baseline = strcmp(all[i], others[k]) == 0;
            char variant[RUN_VARIANT_LEN + 1], stable[256];
            run_name_variant(others[k], variant);
            if (has_baseline) printf("note: %s/%s/result.json not compared (not in --only)\n", runs, others[k]);
            else if (variant[0] && run_name_stable(others[k], stable, sizeof stable) == 0)
                printf("note: %s/%s/result.json not compared: another variant of %s (baselines are compared with "
                       "the current variant, %s/%s)\n",
                       runs, others[k], stable, runs, stable);
            else printf("note: %s/%s/result.json has no baseline in %s (not compared)\n", runs, others[k], baselines);
            free(others[k]);
        }
        free(others);
    }
    if (selection_ok) {
        /* The classes this file does not gate, once, with the file's reason: the gate says what it would not catch. */
        for (int c = 0; c < MC_N_CLASSES && n_compared; c++)
            if (!tol.cls[c].gated) {
                /* The comment's first sentence (the file has the measurements behind it). */
                const char *why = tol.cls[c].why, *end = strstr(why, ". ");
                int len = end ? (int)(end - why) + 1 : (int)strlen(why);
                printf("compare: %s is not gated by %s: %.*s%s\n", METRIC_CLASS_NAMES[c], tol_path, len, why,
                       end ? " (more in the file's comment)" : "");
            }
        char not_gated[160] = "";
        for (int c = 0; c < MC_N_CLASSES; c++)
            if (!tol.cls[c].gated) {
                size_t len = strlen(not_gated);
                snprintf(not_gated + len, sizeof not_gated - len, "%s%s", len ? ", " : "; not gated at this size: ",
                         METRIC_CLASS_NAMES[c]);
            }
        char not_compared[2300] = "";
        if (n_asked_not && n_other)
            snprintf(not_compared, sizeof not_compared, " (%s; %d other run(s) listed above)", asked_not, n_other);
        else if (n_asked_not) snprintf(not_compared, sizeof not_compared, " (%s)", asked_not);
        else if (n_other) snprintf(not_compared, sizeof not_compared, " (listed above)");
        printf("compare: %d compared, %d not compared%s: ", n_compared, n_asked_not + n_other, not_compared);
        if (n_compared == 0) {
            /* Success on nothing would be a false pass: whatever the reasons, nothing was checked. */
            printf("FAILED: nothing was checked against %s\n", baselines);
            /* Every run asked for only noted (its config changed, --config-change=note): a status of its own, so that
             * a caller whose user changed every config on purpose (make reproduce SET=...) can tell it from a broken
             * comparison; still not 0. */
            worst = worst == 0 && n_noted == n_asked_not ? 3 : 2;
        } else if (worst == 0 && n_asked_not == 0)
            printf("all metrics within tolerances (or better)%s\n", not_gated);
        else if (worst == 0)
            printf("the %d compared are within tolerances (or better); %d asked for %s only noted, not checked%s\n",
                   n_compared, n_noted, n_noted == 1 ? "was" : "were", not_gated);
        else
            printf("%s\n", worst == 1 ? "some metric outside its tolerance" : "some records missing or not comparable");
    }
    for (int i = 0; i < n_all; i++) free(all[i]);
    free(all);
    free(names);
    tolerances_free(&tol);
    return worst;
}

#ifndef STAGE_NO_MAIN
int main(int argc, char **argv) { return compare_main(argc, argv); }
#endif
