/* depth_prompts.json: the residual-erasure depth analysis over a sample of evaluation examples (schema
 * "dm-math-depth-prompts", version 1). bin/analyze writes it beside analysis.json, in the same output set, when the run
 * config's analyze.eval_prompts is > 0; bin/report reads it. analysis.json keeps the paper's four prompts and their
 * maps; this record holds, per sampled example, the depth measures under each "uninformative" vector, and the mean map.
 *
 *   {"schema", "schema_version", "experiment", "run", "arch", "loss_mode", "overrides", "seed", "run_config",
 *    "code_version", "backend", "hardware",
 *    "n_layers": L,
 *    "sample": {"requested": N, "seed": S, "pool": [n_interpolate, n_extrapolate]},
 *    "vectors": ["counterfactual", "eval_mean", "zero"], "measures": ["depth_fraction", "depth_centre"],
 *    "mean_maps": {"question_bins": K, "counterfactual": [L rows of K+1], "eval_mean": [...], "zero": [...]},
 *    "prompts": [{"set", "index", "module", "q_len", "a_len", "correct",
 *                 "depth_fraction": [one per vector], "depth_centre": [one per vector]}, ...]}
 *
 * The sample (model/training/depth_prompts.h): N examples of the evaluated ones (the first evaluate.max_examples_per_set of
 * each shard, "pool"), stratified by set and module, drawn with the fixed seed S: the same prompts for every run and
 * seed of an experiment. "index" is the example's position in its shard, as in predictions.jsonl; "correct" is the
 * evaluation's teacher-forced exact match (model/training/evaluation.h). The measures are DEPTH_PROMPTS_DEFINITIONS,
 * the vectors DEPTH_VECTOR_DEFINITIONS; the mean map's columns are DEPTH_MAP_DEFINITION. The reader refuses unknown
 * and missing keys, vectors or measures other than these, and values outside their domain. */
#ifndef PIPELINE_DEPTH_PROMPTS_RECORD_H
#define PIPELINE_DEPTH_PROMPTS_RECORD_H

#include <stdbool.h>
#include <stddef.h>

#include <cjson/cJSON.h>

#include "pipeline/records/run_provenance.h"

#define DEPTH_PROMPTS_SCHEMA "dm-math-depth-prompts"
#define DEPTH_PROMPTS_SCHEMA_VERSION 1
#define DEPTH_PROMPTS_FILE_NAME "depth_prompts.json"
/* The most prompts a record holds: the paper's two evaluation sets whole (2 x 5,000); about 20 values each, so a full
 * record stays inside the JSON record bounds (pipeline/base/limits.h). */
#define DEPTH_PROMPTS_MAX 10000
#define DEPTH_MAP_QUESTION_BINS 10

/* The "uninformative" vector that replaces an erased residual h_l[t]. */
typedef enum { DEPTH_VEC_COUNTERFACTUAL, DEPTH_VEC_EVAL_MEAN, DEPTH_VEC_ZERO, DEPTH_N_VECTORS } DepthVector;
extern const char *const DEPTH_VECTOR_NAMES[DEPTH_N_VECTORS];       /* "counterfactual", "eval_mean", "zero" */
extern const char *const DEPTH_VECTOR_DEFINITIONS[DEPTH_N_VECTORS];

/* The per-prompt depth measures, both read from r_l = the largest erasure score of row l over the question positions
 * (DEPTH_PROMPTS_DEFINITIONS says exactly which). */
typedef enum { DEPTH_MEASURE_FRACTION, DEPTH_MEASURE_CENTRE, DEPTH_N_MEASURES } DepthMeasure;
extern const char *const DEPTH_MEASURE_NAMES[DEPTH_N_MEASURES];     /* "depth_fraction", "depth_centre" */
extern const char *const DEPTH_PROMPTS_DEFINITIONS[DEPTH_N_MEASURES];
extern const char *const DEPTH_MAP_DEFINITION;
extern const char *const DEPTH_SAMPLE_DEFINITION;

typedef struct {
    int set;                  /* EVAL_INTERPOLATE | EVAL_EXTRAPOLATE (pipeline/records/result_record.h) */
    long index;               /* position in the set's shard (predictions.jsonl "index") */
    char module[128];
    int q_len, a_len;         /* question and answer tokens */
    bool correct;             /* the evaluation's teacher-forced exact match */
    double value[DEPTH_N_VECTORS][DEPTH_N_MEASURES]; /* each in [0, 1] */
} DepthPrompt;

typedef struct {
    char experiment[128], run[128], arch[16], loss_mode[16];
    RunProvenance prov;
    char code_version[128], backend[16], hardware[256];
    int n_layers;
    long requested;           /* analyze.eval_prompts */
    unsigned long long sample_seed;
    long pool[2];             /* evaluated examples per set the sample was drawn from */
    int map_bins;             /* question bins of the mean maps: K + 1 columns, the last the answer-predicting ones */
    double *mean_map[DEPTH_N_VECTORS]; /* [n_layers * (map_bins + 1)] mean erasure score over the prompts */
    int n_prompts;
    DepthPrompt *prompts;
} DepthPromptsRecord;

cJSON *depth_prompts_to_json(const DepthPromptsRecord *d);
int depth_prompts_from_json(DepthPromptsRecord *d, const cJSON *json, const char *source, char *err, size_t errlen);
int depth_prompts_load(DepthPromptsRecord *d, const char *path, char *err, size_t errlen);
void depth_prompts_free(DepthPromptsRecord *d);

/* The same sample: the same count and the same (set, index) in the same order. */
bool depth_prompts_same_sample(const DepthPromptsRecord *a, const DepthPromptsRecord *b);

#endif
