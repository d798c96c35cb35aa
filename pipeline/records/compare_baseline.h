/* The baseline a run is compared against (bin/compare): the record <baselines>/<NAME>.result.json, or, when the
 * baselines hold records of two or more seeds of one run config (RUN.result.json and RUN.seed<S>.result.json), the
 * mean and sample standard deviation over those seeds' records. And the inputs two records must share to be
 * compared at all (config, dataset shards, tokenizer). */
#ifndef PIPELINE_COMPARE_BASELINE_H
#define PIPELINE_COMPARE_BASELINE_H

#include <stdbool.h>
#include <stddef.h>

#include "pipeline/records/compare_metrics.h"
#include "pipeline/records/result_record.h"

typedef struct {
    ResultRecord rec;   /* the baseline record of the same name (its hashes are checked against the new record); for
                         * a replication, its run config's first recorded seed */
    RecordMetricList metrics; /* values: that record's, or the seeds' means with seed_sd set */
    int n_seeds;        /* 1, or the number of seed records pooled */
    bool replication;   /* name is a seed the baselines do not hold (compare_seeds.h): compared with the seeds' mean */
} Baseline;

/* "" if the two records describe the same experiment inputs, else the name of the first difference:
 * "config_sha256", "dataset.train_sha256", "dataset.interpolate_sha256", "dataset.extrapolate_sha256",
 * "tokenizer_sha256". */
const char *record_inputs_unlike(const ResultRecord *a, const ResultRecord *b);
/* r's hash of the input record_inputs_unlike named. */
const char *record_input_value(const ResultRecord *r, const char *field);

/* The run config a run directory name belongs to: "moeut_qa.seed2" -> length of "moeut_qa". */
size_t baseline_run_config_len(const char *name);
bool baseline_same_run_config(const char *a, const char *b);

/* Loads the baseline for `name` from the directory `baselines`; names[0..n) are all baseline names there, and the
 * seeds of name's run config among them are pooled (the caller checked that the tolerances have seed_spread.k). A
 * name the baselines do not hold is a replication when they hold >= 2 seeds of its run config: their pool, with
 * replication set; otherwise an error.
 * Returns 0, or 2 after logging why not (the seeds' data inputs or counts differ, a record cannot be read). Free with
 * baseline_free in either case. */
int baseline_load(Baseline *bl, const char *baselines, const char *name, char *const *names, int n);
void baseline_free(Baseline *bl);

#endif
