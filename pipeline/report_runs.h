/* The report's view of an experiment's runs: each run directory's records (result.json, analysis.json,
 * metrics.jsonl, eval_curve.jsonl, predictions.jsonl), which run config and seed it holds, and the runs grouped by
 * run config (the seeds of one configuration). Loading dies with one line naming the file on a bad record. */
#ifndef PIPELINE_REPORT_RUNS_H
#define PIPELINE_REPORT_RUNS_H

#include <stdbool.h>

#include "pipeline/predictions_read.h"
#include "pipeline/result_record.h"
#include "pipeline/run_identity.h"

typedef struct {
    char name[128];           /* directory name, e.g. "moeut_answer.seed2" */
    char dir[4096];
    char run_config[128];     /* e.g. "moeut_answer" */
    long seed;                /* -1 when unknown */
    RecordIdentity identity;  /* the record's own optional fields (overrides) */
    bool has_result, has_analysis, has_metrics, has_predictions;
    ResultRecord res;
    AnalysisRecord ana;
    int n_points;
    double *step, *loss, *ce; /* metrics.jsonl columns (ce = loss when the file has no "ce") */
    int n_curve;              /* eval_curve.jsonl: step and accuracy per set (NaN where a set is absent) */
    double *curve_step, *curve_acc[EVAL_N_SETS];
    PredictionTable pred;
} RunData;

/* Reads every record of runs_dir/name that exists; a record of another run or experiment is an error. */
void report_run_load(RunData *r, const char *runs_dir, const char *name, const char *experiment);
void report_run_free(RunData *r);
bool report_run_has_maps(const RunData *r);          /* an analysis present and not disabled */
const char *report_run_analysis_state(const RunData *r); /* "missing" | "yes" | "disabled" */

/* The expected runs, each expected run's other seeds (NAME.seed<S> with a result.json, by seed), then any other run
 * directory with a result.json (sorted), without duplicates. */
char **report_list_runs(const char *runs_dir, const char *expected, int *n_out);

/* Dies naming the first two result records evaluated on other data (tokenizer or eval sets). */
void report_require_same_data(const RunData *runs, int n);

/* Every run's predictions.jsonl must list the same examples (the runs share their eval data, so paired comparisons
 * are possible between any two); dies naming the first two files that differ. Runs without the file are skipped. */
void report_require_same_examples(const RunData *runs, int n);

/* Most seeds of one run config the report aggregates (report_group_runs refuses more). */
#define REPORT_MAX_SEEDS 64

/* The seeds of one run config, ascending by seed (runs without a result are left out). */
typedef struct {
    char run_config[128];
    char arch[16], loss_mode[16];
    int n;
    const RunData **runs;
} RunGroup;

/* Groups the runs with a result by run_config, in order of first appearance. Dies when two runs of one config
 * have the same seed, differ in arch or loss mode, or number more than REPORT_MAX_SEEDS. */
RunGroup *report_group_runs(const RunData *runs, int n, int *n_groups);
void report_groups_free(RunGroup *g, int n);
/* The group with this arch and loss mode (first in report order), or NULL. */
const RunGroup *report_find_group(const RunGroup *g, int n, const char *arch, const char *mode);
/* The run of the group with this seed, or NULL. */
const RunData *report_group_seed(const RunGroup *g, long seed);

#endif
