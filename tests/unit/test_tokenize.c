/* The tokenize stage (tokenize_run) on raw directories built by hand from the embedded sample in fetch's layout:
 * contents of the shards, determinism, strict config, and bad inputs that must fail with file:line and write nothing. */
#include <check.h>
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "datasets/dm_math_text.h"
#include "datasets/pool_order.h"
#include "datasets/shard.h"
#include "datasets/tokenizer.h"
#include "datasets/tokenizer_stage.h"
#include "pipeline/base/atomic_file.h"
#include "pipeline/base/config.h"
#include "pipeline/base/rng.h"
#include "pipeline/base/sha256.h"
#include "tests/unit/suite_runner.h"

#define SAMPLE "datasets/dm_math_sample.tar.gz"
static const char *SPLITS[] = {"train-easy", "train-medium", "train-hard", "interpolate", "extrapolate"};
static const char *OUTPUTS[] = {"tokenizer.json", "train.shard", "interpolate.shard", "extrapolate.shard",
                                "tokenize_manifest.json"};

static char g_dir[256];    /* per test process */
static char g_sample[512]; /* extracted sample: <g_dir>/sample/mathematics_dataset-v1.0 */

static void fixture_setup(void) {
    snprintf(g_dir, sizeof g_dir, "/tmp/test_tokenize.%ld", (long)getpid());
    char err[256], cmd[1024];
    ck_assert_int_eq(mkdir_p(g_dir, err, sizeof err), 0);
    snprintf(cmd, sizeof cmd, "mkdir -p %s/sample && tar xzf %s -C %s/sample", g_dir, SAMPLE, g_dir);
    ck_assert_msg(system(cmd) == 0, "cannot extract %s", SAMPLE);
    snprintf(g_sample, sizeof g_sample, "%s/sample/mathematics_dataset-v1.0", g_dir);
}
static void fixture_teardown(void) { remove_tree(g_dir); }

/* Plain write (no fsync: the test builds many small trees and durability does not matter here). */
static void write_plain(const char *path, const char *data, size_t n) {
    FILE *f = fopen(path, "wb");
    ck_assert_msg(f != NULL, "cannot write %s", path);
    ck_assert_uint_eq(fwrite(data, 1, n, f), n);
    ck_assert_int_eq(fclose(f), 0);
}

static void copy_file(const char *src, const char *dst) {
    char *buf = NULL, err[512];
    size_t n = 0;
    ck_assert_msg(read_file_all(src, &buf, &n, err, sizeof err) == 0, "%s", err);
    write_plain(dst, buf, n);
    free(buf);
}

static cJSON *manifest_entry(const char *split, const char *file, const char *path) {
    char sha[65], err[512];
    ck_assert_msg(sha256_file_hex(path, sha, err, sizeof err) == 0, "%s", err);
    cJSON *o = cJSON_CreateObject();
    if (split) cJSON_AddStringToObject(o, "split", split);
    cJSON_AddStringToObject(o, "file", file);
    cJSON_AddStringToObject(o, "sha256", sha);
    return o;
}

/* Writes raw/manifest.json (fetch's format, "dm-math-raw") for whatever the raw directory holds now. */
static void write_manifest(const char *raw) {
    cJSON *root = cJSON_CreateObject();
    cJSON_AddStringToObject(root, "schema", "dm-math-raw");
    cJSON_AddNumberToObject(root, "schema_version", 1);
    cJSON_AddStringToObject(root, "source", "test");
    cJSON *files = cJSON_AddArrayToObject(root, "files");
    cJSON *corpus = cJSON_AddArrayToObject(root, "tokenizer_corpus");
    char dir[1024], path[2048], err[512];
    for (int s = 0; s < 6; s++) {
        if (s < 5) snprintf(dir, sizeof dir, "%s/mathematics_dataset-v1.0/%s", raw, SPLITS[s]);
        else snprintf(dir, sizeof dir, "%s/tokenizer_corpus", raw);
        char **names = NULL;
        int n = dm_list_txt(dir, &names, err, sizeof err);
        for (int i = 0; i < n; i++) {
            snprintf(path, sizeof path, "%s/%s", dir, names[i]);
            cJSON_AddItemToArray(s < 5 ? files : corpus, manifest_entry(s < 5 ? SPLITS[s] : NULL, names[i], path));
        }
        if (n > 0) dm_free_names(names, n);
    }
    snprintf(path, sizeof path, "%s/manifest.json", raw);
    ck_assert_int_eq(json_save_file(path, root, err, sizeof err), 0);
    cJSON_Delete(root);
}

/* Builds <g_dir>/<name>: the sample's arithmetic files of every split plus a tokenizer corpus made of every train-easy
 * file (the sample has 500 pairs per file, fewer than the 10,000 the stage uses), and the manifest. */
static const char *build_raw(const char *name) {
    static char raw[512];
    snprintf(raw, sizeof raw, "%s/%s", g_dir, name);
    remove_tree(raw);
    char dir[1024], src[2048], dst[2048], err[512];
    for (int s = 0; s < 6; s++) {
        const char *split = s < 5 ? SPLITS[s] : "train-easy";
        snprintf(dir, sizeof dir, "%s/%s", g_sample, split);
        char **names = NULL;
        int n = dm_list_txt(dir, &names, err, sizeof err);
        ck_assert_int_gt(n, 0);
        char out_dir[1024];
        if (s < 5) snprintf(out_dir, sizeof out_dir, "%s/mathematics_dataset-v1.0/%s", raw, split);
        else snprintf(out_dir, sizeof out_dir, "%s/tokenizer_corpus", raw);
        ck_assert_int_eq(mkdir_p(out_dir, err, sizeof err), 0);
        for (int i = 0; i < n; i++) {
            if (s < 5 && strncmp(names[i], "arithmetic__", 12) != 0) continue;
            snprintf(src, sizeof src, "%s/%s", dir, names[i]);
            snprintf(dst, sizeof dst, "%s/%s", out_dir, names[i]);
            copy_file(src, dst);
        }
        dm_free_names(names, n);
    }
    write_manifest(raw);
    return raw;
}

static const char *out_dir(const char *name) {
    static char out[512];
    snprintf(out, sizeof out, "%s/%s", g_dir, name);
    return out;
}

static TokenizeConfig test_config(void) {
    TokenizeConfig c;
    tokenize_config_defaults(&c);
    c.eval_examples = 1000; /* the sample has 1800 interpolate and 1200 extrapolate pairs: both get cut */
    return c;
}

static int run(const char *raw, const char *out, const TokenizeConfig *cfg, char *err, size_t errlen) {
    TokenizeJob job = {.raw_dir = raw, .out_dir = out};
    return tokenize_run(&job, cfg, err, errlen);
}

/* Number of entries in dir (0 if it does not exist). */
static int count_entries(const char *dir) {
    DIR *d = opendir(dir);
    if (!d) return 0;
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL)
        if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..")) n++;
    closedir(d);
    return n;
}

static char *slurp(const char *path, size_t *n) {
    char *buf = NULL, err[512];
    ck_assert_msg(read_file_all(path, &buf, n, err, sizeof err) == 0, "%s", err);
    return buf;
}

static int files_equal(const char *a, const char *b) {
    size_t na, nb;
    char *x = slurp(a, &na), *y = slurp(b, &nb);
    int eq = na == nb && memcmp(x, y, na) == 0;
    free(x);
    free(y);
    return eq;
}

/* ---- contents ---- */

static int cmp_str(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

/* "Q: <q collapsed> A:|<a collapsed>" for every pair of the given splits' arithmetic files in the sample. */
static char **expected_examples(const char *const *splits, int n_splits, int *count) {
    int cap = 1024, n = 0;
    char **v = malloc((size_t)cap * sizeof *v), err[512];
    for (int s = 0; s < n_splits; s++) {
        char dir[1024];
        snprintf(dir, sizeof dir, "%s/%s", g_sample, splits[s]);
        char **names = NULL;
        int nn = dm_list_txt(dir, &names, err, sizeof err);
        for (int i = 0; i < nn; i++) {
            if (strncmp(names[i], "arithmetic__", 12) != 0) continue;
            char path[2048];
            snprintf(path, sizeof path, "%s/%s", dir, names[i]);
            DmFile f;
            ck_assert_int_eq(dm_file_read(&f, path, err, sizeof err), 0);
            for (int64_t p = 0; p < f.n_pairs; p++) {
                /* The sample's arithmetic lines have no double spaces, so "collapsed" is the line itself. */
                size_t len = strlen(f.lines[2 * p]) + strlen(f.lines[2 * p + 1]) + 16;
                char *e = malloc(len);
                snprintf(e, len, "Q: %s A:|%s", f.lines[2 * p], f.lines[2 * p + 1]);
                if (n == cap) v = realloc(v, (size_t)(cap *= 2) * sizeof *v);
                v[n++] = e;
            }
            dm_file_free(&f);
        }
        dm_free_names(names, nn);
    }
    qsort(v, (size_t)n, sizeof *v, cmp_str);
    *count = n;
    return v;
}

/* Decodes every example of the shard as "question|answer", sorted. */
static char **decoded_examples(const Shard *s, const Tokenizer *t) {
    char **v = malloc((s->n_examples + 1) * sizeof *v);
    for (uint64_t i = 0; i < s->n_examples; i++) {
        const ShardExample *e = &s->examples[i];
        int32_t ids[2048];
        ck_assert_uint_le((uint64_t)e->q_len + e->a_len, 2048);
        for (uint32_t k = 0; k < e->q_len + e->a_len; k++) ids[k] = s->tokens[e->q_start + k];
        char *q = tokenizer_decode(t, ids, (int)e->q_len), *a = tokenizer_decode(t, ids + e->q_len, (int)e->a_len);
        size_t len = strlen(q) + strlen(a) + 2;
        v[i] = malloc(len);
        snprintf(v[i], len, "%s|%s", q, a);
        free(q);
        free(a);
    }
    qsort(v, s->n_examples, sizeof *v, cmp_str);
    return v;
}

/* Is the sorted list sub a sub-multiset of the sorted list all? */
static int sub_multiset(char **sub, int n_sub, char **all, int n_all) {
    int j = 0;
    for (int i = 0; i < n_sub; i++) {
        while (j < n_all && strcmp(all[j], sub[i]) < 0) j++;
        if (j == n_all || strcmp(all[j], sub[i]) != 0) return 0;
        j++;
    }
    return 1;
}

static void free_list(char **v, int n) {
    for (int i = 0; i < n; i++) free(v[i]);
    free(v);
}

START_TEST(outputs_hold_every_example_shuffled) {
    const char *raw = build_raw("raw_ok");
    const char *out = out_dir("out_ok");
    TokenizeConfig cfg = test_config();
    char err[1024], path[1024];
    ck_assert_msg(run(raw, out, &cfg, err, sizeof err) == 0, "%s", err);
    ck_assert_int_eq(count_entries(out), 5); /* the five outputs, no staging directory left */
    snprintf(path, sizeof path, "%s/tokenizer.json", out);
    Tokenizer *t = tokenizer_load(path, err, sizeof err);
    ck_assert_msg(t != NULL, "%s", err);
    ck_assert_int_eq(tokenizer_vocab_size(t), 512);

    const char *shards[] = {"train", "interpolate", "extrapolate"};
    const uint64_t expect_n[] = {27 * 500, 1000, 1000};
    const int expect_modules[] = {9, 9, 6};
    const char *pool_splits[3][3] = {{"train-easy", "train-medium", "train-hard"}, {"interpolate"}, {"extrapolate"}};
    const int n_pool_splits[] = {3, 1, 1};
    for (int k = 0; k < 3; k++) {
        Shard s;
        snprintf(path, sizeof path, "%s/%s.shard", out, shards[k]);
        ck_assert_msg(shard_read(&s, path, err, sizeof err) == 0, "%s", err);
        ck_assert_str_eq(s.split, shards[k]);
        ck_assert_str_eq(s.tokenizer_sha256, tokenizer_sha256(t));
        ck_assert_uint_eq(s.n_examples, expect_n[k]);
        ck_assert_int_eq(s.n_modules, expect_modules[k]);
        for (int m = 1; m < s.n_modules; m++) ck_assert_int_lt(strcmp(s.modules[m - 1], s.modules[m]), 0);
        /* Every example starts its answer with a ▁-piece; no reserved id 1/2 is ever emitted. */
        uint64_t per_module[16] = {0};
        for (uint64_t i = 0; i < s.n_examples; i++) {
            const ShardExample *e = &s.examples[i];
            ck_assert(e->q_len > 0 && e->a_len > 0);
            ck_assert(strncmp(tokenizer_piece(t, s.tokens[e->q_start + e->q_len]), "\xe2\x96\x81", 3) == 0);
            per_module[e->module]++;
        }
        for (uint64_t i = 0; i < s.n_tokens; i++) ck_assert(s.tokens[i] >= 3 && s.tokens[i] < 512);
        /* Shuffled: the first 200 examples come from more than one module. */
        int first_module = (int)s.examples[0].module, mixed = 0;
        for (uint64_t i = 1; i < 200 && i < s.n_examples; i++) mixed |= (int)s.examples[i].module != first_module;
        ck_assert(mixed);
        if (k == 0)
            for (int m = 0; m < 9; m++) ck_assert_uint_eq(per_module[m], 1500); /* 3 difficulties x 500 */
        /* The decoded examples are exactly the pool (train) or a sub-multiset of it (evaluation cut). */
        int n_exp = 0;
        char **exp = expected_examples(pool_splits[k], n_pool_splits[k], &n_exp);
        char **got = decoded_examples(&s, t);
        if (k == 0) ck_assert_int_eq(n_exp, (int)s.n_examples);
        ck_assert_msg(sub_multiset(got, (int)s.n_examples, exp, n_exp), "%s: decoded examples not from the pool",
                      shards[k]);
        free_list(exp, n_exp);
        free_list(got, (int)s.n_examples);
        shard_free(&s);
    }
    /* The manifest records the outputs' sha256 and the tokenizer corpus (54 of 56 files, probability__swr_* out). */
    snprintf(path, sizeof path, "%s/tokenize_manifest.json", out);
    cJSON *m = json_load_file(path, JSON_KIND_MANIFEST, err, sizeof err);
    ck_assert_msg(m != NULL, "%s", err);
    const cJSON *outputs = cJSON_GetObjectItem(m, "outputs");
    for (int i = 0; i < 4; i++) {
        char sha[65], p2[1024];
        snprintf(p2, sizeof p2, "%s/%s", out, OUTPUTS[i]);
        ck_assert_int_eq(sha256_file_hex(p2, sha, err, sizeof err), 0);
        ck_assert_str_eq(cJSON_GetObjectItem(outputs, OUTPUTS[i])->valuestring, sha);
    }
    const cJSON *tok = cJSON_GetObjectItem(m, "tokenizer");
    ck_assert_int_eq(cJSON_GetObjectItem(tok, "corpus_files")->valueint, 54);
    ck_assert_int_eq(cJSON_GetObjectItem(tok, "excluded_corpus_files")->valueint, 2);
    const cJSON *train = cJSON_GetObjectItem(cJSON_GetObjectItem(m, "splits"), "train");
    double mean = cJSON_GetObjectItem(train, "mean_tokens_per_example")->valuedouble;
    ck_assert_msg(mean > 25 && mean < 50, "mean tokens/example %g (reference: about 36)", mean);
    ck_assert_int_eq(cJSON_GetObjectItem(train, "n_unk_tokens")->valueint, 0);
    cJSON_Delete(m);
    tokenizer_free(t);
}
END_TEST

START_TEST(same_inputs_same_bytes) {
    const char *raw = build_raw("raw_det");
    TokenizeConfig cfg = test_config();
    char err[1024], a[1024], b[1024], c[1024];
    char out1[512], out2[512], out3[512];
    snprintf(out1, sizeof out1, "%s", out_dir("det1"));
    snprintf(out2, sizeof out2, "%s", out_dir("det2"));
    snprintf(out3, sizeof out3, "%s", out_dir("det3"));
    ck_assert_msg(run(raw, out1, &cfg, err, sizeof err) == 0, "%s", err);
    ck_assert_msg(run(raw, out2, &cfg, err, sizeof err) == 0, "%s", err);
    cfg.train_shuffle_seed = 7;
    ck_assert_msg(run(raw, out3, &cfg, err, sizeof err) == 0, "%s", err);
    for (int i = 0; i < 5; i++) {
        snprintf(a, sizeof a, "%s/%s", out1, OUTPUTS[i]);
        snprintf(b, sizeof b, "%s/%s", out2, OUTPUTS[i]);
        snprintf(c, sizeof c, "%s/%s", out3, OUTPUTS[i]);
        ck_assert_msg(files_equal(a, b), "%s differs between two identical runs", OUTPUTS[i]);
        /* Another train seed changes the train shard (and the manifest) only. */
        if (i == 1 || i == 4) ck_assert_msg(!files_equal(a, c), "%s ignores train_shuffle_seed", OUTPUTS[i]);
        else ck_assert_msg(files_equal(a, c), "%s depends on train_shuffle_seed", OUTPUTS[i]);
    }
}
END_TEST

/* ---- bad inputs: one error naming the file (and line), nothing written ---- */

typedef void (*Corrupt)(const char *raw);

static void set_line(const char *path, int line, const char *text) {
    size_t n;
    char *buf = slurp(path, &n);
    char *out = malloc(n + strlen(text) + 2);
    size_t o = 0;
    int cur = 1;
    for (size_t i = 0; i < n; i++) {
        if (cur == line) {
            o += (size_t)sprintf(out + o, "%s\n", text);
            while (i < n && buf[i] != '\n') i++;
            cur++;
            continue;
        }
        out[o++] = buf[i];
        if (buf[i] == '\n') cur++;
    }
    write_plain(path, out, o);
    free(out);
    free(buf);
}

static char g_target[1024]; /* the file a corruption touched */

static void target(const char *raw, const char *rel) { snprintf(g_target, sizeof g_target, "%s/%s", raw, rel); }

static void odd_lines(const char *raw) {
    target(raw, "mathematics_dataset-v1.0/train-easy/arithmetic__add_or_sub.txt");
    FILE *f = fopen(g_target, "ab");
    fputs("What is 1 + 1?\n", f);
    fclose(f);
}
static void empty_file(const char *raw) {
    target(raw, "mathematics_dataset-v1.0/interpolate/arithmetic__div.txt");
    char err[256];
    ck_assert_int_eq(write_file_atomic(g_target, "", 0, err, sizeof err), 0);
}
static void long_line(const char *raw) {
    target(raw, "mathematics_dataset-v1.0/train-hard/arithmetic__mul.txt");
    char big[1100];
    memset(big, 'x', 1099);
    big[1099] = '\0';
    set_line(g_target, 3, big);
}
static void non_ascii(const char *raw) {
    target(raw, "mathematics_dataset-v1.0/extrapolate/arithmetic__mul_big.txt");
    set_line(g_target, 5, "What is 2 \xc3\xa9 3?");
}
static void carriage_return(const char *raw) {
    target(raw, "mathematics_dataset-v1.0/train-medium/arithmetic__mixed.txt");
    set_line(g_target, 2, "12\r");
}
static void empty_answer(const char *raw) {
    target(raw, "mathematics_dataset-v1.0/train-easy/arithmetic__div.txt");
    set_line(g_target, 4, "  ");
}
static void corpus_odd_lines(const char *raw) {
    target(raw, "tokenizer_corpus/algebra__linear_1d.txt");
    FILE *f = fopen(g_target, "ab");
    fputs("Solve x = 1.\n", f);
    fclose(f);
}

typedef struct {
    const char *name;
    Corrupt corrupt;
    const char *where;   /* ":LINE:" that must follow the file name */
    const char *problem; /* substring of the message */
} BadCase;

static const BadCase LINE_CASES[] = {
    {"odd_lines", odd_lines, ":1001:", "odd number of lines"},
    {"empty_file", empty_file, ":1:", "empty file"},
    {"long_line", long_line, ":3:", "over the limit of 1024"},
    {"non_ascii", non_ascii, ":5:", "non-ASCII byte 0xC3"},
    {"carriage_return", carriage_return, ":2:", "control character 0x0D"},
    {"empty_answer", empty_answer, ":4:", "empty answer line"},
    {"corpus_odd_lines", corpus_odd_lines, ":1001:", "odd number of lines"},
};

/* Runs the stage into a fresh directory and into one holding a previous run's outputs: both must fail with the message
 * and leave the directory as it was. */
static void expect_failure(const char *raw, const char *needle1, const char *needle2) {
    TokenizeConfig cfg = test_config();
    char err[1024];
    const char *fresh = out_dir("out_fresh");
    remove_tree(fresh);
    ck_assert_int_eq(run(raw, fresh, &cfg, err, sizeof err), -1);
    ck_assert_msg(strstr(err, needle1) && (!needle2 || strstr(err, needle2)), "message '%s' lacks '%s' / '%s'", err,
                  needle1, needle2 ? needle2 : "");
    ck_assert_msg(count_entries(fresh) == 0, "%s not empty after a failed run", fresh);
}

START_TEST(bad_lines_fail_with_file_and_line) {
    for (size_t i = 0; i < sizeof LINE_CASES / sizeof LINE_CASES[0]; i++) {
        const BadCase *c = &LINE_CASES[i];
        const char *raw = build_raw("raw_bad");
        c->corrupt(raw);
        char needle[1200];
        snprintf(needle, sizeof needle, "%s%s", g_target, c->where);
        expect_failure(raw, needle, c->problem);
    }
}
END_TEST

START_TEST(bad_layout_and_manifest) {
    char path[1024], err[512];
    const char *raw = build_raw("raw_layout");
    snprintf(path, sizeof path, "%s/mathematics_dataset-v1.0/interpolate", raw);
    remove_tree(path);
    expect_failure(raw, path, "missing split directory");

    raw = build_raw("raw_layout");
    snprintf(path, sizeof path, "%s/mathematics_dataset-v1.0/train-easy", raw);
    remove_tree(path);
    ck_assert_int_eq(mkdir_p(path, err, sizeof err), 0);
    expect_failure(raw, path, "no usable .txt files");

    raw = build_raw("raw_layout"); /* a valid edit after fetch: the sha256 no longer matches */
    snprintf(path, sizeof path, "%s/mathematics_dataset-v1.0/train-easy/arithmetic__mul.txt", raw);
    set_line(path, 2, "424242");
    expect_failure(raw, path, "differs from");

    raw = build_raw("raw_layout");
    char src[1024];
    snprintf(src, sizeof src, "%s/mathematics_dataset-v1.0/extrapolate/arithmetic__mul_big.txt", raw);
    snprintf(path, sizeof path, "%s/mathematics_dataset-v1.0/extrapolate/arithmetic__extra.txt", raw);
    copy_file(src, path); /* a valid file that fetch did not write */
    expect_failure(raw, path, "not listed");

    raw = build_raw("raw_layout");
    snprintf(path, sizeof path, "%s/mathematics_dataset-v1.0/train-medium/arithmetic__mul.txt", raw);
    unlink(path);
    expect_failure(raw, path, "listed in");

    raw = build_raw("raw_layout");
    snprintf(path, sizeof path, "%s/manifest.json", raw);
    unlink(path);
    expect_failure(raw, path, "missing");
}
END_TEST

/* A failure after the outputs' staging started (the corpus cannot give 60000 pieces) leaves a previous run intact. */
START_TEST(late_failure_keeps_previous_outputs) {
    const char *raw = build_raw("raw_late");
    char out[512], err[1024], a[1024], keep[1024];
    snprintf(out, sizeof out, "%s", out_dir("out_late"));
    TokenizeConfig cfg = test_config();
    ck_assert_msg(run(raw, out, &cfg, err, sizeof err) == 0, "%s", err);
    snprintf(a, sizeof a, "%s/train.shard", out);
    snprintf(keep, sizeof keep, "%s/train.keep", g_dir);
    copy_file(a, keep);
    cfg.vocab_size = 60000;
    ck_assert_int_eq(run(raw, out, &cfg, err, sizeof err), -1);
    ck_assert_msg(strstr(err, "cannot be reached"), "%s", err);
    ck_assert_int_eq(count_entries(out), 5);
    ck_assert(files_equal(a, keep));
}
END_TEST

/* An arithmetic-only raw directory (like the arithmetic archive's) can take its tokenizer corpus from another fetch
 * output: the tokenizer and the shards are then those of the full corpus, byte for byte. On its own, the sample's
 * arithmetic-only corpus (9 files x 500 pairs) cannot give 512 pieces: at most 497, the same limit Debian's
 * SentencePiece 0.1.97 reports for this corpus ("Please set it to a value <= 497"). */
START_TEST(tokenizer_corpus_from_another_raw_dir) {
    char full[512], arith[512], err[1024], a[2048], b[2048], dir[1024];
    snprintf(full, sizeof full, "%s", build_raw("raw_full"));
    snprintf(arith, sizeof arith, "%s", build_raw("raw_arith"));
    snprintf(dir, sizeof dir, "%s/tokenizer_corpus", arith);
    char **names = NULL;
    int n = dm_list_txt(dir, &names, err, sizeof err);
    for (int i = 0; i < n; i++) {
        if (strncmp(names[i], "arithmetic__", 12) == 0) continue;
        snprintf(a, sizeof a, "%s/%s", dir, names[i]);
        unlink(a);
    }
    dm_free_names(names, n);
    write_manifest(arith);
    TokenizeConfig cfg = test_config();
    char out_full[512], out_split[512], out_arith[512];
    snprintf(out_full, sizeof out_full, "%s", out_dir("out_full"));
    snprintf(out_split, sizeof out_split, "%s", out_dir("out_split"));
    snprintf(out_arith, sizeof out_arith, "%s", out_dir("out_arith"));
    ck_assert_msg(run(full, out_full, &cfg, err, sizeof err) == 0, "%s", err);
    TokenizeJob job = {.raw_dir = arith, .out_dir = out_split, .tokenizer_raw_dir = full};
    ck_assert_msg(tokenize_run(&job, &cfg, err, sizeof err) == 0, "%s", err);
    ck_assert_int_eq(run(arith, out_arith, &cfg, err, sizeof err), -1);
    ck_assert_msg(strstr(err, "only 497 pieces"), "%s", err);
    cfg.vocab_size = 497;
    ck_assert_msg(run(arith, out_arith, &cfg, err, sizeof err) == 0, "%s", err);
    cfg.vocab_size = 512;
    snprintf(a, sizeof a, "%s/tokenizer.json", out_full);
    snprintf(b, sizeof b, "%s/tokenizer.json", out_split);
    ck_assert(files_equal(a, b));
    /* The shards hold the same examples and tokens (their headers differ: they name another raw manifest). */
    for (int i = 1; i < 4; i++) {
        Shard x, y;
        snprintf(a, sizeof a, "%s/%s", out_full, OUTPUTS[i]);
        snprintf(b, sizeof b, "%s/%s", out_split, OUTPUTS[i]);
        ck_assert_msg(shard_read(&x, a, err, sizeof err) == 0, "%s", err);
        ck_assert_msg(shard_read(&y, b, err, sizeof err) == 0, "%s", err);
        ck_assert(x.n_examples == y.n_examples && x.n_tokens == y.n_tokens);
        ck_assert(memcmp(x.examples, y.examples, x.n_examples * sizeof *x.examples) == 0);
        ck_assert(memcmp(x.tokens, y.tokens, x.n_tokens * sizeof *x.tokens) == 0);
        shard_free(&x);
        shard_free(&y);
    }
    snprintf(a, sizeof a, "%s/tokenizer.json", out_full);
    snprintf(b, sizeof b, "%s/tokenizer.json", out_arith);
    ck_assert(!files_equal(a, b)); /* the arithmetic-only corpus gives another (smaller) vocabulary */
    snprintf(a, sizeof a, "%s/tokenize_manifest.json", out_split);
    cJSON *m = json_load_file(a, JSON_KIND_MANIFEST, err, sizeof err);
    ck_assert_msg(m != NULL, "%s", err);
    ck_assert_ptr_nonnull(cJSON_GetObjectItem(m, "tokenizer_raw"));
    cJSON_Delete(m);
    /* A tokenizer directory without a manifest is refused like the raw directory itself. */
    snprintf(a, sizeof a, "%s/manifest.json", full);
    unlink(a);
    job.out_dir = out_dir("out_none");
    ck_assert_int_eq(tokenize_run(&job, &cfg, err, sizeof err), -1);
    ck_assert_msg(strstr(err, a) && strstr(err, "missing"), "%s", err);
}
END_TEST

/* ---- config ---- */

static int load_config(const char *text, TokenizeConfig *c, char *err, size_t errlen) {
    char path[512], e2[256];
    snprintf(path, sizeof path, "%s/data.json", g_dir);
    ck_assert_int_eq(write_file_atomic(path, text, strlen(text), e2, sizeof e2), 0);
    return tokenize_config_load(path, c, err, errlen);
}

START_TEST(config_is_strict) {
    TokenizeConfig c;
    char err[1024];
    ck_assert_msg(load_config("{\"fetch\": {\"source\": \"embedded\"}, \"tokenize\": {\"vocab_size\": 300, "
                              "\"eval_examples\": 7, \"exclude_tokenizer_pattern\": \"x.*\"}}", &c, err, sizeof err) == 0,
                  "%s", err);
    ck_assert_int_eq(c.vocab_size, 300);
    ck_assert_int_eq(c.eval_examples, 7);
    ck_assert_str_eq(c.exclude_tokenizer_pattern, "x.*");
    ck_assert_int_eq(c.max_piece_length, 16);        /* default */
    ck_assert_int_eq(c.tokenizer_pairs_per_file, 10000);
    ck_assert_int_eq(load_config("{\"tokenize\": {\"vocab_sise\": 512}}", &c, err, sizeof err), -1);
    ck_assert_msg(strstr(err, "tokenize.vocab_sise") && strstr(err, "data.json"), "%s", err);
    ck_assert_int_eq(load_config("{\"fetch\": {}}", &c, err, sizeof err), -1);
    ck_assert_msg(strstr(err, "tokenize"), "%s", err);
    ck_assert_int_eq(load_config("{\"tokenize\": {\"eval_examples\": 0}}", &c, err, sizeof err), -1);
    ck_assert_msg(strstr(err, "tokenize.eval_examples"), "%s", err);
    ck_assert_int_eq(load_config("{\"tokenize\": {\"vocab_size\": \"512\"}}", &c, err, sizeof err), -1);
    ck_assert_msg(strstr(err, "tokenize.vocab_size"), "%s", err);
    ck_assert_int_eq(load_config("{\"tokenize\": {\"exclude_tokenizer_pattern\": \"(\"}}", &c, err, sizeof err), -1);
    ck_assert_msg(strstr(err, "exclude_tokenizer_pattern"), "%s", err);
    /* The top level too: a second "tokenize" section (the first used to win silently) and a misspelt section. */
    ck_assert_int_eq(load_config("{\"tokenize\": {\"vocab_size\": 300}, \"fetch\": {}, \"tokenize\": {}}", &c, err,
                                 sizeof err), -1);
    ck_assert_msg(strstr(err, "data.json: tokenize: duplicate key"), "%s", err);
    ck_assert_int_eq(load_config("{\"tokenize\": {}, \"tokeniser\": {\"vocab_size\": 300}}", &c, err, sizeof err), -1);
    ck_assert_msg(strstr(err, "data.json: tokeniser: unknown key (did you mean tokenize?)"), "%s", err);
}
END_TEST

/* The example order the shards are built in (datasets/pool_order.h), on a pool of three files of 4, 0 and 7 pairs:
 * every pair exactly once, in the order of the documented Fisher-Yates (from the last element down, j uniform in
 * [0, i] from splitmix64 seeded with the pool's seed) applied to the pairs listed file after file. */
START_TEST(pool_order_is_the_documented_shuffle) {
    const int64_t pairs[] = {4, 0, 7};
    InputFile files[3], *fp[3];
    memset(files, 0, sizeof files);
    for (int i = 0; i < 3; i++) {
        files[i].f.n_pairs = pairs[i];
        fp[i] = &files[i];
    }
    const uint64_t seeds[] = {0, 1, 123};
    PoolRef first[11];
    for (int k = 0; k < 3; k++) {
        uint64_t n = 99;
        PoolRef *got = pool_order(fp, 3, seeds[k], &n);
        ck_assert_uint_eq(n, 11);
        PoolRef want[11];
        int w = 0;
        for (int i = 0; i < 3; i++)
            for (int64_t p = 0; p < pairs[i]; p++) want[w++] = (PoolRef){(uint32_t)i, (uint32_t)p};
        uint64_t state = seeds[k];
        for (uint64_t i = 11; i > 1; i--) {
            uint64_t j = splitmix64_below(&state, i);
            PoolRef t = want[i - 1];
            want[i - 1] = want[j];
            want[j] = t;
        }
        int seen[3][7] = {{0}};
        for (int i = 0; i < 11; i++) {
            ck_assert_uint_eq(got[i].file, want[i].file);
            ck_assert_uint_eq(got[i].pair, want[i].pair);
            ck_assert(got[i].file != 1 && (int64_t)got[i].pair < pairs[got[i].file]);
            ck_assert_int_eq(seen[got[i].file][got[i].pair]++, 0);
        }
        if (k == 0) memcpy(first, got, sizeof first);
        else ck_assert_msg(memcmp(first, got, sizeof first) != 0, "seed %llu gives the order of seed 0",
                           (unsigned long long)seeds[k]);
        free(got);
    }
    uint64_t n = 99;
    PoolRef *none = pool_order(fp + 1, 1, 5, &n); /* only the empty file */
    ck_assert_uint_eq(n, 0);
    ck_assert_ptr_nonnull(none);
    free(none);
}
END_TEST

int main(void) {
    Suite *s = suite_create("tokenize");
    TCase *tc = tcase_create("stage");
    tcase_set_timeout(tc, 300);
    tcase_add_unchecked_fixture(tc, fixture_setup, fixture_teardown);
    tcase_add_test(tc, outputs_hold_every_example_shuffled);
    tcase_add_test(tc, same_inputs_same_bytes);
    tcase_add_test(tc, bad_lines_fail_with_file_and_line);
    tcase_add_test(tc, bad_layout_and_manifest);
    tcase_add_test(tc, late_failure_keeps_previous_outputs);
    tcase_add_test(tc, tokenizer_corpus_from_another_raw_dir);
    tcase_add_test(tc, config_is_strict);
    tcase_add_test(tc, pool_order_is_the_documented_shuffle);
    suite_add_tcase(s, tc);
    return run_test_suite(s);
}
