/* predictions.jsonl writers (pipeline/records/predictions.c): one valid JSON object per line, strings escaped (quotes,
 * backslashes, newlines, control and non-ASCII characters survive a parse), every line exactly the schema's keys in
 * the same order (greedy_correct null where not greedy-checked), losses within cJSON's number printing (it prints 15
 * digits when they read back within one ulp, else 17: 1e-15 relative); the sidecar's fields; a write error names the
 * file; the default path beside the result record and the sidecar's path beside the predictions.
 * The reader (pipeline/records/predictions_read.c): the version-2 layout with its sidecar, the version-1 layout (header line
 * first), and a missing, foreign or mismatched sidecar refused naming the file and the field. */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "pipeline/base/atomic_file.h"
#include "pipeline/base/config.h"
#include "pipeline/records/predictions.h"
#include "pipeline/records/predictions_read.h"
#include "pipeline/base/sha256.h"
#include "tests/unit/suite_runner.h"

/* The lines written to fp, each parsed (the test fails on an unparsable one). Returns the number of lines. */
static int read_lines(FILE *fp, cJSON **out, int max) {
    rewind(fp);
    char buf[4096];
    int n = 0;
    while (fgets(buf, sizeof buf, fp)) {
        ck_assert_msg(strchr(buf, '\n') != NULL, "line %d not newline-terminated or too long", n + 1);
        ck_assert_msg(strchr(buf, '\n') == buf + strlen(buf) - 1, "line %d: a raw newline inside", n + 1);
        ck_assert_int_lt(n, max);
        out[n] = cJSON_Parse(buf);
        ck_assert_msg(out[n] != NULL, "line %d is not JSON: %s", n + 1, buf);
        n++;
    }
    return n;
}

/* The object's keys in order, comma-separated. */
static void keys_of(const cJSON *o, char *out, size_t n) {
    out[0] = '\0';
    for (const cJSON *c = o->child; c; c = c->next) {
        strncat(out, c->string, n - strlen(out) - 1);
        if (c->next) strncat(out, ",", n - strlen(out) - 1);
    }
}

static const char *str(const cJSON *o, const char *k) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
    ck_assert_msg(cJSON_IsString(v), "%s is not a string", k);
    return v->valuestring;
}

static void fill_prov(RunProvenance *prov) {
    run_provenance_init(prov);
    prov->n_overrides = 1;
    snprintf(prov->overrides[0], sizeof prov->overrides[0], "train.seed=2");
    prov->seed = 2;
    snprintf(prov->run_config, sizeof prov->run_config, "dense_qa");
}

START_TEST(lines_and_sidecar) {
    FILE *fp = tmpfile();
    ck_assert(fp != NULL);
    char err[256];
    /* quote, backslash, newline, tab, ^A, ▁ */
    const char *q = "Q: What is \"-2\" \\ 3?\nTab\there \x01 \xe2\x96\x81 A:";
    PredictionLine a = {"interpolate", 0, "arithmetic__add_or_sub", q, "-5", "-6", false, 12.345678901234567, 0};
    PredictionLine b = {"extrapolate", 41, "arithmetic__mul", "Q: 1*1 A:", "1", "1", true, 0.1 + 0.2, -1};
    ck_assert_int_eq(predictions_write_line(fp, "p.jsonl", &a, err, sizeof err), 0);
    ck_assert_int_eq(predictions_write_line(fp, "p.jsonl", &b, err, sizeof err), 0);

    cJSON *l[4];
    ck_assert_int_eq(read_lines(fp, l, 4), 2);
    char keys[512];
    /* every line the same keys in the same order: one table for a JSON-lines reader */
    for (int i = 0; i < 2; i++) {
        keys_of(l[i], keys, sizeof keys);
        ck_assert_str_eq(keys, "set,index,module,question,answer,predicted,correct,answer_loss,greedy_correct");
    }
    ck_assert_str_eq(str(l[0], "question"), q);
    ck_assert_str_eq(str(l[0], "set"), "interpolate");
    ck_assert_str_eq(str(l[0], "predicted"), "-6");
    ck_assert(cJSON_IsFalse(cJSON_GetObjectItem(l[0], "correct")));
    ck_assert(cJSON_IsFalse(cJSON_GetObjectItem(l[0], "greedy_correct")));
    ck_assert(fabs(cJSON_GetObjectItem(l[0], "answer_loss")->valuedouble / 12.345678901234567 - 1) < 1e-15);

    ck_assert(cJSON_IsNull(cJSON_GetObjectItem(l[1], "greedy_correct"))); /* not greedy-checked */
    ck_assert_int_eq(cJSON_GetObjectItem(l[1], "index")->valueint, 41);
    ck_assert(cJSON_IsTrue(cJSON_GetObjectItem(l[1], "correct")));
    ck_assert(fabs(cJSON_GetObjectItem(l[1], "answer_loss")->valuedouble / (0.1 + 0.2) - 1) < 1e-15);
    for (int i = 0; i < 2; i++) cJSON_Delete(l[i]);
    fclose(fp);

    RunProvenance prov;
    fill_prov(&prov);
    PredictionsHeader h = {"tiny", "dense_qa.seed2", "abc123-dirty", "cpu", "AMD EPYC \"2 cores\"", "0123abcd", &prov};
    const char *sha = "5f70bf18a086007016e948b04aed3b82103a36bea41755b6cddfaf10ace3c6ef";
    cJSON *m = predictions_meta_to_json(&h, 2, sha);
    keys_of(m, keys, sizeof keys);
    ck_assert_str_eq(keys, "schema,schema_version,experiment,run,code_version,backend,hardware,config_sha256,overrides,"
                           "seed,run_config,n_examples,predictions_sha256");
    const cJSON *ov = cJSON_GetObjectItem(m, "overrides");
    ck_assert_int_eq(cJSON_GetArraySize(ov), 1);
    ck_assert_str_eq(cJSON_GetArrayItem(ov, 0)->valuestring, "train.seed=2");
    ck_assert_int_eq(cJSON_GetObjectItem(m, "seed")->valueint, 2);
    ck_assert_str_eq(str(m, "run_config"), "dense_qa");
    ck_assert_str_eq(str(m, "schema"), PREDICTIONS_SCHEMA);
    ck_assert_int_eq(cJSON_GetObjectItem(m, "schema_version")->valueint, 2);
    ck_assert_str_eq(str(m, "hardware"), "AMD EPYC \"2 cores\"");
    ck_assert_str_eq(str(m, "config_sha256"), "0123abcd");
    ck_assert_int_eq(cJSON_GetObjectItem(m, "n_examples")->valueint, 2);
    ck_assert_str_eq(str(m, "predictions_sha256"), sha);
    cJSON_Delete(m);
}
END_TEST

/* ---- the reader ---- */

static char g_dir[64];

static void write_text(const char *name, const char *text) {
    char path[256], err[256];
    snprintf(path, sizeof path, "%s/%s", g_dir, name);
    ck_assert_msg(write_file_atomic(path, text, strlen(text), err, sizeof err) == 0, "%s", err);
}

/* Two example lines as bin/evaluate writes them, into g_dir/predictions.jsonl; *text receives them (caller frees). */
static char *write_examples(void) {
    char err[256], path[256];
    snprintf(path, sizeof path, "%s/predictions.jsonl", g_dir);
    FILE *fp = fopen(path, "w");
    ck_assert_ptr_nonnull(fp);
    PredictionLine a = {"interpolate", 0, "arithmetic__add_or_sub", "Q: 1+1 A:", "2", "3", false, 1.5, 1};
    PredictionLine b = {"extrapolate", 0, "arithmetic__mul", "Q: 2*2 A:", "4", "4", true, 0.25, -1};
    ck_assert_int_eq(predictions_write_line(fp, path, &a, err, sizeof err), 0);
    ck_assert_int_eq(predictions_write_line(fp, path, &b, err, sizeof err), 0);
    fclose(fp);
    char *text = NULL;
    size_t n = 0;
    ck_assert_msg(read_file_all(path, &text, &n, err, sizeof err) == 0, "%s", err);
    return text;
}

/* The sidecar of `text` with one field changed (key NULL: none), written to g_dir/predictions.meta.json. */
static void write_meta(const char *text, const char *key, cJSON *value) {
    RunProvenance prov;
    fill_prov(&prov);
    PredictionsHeader h = {"unit", "dense_qa.seed2", "abc", "cpu", "hw", "0123", &prov};
    char sha[65], path[256], err[256];
    sha256_hex(text, strlen(text), sha);
    cJSON *m = predictions_meta_to_json(&h, 2, sha);
    if (key) cJSON_ReplaceItemInObject(m, key, value);
    snprintf(path, sizeof path, "%s/predictions.meta.json", g_dir);
    ck_assert_msg(json_save_file(path, m, err, sizeof err) == 0, "%s", err);
    cJSON_Delete(m);
}

/* Loading g_dir/predictions.jsonl fails with a message holding each of want[] (NULL-terminated). */
static void expect_refused(const char *label, const char *const *want) {
    char path[256], err[1024] = "";
    snprintf(path, sizeof path, "%s/predictions.jsonl", g_dir);
    PredictionTable t;
    ck_assert_msg(prediction_table_load(&t, path, err, sizeof err) == -1, "%s: accepted", label);
    for (int i = 0; want[i]; i++) ck_assert_msg(strstr(err, want[i]) != NULL, "%s: message: %s", label, err);
}

static void reader_setup(void) {
    snprintf(g_dir, sizeof g_dir, "/tmp/test_predictions_XXXXXX");
    ck_assert_ptr_nonnull(mkdtemp(g_dir));
}
static void reader_teardown(void) { remove_tree(g_dir); }

START_TEST(reads_the_sidecar_layout) {
    char *text = write_examples();
    write_meta(text, NULL, NULL);
    char path[256], err[1024];
    snprintf(path, sizeof path, "%s/predictions.jsonl", g_dir);
    PredictionTable t;
    ck_assert_msg(prediction_table_load(&t, path, err, sizeof err) == 0, "%s", err);
    ck_assert_str_eq(t.run, "dense_qa.seed2");
    ck_assert_int_eq(t.n, 2);
    ck_assert_int_eq(t.set[0], 0);
    ck_assert_int_eq(t.set[1], 1);
    ck_assert_int_eq(t.correct[0], 0);
    ck_assert_int_eq(t.correct[1], 1);
    ck_assert(t.answer_loss[1] == 0.25);
    ck_assert_int_eq(t.line[0], 1); /* the first example is the first line */
    ck_assert_int_eq(t.n_modules, 2);
    prediction_table_free(&t);
    free(text);
}
END_TEST

START_TEST(reads_the_header_line_layout) {
    /* version 1: the metadata as the first line, no sidecar (greedy_correct left out where not checked) */
    write_text("predictions.jsonl",
               "{\"schema\":\"dm-math-predictions\",\"schema_version\":1,\"experiment\":\"unit\",\"run\":\"old_run\"}\n"
               "{\"set\":\"interpolate\",\"index\":0,\"module\":\"m\",\"question\":\"q\",\"answer\":\"1\","
               "\"predicted\":\"1\",\"correct\":true,\"answer_loss\":0.5,\"greedy_correct\":true}\n"
               "{\"set\":\"extrapolate\",\"index\":0,\"module\":\"m\",\"question\":\"q\",\"answer\":\"2\","
               "\"predicted\":\"1\",\"correct\":false,\"answer_loss\":3}\n");
    char path[256], err[1024];
    snprintf(path, sizeof path, "%s/predictions.jsonl", g_dir);
    PredictionTable t;
    ck_assert_msg(prediction_table_load(&t, path, err, sizeof err) == 0, "%s", err);
    ck_assert_str_eq(t.run, "old_run");
    ck_assert_int_eq(t.n, 2);
    ck_assert_int_eq(t.line[0], 2);
    ck_assert(t.answer_loss[1] == 3);
    prediction_table_free(&t);
    /* a version-1 header that is not one is still refused as before, naming the line */
    write_text("predictions.jsonl", "{\"schema\":\"other\",\"run\":\"x\"}\n");
    expect_refused("a foreign header line", (const char *const[]){"predictions.jsonl:1: not a dm-math-predictions "
                                                                   "header (schema, run)", NULL});
}
END_TEST

START_TEST(refuses_a_missing_or_mismatched_sidecar) {
    char *text = write_examples();
    expect_refused("no sidecar", (const char *const[]){"predictions.jsonl: no metadata", "predictions.meta.json",
                                                       NULL});
    write_meta(text, "schema", cJSON_CreateString("dm-math-result"));
    expect_refused("another schema", (const char *const[]){"predictions.meta.json: not a dm-math-predictions "
                                                           "metadata file (schema, run)", NULL});
    write_meta(text, "run", cJSON_CreateNumber(3));
    expect_refused("run not a string", (const char *const[]){"predictions.meta.json", "(schema, run)", NULL});
    write_meta(text, "schema_version", cJSON_CreateNumber(3));
    expect_refused("a later version", (const char *const[]){"predictions.meta.json: schema_version: expected 2", NULL});
    write_meta(text, "n_examples", cJSON_CreateNumber(-1));
    expect_refused("a negative count", (const char *const[]){"predictions.meta.json: n_examples", NULL});
    write_meta(text, "n_examples", cJSON_CreateNumber(3));
    expect_refused("a count that differs", (const char *const[]){"predictions.jsonl: 2 example lines", "n_examples 3",
                                                                 NULL});
    write_meta(text, "predictions_sha256", cJSON_CreateString("abc"));
    expect_refused("a short hash", (const char *const[]){"predictions.meta.json: predictions_sha256: expected a "
                                                         "64-digit hex string", NULL});
    /* the sidecar of another predictions file: the lines were replaced after it was written */
    write_meta(text, NULL, NULL);
    char *loss = strstr(text, "0.25");
    ck_assert_ptr_nonnull(loss);
    loss[3] = '7'; /* the last answer_loss 0.25 -> 0.27: still valid lines */
    write_text("predictions.jsonl", text);
    expect_refused("edited lines", (const char *const[]){"predictions.jsonl: sha256", "differs from the "
                                                         "predictions_sha256", "predictions.meta.json", NULL});
    free(text);
}
END_TEST

START_TEST(write_error_names_the_file) {
    FILE *fp = fopen("/dev/full", "w");
    if (!fp) return; /* no /dev/full here: nothing to test with */
    setvbuf(fp, NULL, _IONBF, 0); /* unbuffered: the write itself fails, not a later flush */
    char err[256] = "";
    PredictionLine a = {"interpolate", 0, "m", "q", "a", "p", true, 1.0, -1};
    ck_assert_int_eq(predictions_write_line(fp, "runs/x/predictions.jsonl.tmp.1", &a, err, sizeof err), -1);
    ck_assert_msg(strstr(err, "runs/x/predictions.jsonl.tmp.1: write failed") == err, "message: %s", err);
    fclose(fp);
}
END_TEST

START_TEST(default_path_beside_the_record) {
    char out[64], err[256];
    ck_assert_int_eq(predictions_default_path("runs/tiny/dense_qa/result.json", out, sizeof out, err, sizeof err), 0);
    ck_assert_str_eq(out, "runs/tiny/dense_qa/predictions.jsonl");
    ck_assert_int_eq(predictions_default_path("result.json", out, sizeof out, err, sizeof err), 0);
    ck_assert_str_eq(out, "predictions.jsonl");
    ck_assert_int_eq(predictions_default_path("/r.json", out, sizeof out, err, sizeof err), 0);
    ck_assert_str_eq(out, "/predictions.jsonl");
    char small[20];
    ck_assert_int_eq(predictions_default_path("runs/tiny/result.json", small, sizeof small, err, sizeof err), -1);
    ck_assert_msg(strstr(err, "runs/tiny/result.json") != NULL, "message: %s", err);
}
END_TEST

START_TEST(sidecar_path_beside_the_predictions) {
    char out[64], err[256];
    ck_assert_int_eq(predictions_meta_path("runs/tiny/dense_qa/predictions.jsonl", out, sizeof out, err, sizeof err),
                     0);
    ck_assert_str_eq(out, "runs/tiny/dense_qa/predictions.meta.json");
    ck_assert_int_eq(predictions_meta_path("p.jsonl", out, sizeof out, err, sizeof err), 0);
    ck_assert_str_eq(out, "p.meta.json");
    ck_assert_int_eq(predictions_meta_path("out/preds.txt", out, sizeof out, err, sizeof err), 0);
    ck_assert_str_eq(out, "out/preds.txt.meta.json");
    ck_assert_int_eq(predictions_meta_path("dir/.jsonl", out, sizeof out, err, sizeof err), 0);
    ck_assert_str_eq(out, "dir/.jsonl.meta.json");
    char small[20];
    ck_assert_int_eq(predictions_meta_path("runs/tiny/p.jsonl", small, sizeof small, err, sizeof err), -1);
    ck_assert_msg(strstr(err, "runs/tiny/p.jsonl") != NULL, "message: %s", err);
}
END_TEST

int main(void) {
    Suite *s = suite_create("predictions");
    TCase *tc = tcase_create("predictions");
    tcase_add_test(tc, lines_and_sidecar);
    tcase_add_test(tc, write_error_names_the_file);
    tcase_add_test(tc, default_path_beside_the_record);
    tcase_add_test(tc, sidecar_path_beside_the_predictions);
    suite_add_tcase(s, tc);
    TCase *rd = tcase_create("reader");
    tcase_add_checked_fixture(rd, reader_setup, reader_teardown);
    tcase_add_test(rd, reads_the_sidecar_layout);
    tcase_add_test(rd, reads_the_header_line_layout);
    tcase_add_test(rd, refuses_a_missing_or_mismatched_sidecar);
    suite_add_tcase(s, rd);
    return run_test_suite(s);
}
