/* The report's statistics over seeds and examples, on grouped runs (report_runs.h):
 *  - per run config, a metric's per-seed values with their mean and 95% t-interval across seeds;
 *  - paired contrasts on the same evaluation examples (predictions.jsonl): a weighted sum of up to four run configs'
 *    per-example correctness, paired by seed number, with a hierarchical-bootstrap 95% interval (seeds, then
 *    examples) and, for two-config contrasts, a per-seed exact McNemar test;
 *  - paired depth_fraction differences across seeds with a t-interval.
 * Everything here is deterministic: the bootstrap uses REPORT_BOOT_RNG_SEED. */
#ifndef PIPELINE_REPORT_STATS_H
#define PIPELINE_REPORT_STATS_H

#include <stdbool.h>

#include "pipeline/report/report_runs.h"
#include "pipeline/base/stats.h"

#define REPORT_HEADLINE_SET EVAL_EXTRAPOLATE
#define REPORT_HEADLINE_MODULE "arithmetic__mul_div_multiple_longer"
#define REPORT_BOOT_REPLICATES 2000
#define REPORT_BOOT_RNG_SEED 20250607ull

typedef enum {
    METRIC_HEADLINE,    /* extrapolate accuracy on REPORT_HEADLINE_MODULE */
    METRIC_INTERPOLATE, /* pooled interpolate accuracy */
    METRIC_EXTRAPOLATE, /* pooled extrapolate accuracy */
    METRIC_MEAN,        /* mean of the two sets' accuracies */
    METRIC_DEPTH,       /* the analysis' depth summary (depth_fraction) */
    METRIC_ANSWER_LOSS, /* mean answer loss (nats) over every evaluation example of both sets */
    METRIC_N
} Metric;
extern const char *const METRIC_NAMES[METRIC_N];

/* The metric of one run; false when the run lacks it (module not evaluated, analysis missing or disabled). */
bool report_metric(const RunData *r, Metric m, double *value);

typedef struct {
    int n;                         /* seeds that have the metric */
    long seeds[REPORT_MAX_SEEDS];
    double values[REPORT_MAX_SEEDS];
    double mean, lo, hi;           /* t-interval across seeds (a fraction's clipped to [0, 1]); NaN when n < 2 */
} SeedSummary;
void report_seed_summary(const RunGroup *g, Metric m, SeedSummary *out);

/* Which examples a contrast counts. */
typedef enum { SCOPE_HEADLINE, SCOPE_ALL } Scope;

/* What a contrast averages per example: correctness (0/1, so the contrast is in accuracy) or the summed
 * answer-token cross-entropy in nats (predictions.jsonl "answer_loss"; lower is better). */
typedef enum { QUANTITY_CORRECT, QUANTITY_ANSWER_LOSS } Quantity;

typedef struct {
    bool ok;
    char why[1024];                /* when !ok: why it could not be computed */
    int n_seeds;                   /* seeds present in every config of the contrast */
    long seeds[REPORT_MAX_SEEDS];
    long n_examples;               /* examples in the scope (the same for every seed) */
    double per_seed[REPORT_MAX_SEEDS]; /* the contrast on each seed's examples */
    BootstrapResult boot;          /* hierarchical bootstrap over seeds and examples */
    double t_lo, t_hi;             /* t-interval of the per-seed values across seeds (NaN with one seed) */
    double verdict_lo, verdict_hi; /* the interval the verdict rule reads: the union of the two (see below) */
    double mean_level[4];          /* each config's own mean of the quantity on the scope, over the shared seeds */
    bool has_mcnemar;              /* two configs (weights +1, -1), QUANTITY_CORRECT */
    long b[REPORT_MAX_SEEDS], c[REPORT_MAX_SEEDS]; /* only the first right / only the second right */
    double p[REPORT_MAX_SEEDS];    /* exact McNemar p */
} Contrast;

/* The verdict interval of a difference: [min lo, max hi] of the bootstrap and t-intervals (the reasons below); NaN
 * when either is undefined (one seed: no t-interval, so no verdict interval). */
void report_union_interval(double lo1, double hi1, double lo2, double hi2, double *lo, double *hi);

/* sum_k weights[k] * quantity(groups[k]) per example, averaged; groups paired by seed number (seeds missing from any
 * group are left out). The verdict interval is the union of the hierarchical-bootstrap interval and the t-interval
 * of the per-seed values: the percentile bootstrap over 2 or 3 seeds understates seed variance (it cannot reach
 * beyond the seeds it has; the t quantile 12.7 / 4.3 corrects for that), while the t-interval alone misses example
 * variance and collapses to a point when the seeds happen to agree; a claim is settled only when both exclude 0.
 * Not ok (with why) when a group is NULL, a run has no predictions.jsonl, no seed is shared, or the scope is empty.
 * Dies when two paired runs list different examples (prediction_tables_match). */
void report_contrast(const RunGroup *const *groups, const double *weights, int n_groups, Scope scope,
                     Quantity quantity, Contrast *out);

/* Paired across-seed difference of a per-run metric (a - b by seed number) with its t-interval. */
typedef struct {
    int n;
    long seeds[REPORT_MAX_SEEDS];
    double diffs[REPORT_MAX_SEEDS];
    double mean, lo, hi;
} PairedSeedDiff;
void report_paired_metric_diff(const RunGroup *a, const RunGroup *b, Metric m, PairedSeedDiff *out);

/* The depth summary difference a - b (depth_fraction, the mean over the analysis prompts of each prompt's value):
 * the paired t-interval across seeds (diff) and a hierarchical bootstrap over seeds and PROMPTS (the same prompts
 * in every run; per-prompt differences), and their union as the verdict interval, for the reasons given above.
 * boot is NaN (and the verdict interval too) when the runs' prompts differ. */
typedef struct {
    PairedSeedDiff diff;
    BootstrapResult boot;
    int n_prompts;
    double verdict_lo, verdict_hi;
} DepthDiff;
void report_depth_diff(const RunGroup *a, const RunGroup *b, DepthDiff *out);

#endif
