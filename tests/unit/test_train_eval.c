/* Accuracy during training (model/training/train_eval.c) and its config keys (model/train_config.c): evaluate_every,
 * evaluate_examples and keep_checkpoints are optional (absent = off: configs without them parse as before) and strictly
 * validated; the curve line's fields; the resume truncation of a JSON-lines file by step; the kept-checkpoint names
 * that bin/evaluate --checkpoint accepts; the evaluation schedule (never step 0). */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "model/train_config.h"
#include "model/training/train_eval.h"
#include "pipeline/base/atomic_file.h"
#include "tests/unit/suite_runner.h"

static const char *BASE =
    "{\"loss_on_target_only\": true, \"steps\": 100, \"batch_size\": 16, \"n_microbatch\": 2, \"context\": 256,"
    " \"lr\": 1e-3, \"weight_decay\": 0.01, \"warmup\": 10, \"min_lr_multiplier\": 0.1, \"grad_clip\": 0.25,"
    " \"adam_beta1\": 0.9, \"adam_beta2\": 0.999, \"adam_eps\": 1e-8, \"seed\": 3, \"checkpoint_every\": 50,"
    " \"log_every\": 5, \"precision\": \"fp32\"%s}";

/* BASE with extra keys (", \"k\": v" text) appended to the object. */
static int parse_with(const char *extra, TrainConfig *tc, char *err, size_t errlen) {
    char text[2048];
    snprintf(text, sizeof text, BASE, extra);
    cJSON *j = cJSON_Parse(text);
    ck_assert_ptr_nonnull(j);
    int rc = train_config_from_json(tc, j, "run.json", err, errlen);
    cJSON_Delete(j);
    return rc;
}

START_TEST(keys_absent_mean_off) {
    TrainConfig tc;
    char err[512];
    ck_assert_int_eq(parse_with("", &tc, err, sizeof err), 0);
    ck_assert_int_eq(tc.evaluate_every, 0);
    ck_assert_int_eq(tc.evaluate_examples, 0);
    ck_assert(!tc.keep_checkpoints);
}
END_TEST

START_TEST(keys_parsed) {
    TrainConfig tc;
    char err[512];
    ck_assert_int_eq(parse_with(", \"evaluate_every\": 25, \"evaluate_examples\": 200, \"keep_checkpoints\": true",
                                &tc, err, sizeof err), 0);
    ck_assert_int_eq(tc.evaluate_every, 25);
    ck_assert_int_eq(tc.evaluate_examples, 200);
    ck_assert(tc.keep_checkpoints);
    /* evaluate_every 0 switches evaluation off; evaluate_examples is then unused but still valid */
    ck_assert_int_eq(parse_with(", \"evaluate_every\": 0, \"evaluate_examples\": 10", &tc, err, sizeof err), 0);
}
END_TEST

START_TEST(keys_refused) {
    struct { const char *extra, *expect; } cases[] = {
        {", \"evaluate_every\": -1", "train.evaluate_every: must be >= 0"},
        {", \"evaluate_every\": 2.5", "train.evaluate_every"},
        {", \"evaluate_every\": \"10\"", "train.evaluate_every"},
        {", \"evaluate_every\": 10, \"evaluate_examples\": -5", "train.evaluate_examples: must be >= 0"},
        {", \"evaluate_every\": 10, \"keep_checkpoints\": 1", "train.keep_checkpoints"},
        {", \"keep_checkpoints\": true", "train.keep_checkpoints: needs evaluate_every > 0"},
        {", \"evaluate_every\": 0, \"keep_checkpoints\": true", "train.keep_checkpoints: needs evaluate_every > 0"},
        {", \"evaluate_evry\": 10", "train.evaluate_evry: unknown key (did you mean train.evaluate_every?)"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        TrainConfig tc;
        char err[512] = "";
        ck_assert_msg(parse_with(cases[i].extra, &tc, err, sizeof err) == -1, "case %zu accepted", i);
        ck_assert_msg(strstr(err, cases[i].expect) && strstr(err, "run.json"), "case %zu message: %s", i, err);
    }
}
END_TEST

START_TEST(schedule_never_step_zero) {
    TrainEval te;
    memset(&te, 0, sizeof te);
    ck_assert(!train_eval_due(&te, 5)); /* off */
    te.every = 5;
    ck_assert(!train_eval_due(&te, 0));
    ck_assert(!train_eval_due(&te, 4));
    ck_assert(train_eval_due(&te, 5));
    ck_assert(train_eval_due(&te, 10));
    ck_assert(!train_eval_due(&te, 11));
}
END_TEST

START_TEST(curve_line_fields) {
    SetEval sets[EVAL_N_SETS];
    memset(sets, 0, sizeof sets);
    sets[EVAL_INTERPOLATE] = (SetEval){.n = 200, .correct = 50, .accuracy = 0.25, .mean_answer_loss = 1.5};
    sets[EVAL_EXTRAPOLATE] = (SetEval){.n = 200, .correct = 0, .accuracy = 0.0, .mean_answer_loss = 7.25};
    char *line = train_eval_curve_line(40, 81920, sets);
    ck_assert_ptr_null(strchr(line, '\n'));
    cJSON *j = cJSON_Parse(line);
    ck_assert_ptr_nonnull(j);
    ck_assert_double_eq(cJSON_GetObjectItem(j, "step")->valuedouble, 40);
    ck_assert_double_eq(cJSON_GetObjectItem(j, "tokens")->valuedouble, 81920);
    const cJSON *in = cJSON_GetObjectItem(cJSON_GetObjectItem(j, "sets"), "interpolate");
    const cJSON *ex = cJSON_GetObjectItem(cJSON_GetObjectItem(j, "sets"), "extrapolate");
    ck_assert_double_eq(cJSON_GetObjectItem(in, "n")->valuedouble, 200);
    ck_assert_double_eq(cJSON_GetObjectItem(in, "correct")->valuedouble, 50);
    ck_assert_double_eq(cJSON_GetObjectItem(in, "accuracy")->valuedouble, 0.25);
    ck_assert_double_eq(cJSON_GetObjectItem(in, "mean_answer_loss")->valuedouble, 1.5);
    ck_assert_double_eq(cJSON_GetObjectItem(ex, "mean_answer_loss")->valuedouble, 7.25);
    ck_assert_int_eq(cJSON_GetArraySize(j), 3);
    cJSON_Delete(j);
    cJSON_free(line);
}
END_TEST

START_TEST(jsonl_truncation_by_step) {
    char dir[] = "/tmp/test_train_eval.XXXXXX", path[256], err[512];
    ck_assert_ptr_nonnull(mkdtemp(dir));
    snprintf(path, sizeof path, "%s/curve.jsonl", dir);
    ck_assert_int_eq(jsonl_keep_steps_upto(path, 5, err, sizeof err), 0); /* absent: nothing to do */
    ck_assert(!file_exists(path));
    const char *text = "{\"step\": 4, \"a\": 1}\n{\"step\": 8}\n{\"step\": 12}\n{\"step\": 1";
    ck_assert_int_eq(write_file_atomic(path, text, strlen(text), err, sizeof err), 0);
    ck_assert_int_eq(jsonl_keep_steps_upto(path, 8, err, sizeof err), 0);
    char *got = NULL;
    size_t n = 0;
    ck_assert_int_eq(read_file_all(path, &got, &n, err, sizeof err), 0);
    /* later steps and a torn last line are dropped */
    ck_assert_str_eq(got, "{\"step\": 4, \"a\": 1}\n{\"step\": 8}\n");
    free(got);
    ck_assert_int_eq(jsonl_keep_steps_upto(path, 0, err, sizeof err), 0);
    ck_assert_int_eq(read_file_all(path, &got, &n, err, sizeof err), 0);
    ck_assert_str_eq(got, "");
    free(got);
    unlink(path);
    rmdir(dir);
}
END_TEST

START_TEST(checkpoint_names) {
    ck_assert(train_eval_checkpoint_name_ok("step1"));
    ck_assert(train_eval_checkpoint_name_ok("step250"));
    const char *bad[] = {"step", "steps", "Step1", "step1/..", "../step1", "step-1", "step1 ", "", "1"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        ck_assert_msg(!train_eval_checkpoint_name_ok(bad[i]), "accepted \"%s\"", bad[i]);
}
END_TEST

int main(void) {
    Suite *s = suite_create("train_eval");
    TCase *tc = tcase_create("train_eval");
    tcase_add_test(tc, keys_absent_mean_off);
    tcase_add_test(tc, keys_parsed);
    tcase_add_test(tc, keys_refused);
    tcase_add_test(tc, schedule_never_step_zero);
    tcase_add_test(tc, curve_line_fields);
    tcase_add_test(tc, jsonl_truncation_by_step);
    tcase_add_test(tc, checkpoint_names);
    suite_add_tcase(s, tc);
    return run_test_suite(s);
}
