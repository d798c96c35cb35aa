/* The JSON records shared by the evaluate, analyze, report and compare stages, as typed structs with strict
 * readers and writers (one place that knows each schema).
 *
 *  - runs/EXP/RUN/result.json     schema "dm-math-result", version 2 (evaluate writes, report/compare read)
 *  - runs/EXP/RUN/analysis.json   schema "dm-math-analysis", version 1 (analyze writes, report reads)
 *  - runs/EXP/RUN/train_summary.json  (train writes; evaluate reads the fields it needs, unknown keys are ignored
 *                                     because train owns that file)
 *
 * Numbers are written by cJSON with 15 significant digits (exact to about 1e-15 relative).
 * Readers refuse unknown keys, missing keys and wrong types with one line "<file>: <key path>: <problem>", so a
 * record from a different schema version is never half-understood. */
#ifndef PIPELINE_RESULT_RECORD_H
#define PIPELINE_RESULT_RECORD_H

#include <stdbool.h>
#include <stddef.h>

#include <cjson/cJSON.h>

#include "pipeline/records/routing_stats.h"
#include "pipeline/records/run_provenance.h"

#define RESULT_SCHEMA "dm-math-result"
/* Version 2 added "config_text", the run config file's bytes: with them a reader recomputes "config" and
 * "config_sha256" (version 1 records carry neither check, so they are refused: evaluate the run again). */
#define RESULT_SCHEMA_VERSION 2
#define ANALYSIS_SCHEMA "dm-math-analysis"
#define ANALYSIS_SCHEMA_VERSION 1

/* ---- result.json ---- */

enum { EVAL_INTERPOLATE = 0, EVAL_EXTRAPOLATE = 1, EVAL_N_SETS = 2 };
extern const char *const EVAL_SET_NAMES[EVAL_N_SETS]; /* "interpolate", "extrapolate" */

typedef struct {
    char *name;               /* e.g. "arithmetic__mul_div_multiple_longer" */
    long n, correct;
    double accuracy;          /* correct / n */
    double ci95[2];           /* Wilson 95% interval */
    double mean_answer_loss;  /* mean over examples of the summed answer-token CE (nats) */
} ModuleEval;

typedef struct {
    long n, correct;
    double accuracy, ci95[2], mean_answer_loss;
    long greedy_n, greedy_agree; /* greedy KV-cache decoding vs teacher forcing on the first greedy_n examples */
    int n_modules;
    ModuleEval *modules;      /* in the shard's module order */
    RoutingStats *routing;    /* the FFN router's expert load on this set's teacher-forced forwards (owned); NULL for
                               * the dense model and in records written before it existed ("routing" is optional) */
} SetEval;

typedef struct {
    char experiment[128], run[128];
    char arch[16];            /* "dense" | "moeut" | "moe" */
    char loss_mode[16];       /* "qa" | "answer_only" */
    cJSON *config;            /* the run config object, --set overrides applied (owned) */
    char *config_text;        /* the run config file's bytes (owned); config and config_sha256 must be what
                               * config_from_text computes from them and the overrides: the reader checks both */
    char config_sha256[65];   /* config_sha256 of the run config file and its --set overrides */
    RunProvenance prov;       /* "overrides", "seed", "run_config" (optional on read) */
    char code_version[128];
    char train_sha256[65], interpolate_sha256[65], extrapolate_sha256[65]; /* shard_content_sha256 */
    cJSON *dataset_source;    /* optional provenance copied from the shard header ("source"); owned, may be NULL */
    char tokenizer_sha256[65];
    char backend[16];         /* evaluation backend */
    char hardware[256];       /* evaluation hardware */
    char precision[16];       /* evaluation precision: always "fp32" */
    long n_params;
    struct {
        long steps, tokens;
        double wall_time_s, final_train_loss, tokens_per_s;
        char backend[16], hardware[256], precision[16]; /* where and how training ran */
    } training;
    struct {
        double wall_time_s, mean_accuracy;
        SetEval sets[EVAL_N_SETS];
    } evaluation;
} ResultRecord;

/* Fills accuracy and ci95 from n and correct (module and set level). */
void module_eval_finish(ModuleEval *m);
void set_eval_finish(SetEval *s);
const ModuleEval *set_eval_find_module(const SetEval *s, const char *name); /* NULL if absent */
void set_eval_free(SetEval *s); /* frees the modules, their names and the routing statistics; zeroes *s */

cJSON *result_record_to_json(const ResultRecord *r);
int result_record_from_json(ResultRecord *r, const cJSON *json, const char *source, char *err, size_t errlen);
int result_record_save(const ResultRecord *r, const char *path, char *err, size_t errlen); /* atomic */
int result_record_load(ResultRecord *r, const char *path, char *err, size_t errlen);
/* result_record_load of a record where compare finds it: a run's DIR/NAME/result.json, or a baseline's
 * DIR/NAME.result.json (is_baseline). The record must name that run NAME, and as its experiment DIR's own name (the
 * directories evaluate wrote it in, and reports/baselines/EXP): record_owner_check (run_identity.h). */
int result_record_load_in(ResultRecord *r, const char *path, const char *dir, const char *name, bool is_baseline,
                          char *err, size_t errlen);
void result_record_free(ResultRecord *r); /* frees owned members; the struct itself is the caller's */

/* ---- train_summary.json (read only) ---- */
typedef struct {
    long steps, tokens, n_params;
    double wall_time_s, final_train_loss, tokens_per_s;
    char backend[16], hardware[256], precision[16], config_sha256[65], code_version[128];
    char tokenizer_sha256[65]; /* the tokenizer the run was trained with; "" in summaries written before it was */
    RunProvenance prov;        /* "overrides", "seed", "run_config" (optional: absent in older summaries) */
} TrainSummary;

int train_summary_load(TrainSummary *s, const char *path, char *err, size_t errlen);

/* ---- analysis.json ---- */
typedef struct {
    char *question, *answer;  /* the prompt strings as given to the tokenizer */
    int n_positions;          /* input positions = len(q)+len(a)-1 (columns) */
    char **pieces;            /* [n_positions] decoded token at each input position */
    int n_answer;             /* answer tokens = answer-predicting positions (the last n_answer columns) */
    bool model_correct;       /* teacher-forced argmax reproduces the answer */
    int n_layers;             /* rows */
    double *scores;           /* [n_layers * n_positions], row l = erasing the input of application l */
    double depth_value;       /* this prompt's depth summary (same definition as the run's) */
    char svg[64];             /* file name of the heat map, beside analysis.json */
} AnalysisPrompt;

typedef struct {
    char experiment[128], run[128], arch[16], loss_mode[16];
    RunProvenance prov;       /* "overrides", "seed", "run_config" (optional on read) */
    /* where the analysis ran (empty in records written before these fields existed, and for a disabled analysis's
     * backend and hardware) */
    char code_version[128], backend[16], hardware[256];
    bool enabled;             /* false: the run config disabled the analysis; nothing below is present */
    int n_layers;
    char *counterfactual;     /* the string whose mean residual replaces an erased one */
    int n_prompts;
    AnalysisPrompt *prompts;
    char summary_name[64];
    double summary_value;
    char *summary_definition;
} AnalysisRecord;

cJSON *analysis_record_to_json(const AnalysisRecord *a);
int analysis_record_from_json(AnalysisRecord *a, const cJSON *json, const char *source, char *err, size_t errlen);
int analysis_record_save(const AnalysisRecord *a, const char *path, char *err, size_t errlen); /* atomic */
int analysis_record_load(AnalysisRecord *a, const char *path, char *err, size_t errlen);
void analysis_record_free(AnalysisRecord *a);


/* Bounded copy that reports truncation: returns -1 if src does not fit (dst then holds a truncated copy). */
int copy_str(char *dst, size_t cap, const char *src);

#endif
