/* Encoding one pool into a shard (see pool_encode.h). */
#include "datasets/pool_encode.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "datasets/pool_order.h"
#include "datasets/shard.h"
#include "pipeline/base/log.h"
#include "pipeline/base/progress.h"
#include "pipeline/base/sha256.h"

/* Examples are encoded in parallel a chunk at a time, then checked and copied in order: the chunk bounds the scratch
 * memory of the token ids, whatever the pool's size. */
#define ENCODE_CHUNK 16384

void pool_stats_free(PoolStats *s) {
    for (int i = 0; i < s->n_modules; i++) free(s->modules[i]);
    free(s->modules);
    free(s->module_counts);
    memset(s, 0, sizeof *s);
}

static int cmp_str(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

static int module_index(char **modules, int n, const char *name) {
    char *const *hit = bsearch(&name, modules, (size_t)n, sizeof *modules, cmp_str);
    return hit ? (int)(hit - modules) : -1;
}

/* Does decoded equal prefix + s + suffix with whitespace runs collapsed to one space and the ends stripped (what a
 * lossless encode/decode must give back)? Streams over the three parts without building the expected string. */
static int matches_collapsed(const char *decoded, const char *prefix, const char *s, const char *suffix) {
    const char *parts[3] = {prefix, s, suffix};
    const char *d = decoded;
    int pending_space = 0, started = 0;
    for (int k = 0; k < 3; k++) {
        for (const char *p = parts[k]; *p; p++) {
            if (*p == ' ' || *p == '\t') {
                pending_space = 1;
                continue;
            }
            if (pending_space && started && *d++ != ' ') return 0;
            pending_space = 0;
            started = 1;
            if (*d++ != *p) return 0;
        }
    }
    return *d == '\0';
}

/* Per-example result of the parallel encoding. */
typedef struct {
    uint64_t offset; /* into the chunk scratch */
    int q_len, a_len;
    int unk;         /* <unk> tokens */
    int bad;         /* 0 ok, 1 question, 2 answer: the round trip failed without any <unk> */
} EncodedExample;

int pool_encode(const Pool *pool, const Tokenizer *tok, const char *shard_path, const char *raw_manifest_sha,
                int show_progress, PoolStats *st, char *err, size_t errlen) {
    memset(st, 0, sizeof *st);
    /* Sorted module list of the pool. */
    st->modules = xcalloc((size_t)pool->n_files + 1, sizeof *st->modules);
    for (int i = 0; i < pool->n_files; i++) {
        if (module_index(st->modules, st->n_modules, pool->files[i]->f.module) >= 0) continue;
        st->modules[st->n_modules++] = xstrdup(pool->files[i]->f.module);
        qsort(st->modules, (size_t)st->n_modules, sizeof *st->modules, cmp_str);
    }
    st->module_counts = xcalloc((size_t)st->n_modules + 1, sizeof *st->module_counts);

    uint64_t n = 0;
    PoolRef *refs = pool_order(pool->files, pool->n_files, pool->seed, &n);
    st->n_available = n;
    uint64_t take = pool->limit && pool->limit < n ? pool->limit : n;
    if (pool->limit && n < pool->limit)
        log_info("%s: %llu examples available, fewer than eval_examples %llu: all are used", pool->name,
                 (unsigned long long)n, (unsigned long long)pool->limit);

    ShardExample *ex = xcalloc(take ? take : 1, sizeof *ex);
    uint64_t tok_cap = 1 << 20, n_tok = 0;
    uint16_t *tokens = xmalloc(tok_cap * sizeof *tokens);
    EncodedExample *enc = xmalloc(ENCODE_CHUNK * sizeof *enc);
    int32_t *scratch = NULL;
    uint64_t scratch_cap = 0;
    int rc = 0;
    Progress prog;
    char label[64];
    snprintf(label, sizeof label, "tokenize %s", pool->name);
    if (show_progress) progress_start(&prog, label, (int64_t)take, "ex");

    for (uint64_t c0 = 0; c0 < take && rc == 0; c0 += ENCODE_CHUNK) {
        int m = (int)(take - c0 < ENCODE_CHUNK ? take - c0 : ENCODE_CHUNK);
        /* Each example gets room for one token per character of its normalised text (an upper bound). */
        uint64_t total = 0;
        for (int i = 0; i < m; i++) {
            const PoolRef r = refs[c0 + (uint64_t)i];
            char **lines = pool->files[r.file]->f.lines;
            enc[i].offset = total;
            total += strlen(lines[2 * r.pair]) + strlen(lines[2 * r.pair + 1]) + 16;
        }
        if (total > scratch_cap) {
            scratch_cap = total;
            free(scratch);
            scratch = xmalloc(scratch_cap * sizeof *scratch);
        }
        int64_t unk_total = 0;
#pragma omp parallel for schedule(dynamic, 256) reduction(+ : unk_total)
        for (int i = 0; i < m; i++) {
            const PoolRef r = refs[c0 + (uint64_t)i];
            const char *q = pool->files[r.file]->f.lines[2 * r.pair];
            const char *a = pool->files[r.file]->f.lines[2 * r.pair + 1];
            int32_t *ids = scratch + enc[i].offset;
            /* Normalised " Q: "+q+" A:" has at most strlen(q)+7 characters and " "+a at most strlen(a)+1, and
             * every token covers at least one character, so these capacities always suffice. */
            int cap_q = (int)strlen(q) + 8, cap_a = (int)strlen(a) + 8;
            int nq = tokenizer_encode_question(tok, q, ids, cap_q);
            if (nq > cap_q) nq = cap_q; /* impossible (see above); keeps the writes in bounds regardless */
            int na = tokenizer_encode_answer(tok, a, ids + nq, cap_a);
            if (na > cap_a) na = cap_a;
            enc[i].q_len = nq;
            enc[i].a_len = na;
            int unk = 0;
            for (int j = 0; j < nq + na; j++) unk += ids[j] == 0;
            enc[i].unk = unk;
            enc[i].bad = 0;
            if (unk == 0) {
                char *dq = tokenizer_decode(tok, ids, nq), *da = tokenizer_decode(tok, ids + nq, na);
                if (!matches_collapsed(dq, " Q: ", q, " A:")) enc[i].bad = 1;
                else if (!matches_collapsed(da, " ", a, "")) enc[i].bad = 2;
                free(dq);
                free(da);
            }
            unk_total += unk;
        }
        /* Sequential, in example order: errors (the first one), statistics, copy into the shard arrays. */
        for (int i = 0; i < m; i++) {
            const PoolRef r = refs[c0 + (uint64_t)i];
            const InputFile *f = pool->files[r.file];
            int64_t line = 2 * (int64_t)r.pair + (enc[i].bad == 2 ? 2 : 1);
            if (enc[i].bad) {
                set_err(err, errlen, "%s:%lld: tokenizer round trip failed (decode(encode(line)) differs from the "
                        "line with whitespace collapsed)", f->f.path, (long long)line);
                rc = -1;
                break;
            }
            if (enc[i].unk && st->n_unk_examples++ == 0)
                log_warn("%s:%lld: contains characters outside the tokenizer alphabet (encoded as <unk>)", f->f.path,
                         (long long)(2 * (int64_t)r.pair + 1));
            uint64_t len = (uint64_t)enc[i].q_len + (uint64_t)enc[i].a_len;
            if (n_tok + len > tok_cap) {
                while (n_tok + len > tok_cap) tok_cap *= 2;
                tokens = xrealloc(tokens, tok_cap * sizeof *tokens);
            }
            const int32_t *ids = scratch + enc[i].offset;
            for (uint64_t j = 0; j < len; j++) tokens[n_tok + j] = (uint16_t)ids[j];
            int mod = module_index(st->modules, st->n_modules, f->f.module);
            ex[c0 + (uint64_t)i] = (ShardExample){n_tok, (uint32_t)enc[i].q_len, (uint32_t)enc[i].a_len,
                                                  (uint32_t)mod, 0};
            st->module_counts[mod]++;
            n_tok += len;
            st->q_tokens += (uint64_t)enc[i].q_len;
            st->a_tokens += (uint64_t)enc[i].a_len;
            if (len > st->max_tokens) st->max_tokens = len;
        }
        st->n_unk_tokens += unk_total;
        if (show_progress) progress_update(&prog, (int64_t)(c0 + (uint64_t)m), NULL);
    }
    if (show_progress) progress_finish(&prog);
    st->n_examples = take;
    st->n_tokens = n_tok;

    if (rc == 0) {
        /* Provenance embedded in the shard header. */
        cJSON *src = cJSON_CreateObject();
        CHECK_ALLOC(src);
        cJSON_AddStringToObject(src, "raw_manifest_sha256", raw_manifest_sha);
        cJSON_AddNumberToObject(src, "shuffle_seed", (double)pool->seed);
        cJSON_AddNumberToObject(src, "n_available", (double)n);
        cJSON *files = cJSON_AddArrayToObject(src, "files");
        for (int i = 0; i < pool->n_files; i++) {
            cJSON *o = cJSON_CreateObject();
            CHECK_ALLOC(o);
            cJSON_AddStringToObject(o, "file", pool->files[i]->rel);
            cJSON_AddStringToObject(o, "sha256", pool->files[i]->f.sha256);
            cJSON_AddNumberToObject(o, "pairs", (double)pool->files[i]->f.n_pairs);
            cJSON_AddItemToArray(files, o);
        }
        char *src_json = cJSON_PrintUnformatted(src);
        cJSON_Delete(src);
        CHECK_ALLOC(src_json);
        rc = shard_write(shard_path, pool->name, tokenizer_sha256(tok), st->modules, st->n_modules, ex, take, tokens,
                         n_tok, src_json, err, errlen);
        free(src_json);
    }
    if (rc == 0) {
        struct stat sb;
        rc = sha256_file_hex(shard_path, st->sha256, err, errlen);
        if (rc == 0 && stat(shard_path, &sb) == 0) st->bytes = (uint64_t)sb.st_size;
    }
    free(refs);
    free(ex);
    free(tokens);
    free(enc);
    free(scratch);
    return rc;
}

cJSON *pool_stats_json(const PoolStats *s, const char *file, uint64_t seed) {
    cJSON *o = cJSON_CreateObject();
    CHECK_ALLOC(o);
    cJSON_AddStringToObject(o, "file", file);
    cJSON_AddStringToObject(o, "sha256", s->sha256);
    cJSON_AddNumberToObject(o, "bytes", (double)s->bytes);
    cJSON_AddNumberToObject(o, "shuffle_seed", (double)seed);
    cJSON_AddNumberToObject(o, "n_available", (double)s->n_available);
    cJSON_AddNumberToObject(o, "n_examples", (double)s->n_examples);
    cJSON_AddNumberToObject(o, "n_tokens", (double)s->n_tokens);
    double ne = s->n_examples ? (double)s->n_examples : 1.0;
    cJSON_AddNumberToObject(o, "mean_tokens_per_example", (double)s->n_tokens / ne);
    cJSON_AddNumberToObject(o, "mean_question_tokens", (double)s->q_tokens / ne);
    cJSON_AddNumberToObject(o, "mean_answer_tokens", (double)s->a_tokens / ne);
    cJSON_AddNumberToObject(o, "max_tokens_per_example", (double)s->max_tokens);
    cJSON_AddNumberToObject(o, "n_unk_tokens", (double)s->n_unk_tokens);
    cJSON_AddNumberToObject(o, "n_examples_with_unk", (double)s->n_unk_examples);
    cJSON *mods = cJSON_AddObjectToObject(o, "modules");
    for (int i = 0; i < s->n_modules; i++) cJSON_AddNumberToObject(mods, s->modules[i], (double)s->module_counts[i]);
    return o;
}
