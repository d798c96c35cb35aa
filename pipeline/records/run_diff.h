/* What differs between two runs (bin/compare --diff A B): the config keys whose values differ (each result.json's
 * "config"), then every named number of the runs (run_metrics.h, the names runs.csv uses: counts, final training
 * loss, accuracy and mean answer loss per set and per module, wall times and throughput, the depth summaries of
 * analysis.json and depth_prompts.json) with A, B and the change B - A, and, where both runs have predictions.jsonl
 * on the same examples, a paired 95% bootstrap interval of the change over those examples. A diff is a description,
 * not a gate: it judges nothing. */
#ifndef PIPELINE_RUN_DIFF_H
#define PIPELINE_RUN_DIFF_H

#include <stdbool.h>
#include <stdio.h>

#include "pipeline/records/config_diff.h"
#include "pipeline/records/depth_prompts_record.h"
#include "pipeline/records/predictions_read.h"
#include "pipeline/records/result_record.h"

/* The bootstrap's replicates and its fixed seed (the report's values: intervals are the same on every machine). */
#define RUN_DIFF_BOOT_REPLICATES 2000
#define RUN_DIFF_BOOT_RNG_SEED 20250607ull

/* One side of a diff: a run directory (DIR/result.json, DIR/predictions.jsonl when present, DIR/analysis.json when
 * present) or a baseline record (PREFIX.result.json, named by PREFIX or by the file itself, e.g.
 * reports/baselines/ci/dense_qa or reports/baselines/ci/dense_qa.result.json: no predictions). */
typedef struct {
    char given[1024];       /* the argument as given */
    char record_path[4096]; /* the result.json read */
    bool is_baseline;       /* read from PREFIX.result.json */
    ResultRecord rec;
    bool has_predictions;
    PredictionTable pred;
    char pred_path[4096];
    char no_predictions[1100]; /* why has_predictions is false */
    bool has_analysis;         /* analysis.json present and readable (a disabled one has no depth summary) */
    AnalysisRecord analysis;
    bool has_depth_prompts;    /* depth_prompts.json present and readable, beside an enabled analysis */
    DepthPromptsRecord depth;
} DiffSide;

/* Loads one side; returns 0, or -1 with err naming the argument and what is missing or wrong (nothing is left to
 * free then). The record must be of the run its path names (record_owner_check, run_identity.h: run = the
 * directory's or the baseline's own name, experiment = the name of the directory holding it). A missing or
 * unreadable predictions.jsonl, analysis.json or depth_prompts.json is not an error (no_predictions says why; no
 * depth rows), but
 * predictions of another run or code_version than the record are (prediction_table_check_record). */
int diff_side_load(DiffSide *s, const char *arg, char *err, size_t errlen);
void diff_side_free(DiffSide *s);

typedef struct {
    char name[400];
    bool in_a, in_b;
    double a, b;
    bool has_interval; /* a paired bootstrap interval of b - a over the examples */
    double lo, hi;
    long n_examples;
} DiffRow;

typedef struct {
    ConfigDiff config; /* values[0] A's, values[1] B's */
    char variant_a[9], variant_b[9]; /* run_variant_key of each config ("" when it has none) */
    DiffRow *rows;
    int n_rows;
    bool paired;       /* the intervals were computed */
    char not_paired[1200]; /* why not, when !paired */
    long n_examples;   /* examples both runs share (paired) */
    char unlike[64];   /* the first data input that differs ("dataset.train_sha256", ...), "" when the same */
} RunDiff;

/* The diff of b against a; replicates and rng_seed drive the bootstrap. */
void run_diff_compute(const DiffSide *a, const DiffSide *b, int replicates, unsigned long long rng_seed, RunDiff *out);
void run_diff_print(FILE *fp, const DiffSide *a, const DiffSide *b, const RunDiff *d, int replicates,
                    unsigned long long rng_seed);
void run_diff_free(RunDiff *d);

/* bin/compare --diff A B: loads both sides, prints the diff to stdout with the fixed bootstrap seed. Returns 0, or 2
 * after logging "A: why" or "B: why" when a side cannot be read. */
int run_diff_command(const char *a_arg, const char *b_arg, int replicates);

#endif
