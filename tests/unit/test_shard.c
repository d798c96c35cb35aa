/* Token shards: write/read round trip and rejection of corrupted files (magic, version, truncation, offsets, module
 * ids, reserved field, padding, header JSON). */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "datasets/shard.h"
#include "pipeline/base/atomic_file.h"
#include "tests/unit/suite_runner.h"

static char g_dir[256];
static char g_path[512];
static const char *SHA = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";

static void setup(void) {
    snprintf(g_dir, sizeof g_dir, "/tmp/test_shard.%ld", (long)getpid());
    char err[256];
    ck_assert_int_eq(mkdir_p(g_dir, err, sizeof err), 0);
    snprintf(g_path, sizeof g_path, "%s/x.shard", g_dir);
}
static void teardown(void) { remove_tree(g_dir); }

/* Three examples over 10 tokens, two modules. */
static char *MODULES[] = {"arithmetic__add_or_sub", "arithmetic__mul"};
static const ShardExample EXAMPLES[] = {{0, 2, 1, 1, 0}, {3, 3, 2, 0, 0}, {8, 1, 1, 1, 0}};
static const uint16_t TOKENS[] = {10, 11, 12, 20, 21, 22, 23, 24, 511, 3};

static void write_good(void) {
    char err[512];
    int rc = shard_write(g_path, "train", SHA, MODULES, 2, EXAMPLES, 3, TOKENS, 10, "{\"seed\":1}", err, sizeof err);
    ck_assert_msg(rc == 0, "%s", err);
}

START_TEST(round_trip) {
    write_good();
    Shard s;
    char err[512];
    ck_assert_msg(shard_read(&s, g_path, err, sizeof err) == 0, "%s", err);
    ck_assert_str_eq(s.split, "train");
    ck_assert_str_eq(s.tokenizer_sha256, SHA);
    ck_assert_uint_eq(s.n_examples, 3);
    ck_assert_uint_eq(s.n_tokens, 10);
    ck_assert_int_eq(s.n_modules, 2);
    ck_assert_str_eq(s.modules[0], MODULES[0]);
    ck_assert_str_eq(s.modules[1], MODULES[1]);
    ck_assert(memcmp(s.examples, EXAMPLES, sizeof EXAMPLES) == 0);
    ck_assert(memcmp(s.tokens, TOKENS, sizeof TOKENS) == 0);
    ck_assert_ptr_nonnull(strstr(s.header_json, "\"source\":{\"seed\":1}"));
    /* Sections are 8-byte aligned. */
    ck_assert_uint_eq((size_t)((const char *)s.examples - s.buf) % 8, 0);
    ck_assert_uint_eq(s.size, (size_t)((const char *)s.tokens - s.buf) + sizeof TOKENS);
    shard_free(&s);
}
END_TEST

START_TEST(empty_shard_round_trip) {
    char err[512];
    ck_assert_int_eq(shard_write(g_path, "interpolate", SHA, MODULES, 1, NULL, 0, NULL, 0, NULL, err, sizeof err), 0);
    Shard s;
    ck_assert_msg(shard_read(&s, g_path, err, sizeof err) == 0, "%s", err);
    ck_assert_uint_eq(s.n_examples, 0);
    ck_assert_uint_eq(s.n_tokens, 0);
    ck_assert_str_eq(s.split, "interpolate");
    shard_free(&s);
}
END_TEST

START_TEST(writer_rejects_bad_examples) {
    char err[512];
    ShardExample bad[] = {{0, 2, 1, 2, 0}}; /* module 2 of 2 */
    ck_assert_int_eq(shard_write(g_path, "train", SHA, MODULES, 2, bad, 1, TOKENS, 10, NULL, err, sizeof err), -1);
    ck_assert_ptr_nonnull(strstr(err, "module id"));
    ShardExample past[] = {{8, 2, 1, 0, 0}}; /* [8, 11) of 10 tokens */
    ck_assert_int_eq(shard_write(g_path, "train", SHA, MODULES, 2, past, 1, TOKENS, 10, NULL, err, sizeof err), -1);
    ck_assert_ptr_nonnull(strstr(err, "out of range"));
    ck_assert(!file_exists(g_path));
}
END_TEST

/* Reads the good file, applies the edit, writes it back and returns shard_read's error text (static). */
static const char *read_after(void (*edit)(char *buf, size_t *n)) {
    write_good();
    char *buf = NULL, err[512];
    size_t n = 0;
    ck_assert_int_eq(read_file_all(g_path, &buf, &n, err, sizeof err), 0);
    edit(buf, &n);
    ck_assert_int_eq(write_file_atomic(g_path, buf, n, err, sizeof err), 0);
    free(buf);
    Shard s;
    static char msg[512];
    int rc = shard_read(&s, g_path, msg, sizeof msg);
    if (rc == 0) {
        shard_free(&s);
        return "";
    }
    ck_assert_ptr_null(s.buf); /* freed on error */
    ck_assert_ptr_nonnull(strstr(msg, g_path));
    return msg;
}

static size_t body_offset(const char *buf) {
    uint32_t j;
    memcpy(&j, buf + 12, 4);
    return 16 + (((size_t)j + 7) & ~(size_t)7);
}
static ShardExample *example(char *buf, int i) { return (ShardExample *)(buf + body_offset(buf)) + i; }

static void edit_magic(char *b, size_t *n) { b[0] = 'X'; }
static void edit_version(char *b, size_t *n) { b[8] = 2; }
static void edit_truncate(char *b, size_t *n) { *n -= 1; }
static void edit_truncate_header(char *b, size_t *n) { *n = 20; }
static void edit_append(char *b, size_t *n) { (void)b; } /* see append test */
static void edit_q_start(char *b, size_t *n) { example(b, 2)->q_start = 9; }  /* [9, 11) past 10 tokens */
static void edit_overlap(char *b, size_t *n) { example(b, 1)->q_start = 1; }  /* starts inside example 0 */
static void edit_huge(char *b, size_t *n) { example(b, 0)->q_len = 0xFFFFFFFFu; }
static void edit_module(char *b, size_t *n) { example(b, 0)->module = 7; }
static void edit_reserved(char *b, size_t *n) { example(b, 0)->reserved = 1; }
static void edit_padding(char *b, size_t *n) {
    uint32_t j;
    memcpy(&j, b + 12, 4);
    if (j % 8 == 0) { /* no padding in this layout: corrupt the JSON instead */
        b[16] = '[';
        return;
    }
    b[16 + j] = 'x';
}
static void edit_json(char *b, size_t *n) {
    char *p = strstr(b + 16, "\"n_tokens\":10");
    ck_assert_ptr_nonnull(p);
    p[12] = '1'; /* n_tokens 11: sizes no longer match */
}
static void edit_json_key(char *b, size_t *n) {
    char *p = strstr(b + 16, "\"split\"");
    ck_assert_ptr_nonnull(p);
    memcpy(p, "\"spXit\"", 7); /* unknown key, missing split */
}

START_TEST(rejects_corruption) {
    ck_assert_str_eq(read_after(edit_append), ""); /* sanity: the unedited file reads */
    ck_assert_ptr_nonnull(strstr(read_after(edit_magic), "bad magic"));
    ck_assert_ptr_nonnull(strstr(read_after(edit_version), "version"));
    ck_assert_ptr_nonnull(strstr(read_after(edit_truncate), "truncated"));
    ck_assert_ptr_nonnull(strstr(read_after(edit_truncate_header), "truncated"));
    ck_assert_ptr_nonnull(strstr(read_after(edit_q_start), "out of order or out of range"));
    ck_assert_ptr_nonnull(strstr(read_after(edit_overlap), "out of order or out of range"));
    ck_assert_ptr_nonnull(strstr(read_after(edit_huge), "out of order or out of range"));
    ck_assert_ptr_nonnull(strstr(read_after(edit_module), "module id"));
    ck_assert_ptr_nonnull(strstr(read_after(edit_reserved), "reserved"));
    ck_assert_str_ne(read_after(edit_padding), "");
    ck_assert_ptr_nonnull(strstr(read_after(edit_json), "does not match"));
    ck_assert_str_ne(read_after(edit_json_key), "");
}
END_TEST

START_TEST(rejects_trailing_bytes_and_missing_file) {
    write_good();
    FILE *f = fopen(g_path, "ab");
    ck_assert_ptr_nonnull(f);
    fputc(0, f);
    fputc(0, f);
    fclose(f);
    Shard s;
    char err[512];
    ck_assert_int_eq(shard_read(&s, g_path, err, sizeof err), -1);
    ck_assert_ptr_nonnull(strstr(err, "does not match"));
    unlink(g_path);
    ck_assert_int_eq(shard_read(&s, g_path, err, sizeof err), -1);
    ck_assert_ptr_nonnull(strstr(err, g_path));
}
END_TEST

int main(void) {
    Suite *s = suite_create("shard");
    TCase *tc = tcase_create("shard");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, round_trip);
    tcase_add_test(tc, empty_shard_round_trip);
    tcase_add_test(tc, writer_rejects_bad_examples);
    tcase_add_test(tc, rejects_corruption);
    tcase_add_test(tc, rejects_trailing_bytes_and_missing_file);
    suite_add_tcase(s, tc);
    return run_test_suite(s);
}
