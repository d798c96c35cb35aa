/* Token shard writer and validating reader (layout in shard.h). The reader maps the examples and tokens straight
 * from the file buffer, so it requires a little-endian host (checked at compile time). */
#include "datasets/shard.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <errno.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "pipeline/base/atomic_file.h"
#include "pipeline/base/config.h"
#include "pipeline/base/log.h"

_Static_assert(sizeof(ShardExample) == 24, "ShardExample must be 24 bytes");
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "shard.c maps little-endian data directly: a little-endian host is required"
#endif

#define SHARD_PREFIX_BYTES 16 /* magic, version, header length */

static uint64_t pad8(uint64_t n) { return (n + 7) & ~(uint64_t)7; }

/* Checks that the examples tile tokens in order: monotone, non-overlapping, in range, valid module ids. */
static int check_examples(const ShardExample *ex, uint64_t n_examples, uint64_t n_tokens, int n_modules,
                          const char *what, char *err, size_t errlen) {
    uint64_t prev_end = 0;
    for (uint64_t i = 0; i < n_examples; i++) {
        const ShardExample *e = &ex[i];
        uint64_t len = (uint64_t)e->q_len + e->a_len;
        if (e->q_start < prev_end || e->q_start > n_tokens || len > n_tokens - e->q_start) {
            set_err(err, errlen, "%s: example %llu: tokens [%llu, %llu) out of order or out of range (n_tokens %llu)",
                    what, (unsigned long long)i, (unsigned long long)e->q_start,
                    (unsigned long long)(e->q_start + len), (unsigned long long)n_tokens);
            return -1;
        }
        if (e->module >= (uint32_t)n_modules) {
            set_err(err, errlen, "%s: example %llu: module id %u out of range (%d modules)", what,
                    (unsigned long long)i, e->module, n_modules);
            return -1;
        }
        if (e->reserved != 0) {
            set_err(err, errlen, "%s: example %llu: reserved field is %u, not 0", what, (unsigned long long)i,
                    e->reserved);
            return -1;
        }
        prev_end = e->q_start + len;
    }
    return 0;
}

static void put_u32(unsigned char *p, uint32_t v) {
    for (int i = 0; i < 4; i++) p[i] = (unsigned char)(v >> (8 * i));
}

int shard_write(const char *path, const char *split, const char *tokenizer_sha256, char **modules, int n_modules,
                const ShardExample *examples, uint64_t n_examples, const uint16_t *tokens, uint64_t n_tokens,
                const char *source_json, char *err, size_t errlen) {
    if (strlen(split) >= sizeof(((Shard *)0)->split)) {
        set_err(err, errlen, "%s: split name \"%s\" too long", path, split);
        return -1;
    }
    if (strlen(tokenizer_sha256) != 64) {
        set_err(err, errlen, "%s: tokenizer sha256 must be 64 hex characters", path);
        return -1;
    }
    if (check_examples(examples, n_examples, n_tokens, n_modules, path, err, errlen) != 0) return -1;
    cJSON *h = cJSON_CreateObject();
    CHECK_ALLOC(h);
    cJSON_AddStringToObject(h, "split", split);
    cJSON_AddStringToObject(h, "tokenizer_sha256", tokenizer_sha256);
    cJSON_AddNumberToObject(h, "n_examples", (double)n_examples);
    cJSON_AddNumberToObject(h, "n_tokens", (double)n_tokens);
    cJSON *mods = cJSON_AddArrayToObject(h, "modules");
    for (int i = 0; i < n_modules; i++) cJSON_AddItemToArray(mods, cJSON_CreateString(modules[i]));
    if (source_json) {
        cJSON *src = cJSON_Parse(source_json);
        if (!src) {
            set_err(err, errlen, "%s: source provenance is not valid JSON", path);
            cJSON_Delete(h);
            return -1;
        }
        cJSON_AddItemToObject(h, "source", src);
    }
    char *json = cJSON_PrintUnformatted(h);
    cJSON_Delete(h);
    CHECK_ALLOC(json);
    size_t j = strlen(json);
    if (j > 0xFFFFFFFFu) {
        set_err(err, errlen, "%s: header too large", path);
        free(json);
        return -1;
    }
    unsigned char prefix[SHARD_PREFIX_BYTES];
    memcpy(prefix, SHARD_MAGIC, 8);
    put_u32(prefix + 8, SHARD_VERSION);
    put_u32(prefix + 12, (uint32_t)j);
    static const char zeros[8] = {0};
    AtomicFile af;
    if (atomic_open(&af, path, err, errlen) != 0) {
        free(json);
        return -1;
    }
    errno = 0;
    int ok = fwrite(prefix, 1, sizeof prefix, af.fp) == sizeof prefix && fwrite(json, 1, j, af.fp) == j &&
             fwrite(zeros, 1, pad8(j) - j, af.fp) == pad8(j) - j &&
             (n_examples == 0 || fwrite(examples, sizeof *examples, n_examples, af.fp) == n_examples) &&
             (n_tokens == 0 || fwrite(tokens, sizeof *tokens, n_tokens, af.fp) == n_tokens);
    int write_errno = errno ? errno : EIO;
    free(json);
    if (!ok) {
        set_err(err, errlen, "%s: write failed: %s", af.tmp_path, strerror(write_errno));
        atomic_abort(&af);
        return -1;
    }
    return atomic_commit(&af, err, errlen);
}

void shard_free(Shard *s) {
    free(s->buf);
    for (int i = 0; i < s->n_modules; i++) free(s->modules[i]);
    free(s->modules);
    free(s->header_json);
    memset(s, 0, sizeof *s);
}

static uint32_t get_u32(const unsigned char *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

/* Parses the JSON header into s; strict: the known keys only, with the right types. */
static int parse_header(Shard *s, const char *path, char *err, size_t errlen) {
    cJSON *h = cJSON_Parse(s->header_json);
    if (!h) {
        set_err(err, errlen, "%s: header is not valid JSON", path);
        return -1;
    }
    char what[4200];
    snprintf(what, sizeof what, "%s (header)", path);
    JsonReader r;
    json_reader_init(&r, h, what, "");
    const char *split = NULL, *sha = NULL;
    long n_ex = 0, n_tok = 0;
    json_get_string(&r, "split", &split, true);
    json_get_string(&r, "tokenizer_sha256", &sha, true);
    json_get_int(&r, "n_examples", &n_ex, true);
    json_get_int(&r, "n_tokens", &n_tok, true);
    const cJSON *mods = json_get_array(&r, "modules", true);
    json_get_object(&r, "source", false);
    int rc = json_reader_finish(&r, err, errlen);
    if (rc == 0 && (strlen(split) >= sizeof s->split || strlen(sha) != 64 || n_ex < 0 || n_tok < 0)) {
        set_err(err, errlen, "%s: header: bad split name, tokenizer_sha256 or negative counts", path);
        rc = -1;
    }
    if (rc == 0) {
        snprintf(s->split, sizeof s->split, "%s", split);
        snprintf(s->tokenizer_sha256, sizeof s->tokenizer_sha256, "%s", sha);
        s->n_examples = (uint64_t)n_ex;
        s->n_tokens = (uint64_t)n_tok;
        int n = cJSON_GetArraySize(mods);
        s->modules = xcalloc((size_t)n + 1, sizeof *s->modules);
        const cJSON *m;
        cJSON_ArrayForEach(m, mods) {
            if (!cJSON_IsString(m)) {
                set_err(err, errlen, "%s: header: modules[%d] is not a string", path, s->n_modules);
                rc = -1;
                break;
            }
            s->modules[s->n_modules++] = xstrdup(m->valuestring);
        }
    }
    cJSON_Delete(h);
    return rc;
}

int shard_read(Shard *s, const char *path, char *err, size_t errlen) {
    memset(s, 0, sizeof *s);
    if (read_file_all(path, &s->buf, &s->size, err, errlen) != 0) return -1;
    const unsigned char *u = (const unsigned char *)s->buf;
    if (s->size < SHARD_PREFIX_BYTES || memcmp(u, SHARD_MAGIC, 8) != 0) {
        set_err(err, errlen, "%s: not a token shard (bad magic)", path);
        goto fail;
    }
    uint32_t version = get_u32(u + 8), j = get_u32(u + 12);
    if (version != SHARD_VERSION) {
        set_err(err, errlen, "%s: unsupported shard version %u (expected %d)", path, version, SHARD_VERSION);
        goto fail;
    }
    uint64_t body = SHARD_PREFIX_BYTES + pad8(j);
    if (body > s->size) {
        set_err(err, errlen, "%s: truncated (header of %u bytes, file of %zu)", path, j, s->size);
        goto fail;
    }
    for (uint64_t i = SHARD_PREFIX_BYTES + j; i < body; i++) {
        if (u[i] != 0) {
            set_err(err, errlen, "%s: header padding is not zero", path);
            goto fail;
        }
    }
    s->header_json = xmalloc((size_t)j + 1);
    memcpy(s->header_json, u + SHARD_PREFIX_BYTES, j);
    s->header_json[j] = '\0';
    if (strlen(s->header_json) != j) {
        set_err(err, errlen, "%s: header contains a NUL byte", path);
        goto fail;
    }
    if (parse_header(s, path, err, errlen) != 0) goto fail;
    /* Exact size: sizes derived from the header must describe the file to the byte (guards truncation). */
    uint64_t max = (uint64_t)s->size;
    if (s->n_examples > max / sizeof(ShardExample) || s->n_tokens > max / sizeof(uint16_t) ||
        body + s->n_examples * sizeof(ShardExample) + s->n_tokens * sizeof(uint16_t) != max) {
        set_err(err, errlen, "%s: size %zu bytes does not match the header (%llu examples, %llu tokens): truncated "
                "or corrupt", path, s->size, (unsigned long long)s->n_examples, (unsigned long long)s->n_tokens);
        goto fail;
    }
    s->examples = (const ShardExample *)(s->buf + body);
    s->tokens = (const uint16_t *)(s->buf + body + s->n_examples * sizeof(ShardExample));
    if (check_examples(s->examples, s->n_examples, s->n_tokens, s->n_modules, path, err, errlen) != 0) goto fail;
    return 0;
fail:
    shard_free(s);
    return -1;
}
