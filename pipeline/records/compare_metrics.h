/* The numbers of a result record that compare checks and diff shows, each with a dotted name and a class (which
 * tolerance of reports/baselines/EXP/tolerances.json applies). One list, so that the gate and the diff always speak
 * of the same metrics. Wall times and throughput are deliberately absent: they vary run to run. */
#ifndef PIPELINE_RECORDS_COMPARE_METRICS_H_
#define PIPELINE_RECORDS_COMPARE_METRICS_H_

#include "pipeline/records/result_record.h"

/* Pooled (per set) and per-module answer losses are separate classes: a module's mean over its ~100-200 examples
 * moves an order of magnitude more than the set's mean under the same perturbation (reports/baselines/EXP/spread.json). */
typedef enum { MC_ACCURACY, MC_LOSS, MC_MODULE_LOSS, MC_TRAIN_LOSS, MC_COUNT, MC_GREEDY, MC_N_CLASSES } MetricClass;
extern const char *const METRIC_CLASS_NAMES[MC_N_CLASSES]; /* "accuracy", "mean_answer_loss", ... */

/* Which examples of predictions.jsonl a metric is the mean of (diff's paired intervals): none (a training number or
 * a count), one set, one set's module, or both sets (mean_accuracy: the mean of the two sets' accuracies). */
typedef enum { EXAMPLES_NONE, EXAMPLES_SET, EXAMPLES_MODULE, EXAMPLES_BOTH_SETS } ExampleScope;

typedef struct {
    char name[384];  /* "training.final_train_loss", "interpolate.accuracy", "extrapolate.MODULE.mean_answer_loss" */
    MetricClass klass;
    double value;
    double ci95[2];  /* accuracies only: the Wilson interval */
    double seed_sd;  /* multi-seed baselines: sample sd over the seeds; 0 otherwise */
    ExampleScope scope;
    int set;         /* EXAMPLES_SET, EXAMPLES_MODULE */
    const char *module; /* EXAMPLES_MODULE: the record's module name (valid while the record lives) */
} RecordMetric;

typedef struct {
    RecordMetric *m;
    int n, cap;
} RecordMetricList;

/* Appends every compared number of r to l (in a fixed order: counts and training, then per set, then per module). */
void record_metrics_collect(const ResultRecord *r, RecordMetricList *l);
const RecordMetric *record_metrics_find(const RecordMetricList *l, const char *name); /* NULL if absent */
void record_metrics_free(RecordMetricList *l);

#endif
