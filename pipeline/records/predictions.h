/* predictions.jsonl: evaluate's per-example verdicts (schema "dm-math-predictions", version 2), one JSON object per
 * line and nothing else, so that every line has the same keys and types (pandas.read_json(path, lines=True) reads
 * it as one table):
 *
 *   {"set", "index", "module", "question", "answer", "predicted", "correct", "answer_loss", "greedy_correct"}
 *   ... one line per evaluated example, interpolate then extrapolate, each in shard order; "greedy_correct" is the
 *   greedy KV-cache verdict (true/false) on the greedy-checked examples and null on the others
 *
 * Its metadata lives beside it in the sidecar predictions.meta.json (predictions_meta_path), one JSON object:
 *
 *   {"schema", "schema_version", "experiment", "run", "code_version", "backend", "hardware", "config_sha256",
 *    "overrides", "seed", "run_config",   (the last three as in result.json: pipeline/records/run_provenance.h)
 *    "n_examples", "predictions_sha256"}  (the lines of predictions.jsonl, and the sha256 of its bytes: a sidecar
 *                                          describes exactly one predictions file, never a replaced or edited one)
 *
 * evaluate renames the sidecar into place before predictions.jsonl (and result.json last), so a present
 * predictions.jsonl always has its sidecar. Version 1 files had the metadata as a header line first (without the
 * last two fields, and "greedy_correct" left out where not checked); pipeline/records/predictions_read.h still reads them.
 * The sidecar's fields equal the result record's of the same evaluation (config_sha256 matches a predictions file to
 * its record); the lines' counts and losses add up to the record's (stages/README.md, "evaluate"). The writers only
 * format: the caller owns the (atomic) files. */
#ifndef PIPELINE_PREDICTIONS_H
#define PIPELINE_PREDICTIONS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

#include <cjson/cJSON.h>

#include "pipeline/records/run_provenance.h"

#define PREDICTIONS_SCHEMA "dm-math-predictions"
#define PREDICTIONS_SCHEMA_VERSION 2
#define PREDICTIONS_FILE_NAME "predictions.jsonl"
#define PREDICTIONS_META_SUFFIX ".meta.json" /* predictions.jsonl -> predictions.meta.json */

typedef struct {
    const char *experiment, *run, *code_version, *backend, *hardware, *config_sha256;
    const RunProvenance *prov; /* NULL: the provenance fields are left out */
} PredictionsHeader;

typedef struct {
    const char *set;       /* "interpolate" | "extrapolate" */
    long index;            /* position in the shard */
    const char *module;
    const char *question;  /* decoded question tokens: "Q: {question} A:" as the model reads it */
    const char *answer;    /* decoded answer tokens */
    const char *predicted; /* decoded teacher-forced argmax tokens at the answer positions */
    bool correct;          /* every answer position's argmax equals its target */
    double answer_loss;    /* summed answer-token cross-entropy (nats), as in mean_answer_loss */
    int greedy_correct;    /* -1: not greedy-checked (null); else the greedy KV-cache verdict 0/1 */
} PredictionLine;

/* One line; path names the file in err. Return 0 or -1 with err. */
int predictions_write_line(FILE *fp, const char *path, const PredictionLine *p, char *err, size_t errlen);

/* The sidecar object for a predictions file of n_examples lines whose bytes hash to predictions_sha256 (64 hex
 * digits). The caller writes it (json_prepare_file) and frees it. */
cJSON *predictions_meta_to_json(const PredictionsHeader *h, long n_examples, const char *predictions_sha256);

/* PREDICTIONS_FILE_NAME in the directory of result_path ("predictions.jsonl" when it has none).
 * Returns 0, or -1 with err when it does not fit in out. */
int predictions_default_path(const char *result_path, char *out, size_t outlen, char *err, size_t errlen);

/* The sidecar of a predictions file: its path with a trailing ".jsonl" replaced by PREDICTIONS_META_SUFFIX (or the
 * suffix appended when it has none): "runs/x/predictions.jsonl" -> "runs/x/predictions.meta.json".
 * Returns 0, or -1 with err when it does not fit in out. */
int predictions_meta_path(const char *predictions_path, char *out, size_t outlen, char *err, size_t errlen);

#endif
