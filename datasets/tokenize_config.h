/* The "tokenize" section of experiments/EXP/data.json: what the tokenize stage (datasets/tokenizer_stage.h) trains and
 * encodes with. Read strictly, so that a misspelt key is an error rather than a silent default. */
#ifndef DATASETS_TOKENIZE_CONFIG_H
#define DATASETS_TOKENIZE_CONFIG_H

#include <stddef.h>

/* Every key optional, defaults as in the reference. */
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

#endif
