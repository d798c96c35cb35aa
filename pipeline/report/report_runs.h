/* The report's view of an experiment's runs: each run directory's records (result.json, analysis.json,
 * metrics.jsonl, eval_curve.jsonl, predictions.jsonl), which run config and seed it holds, and the runs grouped by
 * run config (the seeds of one configuration). Loading dies with one line naming the file on a bad record. */
#ifndef PIPELINE_REPORT_RUNS_H
#define PIPELINE_REPORT_RUNS_H

#include <stdbool.h>

#include "pipeline/records/depth_prompts_record.h"
#include "pipeline/records/predictions_read.h"
#include "pipeline/records/result_record.h"
#include "pipeline/records/run_identity.h"

typedef struct {
    char name[128];           /* directory name, e.g. "moeut_answer.seed2" */
    char dir[4096];
    char run_config[128];     /* e.g. "moeut_answer" */
    long seed;                /* -1 when unknown */
    bool aside;               /* named CONFIG@VARIANT[.seedS]: a sweep point or an earlier variant, not current */
    char variant[RUN_VARIANT_LEN + 1]; /* run_variant_key of the recorded config ("" without a result) */
    RecordIdentity identity;  /* the record's own optional fields (overrides) */
    bool has_result, has_analysis, has_metrics, has_predictions;
    ResultRecord res;
    AnalysisRecord ana;
    int n_points;
    double *step, *loss, *ce; /* metrics.jsonl columns (ce = loss when the file has no "ce") */
    int n_curve;              /* eval_curve.jsonl: step and accuracy per set (NaN where a set is absent) */
    double *curve_step, *curve_acc[EVAL_N_SETS];
    PredictionTable pred;
    bool has_depth_prompts;   /* depth_prompts.json beside an enabled analysis.json (analyze.eval_prompts > 0) */
    DepthPromptsRecord depth;
    /* expert capacity: metrics.jsonl lines whose "routing" records "dropped" (cap_steps of them), their kept
     * (cap_kept: the counts) and dropped assignments summed over the lines; 0 without capacity */
    int cap_steps;
    int64_t cap_kept, cap_dropped;
} RunData;

/* Reads every record of runs_dir/name that exists; a record of another run or experiment is an error. */
void report_run_load(RunData *r, const char *runs_dir, const char *name, const char *experiment);
void report_run_free(RunData *r);
bool report_run_has_maps(const RunData *r);          /* an analysis present and not disabled */
const char *report_run_analysis_state(const RunData *r); /* "missing" | "yes" | "disabled" */

/* The expected runs, each followed by its other seeds (NAME.seed<S> with a result.json, by seed) and its other
 * variants (NAME@VARIANT[.seed<S>], by variant and seed), then any other run directory with a result.json (sorted),
 * without duplicates. */
char **report_list_runs(const char *runs_dir, const char *expected, int *n_out);

/* Dies naming the first two result records evaluated on other data (tokenizer or eval sets). */
void report_require_same_data(const RunData *runs, int n);

/* Every run's predictions.jsonl must list the same examples (the runs share their eval data, so paired comparisons
 * are possible between any two); dies naming the first two files that differ. Runs without the file are skipped. */
void report_require_same_examples(const RunData *runs, int n);

/* Most seeds of one run config the report aggregates (report_group_runs refuses more). */
#define REPORT_MAX_SEEDS 64

/* The seeds of one configuration (one run config and one variant key), ascending by seed (runs without a result are
 * left out). Current runs (names without "@") and runs kept aside (CONFIG@VARIANT...) never share a group, even with
 * the same key: the aside ones are another directory's copy of a configuration and do not enter the paper's
 * verdicts. Of the current groups of one run config, the primary one holds the config's own-seed run (runs/EXP/CONFIG;
 * without it, the first current run in report order): the one the paper's claims are judged on. */
typedef struct {
    char run_config[128];
    char variant[RUN_VARIANT_LEN + 1];
    bool current, primary;
    char label[160];          /* run_config for the primary group, else "run_config@variant" */
    char arch[16], loss_mode[16];
    int n;
    const RunData **runs;
} RunGroup;

/* Groups the runs with a result by (run_config, variant key, current), in order of first appearance, and marks the
 * primary groups. Dies when two runs of one group have the same seed, or a group has more than REPORT_MAX_SEEDS. */
RunGroup *report_group_runs(const RunData *runs, int n, int *n_groups);
void report_groups_free(RunGroup *g, int n);
/* The primary group with this arch and loss mode (first in report order), or NULL: the runs the paper's claims are
 * judged on. */
const RunGroup *report_find_group(const RunGroup *g, int n, const char *arch, const char *mode);
/* The number of groups of this run config (its variants among the runs). */
int report_config_variants(const RunGroup *g, int n, const char *run_config);
/* The run of the group with this seed, or NULL. */
const RunData *report_group_seed(const RunGroup *g, long seed);
/* section.key of the group's recorded config (every seed of a group has the same one, so its first run's stands for
 * all), or NULL when g is NULL, has no run or no config, or the key is absent. */
const cJSON *report_group_config_item(const RunGroup *g, const char *section, const char *key);

#endif
