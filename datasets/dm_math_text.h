/* Reading and validating DeepMind-Mathematics text files (dm-math-protocol.md §1): lines alternate question and
 * answer. Every problem is reported as one message "<path>:<line>: <problem>". */
#ifndef DATASETS_DM_MATH_TEXT_H
#define DATASETS_DM_MATH_TEXT_H

#include <stddef.h>
#include <stdint.h>

/* Hard limit on one line. The official data has questions of at most 160 characters and answers of at most 30. */
#define DM_MAX_LINE_BYTES 1024

typedef struct {
    char *path;        /* as given */
    char *name;        /* file name, e.g. "arithmetic__add_or_sub.txt" */
    char *module;      /* the name without ".txt", e.g. "arithmetic__add_or_sub" */
    char *buf;         /* the file; every line NUL-terminated in place */
    size_t size;
    int64_t n_pairs;
    char **lines;      /* 2 * n_pairs: question 0, answer 0, question 1, ... (pointers into buf) */
    char sha256[65];   /* of the file bytes */
} DmFile;

/* Reads and validates: not empty, an even number of lines, no empty line, no line over DM_MAX_LINE_BYTES, only
 * printable ASCII (and tabs); a missing final newline is accepted. Returns 0, or -1 with "<path>:<line>: ..." in err. */
int dm_file_read(DmFile *f, const char *path, char *err, size_t errlen);
void dm_file_free(DmFile *f);

/* The *.txt files directly in dir, sorted bytewise by name. Returns the count (0 if none) or -1 with err when dir
 * cannot be read. *names is malloc'd (free with dm_free_names). */
int dm_list_txt(const char *dir, char ***names, char *err, size_t errlen);
void dm_free_names(char **names, int n);

/* The tokenizer-training form of one string (dm_math_autoregressive.py): a space on each side of every character that
 * is not [A-Za-z0-9] or whitespace, then whitespace runs collapsed to one space and the ends stripped. malloc'd. */
char *dm_space_separate(const char *s);
/* One tokenizer-training sentence: "Q: {q'} A: {a'} " with q', a' = dm_space_separate. malloc'd. */
char *dm_corpus_sentence(const char *q, const char *a);

#endif
