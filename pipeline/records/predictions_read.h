/* Reading predictions.jsonl (the writer is pipeline/records/predictions.h) for paired comparisons: per example its set,
 * module, correctness and an identity key, so that two runs can be compared on the SAME examples. Both layouts are
 * read: version 2 (every line an example, the metadata in the sidecar predictions.meta.json) and version 1 (the
 * metadata as a header line first). */
#ifndef PIPELINE_PREDICTIONS_READ_H
#define PIPELINE_PREDICTIONS_READ_H

#include <stdbool.h>
#include <stddef.h>

typedef struct {
    char run[128];            /* the metadata's run (the sidecar's, or the version-1 header line's) */
    char code_version[128];   /* the metadata's code_version ("" in a version-1 header without one) */
    char meta_source[4352];   /* where the metadata was read: the sidecar, or the predictions file (version 1) */
    long n;                   /* examples */
    unsigned char *set;       /* [n] 0 interpolate, 1 extrapolate (EVAL_INTERPOLATE / EVAL_EXTRAPOLATE) */
    int *module;              /* [n] index into modules */
    unsigned char *correct;   /* [n] 0/1 */
    double *answer_loss;      /* [n] summed answer-token cross-entropy (nats), finite and >= 0 */
    unsigned long long *key;  /* [n] FNV-1a 64 of set, index, module, question and answer: the example's identity */
    long *line;               /* [n] line number in the file (for messages) */
    int n_modules;
    char **modules;
} PredictionTable;

/* Reads the file strictly: one object per example with "set", "index", "module", "question", "answer", boolean
 * "correct" and "answer_loss" (a finite number >= 0); the metadata ("schema" = "dm-math-predictions" and "run") either
 * in the sidecar (predictions_meta_path: also "schema_version" 2, and "n_examples" and "predictions_sha256" that
 * match the file) or, in a version-1 file, as its first line. Returns 0, or -1 with "<path>:<line>: ..." (an example
 * line or a header line) or "<sidecar path>: <field>: ..." (a missing or mismatched sidecar). */
int prediction_table_load(PredictionTable *t, const char *path, char *err, size_t errlen);
void prediction_table_free(PredictionTable *t);

/* 0 when a and b list the same examples in the same order (same count and keys); else -1 with err naming both
 * files and the first example that differs. */
int prediction_tables_match(const PredictionTable *a, const char *path_a, const PredictionTable *b,
                            const char *path_b, char *err, size_t errlen);

/* A predictions file read beside a result record (record_path; its run directory is named run) must come from the
 * same evaluation: its metadata names that run (record_owner_check, run_identity.h) and the record's code_version
 * (code_version). 0, or -1 with err naming the file and both values. */
int prediction_table_check_record(const PredictionTable *t, const char *path, const char *run,
                                  const char *code_version, const char *record_path, char *err, size_t errlen);

/* Index of the module name in t->modules, or -1. */
int prediction_table_module(const PredictionTable *t, const char *name);

#endif
