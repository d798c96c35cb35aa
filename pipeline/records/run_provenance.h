/* The fields that say which variant of a run config a record belongs to, written by train (train_summary.json,
 * state.json), evaluate (result.json, the predictions.jsonl header) and analyze (analysis.json):
 *
 *   "overrides":  ["train.lr=0.001", "train.seed=2"]  the --set overrides, canonical and sorted by KEY; [] when none
 *   "seed":       2                                    the effective train.seed (after the overrides)
 *   "run_config": "moeut_answer"                       the run config file's name without directory and ".json"
 *
 * All three are optional on read (records written before they existed still load: no overrides, seed -1, "").
 * The structure has fixed size (no allocation) so that it can live in structs copied by value (TrainState). */
#ifndef PIPELINE_RUN_PROVENANCE_H
#define PIPELINE_RUN_PROVENANCE_H

#include <stdbool.h>
#include <stddef.h>

#include <cjson/cJSON.h>

#include "pipeline/base/config.h"

#define RUN_MAX_OVERRIDES 32
#define RUN_OVERRIDE_MAX 256 /* bytes of one canonical override, the NUL included */

typedef struct {
    int n_overrides;
    char overrides[RUN_MAX_OVERRIDES][RUN_OVERRIDE_MAX]; /* canonical "KEY=<compact JSON>", sorted by KEY */
    long seed;                                           /* -1: not recorded */
    char run_config[128];                                /* "": not recorded */
} RunProvenance;

/* Nothing recorded: no overrides, seed -1, run_config "". */
void run_provenance_init(RunProvenance *p);

/* Adds "overrides" (always), "seed" (when >= 0) and "run_config" (when not empty) to obj. */
void run_provenance_to_json(cJSON *obj, const RunProvenance *p);

/* Reads the three optional keys through r (marking them known); a wrong type or an override that is not a string
 * (or is too long, or one too many) becomes r's error. Absent keys leave the run_provenance_init values. */
void run_provenance_read(JsonReader *r, RunProvenance *p);

bool run_provenance_same_overrides(const RunProvenance *a, const RunProvenance *b);

/* "--set train.lr=0.001 --set train.seed=2", or "no --set" (for messages). */
void run_provenance_describe_overrides(const RunProvenance *p, char *out, size_t outlen);

/* run_config of a config path: "experiments/tiny/moeut_qa.json" -> "moeut_qa". */
void run_provenance_set_config_name(RunProvenance *p, const char *config_path);

#endif
