/* Baselines of one run or pooled over seeds, and the inputs records must share (compare_baseline.h). */
#include "pipeline/records/compare_baseline.h"

#include <ctype.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pipeline/base/atomic_file.h"
#include "pipeline/base/log.h"

/* "" if the two records describe the same experiment inputs, else the name of the first difference. */
const char *record_inputs_unlike(const ResultRecord *a, const ResultRecord *b) {
    if (strcmp(a->config_sha256, b->config_sha256) != 0) return "config_sha256";
    if (strcmp(a->train_sha256, b->train_sha256) != 0) return "dataset.train_sha256";
    if (strcmp(a->interpolate_sha256, b->interpolate_sha256) != 0) return "dataset.interpolate_sha256";
    if (strcmp(a->extrapolate_sha256, b->extrapolate_sha256) != 0) return "dataset.extrapolate_sha256";
    if (strcmp(a->tokenizer_sha256, b->tokenizer_sha256) != 0) return "tokenizer_sha256";
    return "";
}

const char *record_input_value(const ResultRecord *r, const char *field) {
    if (strcmp(field, "config_sha256") == 0) return r->config_sha256;
    if (strcmp(field, "dataset.train_sha256") == 0) return r->train_sha256;
    if (strcmp(field, "dataset.interpolate_sha256") == 0) return r->interpolate_sha256;
    if (strcmp(field, "dataset.extrapolate_sha256") == 0) return r->extrapolate_sha256;
    return r->tokenizer_sha256;
}

/* The run config a run directory name belongs to: "moeut_qa.seed2" -> length of "moeut_qa". */
size_t baseline_run_config_len(const char *name) {
    const char *dot = strrchr(name, '.');
    if (!dot || strncmp(dot, ".seed", 5) != 0 || !dot[5]) return strlen(name);
    for (const char *p = dot + 5; *p; p++)
        if (!isdigit((unsigned char)*p)) return strlen(name);
    return (size_t)(dot - name);
}

bool baseline_same_run_config(const char *a, const char *b) {
    size_t la = baseline_run_config_len(a);
    return la == baseline_run_config_len(b) && strncmp(a, b, la) == 0;
}

/* Loads the baseline for `name`; names[0..n) are all baseline names. Returns 0, or 2 after logging why not. */
int baseline_load(Baseline *bl, const char *baselines, const char *name, char *const *names, int n) {
    char path[4096], err[1024];
    memset(bl, 0, sizeof *bl);
    /* a seed the baselines do not hold: its run config's first recorded seed stands for the pool's inputs */
    const char *ref = name;
    bool recorded = false;
    for (int i = 0; i < n && !recorded; i++) recorded = strcmp(names[i], name) == 0;
    if (!recorded) {
        ref = NULL;
        int n_group = 0;
        for (int i = 0; i < n; i++)
            if (baseline_same_run_config(names[i], name) && n_group++ == 0) ref = names[i];
        if (n_group < 2) {
            log_error("%s/%s.result.json: missing baseline record (and not 2 or more recorded seeds of %.*s to compare "
                      "another seed with)", baselines, name, (int)baseline_run_config_len(name), name);
            return 2;
        }
        bl->replication = true;
    }
    snprintf(path, sizeof path, "%s/%s.result.json", baselines, ref);
    if (result_record_load_in(&bl->rec, path, baselines, ref, true, err, sizeof err)) {
        log_error("%s", err);
        return 2;
    }
    record_metrics_collect(&bl->rec, &bl->metrics);
    bl->n_seeds = 1;
    int n_group = 0;
    for (int i = 0; i < n; i++) n_group += baseline_same_run_config(names[i], name);
    if (n_group < 2) return 0; /* the caller checked that the tolerances file has seed_spread.k for groups */
    /* Sums of the deviations from this name's own record (shifted, so that a tiny sd of a large value survives). */
    int nm = bl->metrics.n;
    double *sum = xcalloc((size_t)nm, sizeof *sum), *sum2 = xcalloc((size_t)nm, sizeof *sum2);
    int rc = 0;
    for (int i = 0; i < n && rc == 0; i++) {
        if (!baseline_same_run_config(names[i], name)) continue;
        ResultRecord s;
        snprintf(path, sizeof path, "%s/%s.result.json", baselines, names[i]);
        if (result_record_load_in(&s, path, baselines, names[i], true, err, sizeof err)) {
            log_error("%s", err);
            rc = 2;
            break;
        }
        /* Seeds differ in config_sha256 (by their --set train.seed), never in the data they were trained on. */
        memcpy(s.config_sha256, bl->rec.config_sha256, sizeof s.config_sha256);
        const char *diff = record_inputs_unlike(&bl->rec, &s);
        if (diff[0]) {
            log_error("%s: cannot pool with %s/%s.result.json: %s differs", path, baselines, ref, diff);
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
                log_error("%s: %s differs from %s/%s.result.json's (%.0f vs %.0f)", path, m->name, baselines, ref,
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

void baseline_free(Baseline *bl) {
    record_metrics_free(&bl->metrics);
    result_record_free(&bl->rec);
}
