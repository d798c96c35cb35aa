/* One run against its baseline (compare_run.h). */
#include "pipeline/records/compare_run.h"

#include <stdio.h>
#include <string.h>

#include "pipeline/base/atomic_file.h"
#include "pipeline/records/compare_baseline.h"
#include "pipeline/records/config_diff.h"
#include "pipeline/records/run_dirs.h"
#include "pipeline/base/log.h"

/* The config keys whose values differ between a (the baseline's) and b, as "key base -> new" (a value at most 24
 * characters) separated by "; ", into out (size n); train.seed left out with skip_seed (a replication's seed is
 * meant to differ). Returns the number of keys; *material: how many of them can change the result record (not
 * config_key_is_analysis_only: the description, comments and analyze keys change neither training nor evaluation). */
static int config_change_text(const cJSON *a, const cJSON *b, bool skip_seed, char *out, size_t n, int *material) {
    const cJSON *configs[2] = {a, b};
    static const char *const SEED[] = {"train.seed", NULL};
    ConfigDiff d;
    config_diff(configs, 2, skip_seed ? SEED : NULL, &d);
    out[0] = '\0';
    *material = 0;
    for (int i = 0; i < d.n_rows; i++) {
        const char *sa = d.rows[i].values[0], *sb = d.rows[i].values[1];
        *material += !config_key_is_analysis_only(d.rows[i].key);
        size_t len = strlen(out);
        snprintf(out + len, n - len, "%s%s %.24s%s -> %.24s%s", len ? "; " : "", d.rows[i].key, sa ? sa : "(absent)",
                 sa && strlen(sa) > 24 ? "..." : "", sb ? sb : "(absent)", sb && strlen(sb) > 24 ? "..." : "");
    }
    const int keys = d.n_rows;
    config_diff_free(&d);
    return keys;
}

/* Compares one run. Returns 0 (nothing failed), 1 (some metric failed) or 2 (not comparable); *out says whether it
 * was compared and, if not, why. */
int compare_one_run(const char *run, const char *baselines, char *const *names, int n_names, const char *runs,
                       const Tolerances *tol, const CompareOptions *o, RunOutcome *out) {
    char err[1024], baseline_path[4096], result_path[4096];
    memset(out, 0, sizeof *out);
    snprintf(baseline_path, sizeof baseline_path, "%s/%s.result.json", baselines, run);
    snprintf(result_path, sizeof result_path, "%s/%s/result.json", runs, run);
    Baseline bl;
    if (baseline_load(&bl, baselines, run, names, n_names)) {
        snprintf(out->why, sizeof out->why, "its baseline cannot be read");
        baseline_free(&bl);
        return 2;
    }
    const int rc_len = (int)baseline_run_config_len(run);
    if (bl.replication) /* what the run is compared with: no record of its own name */
        snprintf(baseline_path, sizeof baseline_path, "the mean of %s/%.*s[.seed<S>].result.json", baselines, rc_len,
                 run);
    if (!run_file_present(result_path)) {
        log_error("%s: missing result record (%s %s exists)", result_path, bl.replication ? "its comparison," : "baseline",
                  baseline_path);
        snprintf(out->why, sizeof out->why, "no result record");
        baseline_free(&bl);
        return 2;
    }
    ResultRecord cur;
    if (result_record_load_in(&cur, result_path, runs, run, false, err, sizeof err)) {
        log_error("%s", err);
        snprintf(out->why, sizeof out->why, "its result record cannot be read");
        baseline_free(&bl);
        return 2;
    }
    const char *diff = record_inputs_unlike(&bl.rec, &cur);
    char what[1024] = ""; /* the changed config keys, when the config changed */
    int n_keys = 0, material = 0;
    if (strcmp(diff, "config_sha256") == 0)
        n_keys = config_change_text(bl.rec.config, cur.config, bl.replication, what, sizeof what, &material);
    if (strcmp(diff, "config_sha256") == 0 && material == 0 && (n_keys > 0 || bl.replication)) {
        /* Another config_sha256 for the same training and evaluation: a replication's seed (a --set train.seed
         * override), or keys that change neither (an edited description, analyze.eval_prompts added since the
         * baseline): the result record is the same experiment's, so it is compared, saying so. Its data and
         * tokenizer must still match. */
        if (n_keys)
            printf("note: %s: compared although its config differs from the baseline's, in keys that change neither "
                   "training nor evaluation (%s)\n",
                   run, what);
        ResultRecord tmp = cur;
        memcpy(tmp.config_sha256, bl.rec.config_sha256, sizeof tmp.config_sha256);
        diff = record_inputs_unlike(&bl.rec, &tmp);
    }
    if (diff[0] && strcmp(diff, "config_sha256") == 0 && o->config_change_note) {
        printf("note: %s: not compared: its config changed since the baseline (%s; config_sha256 %.12s... -> "
               "%.12s...)\n",
               run, what[0] ? what : "same settings, different file bytes or --set overrides", bl.rec.config_sha256,
               cur.config_sha256);
        /* Dataset and tokenizer must still match: a config edit does not explain other inputs changing. */
        ResultRecord tmp = cur;
        memcpy(tmp.config_sha256, bl.rec.config_sha256, sizeof tmp.config_sha256);
        diff = record_inputs_unlike(&bl.rec, &tmp);
        if (!diff[0]) {
            snprintf(out->why, sizeof out->why, "config changed since the baseline");
            out->noted = true;
            baseline_free(&bl);
            result_record_free(&cur);
            return 0;
        }
    }
    if (diff[0] && strcmp(diff, "config_sha256") == 0) {
        /* the keys and values, as the note above names them: a hash alone says nothing about what changed */
        log_error("%s: cannot compare with %s: its config differs from the baseline's: %s (config_sha256 %.12s... -> "
                  "%.12s...)",
                  result_path, baseline_path, what[0] ? what : "same settings, different file bytes or --set overrides",
                  bl.rec.config_sha256, cur.config_sha256);
        /* a long list of keys is cut to fit why[512] (the error line above has it whole) */
        snprintf(out->why, sizeof out->why, "config differs from the baseline's: %.460s",
                 what[0] ? what : "same settings, different file bytes or --set overrides");
        baseline_free(&bl);
        result_record_free(&cur);
        return 2;
    }
    if (diff[0]) {
        log_error("%s: cannot compare with %s: %s differs (baseline %.12s..., new %.12s...)", result_path,
                  baseline_path, diff, record_input_value(&bl.rec, diff), record_input_value(&cur, diff));
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
        printf("== %s: mean of %d seeds' baselines (%s/%.*s[.seed<S>].result.json%s; tolerance at least %g sd) vs %s\n",
               run, bl.n_seeds, baselines, rc_len, run,
               bl.replication ? "; a seed they do not hold, compared with their spread" : "", tol->seed_k,
               result_path);
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
        MetricVerdict v = tolerance_judge_metric(tol, b, c->value);
        bool fails = v == MV_WORSE || v == MV_CHANGED || (v == MV_BETTER && !o->allow_better);
        if (fails && status < 1) status = 1;
        n_better += v == MV_BETTER;
        n_not_gated += v == MV_NOT_GATED;
        if (o->only_failures && (v == MV_OK || v == MV_NOT_GATED)) continue;
        if (v == MV_NOT_GATED)
            printf("%-62s %14.6g %14.6g %+12.4g %10s  %s\n", b->name, b->value, c->value, c->value - b->value, "-",
                   METRIC_VERDICT_NAMES[v]);
        else
            printf("%-62s %14.6g %14.6g %+12.4g %10.4g  %s%s\n", b->name, b->value, c->value, c->value - b->value,
                   tolerance_allowed_delta(tol, b), METRIC_VERDICT_NAMES[v],
                   v == MV_BETTER && o->allow_better ? " (allowed: --allow-better)" : "");
    }
    for (int i = 0; i < cm.n; i++)
        if (!record_metrics_find(bm, cm.m[i].name)) {
            printf("%-62s %14s %14.6g %12s %10s  NEW (not in baseline)\n", cm.m[i].name, "-", cm.m[i].value, "-", "-");
            status = 2;
        }
    char gated_note[96] = "";
    if (n_not_gated) snprintf(gated_note, sizeof gated_note, " (%d metric(s) not gated at this size)", n_not_gated);
    if (status == 0 && n_better)
        printf("== %s: within tolerances or better (%d metric(s) BETTER than the baseline, allowed by --allow-better)%s\n\n",
               run, n_better, gated_note);
    else if (status == 1 && n_better)
        /* The tolerances are measured spreads, symmetric by nature: beyond them in the good direction the results
         * moved just as much (a changed learning rate or loss mask can lower a loss), so it fails like WORSE. */
        printf("== %s: OUTSIDE tolerances (%d metric(s) BETTER beyond the measured spread: the results moved; if the "
               "change is intended, record new baselines)%s\n\n", run, n_better, gated_note);
    else
        printf("== %s: %s%s\n\n", run,
               status == 0 ? "within tolerances" : (status == 1 ? "OUTSIDE tolerances" : "not comparable"), gated_note);
    record_metrics_free(&cm);
    baseline_free(&bl);
    result_record_free(&cur);
    return status;
}
