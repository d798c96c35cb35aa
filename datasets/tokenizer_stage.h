/* The tokenize stage as a library function (stages/tokenize.c is its command line; the unit tests call it directly).
 *
 * Reads  RAW/manifest.json (fetch's record, schema "dm-math-raw"), RAW/mathematics_dataset-v1.0/<split>/<module>.txt and
 *        RAW/tokenizer_corpus/<module>.txt, each checked against the sha256 listed in the manifest;
 * writes OUT/tokenizer.json, OUT/{train,interpolate,extrapolate}.shard and OUT/tokenize_manifest.json, all first into
 *        OUT/.tokenize.tmp.<pid>/ and renamed into place only when everything succeeded (the manifest last).
 * Same inputs give byte-identical outputs. */
#ifndef DATASETS_TOKENIZER_STAGE_H
#define DATASETS_TOKENIZER_STAGE_H

#include <stddef.h>

/* The "tokenize" section of experiments/EXP/data.json; every key optional, defaults as in the reference. */
typedef struct {
    long vocab_size;                     /* 512 */
    long max_piece_length;               /* 16 */
    long tokenizer_pairs_per_file;       /* 10000: first pairs of each tokenizer_corpus file used for training */
    long eval_examples;                  /* 5000 per evaluation split */
    long eval_shuffle_seed;              /* 123 (the reference's np.random.default_rng(123)) */
    long train_shuffle_seed;             /* 1 */
    char exclude_tokenizer_pattern[256]; /* "probability__swr_.*": POSIX ERE, full match on the module name */
    double character_coverage;           /* 0.9995 */
} TokenizeConfig;

void tokenize_config_defaults(TokenizeConfig *c);
/* Reads the "tokenize" object of a data.json (required; unknown keys in it are errors, other sections are ignored). */
int tokenize_config_load(const char *path, TokenizeConfig *c, char *err, size_t errlen);

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
/* Reads and validates RAW_DIR/manifest.json (fetch's) as tokenize_run does, then frees it: 0, or -1 with err. (The
 * fuzz harness tests/fuzz/fuzz_manifests.c reads it through this.) */
int tokenize_check_fetch_manifest(const char *raw_dir, char *err, size_t errlen);
int tokenize_run(const TokenizeJob *job, const TokenizeConfig *cfg, char *err, size_t errlen);

#endif
