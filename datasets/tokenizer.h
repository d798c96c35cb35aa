/* SentencePiece-style BPE tokenizer (dm-math-training-code.md §C.4), written here in C.
 * 512 pieces, ids 0-2 reserved for <unk>, <s>, </s>; whitespace as U+2581 with a dummy prefix; runs of whitespace
 * collapsed and leading/trailing whitespace removed; pieces never cross whitespace; digits are always single pieces;
 * pieces are at most 16 characters. Stored as JSON (see datasets/README.md). */
#ifndef DATASETS_TOKENIZER_H
#define DATASETS_TOKENIZER_H

#include <stddef.h>
#include <stdint.h>

typedef struct Tokenizer Tokenizer;

Tokenizer *tokenizer_load(const char *path, char *err, size_t errlen);
void tokenizer_free(Tokenizer *t);
int tokenizer_vocab_size(const Tokenizer *t);
const char *tokenizer_piece(const Tokenizer *t, int id); /* UTF-8, "▁" for whitespace */
const char *tokenizer_sha256(const Tokenizer *t);        /* of the tokenizer file bytes */
/* Encodes text; returns the number of ids (may exceed max, in which case only max are written). */
int tokenizer_encode(const Tokenizer *t, const char *text, int32_t *ids, int max);
/* Decodes ids into a malloc'd string (▁ -> space, the dummy-prefix space removed). */
char *tokenizer_decode(const Tokenizer *t, const int32_t *ids, int n);
/* The DM-math example format: question ids = encode(" Q: " + q + " A:"), answer ids = encode(" " + a). */
int tokenizer_encode_question(const Tokenizer *t, const char *q, int32_t *ids, int max);
int tokenizer_encode_answer(const Tokenizer *t, const char *a, int32_t *ids, int max);

#endif
