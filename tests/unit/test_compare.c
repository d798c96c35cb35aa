/* bin/compare on hand-made records: identical -> 0, a metric outside its tolerance -> 1, a change inside it -> 0,
 * different config hash / dataset hash / missing record / bad tolerances -> 2. */
#define STAGE_NO_MAIN
#include "stages/compare.c"

#include <check.h>

#include "tests/unit/record_test_util.h"
#include "tests/unit/suite_runner.h"

static const char *TOL =
    "{\"comment\": \"unit test\", \"tolerances\": {"
    "\"accuracy\": {\"abs\": 0.02, \"comment\": \"two points\"},"
    "\"mean_answer_loss\": {\"abs\": 0.01, \"comment\": \"x\"},"
    "\"final_train_loss\": {\"abs\": 0.001, \"comment\": \"x\"},"
    "\"count\": {\"abs\": 0, \"comment\": \"exact\"},"
    "\"greedy_disagreements\": {\"abs\": 0, \"comment\": \"must stay 0\"}}}";

static char g_dir[256], g_base[512], g_runs[512];

static void setup_dirs(void) {
    rtu_tmpdir(g_dir, sizeof g_dir, "test_compare");
    snprintf(g_base, sizeof g_base, "%s/baselines", g_dir);
    snprintf(g_runs, sizeof g_runs, "%s/runs", g_dir);
    char p[700];
    snprintf(p, sizeof p, "%s/tolerances.json", g_base);
    rtu_write(p, TOL);
}

static void save(const ResultRecord *r, int as_baseline) {
    char p[700], err[512];
    if (as_baseline) snprintf(p, sizeof p, "%s/%s.result.json", g_base, r->run);
    else snprintf(p, sizeof p, "%s/%s/result.json", g_runs, r->run);
    ck_assert_msg(result_record_save(r, p, err, sizeof err) == 0, "%s", err);
}

static int run_compare(const char *tolerances) {
    char a1[600], a2[600], a3[700];
    snprintf(a1, sizeof a1, "--baselines=%s", g_base);
    snprintf(a2, sizeof a2, "--runs=%s", g_runs);
    snprintf(a3, sizeof a3, "--tolerances=%s", tolerances ? tolerances : "");
    char *argv[] = {"compare", a1, a2, a3, NULL};
    fflush(stdout);
    return compare_main(tolerances ? 4 : 3, argv);
}

/* A current dense_qa record with `correct` right answers per module against the saved baseline: bin/compare must exit
 * with `want`. */
static void expect_dense_qa_compare(int correct, const char *tolerances, int want) {
    ResultRecord cur;
    rtu_record(&cur, "dense_qa", "dense", "qa", correct);
    save(&cur, 0);
    int got = run_compare(tolerances);
    ck_assert_msg(got == want, "compare exit %d, want %d (current %d correct, tolerances %s)", got, want, correct,
                  tolerances ? tolerances : "default");
    result_record_free(&cur);
}

START_TEST(identical_is_zero) {
    setup_dirs();
    ResultRecord r;
    rtu_record(&r, "dense_qa", "dense", "qa", 40);
    save(&r, 1);
    save(&r, 0);
    ResultRecord r2;
    rtu_record(&r2, "moeut_answer", "moeut", "answer_only", 60);
    save(&r2, 1);
    save(&r2, 0);
    ck_assert_int_eq(run_compare(NULL), 0);
    result_record_free(&r);
    result_record_free(&r2);
    remove_tree(g_dir);
}
END_TEST

START_TEST(regression_is_one_and_small_change_is_zero) {
    setup_dirs();
    ResultRecord base, cur;
    rtu_record(&base, "dense_qa", "dense", "qa", 40);
    save(&base, 1);
    /* 1 more correct of 100 in every module: +0.01 accuracy, inside the 0.02 tolerance */
    expect_dense_qa_compare(41, NULL, 0);
    /* 5 fewer correct: -0.05, outside */
    expect_dense_qa_compare(35, NULL, 1);
    /* only the final train loss moves beyond its tolerance */
    rtu_record(&cur, "dense_qa", "dense", "qa", 40);
    cur.training.final_train_loss += 0.01;
    save(&cur, 0);
    ck_assert_int_eq(run_compare(NULL), 1);
    /* a greedy disagreement is a regression even with equal accuracies */
    cur.training.final_train_loss = base.training.final_train_loss;
    cur.evaluation.sets[0].greedy_agree = cur.evaluation.sets[0].greedy_n - 1;
    save(&cur, 0);
    ck_assert_int_eq(run_compare(NULL), 1);
    result_record_free(&cur);
    /* the CI rule: -0.05 is inside the baseline's Wilson interval (n=300 pooled, but modules n=100) */
    char tol2[700];
    snprintf(tol2, sizeof tol2, "%s/tol_ci.json", g_dir);
    char *t = strdup(TOL);
    char *at = strstr(t, "\"two points\"}");
    ck_assert(at);
    char buf[2048];
    snprintf(buf, sizeof buf, "%.*s\"two points\", \"within_baseline_ci95\": true}%s", (int)(at - t), t,
             at + strlen("\"two points\"}"));
    rtu_write(tol2, buf);
    free(t);
    expect_dense_qa_compare(35, tol2, 0);
    /* but not a drop far outside the interval */
    expect_dense_qa_compare(10, tol2, 1);
    result_record_free(&base);
    remove_tree(g_dir);
}
END_TEST

/* --only restricts the comparison to the named runs; naming a run without a baseline is "missing" (2). */
START_TEST(only_selects_runs) {
    setup_dirs();
    ResultRecord a, b, b_bad;
    rtu_record(&a, "dense_qa", "dense", "qa", 40);
    rtu_record(&b, "moeut_qa", "moeut", "qa", 40);
    rtu_record(&b_bad, "moeut_qa", "moeut", "qa", 10);
    save(&a, 1);
    save(&a, 0);
    save(&b, 1);
    save(&b_bad, 0); /* moeut_qa regressed */
    char a1[600], a2[600];
    snprintf(a1, sizeof a1, "--baselines=%s", g_base);
    snprintf(a2, sizeof a2, "--runs=%s", g_runs);
    char *all[] = {"compare", a1, a2, NULL};
    ck_assert_int_eq(compare_main(3, all), 1);
    char *only_dense[] = {"compare", a1, a2, "--only", "dense_qa", NULL};
    /* stdout to a file: the note on moeut_qa, which has a baseline, must not claim it has none */
    char out_path[700];
    snprintf(out_path, sizeof out_path, "%s/stdout.txt", g_dir);
    fflush(stdout);
    int saved = dup(1);
    FILE *cap = fopen(out_path, "w");
    ck_assert_ptr_nonnull(cap);
    dup2(fileno(cap), 1);
    int rc = compare_main(5, only_dense);
    fflush(stdout);
    dup2(saved, 1);
    close(saved);
    fclose(cap);
    ck_assert_int_eq(rc, 0);
    char *text = rtu_read(out_path);
    const char *note = strstr(text, "note:") ? strstr(text, "note:") : "(no note)";
    ck_assert_msg(strstr(text, "moeut_qa/result.json not compared (not in --only)"), "%.300s", note);
    ck_assert_msg(!strstr(text, "no baseline"), "%.300s", note);
    free(text);
    char *only_moeut[] = {"compare", a1, a2, "--only=moeut_qa", NULL};
    ck_assert_int_eq(compare_main(4, only_moeut), 1);
    char *unknown[] = {"compare", a1, a2, "--only=dense_qa,moeut_answer", NULL};
    ck_assert_int_eq(compare_main(4, unknown), 2);
    result_record_free(&a);
    result_record_free(&b);
    result_record_free(&b_bad);
    remove_tree(g_dir);
}
END_TEST

START_TEST(unlike_or_missing_is_two) {
    setup_dirs();
    ResultRecord base, cur;
    rtu_record(&base, "dense_qa", "dense", "qa", 40);
    save(&base, 1);
    /* missing run record */
    ck_assert_int_eq(run_compare(NULL), 2);
    /* different config hash, otherwise identical */
    rtu_record(&cur, "dense_qa", "dense", "qa", 40);
    rtu_sha(cur.config_sha256, '9');
    save(&cur, 0);
    ck_assert_int_eq(run_compare(NULL), 2);
    /* different extrapolate shard */
    rtu_sha(cur.config_sha256, 'a');
    rtu_sha(cur.extrapolate_sha256, '0');
    save(&cur, 0);
    ck_assert_int_eq(run_compare(NULL), 2);
    /* different tokenizer */
    rtu_sha(cur.extrapolate_sha256, 'd');
    rtu_sha(cur.tokenizer_sha256, '1');
    save(&cur, 0);
    ck_assert_int_eq(run_compare(NULL), 2);
    /* back to identical: 0 */
    rtu_sha(cur.tokenizer_sha256, 'e');
    save(&cur, 0);
    ck_assert_int_eq(run_compare(NULL), 0);
    /* a tolerances file without one class cannot be used */
    char tol2[700];
    snprintf(tol2, sizeof tol2, "%s/tol_bad.json", g_dir);
    rtu_write(tol2, "{\"comment\": \"x\", \"tolerances\": {\"accuracy\": {\"abs\": 0.02, \"comment\": \"x\"}}}");
    ck_assert_int_eq(run_compare(tol2), 2);
    /* an empty baselines directory */
    char p[700];
    snprintf(p, sizeof p, "%s/%s.result.json", g_base, "dense_qa");
    unlink(p);
    ck_assert_int_eq(run_compare(NULL), 2);
    result_record_free(&cur);
    result_record_free(&base);
    remove_tree(g_dir);
}
END_TEST

int main(void) {
    Suite *s = suite_create("compare");
    TCase *tc = tcase_create("compare");
    tcase_add_test(tc, identical_is_zero);
    tcase_add_test(tc, regression_is_one_and_small_change_is_zero);
    tcase_add_test(tc, only_selects_runs);
    tcase_add_test(tc, unlike_or_missing_is_two);
    suite_add_tcase(s, tc);
    return run_test_suite(s);
}
