/* Loading, encoding and decoding of the BPE tokenizer file written by bpe_train.c (format: tokenizer.h / README).
 *
 * Encoding is SentencePiece's BPE encoding: the text is normalised (bpe_normalize), cut into words at ▁, and inside
 * each word the characters are merged repeatedly: among all adjacent symbol pairs whose concatenation is a piece of
 * the vocabulary, the one with the highest score merges (ties: the leftmost). A symbol that is not a piece
 * (a character outside the alphabet) becomes <unk>, one id per character. */
#include "datasets/tokenizer.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "datasets/bpe_text.h"
#include "datasets/bpe_train.h"
#include "pipeline/base/atomic_file.h"
#include "pipeline/base/config.h"
#include "pipeline/base/limits.h"
#include "pipeline/base/log.h"
#include "pipeline/base/sha256.h"

#define UNK_SURFACE " \xe2\x81\x87 " /* " ⁇ ", SentencePiece's default surface for <unk> */

struct Tokenizer {
    int n;                 /* vocabulary size */
    char **display;        /* UTF-8 pieces, "▁" for whitespace; reserved as "<unk>" ... */
    char **internal;       /* ' ' for ▁ (normal pieces); NULL for reserved */
    double *score;
    BpePieceType *type;
    int *len;              /* bytes of internal[id] (0 for reserved) */
    BpeMap map;            /* internal piece -> id, normal pieces only */
    /* Merge table: (left id, right id) -> id of the piece equal to their concatenation, for every split of every
     * piece into two pieces. Encoding then works on ids only. Open addressing; key 0 = empty. */
    uint64_t *pair_keys;
    int32_t *pair_vals;
    size_t pair_cap;
    int ascii_id[128];     /* id of each one-byte character piece, -1 if not a piece */
    int max_piece_chars;
    bool split_digits;
    int unk_id;
    char sha256[65];
};

void tokenizer_free(Tokenizer *t) {
    if (!t) return;
    for (int i = 0; i < t->n; i++) {
        if (t->display) free(t->display[i]);
        if (t->internal) free(t->internal[i]);
    }
    free(t->display);
    free(t->internal);
    free(t->score);
    free(t->type);
    free(t->len);
    free(t->pair_keys);
    free(t->pair_vals);
    bpe_map_free(&t->map);
    free(t);
}

static int get_int_field(const cJSON *root, const char *key, long *out) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(root, key);
    if (!cJSON_IsNumber(v) || v->valuedouble != (double)(long)v->valuedouble) return -1;
    *out = (long)v->valuedouble;
    return 0;
}

static uint64_t pair_key(int a, int b) { return ((uint64_t)(uint32_t)a << 32 | (uint32_t)b) + 1; }

static size_t pair_slot(const Tokenizer *t, uint64_t key) {
    uint64_t h = key * 0x9e3779b97f4a7c15ull;
    size_t mask = t->pair_cap - 1;
    for (size_t i = (size_t)(h >> 20) & mask;; i = (i + 1) & mask)
        if (t->pair_keys[i] == key || t->pair_keys[i] == 0) return i;
}

static int pair_get(const Tokenizer *t, int a, int b) {
    uint64_t key = pair_key(a, b);
    size_t i = pair_slot(t, key);
    return t->pair_keys[i] == key ? t->pair_vals[i] : -1;
}

/* Fills the merge table and the ASCII table; fails (returns the id) if a piece has a character that is not itself a
 * piece: encoding starts from single characters, so such a piece could never be produced. */
static int build_merge_table(Tokenizer *t) {
    for (int c = 0; c < 128; c++) {
        char ch = (char)c;
        t->ascii_id[c] = bpe_map_get(&t->map, &ch, 1);
    }
    size_t splits = 0;
    for (int id = 0; id < t->n; id++) splits += t->internal[id] ? (size_t)t->len[id] : 0;
    t->pair_cap = 16;
    while (t->pair_cap < 2 * splits + 16) t->pair_cap *= 2;
    t->pair_keys = xcalloc(t->pair_cap, sizeof *t->pair_keys);
    t->pair_vals = xcalloc(t->pair_cap, sizeof *t->pair_vals);
    for (int id = 0; id < t->n; id++) {
        const char *p = t->internal[id];
        if (!p) continue;
        int n = t->len[id];
        for (int k = 0; k < n;) {
            uint32_t cp;
            int clen = bpe_utf8_decode(p + k, (size_t)(n - k), &cp);
            if (bpe_map_get(&t->map, p + k, (size_t)clen) < 0) return id;
            k += clen;
            if (k >= n) break;
            int left = bpe_map_get(&t->map, p, (size_t)k), right = bpe_map_get(&t->map, p + k, (size_t)(n - k));
            if (left < 0 || right < 0) continue;
            size_t slot = pair_slot(t, pair_key(left, right));
            t->pair_keys[slot] = pair_key(left, right);
            t->pair_vals[slot] = id;
        }
    }
    return -1;
}

/* Parses and validates the JSON text; path is used in messages. */
static Tokenizer *parse_tokenizer(const char *path, const char *text, char *err, size_t errlen) {
    cJSON *root = cJSON_Parse(text);
    if (!root) {
        set_err(err, errlen, "%s: not valid JSON", path);
        return NULL;
    }
    Tokenizer *t = xcalloc(1, sizeof *t);
    const cJSON *type = cJSON_GetObjectItemCaseSensitive(root, "type");
    const cJSON *digits = cJSON_GetObjectItemCaseSensitive(root, "split_digits");
    const cJSON *pieces = cJSON_GetObjectItemCaseSensitive(root, "pieces");
    long version = 0, vocab = 0, maxlen = 0;
    if (!cJSON_IsString(type) || strcmp(type->valuestring, BPE_FILE_TYPE) != 0) {
        set_err(err, errlen, "%s: \"type\" must be \"%s\"", path, BPE_FILE_TYPE);
        goto fail;
    }
    if (get_int_field(root, "version", &version) || version != BPE_FILE_VERSION) {
        set_err(err, errlen, "%s: unsupported \"version\" (expected %d)", path, BPE_FILE_VERSION);
        goto fail;
    }
    if (get_int_field(root, "vocab_size", &vocab) || vocab <= BPE_N_RESERVED || vocab > 65536) {
        set_err(err, errlen, "%s: \"vocab_size\" missing or outside 4..65536", path);
        goto fail;
    }
    if (get_int_field(root, "max_piece_length", &maxlen) || maxlen < 1 || maxlen > 1024) {
        set_err(err, errlen, "%s: \"max_piece_length\" missing or outside 1..1024", path);
        goto fail;
    }
    if (!cJSON_IsBool(digits)) {
        set_err(err, errlen, "%s: \"split_digits\" must be a boolean", path);
        goto fail;
    }
    if (!cJSON_IsArray(pieces) || cJSON_GetArraySize(pieces) != vocab) {
        set_err(err, errlen, "%s: \"pieces\" must be an array of vocab_size (%ld) entries", path, vocab);
        goto fail;
    }
    t->n = (int)vocab;
    t->max_piece_chars = (int)maxlen;
    t->split_digits = cJSON_IsTrue(digits);
    t->display = xcalloc((size_t)t->n, sizeof *t->display);
    t->internal = xcalloc((size_t)t->n, sizeof *t->internal);
    t->score = xcalloc((size_t)t->n, sizeof *t->score);
    t->type = xcalloc((size_t)t->n, sizeof *t->type);
    t->len = xcalloc((size_t)t->n, sizeof *t->len);
    bpe_map_init(&t->map, (size_t)t->n);
    static const char *reserved[BPE_N_RESERVED] = {"<unk>", "<s>", "</s>"};
    static const char *reserved_type[BPE_N_RESERVED] = {"unknown", "control", "control"};
    int id = 0;
    const cJSON *p;
    cJSON_ArrayForEach(p, pieces) {
        const cJSON *ps = cJSON_GetObjectItemCaseSensitive(p, "piece");
        const cJSON *sc = cJSON_GetObjectItemCaseSensitive(p, "score");
        const cJSON *ty = cJSON_GetObjectItemCaseSensitive(p, "type");
        if (!cJSON_IsString(ps) || !cJSON_IsNumber(sc) || !cJSON_IsString(ty)) {
            set_err(err, errlen, "%s: pieces[%d] needs \"piece\" (string), \"score\" (number), \"type\" (string)",
                    path, id);
            goto fail;
        }
        t->display[id] = xstrdup(ps->valuestring);
        t->score[id] = sc->valuedouble;
        if (id < BPE_N_RESERVED) {
            if (strcmp(ps->valuestring, reserved[id]) != 0 || strcmp(ty->valuestring, reserved_type[id]) != 0) {
                set_err(err, errlen, "%s: pieces[%d] must be the reserved piece %s of type %s", path, id,
                        reserved[id], reserved_type[id]);
                goto fail;
            }
            t->type[id] = id == 0 ? BPE_PIECE_UNKNOWN : BPE_PIECE_CONTROL;
        } else {
            if (strcmp(ty->valuestring, "normal") != 0) {
                set_err(err, errlen, "%s: pieces[%d] must be of type normal", path, id);
                goto fail;
            }
            char *in = bpe_from_display(ps->valuestring);
            size_t len = in ? strlen(in) : 0;
            if (!in || !bpe_piece_valid(in, len, t->max_piece_chars, t->split_digits)) {
                set_err(err, errlen, "%s: pieces[%d] \"%s\" is not a valid piece (length, ▁ position, digits, "
                        "scripts)", path, id, ps->valuestring);
                free(in);
                goto fail;
            }
            t->internal[id] = in;
            t->len[id] = (int)len;
            t->type[id] = BPE_PIECE_NORMAL;
            if (bpe_map_put(&t->map, in, len, id) != id) {
                set_err(err, errlen, "%s: pieces[%d] \"%s\" appears twice", path, id, ps->valuestring);
                goto fail;
            }
        }
        id++;
    }
    t->unk_id = 0;
    int orphan = build_merge_table(t);
    if (orphan >= 0) {
        set_err(err, errlen, "%s: pieces[%d] \"%s\" contains a character that is not a piece itself", path, orphan,
                t->display[orphan]);
        goto fail;
    }
    cJSON_Delete(root);
    return t;
fail:
    cJSON_Delete(root);
    tokenizer_free(t);
    return NULL;
}

Tokenizer *tokenizer_load(const char *path, char *err, size_t errlen) {
    char *text = NULL;
    size_t n = 0;
    if (json_read_text(path, JSON_KIND_TOKENIZER, &text, &n, err, errlen) != 0) return NULL;
    Tokenizer *t = parse_tokenizer(path, text, err, errlen);
    if (t) sha256_hex(text, n, t->sha256);
    free(text);
    return t;
}

int tokenizer_vocab_size(const Tokenizer *t) { return t->n; }

const char *tokenizer_piece(const Tokenizer *t, int id) {
    if (id < 0 || id >= t->n) return NULL;
    return t->display[id];
}

const char *tokenizer_sha256(const Tokenizer *t) { return t->sha256; }

/* Encodes one word (normalised internal form) and appends its ids. sym is scratch for one id per character; -1 marks
 * a character that is not a piece (it never merges and is emitted as <unk>). */
static int encode_word(const Tokenizer *t, const char *w, int wlen, int *sym, int32_t *ids, int max, int count) {
    int n = 0;
    for (int i = 0; i < wlen;) {
        unsigned char c = (unsigned char)w[i];
        if (c < 128) {
            sym[n++] = t->ascii_id[c];
            i++;
        } else {
            uint32_t cp;
            int clen = bpe_utf8_decode(w + i, (size_t)(wlen - i), &cp);
            sym[n++] = bpe_map_get(&t->map, w + i, (size_t)clen);
            i += clen;
        }
    }
    while (n > 1) {
        int best = -1, best_id = -1;
        for (int i = 0; i + 1 < n; i++) {
            if (sym[i] < 0 || sym[i + 1] < 0) continue;
            int id = pair_get(t, sym[i], sym[i + 1]);
            if (id >= 0 && (best < 0 || t->score[id] > t->score[best_id])) best = i, best_id = id;
        }
        if (best < 0) break;
        sym[best] = best_id;
        memmove(&sym[best + 1], &sym[best + 2], (size_t)(n - best - 2) * sizeof *sym);
        n--;
    }
    for (int i = 0; i < n; i++) {
        if (count < max) ids[count] = sym[i] >= 0 ? sym[i] : t->unk_id;
        count++;
    }
    return count;
}

int tokenizer_encode(const Tokenizer *t, const char *text, int32_t *ids, int max) {
    size_t n = strlen(text);
    char stack_buf[1024];
    char *norm = n + 2 <= sizeof stack_buf ? stack_buf : xmalloc(n + 2);
    size_t len = bpe_normalize(text, n, norm);
    int stack_sym[256];
    int *sym = len <= 256 ? stack_sym : xmalloc(len * sizeof *sym);
    int count = 0;
    size_t start = 0;
    for (size_t i = 1; i <= len; i++) {
        if (i == len || norm[i] == BPE_WS_MARK) {
            count = encode_word(t, norm + start, (int)(i - start), sym, ids, max, count);
            start = i;
        }
    }
    if (sym != stack_sym) free(sym);
    if (norm != stack_buf) free(norm);
    return count;
}

char *tokenizer_decode(const Tokenizer *t, const int32_t *ids, int n) {
    size_t cap = 64, len = 0;
    char *out = xmalloc(cap);
    for (int i = 0; i < n; i++) {
        int id = ids[i];
        const char *s;
        size_t sl;
        if (id < 0 || id >= t->n || t->type[id] == BPE_PIECE_UNKNOWN) s = UNK_SURFACE, sl = sizeof UNK_SURFACE - 1;
        else if (t->type[id] == BPE_PIECE_CONTROL) continue;
        else s = t->internal[id], sl = (size_t)t->len[id];
        if (len + sl + 1 > cap) {
            while (len + sl + 1 > cap) cap *= 2;
            out = xrealloc(out, cap);
        }
        for (size_t k = 0; k < sl; k++) out[len++] = s[k] == BPE_WS_MARK ? ' ' : s[k];
    }
    out[len] = '\0';
    /* The dummy prefix: a leading space produced by the first piece is not part of the text. */
    if (len > 0 && out[0] == ' ') memmove(out, out + 1, len);
    return out;
}

/* Encodes prefix + s + suffix. */
static int encode_wrapped(const Tokenizer *t, const char *prefix, const char *s, const char *suffix, int32_t *ids,
                          int max) {
    size_t np = strlen(prefix), ns = strlen(s), nx = strlen(suffix);
    char stack_buf[512];
    char *buf = np + ns + nx + 1 <= sizeof stack_buf ? stack_buf : xmalloc(np + ns + nx + 1);
    memcpy(buf, prefix, np);
    memcpy(buf + np, s, ns);
    memcpy(buf + np + ns, suffix, nx + 1);
    int n = tokenizer_encode(t, buf, ids, max);
    if (buf != stack_buf) free(buf);
    return n;
}

int tokenizer_encode_question(const Tokenizer *t, const char *q, int32_t *ids, int max) {
    return encode_wrapped(t, " Q: ", q, " A:", ids, max);
}

int tokenizer_encode_answer(const Tokenizer *t, const char *a, int32_t *ids, int max) {
    return encode_wrapped(t, " ", a, "", ids, max);
}
