/* Reading predictions.jsonl (the writer is pipeline/predictions.h) for paired comparisons: per example its set,
 * module, correctness and an identity key, so that two runs can be compared on the SAME examples. */
#ifndef PIPELINE_PREDICTIONS_READ_H
#define PIPELINE_PREDICTIONS_READ_H

#include <stdbool.h>
#include <stddef.h>

typedef struct {
    char run[128];            /* the header's run */
    long n;                   /* examples (lines after the header) */
    unsigned char *set;       /* [n] 0 interpolate, 1 extrapolate (EVAL_INTERPOLATE / EVAL_EXTRAPOLATE) */
    int *module;              /* [n] index into modules */
    unsigned char *correct;   /* [n] 0/1 */
    double *answer_loss;      /* [n] summed answer-token cross-entropy (nats), finite and >= 0 */
    unsigned long long *key;  /* [n] FNV-1a 64 of set, index, module, question and answer: the example's identity */
    long *line;               /* [n] line number in the file (for messages) */
    int n_modules;
    char **modules;
} PredictionTable;

/* Reads the file strictly: a header line with "schema" = "dm-math-predictions", then one object per example with
 * "set", "index", "module", "question", "answer", boolean "correct" and "answer_loss" (a finite number >= 0). Returns 0 or -1 with "<path>:<line>: ..." */
int prediction_table_load(PredictionTable *t, const char *path, char *err, size_t errlen);
void prediction_table_free(PredictionTable *t);

/* 0 when a and b list the same examples in the same order (same count and keys); else -1 with err naming both
 * files and the first example that differs. */
int prediction_tables_match(const PredictionTable *a, const char *path_a, const PredictionTable *b,
                            const char *path_b, char *err, size_t errlen);

/* Index of the module name in t->modules, or -1. */
int prediction_table_module(const PredictionTable *t, const char *name);

#endif
