/* The fields that say which variant of a run config a record belongs to, written by train (train_summary.json,
 * state.json), evaluate (result.json, the predictions.jsonl header) and analyze (analysis.json):
 *
 *   "overrides":  ["train.lr=0.001", "train.seed=2"]  the --set overrides, canonical and sorted by KEY; [] when none
 *   "seed":       2                                    the effective train.seed (after the overrides)
 *   "run_config": "moeut_answer"                       the run config file's name without directory and ".json"
 *   "init_from":  {"path", "sha256", "upcycle": {"from", "method", "seed", "noise", "source", "source_sha256"}}
 *                 only for a run started from converted weights (bin/train --init-from, model/upcycle.h): the
 *                 initial checkpoint, and the dense checkpoint and conversion it was made from
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
    /* init_from (all "" / -1 / 0 when the run started from its own initialisation) */
    char init_path[512], init_sha256[65];
    char upcycle_from[128], upcycle_method[16];
    long upcycle_seed;
    double upcycle_noise;
    char upcycle_source[512], upcycle_source_sha256[65];
} RunProvenance;

/* Nothing recorded: no overrides, seed -1, run_config "". */
void run_provenance_init(RunProvenance *p);

/* Adds "overrides" (always), "seed" (when >= 0), "run_config" (when not empty) and "init_from" (when init_path is
 * not empty) to obj. */
void run_provenance_to_json(cJSON *obj, const RunProvenance *p);

/* Reads the four optional keys through r (marking them known); a wrong type or an override that is not a string
 * (or is too long, or one too many) becomes r's error. Absent keys leave the run_provenance_init values. */
void run_provenance_read(JsonReader *r, RunProvenance *p);

/* Reads an "upcycle" object as bin/upcycle writes it into __metadata__.upcycle into p's upcycle_* fields: 0, or -1
 * with "<source>: <key>: <problem>" in err. */
int run_provenance_read_upcycle(RunProvenance *p, const cJSON *obj, const char *source, char *err, size_t errlen);

/* The init_from fields of src into dst (evaluate and analyze take them from train_summary.json). */
void run_provenance_copy_init(RunProvenance *dst, const RunProvenance *src);

bool run_provenance_same_overrides(const RunProvenance *a, const RunProvenance *b);

/* "--set train.lr=0.001 --set train.seed=2", or "no --set" (for messages). */
void run_provenance_describe_overrides(const RunProvenance *p, char *out, size_t outlen);

/* run_config of a config path: "experiments/tiny/moeut_qa.json" -> "moeut_qa". */
void run_provenance_set_config_name(RunProvenance *p, const char *config_path);

#endif
