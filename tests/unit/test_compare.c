/* bin/compare on hand-made records: identical -> 0, a metric WORSE than its tolerance -> 1, a change inside it -> 0,
 * BETTER -> 0 (1 with --strict), different config hash / dataset hash / missing record / bad tolerances -> 2 (a
 * different config hash with --config-change=note -> a note and 0), several baseline seeds -> the seed-spread rule. */
#define STAGE_NO_MAIN
#include "stages/compare.c"

#include <check.h>
#include <stdarg.h>

#include "tests/unit/record_test_util.h"
#include "tests/unit/suite_runner.h"

static const char *TOL =
    "{\"comment\": \"unit test\", \"tolerances\": {"
    "\"accuracy\": {\"abs\": 0.02, \"comment\": \"two points\"},"
    "\"mean_answer_loss\": {\"abs\": 0.01, \"comment\": \"x\"},"
    "\"module_mean_answer_loss\": {\"abs\": 0.01, \"comment\": \"x\"},"
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

/* Runs compare_main with extra arguments after --baselines/--runs, stdout captured into *text (caller frees). */
static int run_compare_capture(char **text, int n_extra, ...) {
    char a1[600], a2[600], out_path[700];
    snprintf(a1, sizeof a1, "--baselines=%s", g_base);
    snprintf(a2, sizeof a2, "--runs=%s", g_runs);
    char *argv[16] = {"compare", a1, a2};
    va_list ap;
    va_start(ap, n_extra);
    for (int i = 0; i < n_extra && i < 12; i++) argv[3 + i] = va_arg(ap, char *);
    va_end(ap);
    snprintf(out_path, sizeof out_path, "%s/stdout.txt", g_dir);
    fflush(stdout);
    int saved = dup(1);
    FILE *cap = fopen(out_path, "w");
    ck_assert_ptr_nonnull(cap);
    dup2(fileno(cap), 1);
    int rc = compare_main(3 + n_extra, argv);
    fflush(stdout);
    dup2(saved, 1);
    close(saved);
    fclose(cap);
    *text = rtu_read(out_path);
    return rc;
}

/* Better than the baseline beyond the tolerance is reported as BETTER and passes, unless --strict. */
START_TEST(better_is_reported_not_failed) {
    setup_dirs();
    ResultRecord base, cur;
    rtu_record(&base, "dense_qa", "dense", "qa", 40);
    save(&base, 1);
    rtu_record(&cur, "dense_qa", "dense", "qa", 50); /* +0.10 accuracy everywhere, tolerance 0.02 */
    cur.training.final_train_loss -= 0.1;           /* and a lower loss, tolerance 0.001 */
    save(&cur, 0);
    char *text = NULL;
    ck_assert_int_eq(run_compare_capture(&text, 0), 0);
    ck_assert_msg(strstr(text, "BETTER (not a failure)"), "%.2000s", text);
    ck_assert_msg(!strstr(text, "WORSE"), "%.2000s", text);
    free(text);
    ck_assert_int_eq(run_compare_capture(&text, 1, "--strict"), 1);
    ck_assert_msg(strstr(text, "OUTSIDE tolerances"), "%.2000s", text);
    free(text);
    /* better accuracy but one loss worse: the worse one still fails */
    cur.evaluation.sets[1].modules[0].mean_answer_loss += 0.05;
    save(&cur, 0);
    ck_assert_int_eq(run_compare_capture(&text, 0), 1);
    ck_assert_msg(strstr(text, "WORSE"), "%.2000s", text);
    free(text);
    /* a changed count is neither better nor worse: it fails without --strict */
    cur.evaluation.sets[1].modules[0].mean_answer_loss -= 0.05;
    cur.training.steps += 1;
    save(&cur, 0);
    ck_assert_int_eq(run_compare_capture(&text, 0), 1);
    ck_assert_msg(strstr(text, "CHANGED"), "%.2000s", text);
    free(text);
    result_record_free(&cur);
    result_record_free(&base);
    remove_tree(g_dir);
}
END_TEST

/* A different config_sha256: 2 by default; with --config-change=note one note naming the run and the changed key,
 * and 0; a dataset change stays 2 even then; an unknown --config-change value is refused. */
START_TEST(config_change_note) {
    setup_dirs();
    ResultRecord base, cur;
    rtu_record(&base, "dense_qa", "dense", "qa", 40);
    save(&base, 1);
    rtu_record(&cur, "dense_qa", "dense", "qa", 5); /* far worse, but of another config: not compared */
    rtu_sha(cur.config_sha256, '9');
    cJSON_ReplaceItemInObject(cJSON_GetObjectItem(cur.config, "train"), "steps", cJSON_CreateNumber(9));
    save(&cur, 0);
    char *text = NULL;
    ck_assert_int_eq(run_compare_capture(&text, 0), 2);
    free(text);
    ck_assert_int_eq(run_compare_capture(&text, 1, "--config-change=note"), 0);
    ck_assert_msg(strstr(text, "note: dense_qa: not compared: its config changed since the baseline (train.steps 10 -> 9;"),
                  "%.2000s", text);
    ck_assert_msg(!strstr(text, "WORSE"), "%.2000s", text);
    ck_assert_msg(strstr(text, "compare: 1 run(s) (1 of them not compared: config changed since the baseline)"), "%.2000s",
                  text);
    free(text);
    ck_assert_int_eq(run_compare_capture(&text, 1, "--config-change=error"), 2);
    free(text);
    rtu_sha(cur.train_sha256, '0');
    save(&cur, 0);
    ck_assert_int_eq(run_compare_capture(&text, 1, "--config-change=note"), 2);
    free(text);
    ck_assert_int_eq(run_compare_capture(&text, 1, "--config-change=ignore"), 2);
    free(text);
    result_record_free(&cur);
    result_record_free(&base);
    remove_tree(g_dir);
}
END_TEST

static const char *TOL_SEEDS =
    "{\"comment\": \"unit test\", \"seed_spread\": {\"k\": 3, \"comment\": \"three sd\"}, \"tolerances\": {"
    "\"accuracy\": {\"abs\": 0.02, \"comment\": \"two points\"},"
    "\"mean_answer_loss\": {\"abs\": 0.01, \"comment\": \"x\"},"
    "\"module_mean_answer_loss\": {\"abs\": 0.01, \"rel\": 0.02, \"comment\": \"x\"},"
    "\"final_train_loss\": {\"abs\": 0.001, \"comment\": \"x\"},"
    "\"count\": {\"abs\": 0, \"comment\": \"exact\"},"
    "\"greedy_disagreements\": {\"abs\": 0, \"comment\": \"must stay 0\"}}}";

/* Three baseline seeds with final train losses 1.0, 1.1, 1.2 (mean 1.1, sd 0.1): with k = 3 a new seed may lie within
 * 1.1 +- 0.3 although the declared tolerance is 0.001; beyond it is WORSE. Every seed's run is compared. */
START_TEST(seed_spread_rule) {
    setup_dirs();
    char tol[700];
    snprintf(tol, sizeof tol, "%s/tolerances.json", g_base);
    rtu_write(tol, TOL_SEEDS);
    const char *names[3] = {"dense_qa", "dense_qa.seed2", "dense_qa.seed3"};
    ResultRecord r[3];
    for (int i = 0; i < 3; i++) {
        rtu_record(&r[i], names[i], "dense", "qa", 40);
        r[i].training.final_train_loss = 1.0 + 0.1 * i;
        save(&r[i], 1);
        save(&r[i], 0);
    }
    char *text = NULL;
    ck_assert_int_eq(run_compare_capture(&text, 0), 0);
    ck_assert_msg(strstr(text, "== dense_qa.seed3: mean of 3 seeds' baselines"), "%.2000s", text);
    ck_assert_msg(strstr(text, "compare: 3 run(s)"), "%.2000s", text);
    free(text);
    /* 1.35: 0.25 from the mean, inside 3 sd */
    r[2].training.final_train_loss = 1.35;
    save(&r[2], 0);
    ck_assert_int_eq(run_compare_capture(&text, 0), 0);
    free(text);
    /* 1.45: 0.35 from the mean, outside 3 sd (0.30) */
    r[2].training.final_train_loss = 1.45;
    save(&r[2], 0);
    ck_assert_int_eq(run_compare_capture(&text, 1, "--only-failures"), 1);
    ck_assert_msg(strstr(text, "training.final_train_loss") && strstr(text, "WORSE"), "%.2000s", text);
    free(text);
    /* --only by run config selects its seeds too */
    ck_assert_int_eq(run_compare_capture(&text, 1, "--only=dense_qa"), 1);
    ck_assert_msg(strstr(text, "compare: 3 run(s)"), "%.2000s", text);
    free(text);
    /* the relative tolerance: module losses 0.5..0.7 identical across seeds (sd 0); 2% of 0.7 = 0.014 > abs 0.01 */
    r[2].training.final_train_loss = 1.2;
    r[2].evaluation.sets[0].modules[2].mean_answer_loss += 0.013;
    save(&r[2], 0);
    ck_assert_int_eq(run_compare_capture(&text, 0), 0);
    free(text);
    r[2].evaluation.sets[0].modules[2].mean_answer_loss += 0.002; /* 0.015 > 0.014 */
    save(&r[2], 0);
    ck_assert_int_eq(run_compare_capture(&text, 0), 1);
    free(text);
    /* with one seed only, today's rule: the declared 0.001 */
    char p[700];
    for (int i = 1; i < 3; i++) {
        snprintf(p, sizeof p, "%s/%s.result.json", g_base, names[i]);
        unlink(p);
        snprintf(p, sizeof p, "%s/%s", g_runs, names[i]);
        remove_tree(p);
    }
    r[0].training.final_train_loss = 1.0 + 0.002;
    save(&r[0], 0);
    ck_assert_int_eq(run_compare_capture(&text, 0), 1);
    free(text);
    /* several seeds need "seed_spread" in the tolerances file */
    save(&r[1], 1);
    rtu_write(tol, TOL);
    ck_assert_int_eq(run_compare_capture(&text, 0), 2);
    free(text);
    for (int i = 0; i < 3; i++) result_record_free(&r[i]);
    remove_tree(g_dir);
}
END_TEST

/* Seeds' baselines are pooled only when they share the data and every count (their config_sha256 may differ). */
START_TEST(seed_baselines_must_match) {
    setup_dirs();
    char tol[700];
    snprintf(tol, sizeof tol, "%s/tolerances.json", g_base);
    rtu_write(tol, TOL_SEEDS);
    ResultRecord a, b;
    rtu_record(&a, "dense_qa", "dense", "qa", 40);
    rtu_record(&b, "dense_qa.seed2", "dense", "qa", 40);
    rtu_sha(b.config_sha256, '7'); /* another --set train.seed: fine */
    save(&a, 1);
    save(&a, 0);
    save(&b, 1);
    save(&b, 0);
    char *text = NULL;
    ck_assert_int_eq(run_compare_capture(&text, 0), 0);
    free(text);
    rtu_sha(b.train_sha256, '0'); /* trained on other data: not poolable, even behind a config difference */
    save(&b, 1);
    ck_assert_int_eq(run_compare_capture(&text, 0), 2);
    free(text);
    rtu_sha(b.train_sha256, 'b');
    b.n_params += 1; /* another model size */
    save(&b, 1);
    ck_assert_int_eq(run_compare_capture(&text, 0), 2);
    free(text);
    result_record_free(&a);
    result_record_free(&b);
    remove_tree(g_dir);
}
END_TEST

/* The new tolerances fields are validated strictly: each bad file gives exit 2. */
START_TEST(tolerances_validated) {
    setup_dirs();
    ResultRecord base;
    rtu_record(&base, "dense_qa", "dense", "qa", 40);
    save(&base, 1);
    save(&base, 0);
    static const char *const BAD[][2] = {
        {"\"rel\": 0.02", "\"rel\": -0.02"},          /* negative */
        {"\"rel\": 0.02", "\"rel\": \"2%\""},         /* not a number */
        {"\"rel\": 0.02", "\"rell\": 0.02"},          /* unknown key */
        {"\"module_mean_answer_loss\"", "\"module_loss\""}, /* a class misspelt (so also missing) */
        {"\"k\": 3", "\"k\": 0"},                      /* k must be positive */
        {"\"k\": 3", "\"k\": 3, \"sd\": 1"},          /* unknown key in seed_spread */
        {", \"comment\": \"three sd\"}", "}"},         /* seed_spread without its comment */
        {"\"abs\": 0, \"comment\": \"exact\"", "\"abs\": 0, \"rel\": 0.1, \"comment\": \"exact\""}, /* rel on counts */
    };
    char path[700], buf[2048];
    snprintf(path, sizeof path, "%s/tol_new.json", g_dir);
    rtu_write(path, TOL_SEEDS);
    ck_assert_int_eq(run_compare(path), 0); /* the good file passes */
    for (size_t i = 0; i < sizeof BAD / sizeof BAD[0]; i++) {
        const char *at = strstr(TOL_SEEDS, BAD[i][0]);
        ck_assert(at);
        snprintf(buf, sizeof buf, "%.*s%s%s", (int)(at - TOL_SEEDS), TOL_SEEDS, BAD[i][1], at + strlen(BAD[i][0]));
        rtu_write(path, buf);
        ck_assert_msg(run_compare(path) == 2, "accepted: %s", buf);
    }
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
    tcase_add_test(tc, better_is_reported_not_failed);
    tcase_add_test(tc, config_change_note);
    tcase_add_test(tc, seed_spread_rule);
    tcase_add_test(tc, seed_baselines_must_match);
    tcase_add_test(tc, tolerances_validated);
    suite_add_tcase(s, tc);
    return run_test_suite(s);
}
