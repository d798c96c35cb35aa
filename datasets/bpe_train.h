/* Training of the SentencePiece-style BPE vocabulary (dm-math-training-code.md §C.4) and its JSON file.
 *
 * Usage: t = bpe_trainer_new(&cfg); bpe_trainer_add(t, line) for every training sentence; bpe_trainer_train(t, &v);
 * json = bpe_vocab_to_json(&v, training_info); then json_save_file() and tokenizer_load().
 * The algorithm and its deterministic rules are described at the top of bpe_train.c.
 *
 * Tokenizer file (JSON, written by bpe_vocab_to_json, read by tokenizer_load):
 *   {"type": "bpe-sentencepiece-style", "version": 1, "vocab_size": 512, "max_piece_length": 16,
 *    "split_digits": true, "add_dummy_prefix": true, "remove_extra_whitespaces": true, "character_coverage": 0.9995,
 *    "unk_id": 0, "bos_id": 1, "eos_id": 2,
 *    "pieces": [{"piece": "<unk>", "score": 0, "type": "unknown"}, {"piece": "<s>", ..., "type": "control"},
 *               {"piece": "</s>", ...}, {"piece": "▁*", "score": 0, "type": "normal"}, {"piece": "▁-", "score": -1,
 *               ...}, ...],                      (id = position; whitespace written as U+2581 "▁")
 *    "training": {"algorithm", "n_sentences", "n_character_occurrences", "n_merges", "n_never_occurring_merges",
 *                 "n_characters", "piece_counts": [...], "dropped_characters": [{"character", "count"}],
 *                 and from the tokenize stage: "sentence_format", "pairs_per_file", "exclude_pattern",
 *                 "n_excluded_files", "corpus": [{"file", "sha256", "pairs_used"}]}}
 * Encoding needs only "pieces" (strings and scores): a pair of adjacent symbols merges when their concatenation is a
 * piece, the highest score first (tokenizer.c). */
#ifndef DATASETS_BPE_TRAIN_H
#define DATASETS_BPE_TRAIN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <cjson/cJSON.h>

#define BPE_FILE_TYPE "bpe-sentencepiece-style"
#define BPE_FILE_VERSION 1
#define BPE_N_RESERVED 3 /* <unk>=0, <s>=1, </s>=2 */

typedef struct {
    int vocab_size;            /* total, the 3 reserved pieces included (512) */
    int max_piece_length;      /* characters (16) */
    double character_coverage; /* fraction of character occurrences the alphabet must cover (0.9995) */
    bool split_digits;         /* digits are always one-character pieces (true) */
} BpeTrainConfig;

typedef enum { BPE_PIECE_NORMAL = 0, BPE_PIECE_UNKNOWN = 1, BPE_PIECE_CONTROL = 2 } BpePieceType;

typedef struct {
    BpeTrainConfig cfg;
    int n_pieces;          /* == cfg.vocab_size */
    char **pieces;         /* internal form (' ' = ▁); "<unk>", "<s>", "</s>" for the reserved ids */
    double *scores;        /* 0 for reserved; -k for the k-th non-reserved piece (k from 0) */
    BpePieceType *types;
    int64_t *freqs;        /* merges: pair frequency when created; characters: occurrences; reserved: 0 */
    int n_merges;          /* pieces [3, 3+n_merges) are merges, then n_chars characters */
    int n_zero_count;      /* of the merges, the last ones added with count 0 to complete a small corpus */
    int n_chars;
    int64_t n_sentences, n_char_occurrences;
    int n_dropped;         /* characters left out by character_coverage (they encode as <unk>) */
    char **dropped;        /* internal form */
    int64_t *dropped_counts;
} BpeVocab;

typedef struct BpeTrainer BpeTrainer;

BpeTrainer *bpe_trainer_new(const BpeTrainConfig *cfg);
/* Adds one training sentence (normalised here: whitespace collapsed, dummy prefix). */
void bpe_trainer_add(BpeTrainer *t, const char *sentence);
/* Runs the training. Errors (empty corpus, vocab_size unreachable or smaller than the alphabet): -1 with err. */
int bpe_trainer_train(BpeTrainer *t, BpeVocab *out, char *err, size_t errlen);
void bpe_trainer_free(BpeTrainer *t);
void bpe_vocab_free(BpeVocab *v);

/* The tokenizer file as JSON. training_info (may be NULL; ownership taken) is stored under "training" together with
 * the trainer's own statistics. */
cJSON *bpe_vocab_to_json(const BpeVocab *v, cJSON *training_info);

#endif
