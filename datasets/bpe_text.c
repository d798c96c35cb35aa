/* Normalisation, piece validity, code-point ordering and a small string hash map for the BPE tokenizer. */
#include "datasets/bpe_text.h"

#include <stdlib.h>
#include <string.h>

#include "pipeline/base/log.h"

int bpe_utf8_len(unsigned char c) {
    if (c < 0x80) return 1;
    if ((c & 0xE0) == 0xC0) return 2;
    if ((c & 0xF0) == 0xE0) return 3;
    if ((c & 0xF8) == 0xF0) return 4;
    return 1; /* stray continuation byte or invalid lead: one "character" */
}

int bpe_utf8_decode(const char *s, size_t n, uint32_t *cp) {
    const unsigned char *u = (const unsigned char *)s;
    if (u[0] == (unsigned char)BPE_WS_MARK) {
        *cp = BPE_WS_CODEPOINT;
        return 1;
    }
    int len = bpe_utf8_len(u[0]);
    if (len == 1) {
        *cp = u[0] < 0x80 ? u[0] : 0xFFFDu;
        return 1;
    }
    if ((size_t)len > n) {
        *cp = 0xFFFDu;
        return 1;
    }
    uint32_t v = u[0] & (0x7F >> len);
    for (int i = 1; i < len; i++) {
        if ((u[i] & 0xC0) != 0x80) {
            *cp = 0xFFFDu;
            return 1;
        }
        v = (v << 6) | (u[i] & 0x3F);
    }
    *cp = v;
    return len;
}

int bpe_count_chars(const char *s, size_t n) {
    int count = 0;
    for (size_t i = 0; i < n; count++) {
        uint32_t cp;
        i += (size_t)bpe_utf8_decode(s + i, n - i, &cp);
    }
    return count;
}

/* Length of a whitespace character at s (0 if none). U+2581 in the input is whitespace: it decodes to a space. */
static size_t whitespace_at(const char *s, size_t left) {
    unsigned char c = (unsigned char)s[0];
    if (c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f') return 1;
    if (left >= 3 && memcmp(s, BPE_WS_UTF8, 3) == 0) return 3;
    return 0;
}

size_t bpe_normalize(const char *text, size_t n, char *out) {
    size_t o = 0;
    bool pending_space = true; /* the dummy prefix: emitted before the first non-space character */
    for (size_t i = 0; i < n;) {
        size_t ws = whitespace_at(text + i, n - i);
        if (ws) {
            pending_space = true;
            i += ws;
            continue;
        }
        if (pending_space) out[o++] = BPE_WS_MARK;
        pending_space = false;
        out[o++] = text[i++];
    }
    out[o] = '\0';
    return o;
}

/* Script classes for the no-mixing rule: 0 = none yet, 1 = Latin (ASCII letters), 2 = Common (other ASCII),
 * 3 + position = a non-ASCII character, which thereby mixes with nothing. */
static int script_class(uint32_t cp, int pos) {
    if ((cp >= 'A' && cp <= 'Z') || (cp >= 'a' && cp <= 'z')) return 1;
    if (cp < 0x80) return 2;
    return 3 + pos;
}

bool bpe_piece_valid(const char *s, size_t n, int max_chars, bool split_digits) {
    if (n == 0) return false;
    int nchars = bpe_count_chars(s, n);
    if (nchars > max_chars) return false;
    int prev_class = 0, pos = 0;
    for (size_t i = 0; i < n; pos++) {
        uint32_t cp;
        i += (size_t)bpe_utf8_decode(s + i, n - i, &cp);
        if (cp == BPE_WS_CODEPOINT) {
            if (pos > 0) return false; /* whitespace only as a prefix: pieces never cross words */
            continue;
        }
        if (cp == 0 || cp == 0xFFFDu) return false;
        if (split_digits && cp >= '0' && cp <= '9' && nchars > 1) return false;
        int cls = script_class(cp, pos);
        if (prev_class && cls != prev_class) return false;
        prev_class = cls;
    }
    return true;
}

int bpe_piece_cmp(const char *a, size_t na, const char *b, size_t nb) {
    size_t i = 0, j = 0;
    while (i < na && j < nb) {
        uint32_t ca, cb;
        i += (size_t)bpe_utf8_decode(a + i, na - i, &ca);
        j += (size_t)bpe_utf8_decode(b + j, nb - j, &cb);
        if (ca != cb) return ca < cb ? -1 : 1;
    }
    if (i < na) return 1;
    if (j < nb) return -1;
    return 0;
}

char *bpe_to_display(const char *s, size_t n) {
    size_t marks = 0;
    for (size_t i = 0; i < n; i++) marks += s[i] == BPE_WS_MARK;
    char *out = xmalloc(n + 2 * marks + 1);
    size_t o = 0;
    for (size_t i = 0; i < n; i++) {
        if (s[i] == BPE_WS_MARK) {
            memcpy(out + o, BPE_WS_UTF8, 3);
            o += 3;
        } else {
            out[o++] = s[i];
        }
    }
    out[o] = '\0';
    return out;
}

char *bpe_from_display(const char *s) {
    size_t n = strlen(s);
    char *out = xmalloc(n + 1);
    size_t o = 0;
    for (size_t i = 0; i < n;) {
        if (n - i >= 3 && memcmp(s + i, BPE_WS_UTF8, 3) == 0) {
            out[o++] = BPE_WS_MARK;
            i += 3;
            continue;
        }
        unsigned char c = (unsigned char)s[i];
        if (c <= 0x20 || c == 0x7F) {
            free(out);
            return NULL;
        }
        out[o++] = s[i++];
    }
    out[o] = '\0';
    return out;
}

/* ---- hash map ---- */

uint64_t bpe_hash(const char *s, size_t n) {
    uint64_t h = 1469598103934665603ull; /* FNV-1a, then a final mix so the low bits are usable */
    for (size_t i = 0; i < n; i++) {
        h ^= (unsigned char)s[i];
        h *= 1099511628211ull;
    }
    h ^= h >> 29;
    h *= 0xbf58476d1ce4e5b9ull;
    h ^= h >> 32;
    return h;
}

void bpe_map_init(BpeMap *m, size_t expected) {
    size_t cap = 16;
    while (cap < expected * 2) cap *= 2;
    m->cap = cap;
    m->count = 0;
    m->hashes = xcalloc(cap, sizeof *m->hashes);
    m->keys = xcalloc(cap, sizeof *m->keys);
    m->lens = xcalloc(cap, sizeof *m->lens);
    m->vals = xcalloc(cap, sizeof *m->vals);
}

void bpe_map_free(BpeMap *m) {
    if (!m->keys) return;
    for (size_t i = 0; i < m->cap; i++) free(m->keys[i]);
    free(m->hashes);
    free(m->keys);
    free(m->lens);
    free(m->vals);
    memset(m, 0, sizeof *m);
}

static size_t find_slot(const BpeMap *m, const char *key, size_t n, uint64_t h) {
    size_t mask = m->cap - 1;
    for (size_t i = h & mask;; i = (i + 1) & mask) {
        if (!m->keys[i]) return i;
        if (m->hashes[i] == h && m->lens[i] == n && memcmp(m->keys[i], key, n) == 0) return i;
    }
}

int bpe_map_get(const BpeMap *m, const char *key, size_t n) {
    size_t i = find_slot(m, key, n, bpe_hash(key, n));
    return m->keys[i] ? m->vals[i] : -1;
}

static void grow(BpeMap *m) {
    BpeMap bigger;
    bpe_map_init(&bigger, m->cap); /* doubles the capacity */
    for (size_t i = 0; i < m->cap; i++) {
        if (!m->keys[i]) continue;
        size_t j = find_slot(&bigger, m->keys[i], m->lens[i], m->hashes[i]);
        bigger.keys[j] = m->keys[i];
        bigger.lens[j] = m->lens[i];
        bigger.hashes[j] = m->hashes[i];
        bigger.vals[j] = m->vals[i];
        m->keys[i] = NULL;
        bigger.count++;
    }
    bpe_map_free(m);
    *m = bigger;
}

int bpe_map_put(BpeMap *m, const char *key, size_t n, int val) {
    if ((m->count + 1) * 2 > m->cap) grow(m);
    uint64_t h = bpe_hash(key, n);
    size_t i = find_slot(m, key, n, h);
    if (m->keys[i]) return m->vals[i];
    char *copy = xmalloc(n + 1);
    memcpy(copy, key, n);
    copy[n] = '\0';
    m->keys[i] = copy;
    m->lens[i] = (uint32_t)n;
    m->hashes[i] = h;
    m->vals[i] = val;
    m->count++;
    return val;
}
