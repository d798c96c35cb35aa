/* predictions.jsonl: evaluate's per-example verdicts (schema "dm-math-predictions", version 1), one JSON object per
 * line, written with cJSON so every string is escaped:
 *
 *   {"schema", "schema_version", "experiment", "run", "code_version", "backend", "hardware", "config_sha256",
 *    "overrides", "seed", "run_config"}   (the last three as in result.json: pipeline/run_provenance.h)
 *   {"set", "index", "module", "question", "answer", "predicted", "correct", "answer_loss"[, "greedy_correct"]}
 *   ... one line per evaluated example, interpolate then extrapolate, each in shard order
 *
 * The header's fields equal the result record's of the same evaluation (config_sha256 matches a predictions file to
 * its record); the lines' counts and losses add up to the record's (stages/README.md, "evaluate"). The writers only format: the
 * caller owns the (atomic) file. */
#ifndef PIPELINE_PREDICTIONS_H
#define PIPELINE_PREDICTIONS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

#include "pipeline/run_provenance.h"

#define PREDICTIONS_SCHEMA "dm-math-predictions"
#define PREDICTIONS_SCHEMA_VERSION 1
#define PREDICTIONS_FILE_NAME "predictions.jsonl"

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
    int greedy_correct;    /* -1: not greedy-checked (key left out); else the greedy KV-cache verdict 0/1 */
} PredictionLine;

/* One line each; path names the file in err. Return 0 or -1 with err. */
int predictions_write_header(FILE *fp, const char *path, const PredictionsHeader *h, char *err, size_t errlen);
int predictions_write_line(FILE *fp, const char *path, const PredictionLine *p, char *err, size_t errlen);

/* PREDICTIONS_FILE_NAME in the directory of result_path ("predictions.jsonl" when it has none).
 * Returns 0, or -1 with err when it does not fit in out. */
int predictions_default_path(const char *result_path, char *out, size_t outlen, char *err, size_t errlen);

#endif
