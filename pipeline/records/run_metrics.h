/* The named numbers of one run: one table of names shared by runs.csv (bin/export, runs_csv.h) and make diff
 * (bin/compare --diff, run_diff.h), so that a column of the CSV and a line of the diff that show the same number have
 * the same name ("interpolate.accuracy" in both). In this order:
 *   - the metrics compare gates (compare_metrics.h, in its order): n_params, training.steps, training.tokens,
 *     training.final_train_loss, evaluation.mean_accuracy; per set SET.n, SET.accuracy, SET.mean_answer_loss,
 *     SET.greedy_n, SET.greedy_disagreements, and per module SET.MODULE.n, SET.MODULE.accuracy,
 *     SET.MODULE.mean_answer_loss;
 *   - the numbers shown but never gated (they vary run to run, or come from the depth analysis):
 *     training.wall_time_s, training.tokens_per_s, evaluation.wall_time_s;
 *     analysis.NAME (analysis.json's depth summary over the paper's four prompts, NAME its "depth_summary" name:
 *     analysis.depth_fraction), where the run has an enabled analysis;
 *     depth_prompts.n (the sampled evaluation prompts) and depth_prompts.VECTOR.MEASURE, the mean over those prompts
 *     of each measure (depth_fraction, depth_centre) under each uninformative vector (counterfactual, the paper's;
 *     eval_mean; zero) of depth_prompts_record.h, where the run has a depth_prompts.json. */
#ifndef PIPELINE_RECORDS_RUN_METRICS_H_
#define PIPELINE_RECORDS_RUN_METRICS_H_

#include "pipeline/records/depth_prompts_record.h"
#include "pipeline/records/result_record.h"

typedef struct {
    char name[384];
    double value;
} RunMetric;

typedef struct {
    RunMetric *m;
    int n, cap;
} RunMetricList;

/* The numbers not gated, appended to l: from the result record, and from the analysis and depth_prompts records
 * where given (NULL: none; a disabled analysis has no depth summary). */
void run_metrics_described(const ResultRecord *r, const AnalysisRecord *analysis, const DepthPromptsRecord *depth,
                           RunMetricList *l);
/* Every named number of the run: the gated ones (record_metrics_collect), then run_metrics_described's. */
void run_metrics_all(const ResultRecord *r, const AnalysisRecord *analysis, const DepthPromptsRecord *depth,
                     RunMetricList *l);
const RunMetric *run_metrics_find(const RunMetricList *l, const char *name); /* NULL if absent */
void run_metrics_free(RunMetricList *l);

#endif
