/* Statistics over seeds and examples for the report (see report_stats.h). */
#include "pipeline/report/report_stats.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pipeline/base/log.h"

const char *const METRIC_NAMES[METRIC_N] = {"headline accuracy", "interpolate accuracy", "extrapolate accuracy",
                                            "mean accuracy", "depth summary", "mean answer loss"};

bool report_metric(const RunData *r, Metric m, double *value) {
    if (m == METRIC_DEPTH) {
        if (!report_run_has_maps(r)) return false;
        *value = r->ana.summary_value;
        return true;
    }
    if (!r->has_result) return false;
    const SetEval *sets = r->res.evaluation.sets;
    switch (m) {
    case METRIC_HEADLINE: {
        const ModuleEval *me = set_eval_find_module(&sets[REPORT_HEADLINE_SET], REPORT_HEADLINE_MODULE);
        if (!me || me->n == 0) return false;
        *value = me->accuracy;
        return true;
    }
    case METRIC_INTERPOLATE: *value = sets[EVAL_INTERPOLATE].accuracy; return true;
    case METRIC_EXTRAPOLATE: *value = sets[EVAL_EXTRAPOLATE].accuracy; return true;
    case METRIC_MEAN: *value = r->res.evaluation.mean_accuracy; return true;
    case METRIC_ANSWER_LOSS: {
        const long n = sets[EVAL_INTERPOLATE].n + sets[EVAL_EXTRAPOLATE].n;
        if (n == 0) return false;
        *value = ((double)sets[EVAL_INTERPOLATE].n * sets[EVAL_INTERPOLATE].mean_answer_loss +
                  (double)sets[EVAL_EXTRAPOLATE].n * sets[EVAL_EXTRAPOLATE].mean_answer_loss) /
                 (double)n;
        return true;
    }
    default: return false;
    }
}

void report_seed_summary(const RunGroup *g, Metric m, SeedSummary *out) {
    memset(out, 0, sizeof *out);
    for (int i = 0; i < g->n && out->n < REPORT_MAX_SEEDS; i++) {
        double v;
        if (!report_metric(g->runs[i], m, &v)) continue;
        out->seeds[out->n] = g->runs[i]->seed;
        out->values[out->n++] = v;
    }
    if (out->n == 0) {
        out->mean = out->lo = out->hi = NAN;
        return;
    }
    mean_t_interval(out->values, out->n, &out->mean, &out->lo, &out->hi, NULL);
    /* Accuracies and depth are fractions in [0, 1]; the t-interval of 2 or 3 seeds easily reaches past its ends. */
    if (out->n >= 2 && m != METRIC_ANSWER_LOSS) {
        out->lo = fmax(out->lo, 0.0);
        out->hi = fmin(out->hi, 1.0);
    }
}

void report_union_interval(double lo1, double hi1, double lo2, double hi2, double *lo, double *hi) {
    if (!isfinite(lo1) || !isfinite(hi1) || !isfinite(lo2) || !isfinite(hi2)) {
        *lo = *hi = NAN;
        return;
    }
    *lo = fmin(lo1, lo2);
    *hi = fmax(hi1, hi2);
}

/* Seeds shared by every group (ascending, as the groups are). */
static int shared_seeds(const RunGroup *const *groups, int n_groups, long *seeds) {
    int n = 0;
    for (int i = 0; i < groups[0]->n && n < REPORT_MAX_SEEDS; i++) {
        long s = groups[0]->runs[i]->seed;
        bool all = true;
        for (int k = 1; k < n_groups && all; k++) all = report_group_seed(groups[k], s) != NULL;
        if (all) seeds[n++] = s;
    }
    return n;
}

void report_contrast(const RunGroup *const *groups, const double *weights, int n_groups, Scope scope,
                     Quantity quantity, Contrast *out) {
    memset(out, 0, sizeof *out);
    out->boot.estimate = out->boot.lo = out->boot.hi = NAN;
    out->t_lo = out->t_hi = out->verdict_lo = out->verdict_hi = NAN;
    for (int k = 0; k < n_groups; k++)
        if (!groups[k]) {
            snprintf(out->why, sizeof out->why, "a run config of the comparison has no results");
            return;
        }
    out->n_seeds = shared_seeds(groups, n_groups, out->seeds);
    if (out->n_seeds == 0) {
        snprintf(out->why, sizeof out->why, "no seed is shared by %s%s", groups[0]->run_config,
                 n_groups > 1 ? " and the others" : "");
        return;
    }
    /* Every run of the contrast must have predictions, and list the same examples as the first. */
    const RunData *first = NULL;
    for (int s = 0; s < out->n_seeds; s++)
        for (int k = 0; k < n_groups; k++) {
            const RunData *r = report_group_seed(groups[k], out->seeds[s]);
            if (!r->has_predictions) {
                snprintf(out->why, sizeof out->why, "%s has no predictions.jsonl (per-example verdicts)", r->name);
                return;
            }
            if (!first) {
                first = r;
                continue;
            }
            char err[2048], pa[4200], pb[4200];
            snprintf(pa, sizeof pa, "%s/predictions.jsonl", first->dir);
            snprintf(pb, sizeof pb, "%s/predictions.jsonl", r->dir);
            if (prediction_tables_match(&first->pred, pa, &r->pred, pb, err, sizeof err)) die("%s", err);
        }
    /* The examples in scope, by position (the same positions in every table, as just checked). */
    const PredictionTable *t0 = &first->pred;
    const int headline = prediction_table_module(t0, REPORT_HEADLINE_MODULE);
    long *idx = xmalloc((size_t)(t0->n + 1) * sizeof *idx);
    long ne = 0;
    for (long i = 0; i < t0->n; i++)
        if (scope == SCOPE_ALL || (t0->set[i] == REPORT_HEADLINE_SET && t0->module[i] == headline)) idx[ne++] = i;
    if (ne == 0) {
        snprintf(out->why, sizeof out->why, "no %s example of %s in predictions.jsonl",
                 EVAL_SET_NAMES[REPORT_HEADLINE_SET], REPORT_HEADLINE_MODULE);
        free(idx);
        return;
    }
    out->n_examples = ne;
    double *values = xcalloc((size_t)out->n_seeds * (size_t)ne, sizeof *values);
    out->has_mcnemar = quantity == QUANTITY_CORRECT && n_groups == 2 && weights[0] == 1 && weights[1] == -1;
    for (int s = 0; s < out->n_seeds; s++) {
        double sum = 0;
        long b = 0, c = 0;
        for (long e = 0; e < ne; e++) {
            double v = 0;
            for (int k = 0; k < n_groups; k++) {
                const PredictionTable *t = &report_group_seed(groups[k], out->seeds[s])->pred;
                const double q = quantity == QUANTITY_CORRECT ? (double)t->correct[idx[e]] : t->answer_loss[idx[e]];
                v += weights[k] * q;
                if (k < 4) out->mean_level[k] += q / ((double)ne * out->n_seeds);
            }
            values[(size_t)s * ne + e] = v;
            sum += v;
            if (out->has_mcnemar) {
                b += v > 0;
                c += v < 0;
            }
        }
        out->per_seed[s] = sum / (double)ne;
        if (out->has_mcnemar) {
            out->b[s] = b;
            out->c[s] = c;
            out->p[s] = mcnemar_exact_p(b, c);
        }
    }
    hierarchical_bootstrap_mean(values, out->n_seeds, ne, REPORT_BOOT_REPLICATES, REPORT_BOOT_RNG_SEED, &out->boot);
    double mean;
    mean_t_interval(out->per_seed, out->n_seeds, &mean, &out->t_lo, &out->t_hi, NULL);
    report_union_interval(out->boot.lo, out->boot.hi, out->t_lo, out->t_hi, &out->verdict_lo, &out->verdict_hi);
    out->ok = true;
    free(values);
    free(idx);
}

void report_paired_metric_diff(const RunGroup *a, const RunGroup *b, Metric m, PairedSeedDiff *out) {
    memset(out, 0, sizeof *out);
    out->mean = out->lo = out->hi = NAN;
    if (!a || !b) return;
    for (int i = 0; i < a->n && out->n < REPORT_MAX_SEEDS; i++) {
        const RunData *ra = a->runs[i], *rb = report_group_seed(b, ra->seed);
        double va, vb;
        if (!rb || !report_metric(ra, m, &va) || !report_metric(rb, m, &vb)) continue;
        out->seeds[out->n] = ra->seed;
        out->diffs[out->n++] = va - vb;
    }
    if (out->n) mean_t_interval(out->diffs, out->n, &out->mean, &out->lo, &out->hi, NULL);
}

/* The analysis prompts of two records are the same ones (count and strings). */
static bool same_prompts(const AnalysisRecord *a, const AnalysisRecord *b) {
    if (a->n_prompts != b->n_prompts) return false;
    for (int k = 0; k < a->n_prompts; k++)
        if (strcmp(a->prompts[k].question, b->prompts[k].question) != 0 ||
            strcmp(a->prompts[k].answer, b->prompts[k].answer) != 0)
            return false;
    return true;
}

void report_depth_diff(const RunGroup *a, const RunGroup *b, DepthDiff *out) {
    memset(out, 0, sizeof *out);
    out->boot.estimate = out->boot.lo = out->boot.hi = NAN;
    out->verdict_lo = out->verdict_hi = NAN;
    report_paired_metric_diff(a, b, METRIC_DEPTH, &out->diff);
    if (out->diff.n == 0) return;
    const AnalysisRecord *ref = &report_group_seed(a, out->diff.seeds[0])->ana;
    const int np = ref->n_prompts;
    for (int s = 0; s < out->diff.n; s++)
        if (!same_prompts(ref, &report_group_seed(a, out->diff.seeds[s])->ana) ||
            !same_prompts(ref, &report_group_seed(b, out->diff.seeds[s])->ana))
            return;
    if (np == 0) return;
    out->n_prompts = np;
    double *v = xcalloc((size_t)out->diff.n * (size_t)np, sizeof *v);
    for (int s = 0; s < out->diff.n; s++)
        for (int k = 0; k < np; k++)
            v[(size_t)s * np + k] = report_group_seed(a, out->diff.seeds[s])->ana.prompts[k].depth_value -
                                    report_group_seed(b, out->diff.seeds[s])->ana.prompts[k].depth_value;
    hierarchical_bootstrap_mean(v, out->diff.n, np, REPORT_BOOT_REPLICATES, REPORT_BOOT_RNG_SEED, &out->boot);
    free(v);
    report_union_interval(out->boot.lo, out->boot.hi, out->diff.lo, out->diff.hi, &out->verdict_lo, &out->verdict_hi);
}
