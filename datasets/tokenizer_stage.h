/* The tokenize stage as a library function (stages/tokenize.c is its command line; the unit tests call it directly).
 *
 * Reads  RAW/manifest.json (fetch's record, schema "dm-math-raw"), RAW/mathematics_dataset-v1.0/<split>/<module>.txt and
 *        RAW/tokenizer_corpus/<module>.txt, each checked against the sha256 listed in the manifest
 *        (datasets/raw_inputs.h);
 * writes OUT/tokenizer.json (datasets/tokenizer_training.h), OUT/{train,interpolate,extrapolate}.shard
 *        (datasets/pool_order.h, datasets/pool_encode.h) and OUT/tokenize_manifest.json
 *        (datasets/tokenize_manifest.h), all first into OUT/.tokenize.tmp.<pid>.<random>/ and renamed into place only when
 *        everything succeeded (the manifest last).
 * Same inputs give byte-identical outputs. */
#ifndef DATASETS_TOKENIZER_STAGE_H
#define DATASETS_TOKENIZER_STAGE_H

#include <stddef.h>

#include "datasets/tokenize_config.h"

typedef struct {
    const char *raw_dir;
    const char *config_path; /* only hashed into the manifest; may be NULL */
    const char *out_dir;
    int show_progress;       /* progress bars on stderr */
    /* Optional: take the tokenizer corpus (tokenizer_corpus/ and its manifest) from this raw directory instead of
     * raw_dir, e.g. the embedded sample's (all 56 modules) when raw_dir holds an arithmetic-only archive whose own
     * corpus lacks the other modules' text. NULL = raw_dir. */
    const char *tokenizer_raw_dir;
} TokenizeJob;

/* Runs the stage. Returns 0, or -1 with one line in err (bad input names file and line); on error no output file
 * in out_dir was created or changed. */
int tokenize_run(const TokenizeJob *job, const TokenizeConfig *cfg, char *err, size_t errlen);

#endif
