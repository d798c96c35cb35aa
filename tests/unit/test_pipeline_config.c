/* Strict config reader: every error names the file and the dotted key path; unknown keys are errors. */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "pipeline/base/atomic_file.h"
#include "pipeline/base/config.h"
#include "tests/unit/suite_runner.h"

static char g_dir[256];

static void setup(void) {
    snprintf(g_dir, sizeof g_dir, "/tmp/test_pipeline_config.%ld", (long)getpid());
    char err[256];
    ck_assert_int_eq(mkdir_p(g_dir, err, sizeof err), 0);
}
static void teardown(void) { remove_tree(g_dir); }

/* Writes text to <g_dir>/<name> and returns the path (static buffer). */
static const char *write_tmp(const char *name, const char *text) {
    static char path[512];
    snprintf(path, sizeof path, "%s/%s", g_dir, name);
    char err[256];
    ck_assert_int_eq(write_file_atomic(path, text, strlen(text), err, sizeof err), 0);
    return path;
}

/* Reads {"train": {"steps": int, "lr": double, "bf": bool, "name": str}} and returns the reader's error text. */
static int read_train(const char *text, char *err, size_t errlen, long *steps) {
    const char *path = write_tmp("cfg.json", text);
    cJSON *root = json_load_file(path, JSON_KIND_CONFIG, err, errlen);
    if (!root) return -1;
    JsonReader top;
    json_reader_init(&top, root, "cfg.json", "");
    const cJSON *train = json_get_object(&top, "train", true);
    int rc = json_reader_finish(&top, err, errlen);
    if (rc == 0) {
        JsonReader r;
        json_reader_init(&r, train, "cfg.json", "train");
        double lr = 0;
        bool bf = false;
        const char *name = NULL;
        json_get_int(&r, "steps", steps, true);
        json_get_double(&r, "lr", &lr, true);
        json_get_bool(&r, "bf", &bf, false);
        json_get_string(&r, "name", &name, false);
        rc = json_reader_finish(&r, err, errlen);
    }
    cJSON_Delete(root);
    return rc;
}

START_TEST(valid_config_reads_values) {
    char err[512] = "";
    long steps = 0;
    ck_assert_int_eq(read_train("{\"train\": {\"steps\": 100, \"lr\": 0.5, \"bf\": true}}", err, sizeof err, &steps), 0);
    ck_assert_int_eq(steps, 100);
}
END_TEST

START_TEST(unknown_key_named_with_path) {
    char err[512] = "";
    long steps = 0;
    ck_assert_int_eq(read_train("{\"train\": {\"steps\": 1, \"lr\": 1, \"lrr\": 2}}", err, sizeof err, &steps), -1);
    ck_assert_msg(strstr(err, "cfg.json") && strstr(err, "train.lrr: unknown key (did you mean train.lr?)"), "message: %s", err);
}
END_TEST

START_TEST(unknown_top_level_key) {
    char err[512] = "";
    long steps = 0;
    ck_assert_int_eq(read_train("{\"train\": {\"steps\": 1, \"lr\": 1}, \"extra\": 3}", err, sizeof err, &steps), -1);
    ck_assert_msg(strstr(err, "cfg.json: extra: unknown key") && !strstr(err, "did you mean"), "message: %s", err);
}
END_TEST

START_TEST(wrong_type_named) {
    char err[512] = "";
    long steps = 0;
    ck_assert_int_eq(read_train("{\"train\": {\"steps\": \"100\", \"lr\": 1}}", err, sizeof err, &steps), -1);
    ck_assert_msg(strstr(err, "cfg.json: train.steps: expected an integer, got a string"), "message: %s", err);
    ck_assert_int_eq(read_train("{\"train\": {\"steps\": 1, \"lr\": 1, \"bf\": 1}}", err, sizeof err, &steps), -1);
    ck_assert_msg(strstr(err, "train.bf: expected a boolean"), "message: %s", err);
    ck_assert_int_eq(read_train("{\"train\": 5}", err, sizeof err, &steps), -1);
    ck_assert_msg(strstr(err, "train: expected an object"), "message: %s", err);
}
END_TEST

START_TEST(fractional_int_refused) {
    char err[512] = "";
    long steps = 0;
    ck_assert_int_eq(read_train("{\"train\": {\"steps\": 1.5, \"lr\": 1}}", err, sizeof err, &steps), -1);
    ck_assert_msg(strstr(err, "train.steps") && strstr(err, "fractional"), "message: %s", err);
    ck_assert_int_eq(read_train("{\"train\": {\"steps\": 1e30, \"lr\": 1}}", err, sizeof err, &steps), -1);
    ck_assert_msg(strstr(err, "train.steps") && strstr(err, "out of range"), "message: %s", err);
}
END_TEST

START_TEST(missing_required_named) {
    char err[512] = "";
    long steps = 0;
    ck_assert_int_eq(read_train("{\"train\": {\"steps\": 1}}", err, sizeof err, &steps), -1);
    ck_assert_msg(strstr(err, "cfg.json: missing required key train.lr"), "message: %s", err);
    ck_assert_int_eq(read_train("{}", err, sizeof err, &steps), -1);
    ck_assert_msg(strstr(err, "missing required key train"), "message: %s", err);
}
END_TEST

START_TEST(duplicate_key_refused) {
    char err[512] = "";
    long steps = 0;
    ck_assert_int_eq(read_train("{\"train\": {\"steps\": 1, \"lr\": 1, \"steps\": 2}}", err, sizeof err, &steps), -1);
    ck_assert_msg(strstr(err, "cfg.json: train.steps: duplicate key"), "message: %s", err);
}
END_TEST

/* The misspelling is the cause, the missing key its consequence: the unknown key is reported, with the closest key
 * the reader asked for. */
START_TEST(unknown_key_before_missing_with_suggestion) {
    char err[512] = "";
    long steps = 0;
    ck_assert_int_eq(read_train("{\"train\": {\"steps\": 1, \"learning_rate\": 2}}", err, sizeof err, &steps), -1);
    ck_assert_msg(strstr(err, "cfg.json: train.learning_rate: unknown key (did you mean train.lr?)"), "message: %s", err);
    ck_assert_msg(!strstr(err, "missing"), "message: %s", err);
    ck_assert_int_eq(read_train("{\"train\": {\"setps\": 1, \"lr\": 2}}", err, sizeof err, &steps), -1);
    ck_assert_msg(strstr(err, "cfg.json: train.setps: unknown key (did you mean train.steps?)"), "message: %s", err);
    /* also before a wrong type recorded earlier */
    ck_assert_int_eq(read_train("{\"train\": {\"steps\": \"x\", \"lr\": 2, \"nmae\": \"a\"}}", err, sizeof err, &steps),
                     -1);
    ck_assert_msg(strstr(err, "train.nmae: unknown key (did you mean train.name?)"), "message: %s", err);
    /* a missing section caused by a misspelt one */
    ck_assert_int_eq(read_train("{\"trian\": {\"steps\": 1, \"lr\": 2}}", err, sizeof err, &steps), -1);
    ck_assert_msg(strstr(err, "cfg.json: trian: unknown key (did you mean train?)"), "message: %s", err);
    /* nothing close: no suggestion, still before the missing key */
    ck_assert_int_eq(read_train("{\"train\": {\"steps\": 1, \"momentum\": 2}}", err, sizeof err, &steps), -1);
    ck_assert_msg(strstr(err, "cfg.json: train.momentum: unknown key") && !strstr(err, "did you mean"), "message: %s",
                  err);
}
END_TEST

START_TEST(closest_key_cutoffs) {
    const char *keys[] = {"steps", "lr", "seed", "warmup", "batch_size", "n_microbatch", "weight_decay"};
    const int n = (int)(sizeof keys / sizeof keys[0]);
    ck_assert_str_eq(json_closest_key("sead", keys, n), "seed");        /* substitution */
    ck_assert_str_eq(json_closest_key("sede", keys, n), "seed");        /* transposition */
    ck_assert_str_eq(json_closest_key("step", keys, n), "steps");       /* deletion */
    ck_assert_str_eq(json_closest_key("LR", keys, n), "lr");            /* case */
    ck_assert_str_eq(json_closest_key("batchsize", keys, n), "batch_size");
    ck_assert_str_eq(json_closest_key("learning_rate", keys, n), "lr"); /* initials */
    ck_assert_str_eq(json_closest_key("nm", keys, n), "n_microbatch");
    ck_assert_ptr_null(json_closest_key("x", keys, n));
    ck_assert_ptr_null(json_closest_key("momentum", keys, n));
    ck_assert_ptr_null(json_closest_key("sd", keys, n)); /* 2 edits of 4 characters: too far */
    ck_assert_ptr_null(json_closest_key("lr", (const char *[]){"lr"}, 1)); /* itself is no suggestion */
    ck_assert_ptr_null(json_closest_key("lr", keys, 0));
}
END_TEST

START_TEST(syntax_error_has_line) {
    char err[512] = "";
    long steps = 0;
    ck_assert_int_eq(read_train("{\n\"train\": {\n\"steps\": 1,,\n}}", err, sizeof err, &steps), -1);
    ck_assert_msg(strstr(err, "cfg.json:3:") && strstr(err, "invalid JSON"), "message: %s", err);
    ck_assert_int_eq(read_train("{\"train\": {}} trailing", err, sizeof err, &steps), -1);
    ck_assert_msg(strstr(err, "invalid JSON"), "message: %s", err);
}
END_TEST

/* A NUL in a string, as a \u0000 escape or a raw byte, is refused before parsing: cJSON would end the C string there
 * ("dense_qa\u0000evil" read as "dense_qa", a tokenizer piece "a\u0000b" as a duplicate of "a"). An escaped backslash
 * followed by the letters u0000 is text, not a NUL. */
START_TEST(nul_in_strings_refused) {
    char err[512] = "";
    const char *path = write_tmp("nul.json", "{\"run\": \"dense_qa\\u0000evil\"}");
    ck_assert_ptr_null(json_load_file(path, JSON_KIND_RECORD, err, sizeof err));
    ck_assert_msg(strstr(err, "nul.json:1:18: a string holds \\u0000 (a NUL character") && strstr(err, "refused"),
                  "message: %s", err);
    /* in a key, after other escapes, on a later line; the tokenizer kind (json_read_text) too */
    const char *bad[] = {"{\"a\\u0000b\": 1}", "[\"\\n\\\\\\u0000\"]", "{\"pieces\": [\"a\",\n  \"a\\u0000b\"]}"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        path = write_tmp("nul.json", bad[i]);
        ck_assert_msg(json_load_file(path, JSON_KIND_CONFIG, err, sizeof err) == NULL, "accepted %s", bad[i]);
        ck_assert_msg(strstr(err, "holds \\u0000"), "%s: %s", bad[i], err);
        char *text = NULL;
        size_t n = 0;
        ck_assert_int_eq(json_read_text(path, JSON_KIND_TOKENIZER, &text, &n, err, sizeof err), -1);
        ck_assert_ptr_null(text);
    }
    ck_assert_msg(strstr(err, "nul.json:2:5:"), "line and column of the escape: %s", err);
    /* an escaped backslash and the text u0000 is not a NUL, nor is another escape */
    path = write_tmp("ok.json", "{\"a\": \"x\\\\u0000\", \"b\": \"\\u0001\", \"c\": \"\\\\\\\\u0000\"}");
    cJSON *j = json_load_file(path, JSON_KIND_CONFIG, err, sizeof err);
    ck_assert_msg(j != NULL, "%s", err);
    ck_assert_str_eq(cJSON_GetObjectItem(j, "a")->valuestring, "x\\u0000");
    ck_assert_str_eq(cJSON_GetObjectItem(j, "c")->valuestring, "\\\\u0000");
    cJSON_Delete(j);
    /* a raw NUL byte, named with its position */
    char raw[] = "{\"a\": \"x\0y\"}";
    char raw_path[512];
    snprintf(raw_path, sizeof raw_path, "%s/raw.json", g_dir);
    ck_assert_int_eq(write_file_atomic(raw_path, raw, sizeof raw - 1, err, sizeof err), 0);
    ck_assert_ptr_null(json_load_file(raw_path, JSON_KIND_CONFIG, err, sizeof err));
    ck_assert_msg(strstr(err, "raw.json:1:9: contains a NUL byte"), "message: %s", err);
    /* texts in memory (a record's config_text, a header) and JSON-lines files: the same check */
    const char *mem = "{\"k\": \"v\\u0000\"}";
    ck_assert_ptr_null(json_parse_text(mem, strlen(mem), JSON_KIND_CONFIG, "mem", err, sizeof err));
    ck_assert_msg(strstr(err, "mem:1:9: a string holds"), "message: %s", err);
    const char *lines = "{\"a\": \"unterminated\n{\"b\": \"\\u0000\"}\n";
    ck_assert_int_eq(json_check_strings(lines, strlen(lines), "x.jsonl", err, sizeof err), -1);
    ck_assert_msg(strstr(err, "x.jsonl:2:8:"), "message: %s", err);
    ck_assert_int_eq(json_check_strings("{\"a\": 1}\n", 9, "x.jsonl", err, sizeof err), 0);
}
END_TEST

START_TEST(missing_file_named) {
    char err[512] = "";
    cJSON *j = json_load_file("/nonexistent/x.json", JSON_KIND_CONFIG, err, sizeof err);
    ck_assert_ptr_null(j);
    ck_assert_msg(strstr(err, "/nonexistent/x.json"), "message: %s", err);
}
END_TEST

START_TEST(save_round_trip) {
    char path[512], err[512];
    snprintf(path, sizeof path, "%s/sub/out.json", g_dir);
    cJSON *o = cJSON_CreateObject();
    cJSON_AddNumberToObject(o, "a", 3);
    cJSON_AddStringToObject(o, "b", "x");
    ck_assert_int_eq(json_save_file(path, o, err, sizeof err), 0);
    cJSON_Delete(o);
    char *text;
    size_t n;
    ck_assert_int_eq(read_file_all(path, &text, &n, err, sizeof err), 0);
    ck_assert(n > 0 && text[n - 1] == '\n');
    free(text);
    cJSON *back = json_load_file(path, JSON_KIND_CONFIG, err, sizeof err);
    ck_assert_ptr_nonnull(back);
    ck_assert_int_eq(cJSON_GetObjectItem(back, "a")->valueint, 3);
    cJSON_Delete(back);
}
END_TEST

int main(void) {
    Suite *s = suite_create("pipeline_config");
    TCase *tc = tcase_create("config");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, valid_config_reads_values);
    tcase_add_test(tc, unknown_key_named_with_path);
    tcase_add_test(tc, unknown_top_level_key);
    tcase_add_test(tc, wrong_type_named);
    tcase_add_test(tc, fractional_int_refused);
    tcase_add_test(tc, missing_required_named);
    tcase_add_test(tc, duplicate_key_refused);
    tcase_add_test(tc, unknown_key_before_missing_with_suggestion);
    tcase_add_test(tc, closest_key_cutoffs);
    tcase_add_test(tc, syntax_error_has_line);
    tcase_add_test(tc, missing_file_named);
    tcase_add_test(tc, nul_in_strings_refused);
    tcase_add_test(tc, save_round_trip);
    suite_add_tcase(s, tc);
    return run_test_suite(s);
}
