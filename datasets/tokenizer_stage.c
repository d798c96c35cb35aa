/* The tokenize stage (see tokenizer_stage.h): validate the raw files against fetch's manifest, train the BPE
 * tokenizer on the tokenizer corpus, encode the train / interpolate / extrapolate pools into shards.
 *
 * Example order (deterministic): a pool lists its files in a fixed order (train: train-easy, train-medium,
 * train-hard, each sorted by file name; evaluation splits: sorted by file name) and each file's pairs in file order;
 * the pool is then permuted by Fisher-Yates (from the last element down, j uniform in [0, i] by rejection sampling on
 * splitmix64 seeded with the split's seed) and evaluation pools are cut to eval_examples. */
#include "datasets/tokenizer_stage.h"

#include <errno.h>
#include <regex.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "datasets/bpe_train.h"
#include "datasets/data_config.h"
#include "datasets/dm_math_text.h"
#include "datasets/shard.h"
#include "datasets/tokenizer.h"
#include "pipeline/atomic_file.h"
#include "pipeline/config.h"
#include "pipeline/log.h"
#include "pipeline/module_regex.h"
#include "pipeline/progress.h"
#include "pipeline/rng.h"
#include "pipeline/sha256.h"

#ifndef CODE_VERSION
#define CODE_VERSION "unknown"
#endif

#define DATA_ROOT "mathematics_dataset-v1.0"
#define CORPUS_DIR "tokenizer_corpus"
#define RAW_SCHEMA "dm-math-raw"
#define MANIFEST_SCHEMA "dm-math-tokenized"
#define ENCODE_CHUNK 16384

/* ---- configuration ---- */

void tokenize_config_defaults(TokenizeConfig *c) {
    c->vocab_size = 512;
    c->max_piece_length = 16;
    c->tokenizer_pairs_per_file = 10000;
    c->eval_examples = 5000;
    c->eval_shuffle_seed = 123;
    c->train_shuffle_seed = 1;
    snprintf(c->exclude_tokenizer_pattern, sizeof c->exclude_tokenizer_pattern, "%s", "probability__swr_.*");
    c->character_coverage = 0.9995;
}

/* Compiles "^(pattern)$" (full match). */
static int compile_full_match(regex_t *re, const char *pattern, char *err, size_t errlen) {
    return module_regex_compile(re, pattern, "regular expression", err, errlen);
}

int tokenize_config_load(const char *path, TokenizeConfig *c, char *err, size_t errlen) {
    tokenize_config_defaults(c);
    cJSON *root = json_load_file(path, JSON_KIND_CONFIG, err, errlen);
    if (!root) return -1;
    int rc = -1;
    if (!cJSON_IsObject(root)) {
        set_err(err, errlen, "%s: expected a JSON object at the top level", path);
        goto done;
    }
    if (data_config_check_sections(root, path, err, errlen) != 0) goto done;
    const cJSON *sec = cJSON_GetObjectItemCaseSensitive(root, "tokenize");
    if (!sec) {
        set_err(err, errlen, "%s: missing required key tokenize", path);
        goto done;
    }
    JsonReader r;
    json_reader_init(&r, sec, path, "tokenize");
    const char *pattern = NULL;
    json_get_int(&r, "vocab_size", &c->vocab_size, false);
    json_get_int(&r, "max_piece_length", &c->max_piece_length, false);
    json_get_int(&r, "tokenizer_pairs_per_file", &c->tokenizer_pairs_per_file, false);
    json_get_int(&r, "eval_examples", &c->eval_examples, false);
    json_get_int(&r, "eval_shuffle_seed", &c->eval_shuffle_seed, false);
    json_get_int(&r, "train_shuffle_seed", &c->train_shuffle_seed, false);
    json_get_double(&r, "character_coverage", &c->character_coverage, false);
    if (json_get_string(&r, "exclude_tokenizer_pattern", &pattern, false)) {
        if (strlen(pattern) >= sizeof c->exclude_tokenizer_pattern) {
            set_err(err, errlen, "%s: tokenize.exclude_tokenizer_pattern: longer than %zu characters", path,
                    sizeof c->exclude_tokenizer_pattern - 1);
            goto done;
        }
        snprintf(c->exclude_tokenizer_pattern, sizeof c->exclude_tokenizer_pattern, "%s", pattern);
    }
    if (json_reader_finish(&r, err, errlen) != 0) goto done;
    const char *bad = NULL;
    char range[64] = "";
    if (c->vocab_size < 4 || c->vocab_size > 65536) bad = "vocab_size", snprintf(range, sizeof range, "4..65536");
    else if (c->max_piece_length < 1 || c->max_piece_length > 64)
        bad = "max_piece_length", snprintf(range, sizeof range, "1..64");
    else if (c->tokenizer_pairs_per_file < 1) bad = "tokenizer_pairs_per_file", snprintf(range, sizeof range, ">= 1");
    else if (c->eval_examples < 1) bad = "eval_examples", snprintf(range, sizeof range, ">= 1");
    else if (c->eval_shuffle_seed < 0) bad = "eval_shuffle_seed", snprintf(range, sizeof range, ">= 0");
    else if (c->train_shuffle_seed < 0) bad = "train_shuffle_seed", snprintf(range, sizeof range, ">= 0");
    else if (!(c->character_coverage > 0 && c->character_coverage <= 1))
        bad = "character_coverage", snprintf(range, sizeof range, "(0, 1]");
    if (bad) {
        set_err(err, errlen, "%s: tokenize.%s: must be in %s", path, bad, range);
        goto done;
    }
    regex_t re;
    char rerr[400];
    if (compile_full_match(&re, c->exclude_tokenizer_pattern, rerr, sizeof rerr) != 0) {
        set_err(err, errlen, "%s: tokenize.exclude_tokenizer_pattern: %s", path, rerr);
        goto done;
    }
    regfree(&re);
    rc = 0;
done:
    cJSON_Delete(root);
    return rc;
}

/* ---- inputs ---- */

typedef struct {
    DmFile f;
    char rel[600];  /* path relative to the raw directory */
    char split[32]; /* "train-easy", ..., or "tokenizer_corpus" */
} InputFile;

typedef struct {
    InputFile **v;
    int n, cap;
} InputList;

static void list_push(InputList *l, InputFile *f) {
    if (l->n == l->cap) {
        l->cap = l->cap ? l->cap * 2 : 16;
        l->v = xrealloc(l->v, (size_t)l->cap * sizeof *l->v);
    }
    l->v[l->n++] = f;
}

static void list_free(InputList *l) {
    for (int i = 0; i < l->n; i++) {
        dm_file_free(&l->v[i]->f);
        free(l->v[i]);
    }
    free(l->v);
    memset(l, 0, sizeof *l);
}

/* fetch's manifest: the sha256 of every file it wrote, keyed by the path relative to the raw directory. */
typedef struct {
    cJSON *root;
    char sha256[65]; /* of manifest.json itself */
    int n;
    char **rel;
    const char **sha;
    int *used;
    int *is_corpus;  /* entry from "tokenizer_corpus" (else from "files") */
} RawManifest;

static void raw_manifest_free(RawManifest *m) {
    for (int i = 0; i < m->n; i++) free(m->rel[i]);
    free(m->rel);
    free(m->sha);
    free(m->used);
    free(m->is_corpus);
    cJSON_Delete(m->root);
    memset(m, 0, sizeof *m);
}

static int raw_manifest_add(RawManifest *m, const char *path, const cJSON *arr, const char *what, int with_split,
                            char *err, size_t errlen) {
    if (!cJSON_IsArray(arr)) {
        set_err(err, errlen, "%s: \"%s\" must be an array", path, what);
        return -1;
    }
    int n = cJSON_GetArraySize(arr), i = 0;
    m->rel = xrealloc(m->rel, (size_t)(m->n + n) * sizeof *m->rel);
    m->sha = xrealloc(m->sha, (size_t)(m->n + n) * sizeof *m->sha);
    m->used = xrealloc(m->used, (size_t)(m->n + n) * sizeof *m->used);
    m->is_corpus = xrealloc(m->is_corpus, (size_t)(m->n + n) * sizeof *m->is_corpus);
    const cJSON *e;
    cJSON_ArrayForEach(e, arr) {
        const cJSON *split = cJSON_GetObjectItemCaseSensitive(e, "split");
        const cJSON *file = cJSON_GetObjectItemCaseSensitive(e, "file");
        const cJSON *sha = cJSON_GetObjectItemCaseSensitive(e, "sha256");
        if ((with_split && !cJSON_IsString(split)) || !cJSON_IsString(file) || !cJSON_IsString(sha) ||
            strlen(sha->valuestring) != 64) {
            set_err(err, errlen, "%s: %s[%d] needs %s\"file\" and \"sha256\" strings", path, what, i,
                    with_split ? "\"split\", " : "");
            return -1;
        }
        size_t len = strlen(file->valuestring) + 64 + (with_split ? strlen(split->valuestring) : 0);
        char *rel = xmalloc(len);
        if (with_split) snprintf(rel, len, "%s/%s/%s", DATA_ROOT, split->valuestring, file->valuestring);
        else snprintf(rel, len, "%s/%s", CORPUS_DIR, file->valuestring);
        m->rel[m->n] = rel;
        m->sha[m->n] = sha->valuestring;
        m->used[m->n] = 0;
        m->is_corpus[m->n] = !with_split;
        m->n++;
        i++;
    }
    return 0;
}

static int raw_manifest_load(RawManifest *m, const char *raw_dir, char *err, size_t errlen) {
    memset(m, 0, sizeof *m);
    char path[4200];
    snprintf(path, sizeof path, "%s/manifest.json", raw_dir);
    if (!file_exists(path)) {
        set_err(err, errlen, "%s: missing (the raw directory must come from the fetch stage)", path);
        return -1;
    }
    m->root = json_load_file(path, JSON_KIND_MANIFEST, err, errlen);
    if (!m->root) return -1;
    if (sha256_file_hex(path, m->sha256, err, errlen) != 0) return -1;
    const cJSON *schema = cJSON_GetObjectItemCaseSensitive(m->root, "schema");
    const cJSON *ver = cJSON_GetObjectItemCaseSensitive(m->root, "schema_version");
    if (!cJSON_IsString(schema) || strcmp(schema->valuestring, RAW_SCHEMA) != 0 || !cJSON_IsNumber(ver) ||
        ver->valuedouble != 1) {
        set_err(err, errlen, "%s: not a \"%s\" version 1 manifest", path, RAW_SCHEMA);
        return -1;
    }
    if (raw_manifest_add(m, path, cJSON_GetObjectItemCaseSensitive(m->root, "files"), "files", 1, err, errlen) ||
        raw_manifest_add(m, path, cJSON_GetObjectItemCaseSensitive(m->root, "tokenizer_corpus"), "tokenizer_corpus",
                         0, err, errlen))
        return -1;
    return 0;
}

int tokenize_check_fetch_manifest(const char *raw_dir, char *err, size_t errlen) {
    RawManifest m;
    int rc = raw_manifest_load(&m, raw_dir, err, errlen);
    raw_manifest_free(&m);
    return rc;
}

/* The file must be listed in fetch's manifest with the same sha256. */
static int raw_manifest_check(RawManifest *m, const char *raw_dir, const InputFile *f, char *err, size_t errlen) {
    for (int i = 0; i < m->n; i++) {
        if (strcmp(m->rel[i], f->rel) != 0) continue;
        if (strcmp(m->sha[i], f->f.sha256) != 0) {
            set_err(err, errlen, "%s: sha256 %s differs from %s/manifest.json (%s): modified after fetch?", f->f.path,
                    f->f.sha256, raw_dir, m->sha[i]);
            return -1;
        }
        m->used[i] = 1;
        return 0;
    }
    set_err(err, errlen, "%s: not listed in %s/manifest.json", f->f.path, raw_dir);
    return -1;
}

static int is_dir(const char *path) {
    struct stat st;
    return stat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

/* Reads and validates every *.txt of raw/<sub>; a missing directory is an error only when required. */
static int read_dir(const char *raw_dir, const char *sub, const char *split, int required, const regex_t *exclude,
                    RawManifest *m, InputList *out, int *n_excluded, char *err, size_t errlen) {
    char dir[4200];
    snprintf(dir, sizeof dir, "%s/%s", raw_dir, sub);
    if (!is_dir(dir)) {
        if (!required) {
            log_warn("%s: no such split directory; skipped", dir);
            return 0;
        }
        set_err(err, errlen, "%s: missing split directory", dir);
        return -1;
    }
    char **names = NULL;
    int n = dm_list_txt(dir, &names, err, errlen);
    if (n < 0) return -1;
    int kept = 0, rc = 0;
    for (int i = 0; i < n && rc == 0; i++) {
        if (exclude) {
            char stem[512];
            snprintf(stem, sizeof stem, "%.*s", (int)(strlen(names[i]) - 4), names[i]);
            if (regexec(exclude, stem, 0, NULL, 0) == 0) {
                (*n_excluded)++;
                continue;
            }
        }
        InputFile *f = xcalloc(1, sizeof *f);
        char path[4800];
        snprintf(path, sizeof path, "%s/%s", dir, names[i]);
        snprintf(f->rel, sizeof f->rel, "%s/%s", sub, names[i]);
        snprintf(f->split, sizeof f->split, "%s", split);
        if (dm_file_read(&f->f, path, err, errlen) != 0 || raw_manifest_check(m, raw_dir, f, err, errlen) != 0) {
            dm_file_free(&f->f);
            free(f);
            rc = -1;
            break;
        }
        list_push(out, f);
        kept++;
    }
    dm_free_names(names, n);
    if (rc == 0 && kept == 0 && required) {
        set_err(err, errlen, "%s: no usable .txt files", dir);
        rc = -1;
    }
    return rc;
}

/* ---- tokenizer training ---- */

static int train_tokenizer(const InputList *corpus, const TokenizeConfig *cfg, int n_excluded, const char *path,
                           char *err, size_t errlen) {
    BpeTrainConfig tc = {(int)cfg->vocab_size, (int)cfg->max_piece_length, cfg->character_coverage, true};
    BpeTrainer *tr = bpe_trainer_new(&tc);
    cJSON *info = cJSON_CreateObject();
    CHECK_ALLOC(info);
    cJSON_AddStringToObject(info, "sentence_format",
                            "\"Q: {q'} A: {a'} \", q'/a' with spaces around every non-[A-Za-z0-9] character and "
                            "whitespace runs collapsed");
    cJSON_AddNumberToObject(info, "pairs_per_file", (double)cfg->tokenizer_pairs_per_file);
    cJSON_AddStringToObject(info, "exclude_pattern", cfg->exclude_tokenizer_pattern);
    cJSON_AddNumberToObject(info, "n_excluded_files", n_excluded);
    cJSON *files = cJSON_AddArrayToObject(info, "corpus");
    for (int i = 0; i < corpus->n; i++) {
        const InputFile *f = corpus->v[i];
        int64_t use = f->f.n_pairs < cfg->tokenizer_pairs_per_file ? f->f.n_pairs : cfg->tokenizer_pairs_per_file;
        for (int64_t p = 0; p < use; p++) {
            char *s = dm_corpus_sentence(f->f.lines[2 * p], f->f.lines[2 * p + 1]);
            bpe_trainer_add(tr, s);
            free(s);
        }
        cJSON *o = cJSON_CreateObject();
        CHECK_ALLOC(o);
        cJSON_AddStringToObject(o, "file", f->rel);
        cJSON_AddStringToObject(o, "sha256", f->f.sha256);
        cJSON_AddNumberToObject(o, "pairs_used", (double)use);
        cJSON_AddItemToArray(files, o);
    }
    BpeVocab v;
    int rc = bpe_trainer_train(tr, &v, err, errlen);
    bpe_trainer_free(tr);
    if (rc != 0) {
        cJSON_Delete(info);
        return -1;
    }
    if (v.n_dropped > 0)
        log_info("tokenizer: %d rare character(s) left out by character_coverage %g (they encode as <unk>)",
                 v.n_dropped, cfg->character_coverage);
    cJSON *json = bpe_vocab_to_json(&v, info);
    log_info("tokenizer: %d pieces = 3 reserved + %d merges + %d characters, from %lld sentences", v.n_pieces,
             v.n_merges, v.n_chars, (long long)v.n_sentences);
    bpe_vocab_free(&v);
    rc = json_save_file(path, json, err, errlen);
    cJSON_Delete(json);
    return rc;
}

/* ---- shuffling ---- */

typedef struct {
    uint32_t file; /* index into the pool's file list */
    uint32_t pair;
} Ref;

static void shuffle_refs(Ref *v, uint64_t n, uint64_t seed) {
    uint64_t state = seed;
    for (uint64_t i = n; i > 1; i--) {
        uint64_t j = splitmix64_below(&state, i);
        Ref tmp = v[i - 1];
        v[i - 1] = v[j];
        v[j] = tmp;
    }
}

/* ---- encoding one pool into a shard ---- */

typedef struct {
    const char *name;       /* "train", "interpolate", "extrapolate" */
    InputFile **files;
    int n_files;
    uint64_t seed;
    uint64_t limit;         /* 0 = all */
} Pool;

typedef struct {
    uint64_t n_available, n_examples, n_tokens, q_tokens, a_tokens, max_tokens;
    int64_t n_unk_tokens, n_unk_examples;
    char **modules;
    int n_modules;
    uint64_t *module_counts;
    char sha256[65];
    uint64_t bytes;
} PoolStats;

static void pool_stats_free(PoolStats *s) {
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

static int encode_pool(const Pool *pool, const Tokenizer *tok, const char *shard_path, const char *raw_manifest_sha,
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
    for (int i = 0; i < pool->n_files; i++) n += (uint64_t)pool->files[i]->f.n_pairs;
    Ref *refs = xmalloc((n ? n : 1) * sizeof *refs);
    uint64_t k = 0;
    for (int i = 0; i < pool->n_files; i++)
        for (int64_t p = 0; p < pool->files[i]->f.n_pairs; p++) refs[k++] = (Ref){(uint32_t)i, (uint32_t)p};
    shuffle_refs(refs, n, pool->seed);
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
            const Ref r = refs[c0 + (uint64_t)i];
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
            const Ref r = refs[c0 + (uint64_t)i];
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
            const Ref r = refs[c0 + (uint64_t)i];
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

/* ---- manifest ---- */

static cJSON *pool_json(const PoolStats *s, const char *file, uint64_t seed) {
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

/* ---- the stage ---- */

static const char *const OUTPUT_FILES[] = {"tokenizer.json", "train.shard", "interpolate.shard", "extrapolate.shard"};
#define N_OUTPUT_FILES 4
#define MANIFEST_FILE "tokenize_manifest.json"

/* The staging directory of a run is OUT/.tokenize.tmp.<pid>. */
#define STAGE_PREFIX ".tokenize.tmp."

/* Moves the finished outputs from the staging directory into out_dir: the old manifest goes first (so a crash in
 * between never leaves a manifest that describes other files), the new manifest last. */
static int commit_outputs(const char *stage_dir, const char *out_dir, char *err, size_t errlen) {
    char from[4300], to[4300];
    snprintf(to, sizeof to, "%s/%s", out_dir, MANIFEST_FILE);
    if (unlink(to) != 0 && errno != ENOENT) {
        set_err(err, errlen, "%s: cannot remove the old manifest: %s", to, strerror(errno));
        return -1;
    }
    for (int i = 0; i <= N_OUTPUT_FILES; i++) {
        const char *name = i < N_OUTPUT_FILES ? OUTPUT_FILES[i] : MANIFEST_FILE;
        snprintf(from, sizeof from, "%s/%s", stage_dir, name);
        snprintf(to, sizeof to, "%s/%s", out_dir, name);
        if (rename(from, to) != 0) {
            set_err(err, errlen, "cannot rename %s to %s: %s", from, to, strerror(errno));
            return -1;
        }
    }
    fsync_dir_of(to);
    return 0;
}

int tokenize_run(const TokenizeJob *job, const TokenizeConfig *cfg, char *err, size_t errlen) {
    static const char *const DATA_SPLITS[] = {"train-easy", "train-medium", "train-hard", "interpolate",
                                              "extrapolate"};
    static const int REQUIRED[] = {1, 0, 0, 1, 1};
    RawManifest rm, rm_tok_own;
    memset(&rm_tok_own, 0, sizeof rm_tok_own);
    const char *tok_raw = job->tokenizer_raw_dir ? job->tokenizer_raw_dir : job->raw_dir;
    RawManifest *rm_tok = &rm; /* the manifest of the directory the tokenizer corpus comes from */
    InputList data = {0}, corpus = {0};
    Tokenizer *tok = NULL;
    PoolStats stats[3];
    memset(stats, 0, sizeof stats);
    cJSON *manifest = NULL;
    regex_t exclude;
    int have_regex = 0, rc = -1, n_excluded = 0;
    char stage_dir[4200] = "", path[4400];
    int split_start[6] = {0};

    if (raw_manifest_load(&rm, job->raw_dir, err, errlen) != 0) goto done;
    if (strcmp(tok_raw, job->raw_dir) != 0) {
        rm_tok = &rm_tok_own;
        if (raw_manifest_load(rm_tok, tok_raw, err, errlen) != 0) goto done;
    }
    {
        char rerr[400];
        if (compile_full_match(&exclude, cfg->exclude_tokenizer_pattern, rerr, sizeof rerr) != 0) {
            set_err(err, errlen, "exclude_tokenizer_pattern: %s", rerr);
            goto done;
        }
        have_regex = 1;
    }
    /* 1. Read and validate every input before anything is written. */
    for (int s = 0; s < 5; s++) {
        char sub[128];
        snprintf(sub, sizeof sub, "%s/%s", DATA_ROOT, DATA_SPLITS[s]);
        split_start[s] = data.n;
        if (read_dir(job->raw_dir, sub, DATA_SPLITS[s], REQUIRED[s], NULL, &rm, &data, &n_excluded, err, errlen))
            goto done;
    }
    split_start[5] = data.n;
    if (read_dir(tok_raw, CORPUS_DIR, CORPUS_DIR, 1, &exclude, rm_tok, &corpus, &n_excluded, err, errlen))
        goto done;
    /* Every file the manifests list (that this run draws from) must exist; corpus files excluded by the pattern are
     * not read ("used"), but they must exist too. */
    for (int k = 0; k < (rm_tok == &rm ? 1 : 2); k++) {
        const RawManifest *m = k == 0 ? &rm : rm_tok;
        const char *dir = k == 0 ? job->raw_dir : tok_raw;
        for (int i = 0; i < m->n; i++) {
            if (m->used[i] || (m != rm_tok && m->is_corpus[i]) || (k == 1 && !m->is_corpus[i])) continue;
            snprintf(path, sizeof path, "%s/%s", dir, m->rel[i]);
            if (!file_exists(path)) {
                set_err(err, errlen, "%s: listed in %s/manifest.json but missing", path, dir);
                goto done;
            }
        }
    }
    log_info("read %d data files and %d tokenizer-corpus files (%d excluded by \"%s\")", data.n, corpus.n, n_excluded,
             cfg->exclude_tokenizer_pattern);

    /* 2. Staging directory for all outputs. */
    if (mkdir_p(job->out_dir, err, errlen) != 0) goto done;
    /* Staging directories of killed runs (a signal ends tokenize without cleanup; with the full dataset they hold
     * gigabytes of shards) go first. */
    int n_stale = remove_stale_temps(job->out_dir, STAGE_PREFIX);
    if (n_stale > 0) log_info("removed %d stale staging director%s %s/%s<pid>", n_stale, n_stale == 1 ? "y" : "ies",
                              job->out_dir, STAGE_PREFIX);
    snprintf(stage_dir, sizeof stage_dir, "%s/" STAGE_PREFIX "%ld", job->out_dir, (long)getpid());
    remove_tree(stage_dir);
    if (mkdir_p(stage_dir, err, errlen) != 0) {
        stage_dir[0] = '\0';
        goto done;
    }

    /* 3. Tokenizer. */
    snprintf(path, sizeof path, "%s/tokenizer.json", stage_dir);
    if (train_tokenizer(&corpus, cfg, n_excluded, path, err, errlen) != 0) goto done;
    tok = tokenizer_load(path, err, errlen);
    if (!tok) goto done;

    /* 4. Shards. */
    Pool pools[3] = {
        {"train", data.v + split_start[0], split_start[3] - split_start[0], (uint64_t)cfg->train_shuffle_seed, 0},
        {"interpolate", data.v + split_start[3], split_start[4] - split_start[3], (uint64_t)cfg->eval_shuffle_seed,
         (uint64_t)cfg->eval_examples},
        {"extrapolate", data.v + split_start[4], split_start[5] - split_start[4], (uint64_t)cfg->eval_shuffle_seed,
         (uint64_t)cfg->eval_examples},
    };
    for (int p = 0; p < 3; p++) {
        snprintf(path, sizeof path, "%s/%s", stage_dir, OUTPUT_FILES[1 + p]);
        if (encode_pool(&pools[p], tok, path, rm.sha256, job->show_progress, &stats[p], err, errlen) != 0) goto done;
        log_info("%s: %llu examples, %llu tokens, %.2f tokens/example", pools[p].name,
                 (unsigned long long)stats[p].n_examples, (unsigned long long)stats[p].n_tokens,
                 stats[p].n_examples ? (double)stats[p].n_tokens / (double)stats[p].n_examples : 0.0);
    }

    /* 5. Manifest. */
    manifest = cJSON_CreateObject();
    CHECK_ALLOC(manifest);
    cJSON_AddStringToObject(manifest, "schema", MANIFEST_SCHEMA);
    cJSON_AddNumberToObject(manifest, "schema_version", 1);
    cJSON_AddStringToObject(manifest, "code_version", CODE_VERSION);
    cJSON *c = cJSON_AddObjectToObject(manifest, "config");
    cJSON_AddNumberToObject(c, "vocab_size", (double)cfg->vocab_size);
    cJSON_AddNumberToObject(c, "max_piece_length", (double)cfg->max_piece_length);
    cJSON_AddNumberToObject(c, "tokenizer_pairs_per_file", (double)cfg->tokenizer_pairs_per_file);
    cJSON_AddNumberToObject(c, "eval_examples", (double)cfg->eval_examples);
    cJSON_AddNumberToObject(c, "eval_shuffle_seed", (double)cfg->eval_shuffle_seed);
    cJSON_AddNumberToObject(c, "train_shuffle_seed", (double)cfg->train_shuffle_seed);
    cJSON_AddStringToObject(c, "exclude_tokenizer_pattern", cfg->exclude_tokenizer_pattern);
    cJSON_AddNumberToObject(c, "character_coverage", cfg->character_coverage);
    if (job->config_path) {
        char sha[65];
        if (sha256_file_hex(job->config_path, sha, err, errlen) != 0) goto done;
        cJSON_AddStringToObject(manifest, "config_sha256", sha);
    }
    cJSON *raw = cJSON_AddObjectToObject(manifest, "raw");
    cJSON_AddStringToObject(raw, "manifest_sha256", rm.sha256);
    const char *copy_keys[] = {"source", "archive_sha256", "filter"};
    for (int i = 0; i < 3; i++) {
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(rm.root, copy_keys[i]);
        if (cJSON_IsString(v)) cJSON_AddStringToObject(raw, copy_keys[i], v->valuestring);
    }
    if (rm_tok != &rm) {
        cJSON *tr = cJSON_AddObjectToObject(manifest, "tokenizer_raw");
        cJSON_AddStringToObject(tr, "manifest_sha256", rm_tok->sha256);
        for (int i = 0; i < 3; i++) {
            const cJSON *v = cJSON_GetObjectItemCaseSensitive(rm_tok->root, copy_keys[i]);
            if (cJSON_IsString(v)) cJSON_AddStringToObject(tr, copy_keys[i], v->valuestring);
        }
    }
    cJSON *inputs = cJSON_AddArrayToObject(manifest, "inputs");
    InputList *lists[2] = {&data, &corpus};
    for (int l = 0; l < 2; l++) {
        for (int i = 0; i < lists[l]->n; i++) {
            const InputFile *f = lists[l]->v[i];
            cJSON *o = cJSON_CreateObject();
            CHECK_ALLOC(o);
            cJSON_AddStringToObject(o, "file", f->rel);
            cJSON_AddStringToObject(o, "sha256", f->f.sha256);
            cJSON_AddNumberToObject(o, "pairs", (double)f->f.n_pairs);
            cJSON_AddStringToObject(o, "raw", l == 1 && rm_tok != &rm ? "tokenizer_raw" : "raw");
            cJSON_AddItemToArray(inputs, o);
        }
    }
    cJSON *tj = cJSON_AddObjectToObject(manifest, "tokenizer");
    cJSON_AddStringToObject(tj, "file", "tokenizer.json");
    cJSON_AddStringToObject(tj, "sha256", tokenizer_sha256(tok));
    cJSON_AddNumberToObject(tj, "vocab_size", tokenizer_vocab_size(tok));
    cJSON_AddNumberToObject(tj, "corpus_files", corpus.n);
    cJSON_AddNumberToObject(tj, "excluded_corpus_files", n_excluded);
    cJSON *splits = cJSON_AddObjectToObject(manifest, "splits");
    cJSON *outputs = cJSON_AddObjectToObject(manifest, "outputs");
    cJSON_AddStringToObject(outputs, "tokenizer.json", tokenizer_sha256(tok));
    for (int p = 0; p < 3; p++) {
        cJSON_AddItemToObject(splits, pools[p].name, pool_json(&stats[p], OUTPUT_FILES[1 + p], pools[p].seed));
        cJSON_AddStringToObject(outputs, OUTPUT_FILES[1 + p], stats[p].sha256);
    }
    snprintf(path, sizeof path, "%s/%s", stage_dir, MANIFEST_FILE);
    if (json_save_file(path, manifest, err, errlen) != 0) goto done;

    /* 6. Into place. */
    if (commit_outputs(stage_dir, job->out_dir, err, errlen) != 0) goto done;
    rc = 0;
done:
    if (stage_dir[0]) remove_tree(stage_dir);
    cJSON_Delete(manifest);
    for (int p = 0; p < 3; p++) pool_stats_free(&stats[p]);
    tokenizer_free(tok);
    if (have_regex) regfree(&exclude);
    list_free(&data);
    list_free(&corpus);
    raw_manifest_free(&rm);
    raw_manifest_free(&rm_tok_own);
    return rc;
}
