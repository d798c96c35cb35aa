/* Classic BPE training with SentencePiece's conventions (dm-math-training-code.md §C.4).
 *
 * 1. Every sentence is normalised (bpe_normalize: whitespace runs collapsed, ends stripped, dummy prefix ▁) and cut
 *    into words; a word is a ▁ followed by the characters up to the next ▁. Word types are counted.
 * 2. Alphabet (character_coverage, as SentencePiece's trainer): characters sorted by occurrence count, descending,
 *    ties by code point ascending (▁ counts as U+2581); characters are kept while the fraction of occurrences
 *    covered by the characters kept so far is below character_coverage. The others are dropped: they never take
 *    part in a merge and encode as <unk>.
 * 3. Merges: each round counts every adjacent symbol pair of every word, weighted by the word's count (overlapping
 *    occurrences such as the two pairs of "aaa" both count), keeps only pairs whose concatenation is a valid piece
 *    (bpe_piece_valid: ≤ max_piece_length characters, ▁ only first, digits alone, no letter/punctuation mix), and
 *    groups pairs by their concatenated string (different splits of one string are one candidate piece, their counts
 *    summed). The winner has the highest count; ties go to the piece with fewer characters, then to the smaller piece
 *    in code-point order. Its pairs are then merged in every word, left to right without overlap. A new string is
 *    appended to the vocabulary; a string that is already a piece (reached again through another split) is merged
 *    without adding an entry. Rounds continue until 3 + characters + merged pieces == vocab_size. When no pair
 *    occurs any more first (a small corpus, e.g. arithmetic modules only), the rest is filled as SentencePiece's
 *    trainer does it, from pairs seen in earlier rounds whose count is now 0 (fill_from_stale_pairs); if even those
 *    run out, it is an error (SentencePiece's hard_vocab_limit).
 * 4. Vocabulary order (SentencePiece's BPE trainer): <unk>, <s>, </s>, then the merged pieces in creation order, then
 *    the alphabet in the order of step 2. Scores: 0 for the reserved ids, -k for the k-th other piece, so an earlier
 *    merge always outranks a later one when encoding. */
#include "datasets/bpe_train.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "datasets/bpe_text.h"
#include "pipeline/base/log.h"

struct BpeTrainer {
    BpeTrainConfig cfg;
    BpeMap words;          /* word (internal form) -> index */
    int64_t *word_freq;
    size_t word_cap;
    BpeMap chars;          /* character (its bytes) -> index */
    int64_t *char_freq;
    size_t char_cap;
    int64_t n_sentences, n_char_occurrences;
    char *buf;             /* normalisation scratch */
    size_t buf_cap;
};

BpeTrainer *bpe_trainer_new(const BpeTrainConfig *cfg) {
    BpeTrainer *t = xcalloc(1, sizeof *t);
    t->cfg = *cfg;
    bpe_map_init(&t->words, 1 << 12);
    bpe_map_init(&t->chars, 256);
    return t;
}

void bpe_trainer_free(BpeTrainer *t) {
    if (!t) return;
    bpe_map_free(&t->words);
    bpe_map_free(&t->chars);
    free(t->word_freq);
    free(t->char_freq);
    free(t->buf);
    free(t);
}

/* Adds n to counts[map[key]], creating the entry (and growing the count array) when new. */
static void count_key(BpeMap *map, int64_t **counts, size_t *cap, const char *key, size_t len, int64_t n) {
    int idx = bpe_map_put(map, key, len, (int)map->count);
    if ((size_t)idx >= *cap) {
        size_t ncap = *cap ? *cap * 2 : 1024;
        while (ncap <= (size_t)idx) ncap *= 2;
        *counts = xrealloc(*counts, ncap * sizeof **counts);
        memset(*counts + *cap, 0, (ncap - *cap) * sizeof **counts);
        *cap = ncap;
    }
    (*counts)[idx] += n;
}

void bpe_trainer_add(BpeTrainer *t, const char *sentence) {
    size_t n = strlen(sentence);
    if (n + 2 > t->buf_cap) {
        t->buf_cap = n + 2 > 4096 ? n + 2 : 4096;
        free(t->buf);
        t->buf = xmalloc(t->buf_cap);
    }
    size_t len = bpe_normalize(sentence, n, t->buf);
    t->n_sentences++;
    size_t word_start = 0;
    for (size_t i = 0; i < len;) {
        uint32_t cp;
        int clen = bpe_utf8_decode(t->buf + i, len - i, &cp);
        count_key(&t->chars, &t->char_freq, &t->char_cap, t->buf + i, (size_t)clen, 1);
        t->n_char_occurrences++;
        if (t->buf[i] == BPE_WS_MARK && i > word_start) {
            count_key(&t->words, &t->word_freq, &t->word_cap, t->buf + word_start, i - word_start, 1);
            word_start = i;
        }
        i += (size_t)clen;
    }
    if (len > word_start) count_key(&t->words, &t->word_freq, &t->word_cap, t->buf + word_start, len - word_start, 1);
}

/* ---- symbols and pairs ---- */

typedef struct {
    char *s;      /* internal form */
    size_t len;   /* bytes */
    int nchars;
} Symbol;

typedef struct {
    Symbol *v;
    int n, cap;
    BpeMap index; /* string -> symbol id */
} SymbolTable;

static int symbol_add(SymbolTable *st, const char *s, size_t len) {
    if (st->n == st->cap) {
        st->cap = st->cap ? st->cap * 2 : 256;
        st->v = xrealloc(st->v, (size_t)st->cap * sizeof *st->v);
    }
    Symbol *sym = &st->v[st->n];
    sym->s = xmalloc(len + 1);
    memcpy(sym->s, s, len);
    sym->s[len] = '\0';
    sym->len = len;
    sym->nchars = bpe_count_chars(s, len);
    bpe_map_put(&st->index, s, len, st->n);
    return st->n++;
}

/* Pair statistics, keyed by (left symbol, right symbol). valid: -1 not yet checked, 0 no, 1 yes. */
typedef struct {
    uint64_t key; /* (a << 32 | b) + 1, 0 = empty slot */
    int64_t freq;
    int valid;
    int group;    /* candidate index in the current round */
} PairSlot;

typedef struct {
    PairSlot *slots;
    size_t cap, count;
} PairMap;

static uint64_t pair_key(int a, int b) { return (((uint64_t)(uint32_t)a << 32) | (uint32_t)b) + 1; }

static size_t pair_hash(uint64_t k) {
    k ^= k >> 33;
    k *= 0xff51afd7ed558ccdull;
    k ^= k >> 33;
    return (size_t)k;
}

static PairSlot *pair_find(PairMap *pm, int a, int b, int create) {
    if (create && (pm->count + 1) * 2 > pm->cap) {
        PairMap bigger = {xcalloc(pm->cap ? pm->cap * 2 : 1024, sizeof(PairSlot)), pm->cap ? pm->cap * 2 : 1024, 0};
        for (size_t i = 0; i < pm->cap; i++) {
            if (!pm->slots[i].key) continue;
            size_t j = pair_hash(pm->slots[i].key) & (bigger.cap - 1);
            while (bigger.slots[j].key) j = (j + 1) & (bigger.cap - 1);
            bigger.slots[j] = pm->slots[i];
            bigger.count++;
        }
        free(pm->slots);
        *pm = bigger;
    }
    if (!pm->cap) return NULL;
    uint64_t k = pair_key(a, b);
    size_t mask = pm->cap - 1;
    for (size_t i = pair_hash(k) & mask;; i = (i + 1) & mask) {
        PairSlot *s = &pm->slots[i];
        if (s->key == k) return s;
        if (!s->key) {
            if (!create) return NULL;
            s->key = k;
            s->freq = 0;
            s->valid = -1;
            s->group = -1;
            pm->count++;
            return s;
        }
    }
}

static int pair_valid(PairSlot *slot, const SymbolTable *st, int a, int b, const BpeTrainConfig *cfg) {
    if (slot->valid < 0) {
        const Symbol *x = &st->v[a], *y = &st->v[b];
        if (x->nchars + y->nchars > cfg->max_piece_length) {
            slot->valid = 0;
        } else {
            char tmp[256];
            char *cat = x->len + y->len <= sizeof tmp ? tmp : xmalloc(x->len + y->len);
            memcpy(cat, x->s, x->len);
            memcpy(cat + x->len, y->s, y->len);
            slot->valid = bpe_piece_valid(cat, x->len + y->len, cfg->max_piece_length, cfg->split_digits);
            if (cat != tmp) free(cat);
        }
    }
    return slot->valid;
}

/* A word type as a sequence of symbol ids (-1 = a dropped character, never merged). */
typedef struct {
    int *sym;
    int n;
    int64_t freq;
} Word;

/* A candidate new piece: all pairs whose concatenation is the same string. */
typedef struct {
    char *s;
    size_t len;
    int nchars;
    int64_t freq;
} Candidate;

static int better_candidate(const Candidate *c, const Candidate *best) {
    if (c->freq != best->freq) return c->freq > best->freq;
    if (c->nchars != best->nchars) return c->nchars < best->nchars;
    return bpe_piece_cmp(c->s, c->len, best->s, best->len) < 0;
}

/* Alphabet ordering: count descending, code point ascending. */
typedef struct {
    const char *s;
    size_t len;
    int64_t count;
} CharCount;

static int cmp_char_count(const void *pa, const void *pb) {
    const CharCount *a = pa, *b = pb;
    if (a->count != b->count) return a->count > b->count ? -1 : 1;
    return bpe_piece_cmp(a->s, a->len, b->s, b->len);
}

/* Builds the alphabet (symbols 0..kept-1 of st) and returns its size; *alpha_counts gets the occurrence counts. */
static int build_alphabet(BpeTrainer *t, SymbolTable *st, BpeVocab *out, int64_t **alpha_counts) {
    size_t n = t->chars.count;
    CharCount *cc = xmalloc((n ? n : 1) * sizeof *cc);
    size_t k = 0;
    for (size_t i = 0; i < t->chars.cap; i++) {
        if (!t->chars.keys[i]) continue;
        cc[k].s = t->chars.keys[i];
        cc[k].len = t->chars.lens[i];
        cc[k].count = t->char_freq[t->chars.vals[i]];
        k++;
    }
    qsort(cc, n, sizeof *cc, cmp_char_count);
    int64_t covered = 0;
    size_t kept = 0;
    *alpha_counts = xmalloc((n ? n : 1) * sizeof **alpha_counts);
    while (kept < n && (double)covered / (double)t->n_char_occurrences < t->cfg.character_coverage) {
        covered += cc[kept].count;
        (*alpha_counts)[kept] = cc[kept].count;
        symbol_add(st, cc[kept].s, cc[kept].len);
        kept++;
    }
    out->n_dropped = (int)(n - kept);
    out->dropped = xcalloc((size_t)out->n_dropped + 1, sizeof *out->dropped);
    out->dropped_counts = xcalloc((size_t)out->n_dropped + 1, sizeof *out->dropped_counts);
    for (size_t i = kept; i < n; i++) {
        out->dropped[i - kept] = xstrdup(cc[i].s);
        out->dropped_counts[i - kept] = cc[i].count;
    }
    free(cc);
    out->n_chars = (int)kept;
    return (int)kept;
}

/* Splits every word type into alphabet symbols; keeps only words with at least one valid pair. */
static Word *build_words(BpeTrainer *t, SymbolTable *st, PairMap *pm, int *n_words) {
    Word *words = xmalloc((t->words.count ? t->words.count : 1) * sizeof *words);
    int nw = 0;
    int *tmp = NULL;
    size_t tmp_cap = 0;
    for (size_t i = 0; i < t->words.cap; i++) {
        const char *w = t->words.keys[i];
        if (!w) continue;
        size_t len = t->words.lens[i];
        if (len > tmp_cap) {
            tmp_cap = len;
            tmp = xrealloc(tmp, tmp_cap * sizeof *tmp);
        }
        int n = 0;
        for (size_t p = 0; p < len;) {
            uint32_t cp;
            int clen = bpe_utf8_decode(w + p, len - p, &cp);
            tmp[n++] = bpe_map_get(&st->index, w + p, (size_t)clen);
            p += (size_t)clen;
        }
        int useful = 0;
        for (int j = 0; j + 1 < n && !useful; j++) {
            if (tmp[j] < 0 || tmp[j + 1] < 0) continue;
            useful = pair_valid(pair_find(pm, tmp[j], tmp[j + 1], 1), st, tmp[j], tmp[j + 1], &t->cfg);
        }
        if (!useful) continue;
        words[nw].sym = xmalloc((size_t)n * sizeof(int));
        memcpy(words[nw].sym, tmp, (size_t)n * sizeof(int));
        words[nw].n = n;
        words[nw].freq = t->word_freq[t->words.vals[i]];
        nw++;
    }
    free(tmp);
    *n_words = nw;
    return words;
}

static int cmp_candidate_fill(const void *pa, const void *pb) {
    const Candidate *a = pa, *b = pb;
    if (a->nchars != b->nchars) return a->nchars < b->nchars ? -1 : 1;
    return bpe_piece_cmp(a->s, a->len, b->s, b->len);
}

/* When no pair occurs any more (a small corpus), the vocabulary is completed like SentencePiece's trainer does, which
 * keeps picking among the pairs it has seen before even though their count has dropped to 0: every valid pair that
 * occurred in some earlier round and whose string is not a piece yet, fewest characters first, then code-point
 * order. These pieces never occur in the training words, so adding them changes no other statistic. Returns how
 * many were added. */
static int fill_from_stale_pairs(const PairMap *pm, SymbolTable *st, int *merged,
                                 int64_t *merged_freq, int *n_merged, int target) {
    Candidate *c = xmalloc((pm->count ? pm->count : 1) * sizeof *c);
    size_t n = 0;
    BpeMap seen;
    bpe_map_init(&seen, pm->count);
    for (size_t i = 0; i < pm->cap; i++) {
        const PairSlot *s = &pm->slots[i];
        if (!s->key || s->valid != 1) continue;
        int a = (int)((s->key - 1) >> 32), b = (int)((s->key - 1) & 0xffffffffu);
        const Symbol *x = &st->v[a], *y = &st->v[b];
        size_t len = x->len + y->len;
        char *cat = xmalloc(len + 1);
        memcpy(cat, x->s, x->len);
        memcpy(cat + x->len, y->s, y->len);
        cat[len] = '\0';
        if (bpe_map_get(&st->index, cat, len) >= 0 || bpe_map_put(&seen, cat, len, (int)n) != (int)n) {
            free(cat);
            continue;
        }
        c[n++] = (Candidate){cat, len, x->nchars + y->nchars, 0};
    }
    qsort(c, n, sizeof *c, cmp_candidate_fill);
    int added = 0;
    for (size_t i = 0; i < n && *n_merged < target; i++) {
        merged[*n_merged] = symbol_add(st, c[i].s, c[i].len);
        merged_freq[*n_merged] = 0;
        (*n_merged)++;
        added++;
    }
    for (size_t i = 0; i < n; i++) free(c[i].s);
    free(c);
    bpe_map_free(&seen);
    return added;
}

int bpe_trainer_train(BpeTrainer *t, BpeVocab *out, char *err, size_t errlen) {
    memset(out, 0, sizeof *out);
    out->cfg = t->cfg;
    const BpeTrainConfig *cfg = &t->cfg;
    if (t->n_char_occurrences == 0) {
        set_err(err, errlen, "the tokenizer training corpus is empty");
        return -1;
    }
    if (cfg->vocab_size <= BPE_N_RESERVED || cfg->vocab_size > 65536 || cfg->max_piece_length < 1) {
        set_err(err, errlen, "invalid tokenizer settings: vocab_size %d (must be 4..65536), max_piece_length %d",
                cfg->vocab_size, cfg->max_piece_length);
        return -1;
    }
    SymbolTable st = {0};
    bpe_map_init(&st.index, 1024);
    PairMap pm = {0};
    int64_t *alpha_counts = NULL;
    int n_alpha = build_alphabet(t, &st, out, &alpha_counts);
    out->n_sentences = t->n_sentences;
    out->n_char_occurrences = t->n_char_occurrences;
    int rc = -1, n_filled = 0;
    int n_words = 0;
    Word *words = NULL;
    if (BPE_N_RESERVED + n_alpha > cfg->vocab_size) {
        set_err(err, errlen, "vocab_size %d is smaller than the %d reserved pieces + %d characters of the corpus",
                cfg->vocab_size, BPE_N_RESERVED, n_alpha);
        goto done;
    }
    words = build_words(t, &st, &pm, &n_words);

    int target_merges = cfg->vocab_size - BPE_N_RESERVED - n_alpha;
    int *merged = xmalloc(((size_t)target_merges + 1) * sizeof *merged); /* symbol ids of the merged pieces */
    int64_t *merged_freq = xmalloc(((size_t)target_merges + 1) * sizeof *merged_freq);
    int n_merged = 0;
    Candidate *cands = NULL;
    size_t cand_cap = 0;
    BpeMap cand_index;
    while (n_merged < target_merges) {
        /* Count valid pairs. */
        for (size_t i = 0; i < pm.cap; i++) pm.slots[i].freq = 0, pm.slots[i].group = -1;
        for (int w = 0; w < n_words; w++) {
            const Word *wd = &words[w];
            for (int j = 0; j + 1 < wd->n; j++) {
                int a = wd->sym[j], b = wd->sym[j + 1];
                if (a < 0 || b < 0) continue;
                PairSlot *s = pair_find(&pm, a, b, 1);
                if (pair_valid(s, &st, a, b, cfg)) s->freq += wd->freq;
            }
        }
        /* Group the pairs by their concatenated string. */
        bpe_map_init(&cand_index, 1024);
        size_t n_cands = 0;
        for (size_t i = 0; i < pm.cap; i++) {
            PairSlot *s = &pm.slots[i];
            if (!s->key || s->freq == 0) continue;
            int a = (int)((s->key - 1) >> 32), b = (int)((s->key - 1) & 0xffffffffu);
            const Symbol *x = &st.v[a], *y = &st.v[b];
            size_t len = x->len + y->len;
            char *cat = xmalloc(len + 1);
            memcpy(cat, x->s, x->len);
            memcpy(cat + x->len, y->s, y->len);
            cat[len] = '\0';
            int g = bpe_map_put(&cand_index, cat, len, (int)n_cands);
            if ((size_t)g == n_cands) {
                if (n_cands == cand_cap) {
                    cand_cap = cand_cap ? cand_cap * 2 : 1024;
                    cands = xrealloc(cands, cand_cap * sizeof *cands);
                }
                cands[g] = (Candidate){cat, len, x->nchars + y->nchars, 0};
                n_cands++;
            } else {
                free(cat);
            }
            cands[g].freq += s->freq;
            s->group = g;
        }
        int best = -1;
        for (size_t g = 0; g < n_cands; g++)
            if (best < 0 || better_candidate(&cands[g], &cands[best])) best = (int)g;
        if (best < 0) { /* no pair occurs any more */
            bpe_map_free(&cand_index);
            break;
        }
        int new_id = bpe_map_get(&st.index, cands[best].s, cands[best].len);
        if (new_id < 0) {
            new_id = symbol_add(&st, cands[best].s, cands[best].len);
            merged[n_merged] = new_id;
            merged_freq[n_merged] = cands[best].freq;
            n_merged++;
        }
        /* Merge the winning pairs in every word, left to right, without overlap. */
        for (int w = 0; w < n_words; w++) {
            Word *wd = &words[w];
            int o = 0;
            for (int j = 0; j < wd->n; j++) {
                if (j + 1 < wd->n && wd->sym[j] >= 0 && wd->sym[j + 1] >= 0) {
                    PairSlot *s = pair_find(&pm, wd->sym[j], wd->sym[j + 1], 0);
                    if (s && s->group == best) {
                        wd->sym[o++] = new_id;
                        j++;
                        continue;
                    }
                }
                wd->sym[o++] = wd->sym[j];
            }
            wd->n = o;
        }
        for (size_t g = 0; g < n_cands; g++) free(cands[g].s);
        bpe_map_free(&cand_index);
    }
    free(cands);
    if (n_merged < target_merges) {
        n_filled = fill_from_stale_pairs(&pm, &st, merged, merged_freq, &n_merged, target_merges);
        if (n_merged < target_merges) {
            set_err(err, errlen,
                    "the tokenizer corpus allows only %d pieces (%d reserved + %d characters + %d merges, %d of them "
                    "never-occurring); vocab_size %d cannot be reached",
                    BPE_N_RESERVED + n_alpha + n_merged, BPE_N_RESERVED, n_alpha, n_merged, n_filled,
                    cfg->vocab_size);
            free(merged);
            free(merged_freq);
            goto done;
        }
    }

    /* Assemble the vocabulary: reserved, merges in creation order, alphabet in frequency order. */
    out->n_pieces = cfg->vocab_size;
    out->n_merges = n_merged;
    out->n_zero_count = n_filled;
    out->pieces = xcalloc((size_t)out->n_pieces, sizeof *out->pieces);
    out->scores = xcalloc((size_t)out->n_pieces, sizeof *out->scores);
    out->types = xcalloc((size_t)out->n_pieces, sizeof *out->types);
    out->freqs = xcalloc((size_t)out->n_pieces, sizeof *out->freqs);
    const char *reserved[BPE_N_RESERVED] = {"<unk>", "<s>", "</s>"};
    for (int i = 0; i < BPE_N_RESERVED; i++) {
        out->pieces[i] = xstrdup(reserved[i]);
        out->types[i] = i == 0 ? BPE_PIECE_UNKNOWN : BPE_PIECE_CONTROL;
        out->freqs[i] = 0;
    }
    int id = BPE_N_RESERVED;
    for (int m = 0; m < n_merged; m++, id++) {
        out->pieces[id] = xstrdup(st.v[merged[m]].s);
        out->freqs[id] = merged_freq[m];
    }
    for (int c = 0; c < n_alpha; c++, id++) {
        out->pieces[id] = xstrdup(st.v[c].s);
        out->freqs[id] = alpha_counts[c];
    }
    for (int i = BPE_N_RESERVED; i < out->n_pieces; i++) {
        out->types[i] = BPE_PIECE_NORMAL;
        out->scores[i] = -(double)(i - BPE_N_RESERVED);
    }
    free(merged);
    free(merged_freq);
    rc = 0;
done:
    free(alpha_counts);
    for (int w = 0; w < n_words; w++) free(words[w].sym);
    free(words);
    for (int i = 0; i < st.n; i++) free(st.v[i].s);
    free(st.v);
    bpe_map_free(&st.index);
    free(pm.slots);
    if (rc != 0) bpe_vocab_free(out);
    return rc;
}

void bpe_vocab_free(BpeVocab *v) {
    if (v->pieces)
        for (int i = 0; i < v->n_pieces; i++) free(v->pieces[i]);
    for (int i = 0; v->dropped && i < v->n_dropped; i++) free(v->dropped[i]);
    free(v->pieces);
    free(v->scores);
    free(v->types);
    free(v->freqs);
    free(v->dropped);
    free(v->dropped_counts);
    memset(v, 0, sizeof *v);
}

cJSON *bpe_vocab_to_json(const BpeVocab *v, cJSON *training_info) {
    cJSON *root = cJSON_CreateObject();
    CHECK_ALLOC(root);
    cJSON_AddStringToObject(root, "type", BPE_FILE_TYPE);
    cJSON_AddNumberToObject(root, "version", BPE_FILE_VERSION);
    cJSON_AddNumberToObject(root, "vocab_size", v->n_pieces);
    cJSON_AddNumberToObject(root, "max_piece_length", v->cfg.max_piece_length);
    cJSON_AddBoolToObject(root, "split_digits", v->cfg.split_digits);
    cJSON_AddBoolToObject(root, "add_dummy_prefix", 1);
    cJSON_AddBoolToObject(root, "remove_extra_whitespaces", 1);
    cJSON_AddNumberToObject(root, "character_coverage", v->cfg.character_coverage);
    cJSON_AddNumberToObject(root, "unk_id", 0);
    cJSON_AddNumberToObject(root, "bos_id", 1);
    cJSON_AddNumberToObject(root, "eos_id", 2);
    cJSON *pieces = cJSON_AddArrayToObject(root, "pieces");
    static const char *type_names[] = {"normal", "unknown", "control"};
    for (int i = 0; i < v->n_pieces; i++) {
        cJSON *p = cJSON_CreateObject();
        CHECK_ALLOC(p);
        char *disp = v->types[i] == BPE_PIECE_NORMAL ? bpe_to_display(v->pieces[i], strlen(v->pieces[i]))
                                                     : xstrdup(v->pieces[i]);
        cJSON_AddStringToObject(p, "piece", disp);
        free(disp);
        cJSON_AddNumberToObject(p, "score", v->scores[i]);
        cJSON_AddStringToObject(p, "type", type_names[v->types[i]]);
        cJSON_AddItemToArray(pieces, p);
    }
    cJSON *tr = training_info ? training_info : cJSON_CreateObject();
    CHECK_ALLOC(tr);
    cJSON_AddStringToObject(tr, "algorithm",
                            "classic BPE over word types; candidate = concatenated string (pair counts summed); "
                            "ties: fewer characters, then smaller code-point order; ids: reserved, merges in "
                            "creation order, characters by count desc then code point");
    cJSON_AddNumberToObject(tr, "n_sentences", (double)v->n_sentences);
    cJSON_AddNumberToObject(tr, "n_character_occurrences", (double)v->n_char_occurrences);
    cJSON_AddNumberToObject(tr, "n_merges", v->n_merges);
    cJSON_AddNumberToObject(tr, "n_never_occurring_merges", v->n_zero_count);
    cJSON_AddNumberToObject(tr, "n_characters", v->n_chars);
    cJSON *freqs = cJSON_AddArrayToObject(tr, "piece_counts");
    for (int i = 0; i < v->n_pieces; i++) cJSON_AddItemToArray(freqs, cJSON_CreateNumber((double)v->freqs[i]));
    cJSON *dropped = cJSON_AddArrayToObject(tr, "dropped_characters");
    for (int i = 0; i < v->n_dropped; i++) {
        cJSON *d = cJSON_CreateObject();
        CHECK_ALLOC(d);
        char *disp = bpe_to_display(v->dropped[i], strlen(v->dropped[i]));
        cJSON_AddStringToObject(d, "character", disp);
        free(disp);
        cJSON_AddNumberToObject(d, "count", (double)v->dropped_counts[i]);
        cJSON_AddItemToArray(dropped, d);
    }
    cJSON_AddItemToObject(root, "training", tr);
    return root;
}
