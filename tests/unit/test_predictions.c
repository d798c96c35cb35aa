/* predictions.jsonl writers (pipeline/predictions.c): one valid JSON object per line, strings escaped (quotes,
 * backslashes, newlines, control and non-ASCII characters survive a parse), exactly the schema's keys with their
 * types, greedy_correct only for greedy-checked examples, losses within cJSON's number printing (it prints 15 digits
 * when they read back within one ulp, else 17: 1e-15 relative); a write error names the file;
 * the default path beside the result record. */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "pipeline/predictions.h"
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

START_TEST(header_and_lines_round_trip) {
    FILE *fp = tmpfile();
    ck_assert(fp != NULL);
    char err[256];
    RunProvenance prov;
    run_provenance_init(&prov);
    prov.n_overrides = 1;
    snprintf(prov.overrides[0], sizeof prov.overrides[0], "train.seed=2");
    prov.seed = 2;
    snprintf(prov.run_config, sizeof prov.run_config, "dense_qa");
    PredictionsHeader h = {"tiny", "dense_qa.seed2", "abc123-dirty", "cpu", "AMD EPYC \"2 cores\"", "0123abcd", &prov};
    ck_assert_int_eq(predictions_write_header(fp, "p.jsonl", &h, err, sizeof err), 0);
    /* quote, backslash, newline, tab, ^A, ▁ */
    const char *q = "Q: What is \"-2\" \\ 3?\nTab\there \x01 \xe2\x96\x81 A:";
    PredictionLine a = {"interpolate", 0, "arithmetic__add_or_sub", q, "-5", "-6", false, 12.345678901234567, 0};
    PredictionLine b = {"extrapolate", 41, "arithmetic__mul", "Q: 1*1 A:", "1", "1", true, 0.1 + 0.2, -1};
    ck_assert_int_eq(predictions_write_line(fp, "p.jsonl", &a, err, sizeof err), 0);
    ck_assert_int_eq(predictions_write_line(fp, "p.jsonl", &b, err, sizeof err), 0);

    cJSON *l[4];
    ck_assert_int_eq(read_lines(fp, l, 4), 3);
    char keys[512];
    keys_of(l[0], keys, sizeof keys);
    ck_assert_str_eq(keys, "schema,schema_version,experiment,run,code_version,backend,hardware,config_sha256,overrides,seed,"
                           "run_config");
    const cJSON *ov = cJSON_GetObjectItem(l[0], "overrides");
    ck_assert_int_eq(cJSON_GetArraySize(ov), 1);
    ck_assert_str_eq(cJSON_GetArrayItem(ov, 0)->valuestring, "train.seed=2");
    ck_assert_int_eq(cJSON_GetObjectItem(l[0], "seed")->valueint, 2);
    ck_assert_str_eq(str(l[0], "run_config"), "dense_qa");
    ck_assert_str_eq(str(l[0], "schema"), PREDICTIONS_SCHEMA);
    ck_assert_int_eq(cJSON_GetObjectItem(l[0], "schema_version")->valueint, PREDICTIONS_SCHEMA_VERSION);
    ck_assert_str_eq(str(l[0], "hardware"), "AMD EPYC \"2 cores\"");
    ck_assert_str_eq(str(l[0], "config_sha256"), "0123abcd");

    keys_of(l[1], keys, sizeof keys);
    ck_assert_str_eq(keys, "set,index,module,question,answer,predicted,correct,answer_loss,greedy_correct");
    ck_assert_str_eq(str(l[1], "question"), q);
    ck_assert_str_eq(str(l[1], "set"), "interpolate");
    ck_assert_str_eq(str(l[1], "predicted"), "-6");
    ck_assert(cJSON_IsFalse(cJSON_GetObjectItem(l[1], "correct")));
    ck_assert(cJSON_IsFalse(cJSON_GetObjectItem(l[1], "greedy_correct")));
    ck_assert(fabs(cJSON_GetObjectItem(l[1], "answer_loss")->valuedouble / 12.345678901234567 - 1) < 1e-15);

    keys_of(l[2], keys, sizeof keys); /* not greedy-checked: no greedy_correct */
    ck_assert_str_eq(keys, "set,index,module,question,answer,predicted,correct,answer_loss");
    ck_assert_int_eq(cJSON_GetObjectItem(l[2], "index")->valueint, 41);
    ck_assert(cJSON_IsTrue(cJSON_GetObjectItem(l[2], "correct")));
    ck_assert(fabs(cJSON_GetObjectItem(l[2], "answer_loss")->valuedouble / (0.1 + 0.2) - 1) < 1e-15);
    for (int i = 0; i < 3; i++) cJSON_Delete(l[i]);
    fclose(fp);
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

int main(void) {
    Suite *s = suite_create("predictions");
    TCase *tc = tcase_create("predictions");
    tcase_add_test(tc, header_and_lines_round_trip);
    tcase_add_test(tc, write_error_names_the_file);
    tcase_add_test(tc, default_path_beside_the_record);
    suite_add_tcase(s, tc);
    return run_test_suite(s);
}
