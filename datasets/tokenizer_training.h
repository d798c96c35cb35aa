/* The tokenize stage's tokenizer: BPE (datasets/bpe_train.h) trained on the first tokenizer_pairs_per_file pairs of
 * every tokenizer-corpus file, written as tokenizer.json with a record of what it was trained on. */
#ifndef DATASETS_TOKENIZER_TRAINING_H
#define DATASETS_TOKENIZER_TRAINING_H

#include <stddef.h>

#include "datasets/raw_inputs.h"
#include "datasets/tokenize_config.h"

/* Trains on corpus (n_excluded = corpus files the pattern left out, recorded) and writes the tokenizer to path.
 * 0, or -1 with err. */
int tokenizer_train_on_corpus(const InputList *corpus, const TokenizeConfig *cfg, int n_excluded, const char *path,
                              char *err, size_t errlen);

#endif
