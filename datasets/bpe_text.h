/* Text utilities shared by the BPE trainer (bpe_train.c) and the encoder (tokenizer.c).
 *
 * Internal form: after normalisation no real space is left in the text, so the byte ' ' (0x20) stands for the
 * whitespace piece U+2581 "▁" inside normalised text and inside pieces. It becomes "▁" (E2 96 81) only at the edges:
 * in the tokenizer file and in tokenizer_piece(). This keeps every piece a plain byte substring of a word. */
#ifndef DATASETS_BPE_TEXT_H
#define DATASETS_BPE_TEXT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define BPE_WS_MARK ' '
#define BPE_WS_UTF8 "\xe2\x96\x81" /* U+2581 LOWER ONE EIGHTH BLOCK */
#define BPE_WS_CODEPOINT 0x2581u

/* Bytes of the UTF-8 character starting with lead byte c (1 for ASCII and for invalid lead bytes). */
int bpe_utf8_len(unsigned char c);
/* Decodes one character at s (n bytes available); returns its byte length and writes the code point
 * (the internal mark ' ' decodes as U+2581). Invalid sequences decode byte by byte as U+FFFD. */
int bpe_utf8_decode(const char *s, size_t n, uint32_t *cp);
/* Number of characters in s[0..n). */
int bpe_count_chars(const char *s, size_t n);

/* SentencePiece-style normalisation (nmt_nfkc is the identity on ASCII): runs of whitespace (space, \t, \n, \r, \v,
 * \f, U+2581) become one mark, leading and trailing whitespace is removed, and a dummy-prefix mark is added in front
 * of non-empty text. out needs n + 2 bytes; it is NUL-terminated. Returns the output length. */
size_t bpe_normalize(const char *text, size_t n, char *out);

/* Is s[0..n) (internal form) a valid piece? Non-empty, at most max_chars characters, the mark only at position 0,
 * a digit only as a one-character piece (split_digits), and no mix of Unicode scripts: ASCII letters are "Latin",
 * other ASCII characters "Common"; a non-ASCII character is never merged with anything (this project's input is
 * ASCII; see bpe_train.c). */
bool bpe_piece_valid(const char *s, size_t n, int max_chars, bool split_digits);

/* Orders pieces by code points (the mark counts as U+2581), i.e. like their UTF-8 forms bytewise. */
int bpe_piece_cmp(const char *a, size_t na, const char *b, size_t nb);

/* Internal -> display form ("▁" for the mark), malloc'd. */
char *bpe_to_display(const char *s, size_t n);
/* Display -> internal form, malloc'd; NULL if it contains a real space or a control character. */
char *bpe_from_display(const char *s);

/* Open-addressing hash map from byte strings to int. Keys are copied into the map. */
typedef struct {
    uint64_t *hashes;
    char **keys;
    uint32_t *lens;
    int *vals;
    size_t cap, count;
} BpeMap;

void bpe_map_init(BpeMap *m, size_t expected);
void bpe_map_free(BpeMap *m);
/* Returns the value stored for key, or -1. */
int bpe_map_get(const BpeMap *m, const char *key, size_t n);
/* Inserts key -> val if absent; returns the value now stored (the old one if present). */
int bpe_map_put(BpeMap *m, const char *key, size_t n, int val);
uint64_t bpe_hash(const char *s, size_t n);

#endif
