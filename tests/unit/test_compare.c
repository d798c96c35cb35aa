/* bin/compare's gate (pipeline/records/compare_gate.h: the status is the exit status) on hand-made records: identical -> 0,
 * a metric WORSE than its tolerance -> 1, a change inside it -> 0, BETTER -> 1 (0 with --allow-better), different config
 * hash / dataset hash / missing record / bad tolerances -> 2 (a different config hash with --config-change=note -> a
 * note and 0), several baseline seeds -> the seed-spread rule; and --diff (pipeline/records/run_diff.h). */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "pipeline/base/atomic_file.h"
#include "pipeline/records/compare_gate.h"
#include "pipeline/records/predictions.h"
#include "pipeline/records/run_diff.h"
#include "pipeline/base/sha256.h"
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
    /* named like reports/baselines/EXP and runs/EXP: a record names the experiment of the directory holding it */
    snprintf(g_base, sizeof g_base, "%s/baselines/unit", g_dir);
    snprintf(g_runs, sizeof g_runs, "%s/runs/unit", g_dir);
    char p[700];
    snprintf(p, sizeof p, "%s/tolerances.json", g_base);
    rtu_write(p, TOL);
}

static void save(ResultRecord *r, int as_baseline) {
    char p[700];
    if (as_baseline) snprintf(p, sizeof p, "%s/%s.result.json", g_base, r->run);
    else snprintf(p, sizeof p, "%s/%s/result.json", g_runs, r->run);
    rtu_save(r, p);
}

/* The gate on g_base and g_runs (bin/compare --baselines --runs [--tolerances]); returns its exit status. */
static int run_compare(const char *tolerances) {
    CompareRequest req = {.baselines = g_base, .runs = g_runs, .tolerances = tolerances};
    fflush(stdout);
    return compare_gate(&req);
}

/* The gate on g_base and g_runs with --only (NULL: every baseline). */
static int run_compare_only(const char *only) {
    CompareRequest req = {.baselines = g_base, .runs = g_runs, .only = only};
    fflush(stdout);
    return compare_gate(&req);
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
    ck_assert_int_eq(run_compare_only(NULL), 1);
    /* stdout to a file: the note on moeut_qa, which has a baseline, must not claim it has none */
    char out_path[700];
    snprintf(out_path, sizeof out_path, "%s/stdout.txt", g_dir);
    fflush(stdout);
    int saved = dup(1);
    FILE *cap = fopen(out_path, "w");
    ck_assert_ptr_nonnull(cap);
    dup2(fileno(cap), 1);
    int rc = run_compare_only("dense_qa");
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
    ck_assert_int_eq(run_compare_only("moeut_qa"), 1);
    ck_assert_int_eq(run_compare_only("dense_qa,moeut_answer"), 2); /* a run without a baseline */
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
    /* different config (so config hash), otherwise identical */
    rtu_record(&cur, "dense_qa", "dense", "qa", 40);
    cJSON_ReplaceItemInObject(cJSON_GetObjectItem(cur.config, "train"), "steps", cJSON_CreateNumber(9));
    save(&cur, 0);
    ck_assert_int_eq(run_compare(NULL), 2);
    /* different extrapolate shard */
    cJSON_ReplaceItemInObject(cJSON_GetObjectItem(cur.config, "train"), "steps", cJSON_CreateNumber(10));
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

/* The options of bin/compare: none (--config-change=error), --allow-better, --only-failures, --config-change=note. */
#define NO_OPTIONS ((CompareRequest){0})
#define ALLOW_BETTER ((CompareRequest){.options.allow_better = true})
#define ONLY_FAILURES ((CompareRequest){.options.only_failures = true})
#define CONFIG_CHANGE_NOTE ((CompareRequest){.options.config_change_note = true})

/* Runs the gate on g_base and g_runs with req's --only and options, stdout captured into *text (caller frees). */
static int run_compare_capture(char **text, CompareRequest req) {
    char out_path[700];
    req.baselines = g_base;
    req.runs = g_runs;
    snprintf(out_path, sizeof out_path, "%s/stdout.txt", g_dir);
    fflush(stdout);
    int saved = dup(1);
    FILE *cap = fopen(out_path, "w");
    ck_assert_ptr_nonnull(cap);
    dup2(fileno(cap), 1);
    int rc = compare_gate(&req);
    fflush(stdout);
    dup2(saved, 1);
    close(saved);
    fclose(cap);
    *text = rtu_read(out_path);
    return rc;
}

/* Better than the baseline beyond the tolerance is BETTER and fails (the results moved beyond the measured spread),
 * unless --allow-better, which reports it and passes. */
START_TEST(better_fails_unless_allowed) {
    setup_dirs();
    ResultRecord base, cur;
    rtu_record(&base, "dense_qa", "dense", "qa", 40);
    save(&base, 1);
    rtu_record(&cur, "dense_qa", "dense", "qa", 50); /* +0.10 accuracy everywhere, tolerance 0.02 */
    cur.training.final_train_loss -= 0.1;           /* and a lower loss, tolerance 0.001 */
    save(&cur, 0);
    char *text = NULL;
    ck_assert_int_eq(run_compare_capture(&text, ALLOW_BETTER), 0);
    ck_assert_msg(strstr(text, "BETTER (allowed: --allow-better)"), "%.2000s", text);
    ck_assert_msg(strstr(text, "all metrics within tolerances (or better)"), "%.2000s", text);
    ck_assert_msg(!strstr(text, "WORSE"), "%.2000s", text);
    free(text);
    ck_assert_int_eq(run_compare_capture(&text, NO_OPTIONS), 1);
    ck_assert_msg(strstr(text, "OUTSIDE tolerances (") && strstr(text, "BETTER beyond the measured spread"), "%.2000s",
                  text);
    ck_assert_msg(!strstr(text, "within tolerances (or better)"), "%.2000s", text);
    free(text);
    /* better accuracy but one loss worse: the worse one still fails */
    cur.evaluation.sets[1].modules[0].mean_answer_loss += 0.05;
    save(&cur, 0);
    ck_assert_int_eq(run_compare_capture(&text, ALLOW_BETTER), 1);
    ck_assert_msg(strstr(text, "WORSE"), "%.2000s", text);
    free(text);
    /* a changed count is neither better nor worse: it fails with --allow-better too */
    cur.evaluation.sets[1].modules[0].mean_answer_loss -= 0.05;
    cur.training.steps += 1;
    save(&cur, 0);
    ck_assert_int_eq(run_compare_capture(&text, ALLOW_BETTER), 1);
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
    cJSON_ReplaceItemInObject(cJSON_GetObjectItem(cur.config, "train"), "steps", cJSON_CreateNumber(9));
    save(&cur, 0);
    char *text = NULL;
    ck_assert_int_eq(run_compare_capture(&text, NO_OPTIONS), 2);
    free(text);
    /* the only run noted: nothing was compared, which is never a success (3: every run asked for was a note) */
    ck_assert_int_eq(run_compare_capture(&text, CONFIG_CHANGE_NOTE), 3);
    ck_assert_msg(strstr(text, "note: dense_qa: not compared: its config changed since the baseline (train.steps 10 -> 9;"),
                  "%.2000s", text);
    ck_assert_msg(!strstr(text, "WORSE"), "%.2000s", text);
    ck_assert_msg(strstr(text, "compare: 0 compared, 1 not compared (dense_qa: config changed since the baseline (a "
                               "note: --config-change=note)): FAILED: nothing was checked against"),
                  "%.2000s", text);
    ck_assert_msg(!strstr(text, "within tolerances"), "%.2000s", text);
    free(text);
    /* with another run compared, the changed one is a counted note and the verdict speaks of the compared only */
    ResultRecord other;
    rtu_record(&other, "moeut_qa", "moeut", "qa", 40);
    save(&other, 1);
    save(&other, 0);
    ck_assert_int_eq(run_compare_capture(&text, CONFIG_CHANGE_NOTE), 0);
    ck_assert_msg(strstr(text, "compare: 1 compared, 1 not compared (dense_qa: config changed since the baseline (a note: "
                               "--config-change=note)): the 1 compared are within tolerances; 1 asked for "
                               "was only noted, not checked"),
                  "%.2000s", text);
    ck_assert_msg(!strstr(text, "all metrics within tolerances"), "%.2000s", text);
    free(text);
    /* --only of the changed run alone: nothing compared again */
    ck_assert_int_eq(run_compare_capture(&text, (CompareRequest){.only = "dense_qa", .options.config_change_note = true}), 3);
    ck_assert_msg(strstr(text, "0 compared"), "%.2000s", text);
    free(text);
    result_record_free(&other);
    ck_assert_int_eq(run_compare_capture(&text, NO_OPTIONS), 2);
    free(text);
    rtu_sha(cur.train_sha256, '0');
    save(&cur, 0);
    ck_assert_int_eq(run_compare_capture(&text, CONFIG_CHANGE_NOTE), 2);
    free(text);
    /* --config-change takes error or note, nothing else */
    bool note = true;
    ck_assert_int_eq(compare_config_change_parse("error", &note), 0);
    ck_assert(!note);
    ck_assert_int_eq(compare_config_change_parse("note", &note), 0);
    ck_assert(note);
    ck_assert_int_eq(compare_config_change_parse("ignore", &note), -1);
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
    ck_assert_int_eq(run_compare_capture(&text, NO_OPTIONS), 0);
    ck_assert_msg(strstr(text, "== dense_qa.seed3: mean of 3 seeds' baselines"), "%.2000s", text);
    ck_assert_msg(strstr(text, "compare: 3 compared, 0 not compared: "), "%.2000s", text);
    free(text);
    /* 1.35: 0.25 from the mean, inside 3 sd */
    r[2].training.final_train_loss = 1.35;
    save(&r[2], 0);
    ck_assert_int_eq(run_compare_capture(&text, NO_OPTIONS), 0);
    free(text);
    /* 1.45: 0.35 from the mean, outside 3 sd (0.30) */
    r[2].training.final_train_loss = 1.45;
    save(&r[2], 0);
    ck_assert_int_eq(run_compare_capture(&text, ONLY_FAILURES), 1);
    ck_assert_msg(strstr(text, "training.final_train_loss") && strstr(text, "WORSE"), "%.2000s", text);
    free(text);
    /* --only by run config selects its seeds too */
    ck_assert_int_eq(run_compare_capture(&text, (CompareRequest){.only = "dense_qa"}), 1);
    ck_assert_msg(strstr(text, "compare: 3 compared, 0 not compared: "), "%.2000s", text);
    free(text);
    /* the relative tolerance: module losses 0.5..0.7 identical across seeds (sd 0); 2% of 0.7 = 0.014 > abs 0.01 */
    r[2].training.final_train_loss = 1.2;
    r[2].evaluation.sets[0].modules[2].mean_answer_loss += 0.013;
    save(&r[2], 0);
    ck_assert_int_eq(run_compare_capture(&text, NO_OPTIONS), 0);
    free(text);
    r[2].evaluation.sets[0].modules[2].mean_answer_loss += 0.002; /* 0.015 > 0.014 */
    save(&r[2], 0);
    ck_assert_int_eq(run_compare_capture(&text, NO_OPTIONS), 1);
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
    ck_assert_int_eq(run_compare_capture(&text, NO_OPTIONS), 1);
    free(text);
    /* several seeds need "seed_spread" in the tolerances file */
    save(&r[1], 1);
    rtu_write(tol, TOL);
    ck_assert_int_eq(run_compare_capture(&text, NO_OPTIONS), 2);
    free(text);
    for (int i = 0; i < 3; i++) result_record_free(&r[i]);
    remove_tree(g_dir);
}
END_TEST

/* A seed the baselines do not hold (dense_qa.seed4, its config the recorded seeds' but for --set train.seed=4) is
 * compared with the three recorded seeds' mean within the seed spread (1.1 +- 0.3); the recorded seeds not run here
 * are noted, not failures; --only by run config or by name selects it; another config key is named; with one recorded
 * seed it is a note, not compared. */
START_TEST(replication_seed_compared_with_spread) {
    setup_dirs();
    char tol[700];
    snprintf(tol, sizeof tol, "%s/tolerances.json", g_base);
    rtu_write(tol, TOL_SEEDS);
    const char *names[3] = {"dense_qa", "dense_qa.seed2", "dense_qa.seed3"};
    ResultRecord r[3], rep;
    for (int i = 0; i < 3; i++) {
        rtu_record(&r[i], names[i], "dense", "qa", 40);
        r[i].training.final_train_loss = 1.0 + 0.1 * i;
        save(&r[i], 1);
    }
    rtu_record(&rep, "dense_qa.seed4", "dense", "qa", 40);
    snprintf(rep.prov.overrides[rep.prov.n_overrides++], RUN_OVERRIDE_MAX, "train.seed=4");
    rep.training.final_train_loss = 1.35; /* 0.25 from the mean: inside 3 sd (0.3), far outside the declared 0.001 */
    save(&rep, 0);
    char *text = NULL;
    ck_assert_int_eq(run_compare_capture(&text, NO_OPTIONS), 0);
    ck_assert_msg(strstr(text, "== dense_qa.seed4: mean of 3 seeds' baselines (") &&
                      strstr(text, "; a seed they do not hold, compared with their spread; tolerance at least 3 sd)"),
                  "%.3000s", text);
    ck_assert_msg(strstr(text, "note: dense_qa: the recorded seeds dense_qa, dense_qa.seed2, dense_qa.seed3 were not run "
                               "here (not compared); dense_qa.seed4, seed(s) the baselines do not hold, are compared "
                               "with the recorded seeds' mean"),
                  "%.3000s", text);
    ck_assert_msg(strstr(text, "compare: 1 compared, 3 not compared (3 recorded seed(s) not run here, replicated with "
                               "other seeds): all metrics within tolerances"),
                  "%.3000s", text);
    free(text);
    ck_assert_int_eq(run_compare_capture(&text, (CompareRequest){.only = "dense_qa"}), 0);
    ck_assert_msg(strstr(text, "compare: 1 compared, 3 not compared"), "%.3000s", text);
    free(text);
    ck_assert_int_eq(run_compare_capture(&text, (CompareRequest){.only = "dense_qa.seed4"}), 0);
    ck_assert_msg(strstr(text, "compare: 1 compared, 0 not compared: all metrics within tolerances"), "%.3000s", text);
    free(text);
    /* 1.45: 0.35 from the mean, outside 3 sd */
    rep.training.final_train_loss = 1.45;
    save(&rep, 0);
    ck_assert_int_eq(run_compare_capture(&text, ONLY_FAILURES), 1);
    ck_assert_msg(strstr(text, "training.final_train_loss") && strstr(text, "WORSE"), "%.3000s", text);
    free(text);
    /* a recorded seed whose directory is there without a result record is still missing (not "not run") */
    char p[700];
    snprintf(p, sizeof p, "%s/dense_qa.seed2", g_runs);
    ck_assert_int_eq(mkdir(p, 0755), 0);
    rep.training.final_train_loss = 1.1;
    save(&rep, 0);
    ck_assert_int_eq(run_compare_capture(&text, NO_OPTIONS), 2);
    ck_assert_msg(strstr(text, "dense_qa.seed2: no result record"), "%.3000s", text);
    free(text);
    rmdir(p);
    /* another config key: not comparable, the key named (the seed is not) */
    cJSON_ReplaceItemInObject(cJSON_GetObjectItem(rep.config, "train"), "steps", cJSON_CreateNumber(9));
    save(&rep, 0);
    ck_assert_int_eq(run_compare_capture(&text, NO_OPTIONS), 2);
    ck_assert_msg(strstr(text, "(dense_qa.seed4: config differs from the baseline's: train.steps 10 -> 9; 3 recorded "
                               "seed(s) not run here"),
                  "%.3000s", text);
    ck_assert_msg(!strstr(text, "train.seed"), "%.3000s", text);
    free(text);
    /* one recorded seed: no spread to compare another seed with */
    cJSON_ReplaceItemInObject(cJSON_GetObjectItem(rep.config, "train"), "steps", cJSON_CreateNumber(10));
    save(&rep, 0);
    for (int i = 1; i < 3; i++) {
        snprintf(p, sizeof p, "%s/%s.result.json", g_base, names[i]);
        unlink(p);
    }
    save(&r[0], 0);
    ck_assert_int_eq(run_compare_capture(&text, NO_OPTIONS), 0);
    ck_assert_msg(strstr(text, "dense_qa.seed4/result.json has no baseline in") &&
                      strstr(text, "holds one of dense_qa)"),
                  "%.3000s", text);
    ck_assert_msg(strstr(text, "compare: 1 compared, 1 not compared (listed above)"), "%.3000s", text);
    free(text);
    ck_assert_int_eq(run_compare_capture(&text, (CompareRequest){.only = "dense_qa.seed4"}), 2);
    free(text);
    for (int i = 0; i < 3; i++) result_record_free(&r[i]);
    result_record_free(&rep);
    remove_tree(g_dir);
}
END_TEST

/* A changed config is named key by key, not by its hash: as an error (--config-change=error) and in the summary. A
 * config that differs in keys which change neither training nor evaluation (the description, analyze keys) is
 * compared, with a note naming them. */
START_TEST(config_change_named) {
    setup_dirs();
    ResultRecord base, cur;
    rtu_record(&base, "dense_qa", "dense", "qa", 40);
    save(&base, 1);
    rtu_record(&cur, "dense_qa", "dense", "qa", 40);
    cJSON_AddNumberToObject(cJSON_GetObjectItem(cur.config, "train"), "lr", 0.008);
    save(&cur, 0);
    char *text = NULL;
    ck_assert_int_eq(run_compare_capture(&text, NO_OPTIONS), 2);
    ck_assert_msg(strstr(text, "compare: 0 compared, 1 not compared (dense_qa: config differs from the baseline's: "
                               "train.lr (absent) -> 0.008): FAILED"),
                  "%.3000s", text);
    ck_assert_msg(!strstr(text, "config_sha256 differs"), "%.3000s", text);
    free(text);
    /* the description and an analyze key: the same training and evaluation */
    cJSON_DeleteItemFromObject(cJSON_GetObjectItem(cur.config, "train"), "lr");
    cJSON_ReplaceItemInObject(cur.config, "description", cJSON_CreateString("edited"));
    cJSON *analyze = cJSON_AddObjectToObject(cur.config, "analyze");
    cJSON_AddNumberToObject(analyze, "eval_prompts", 500);
    save(&cur, 0);
    ck_assert_int_eq(run_compare_capture(&text, NO_OPTIONS), 0);
    ck_assert_msg(strstr(text, "note: dense_qa: compared although its config differs from the baseline's, in keys that "
                               "change neither training nor evaluation (analyze.eval_prompts (absent) -> 500; "
                               "description \"hand-made\" -> \"edited\")"),
                  "%.3000s", text);
    ck_assert_msg(strstr(text, "compare: 1 compared, 0 not compared: all metrics within tolerances"), "%.3000s", text);
    free(text);
    result_record_free(&cur);
    result_record_free(&base);
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
    snprintf(b.prov.overrides[b.prov.n_overrides++], RUN_OVERRIDE_MAX, "train.seed=2"); /* another config_sha256: fine */
    save(&a, 1);
    save(&a, 0);
    save(&b, 1);
    save(&b, 0);
    char *text = NULL;
    ck_assert_int_eq(run_compare_capture(&text, NO_OPTIONS), 0);
    free(text);
    rtu_sha(b.train_sha256, '0'); /* trained on other data: not poolable, even behind a config difference */
    save(&b, 1);
    ck_assert_int_eq(run_compare_capture(&text, NO_OPTIONS), 2);
    free(text);
    rtu_sha(b.train_sha256, 'b');
    b.n_params += 1; /* another model size */
    save(&b, 1);
    ck_assert_int_eq(run_compare_capture(&text, NO_OPTIONS), 2);
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

/* The summary counts what was compared: a missing result record is listed as not compared (exit 2), a run directory
 * without a baseline and another variant of a run are listed, not counted as failures; zero compared fails. */
START_TEST(summary_counts_compared) {
    setup_dirs();
    ResultRecord a, b;
    rtu_record(&a, "dense_qa", "dense", "qa", 40);
    rtu_record(&b, "moeut_qa", "moeut", "qa", 40);
    save(&a, 1);
    save(&a, 0);
    save(&b, 1);
    char *text = NULL;
    /* moeut_qa has a baseline but no result record */
    ck_assert_int_eq(run_compare_capture(&text, NO_OPTIONS), 2);
    ck_assert_msg(strstr(text, "compare: 1 compared, 1 not compared (moeut_qa: no result record): some records missing"),
                  "%.3000s", text);
    free(text);
    save(&b, 0);
    /* a run without a baseline and an earlier variant of dense_qa: listed, not failures */
    ResultRecord extra;
    rtu_record(&extra, "dense_answer", "dense", "answer_only", 40);
    save(&extra, 0);
    result_record_free(&extra);
    char p[700];
    snprintf(p, sizeof p, "%s/dense_qa@1a2b3c4d/result.json", g_runs);
    rtu_save(&a, p);
    ck_assert_int_eq(run_compare_capture(&text, NO_OPTIONS), 0);
    ck_assert_msg(strstr(text, "dense_answer/result.json has no baseline"), "%.3000s", text);
    ck_assert_msg(strstr(text, "dense_qa@1a2b3c4d/result.json not compared: another variant of dense_qa"), "%.3000s",
                  text);
    ck_assert_msg(strstr(text, "compare: 2 compared, 2 not compared (listed above): all metrics within tolerances"),
                  "%.3000s", text);
    free(text);
    /* no run directory at all: every baseline is not compared */
    remove_tree(g_runs);
    ck_assert_int_eq(run_compare_capture(&text, NO_OPTIONS), 2);
    ck_assert_msg(strstr(text, "compare: 0 compared, 2 not compared (dense_qa: no result record; moeut_qa: no result "
                               "record): FAILED: nothing was checked"),
                  "%.3000s", text);
    free(text);
    result_record_free(&a);
    result_record_free(&b);
    remove_tree(g_dir);
}
END_TEST

static const char *TOL_NOT_GATED =
    "{\"comment\": \"unit test\", \"tolerances\": {"
    "\"accuracy\": {\"gated\": false, \"comment\": \"models answer ~1%: no defect moves it beyond seed noise\"},"
    "\"mean_answer_loss\": {\"abs\": 0.01, \"comment\": \"x\"},"
    "\"module_mean_answer_loss\": {\"abs\": 0.01, \"comment\": \"x\"},"
    "\"final_train_loss\": {\"abs\": 0.001, \"comment\": \"x\"},"
    "\"count\": {\"abs\": 0, \"comment\": \"exact\"},"
    "\"greedy_disagreements\": {\"abs\": 0, \"comment\": \"must stay 0\"}}}";

/* A class declared "gated": false is shown as "not gated", never fails (BETTER or WORSE), and compare says so with
 * the file's reason; the other classes still fail. A not gated class with a tolerance, an exact class not gated, or
 * a non-boolean "gated" is refused. */
START_TEST(not_gated_class) {
    setup_dirs();
    char tol[700];
    snprintf(tol, sizeof tol, "%s/tolerances.json", g_base);
    rtu_write(tol, TOL_NOT_GATED);
    ResultRecord base, cur;
    rtu_record(&base, "dense_qa", "dense", "qa", 40);
    rtu_record(&cur, "dense_qa", "dense", "qa", 10); /* accuracy -0.3 everywhere */
    save(&base, 1);
    save(&cur, 0);
    char *text = NULL;
    ck_assert_int_eq(run_compare_capture(&text, NO_OPTIONS), 0);
    ck_assert_msg(strstr(text, "interpolate.accuracy") && strstr(text, "not gated"), "%.3000s", text);
    ck_assert_msg(strstr(text, "compare: accuracy is not gated by ") &&
                      strstr(text, ": models answer ~1%: no defect moves it beyond seed noise"),
                  "%.3000s", text);
    ck_assert_msg(strstr(text, "all metrics within tolerances; not gated at this size: accuracy"), "%.3000s",
                  text);
    ck_assert_msg(!strstr(text, "WORSE"), "%.3000s", text);
    free(text);
    result_record_free(&cur);
    rtu_record(&cur, "dense_qa", "dense", "qa", 90); /* far better: still no verdict */
    save(&cur, 0);
    ck_assert_int_eq(run_compare_capture(&text, NO_OPTIONS), 0);
    free(text);
    cur.training.final_train_loss += 0.01; /* a gated class still fails */
    save(&cur, 0);
    ck_assert_int_eq(run_compare_capture(&text, ONLY_FAILURES), 1);
    ck_assert_msg(strstr(text, "training.final_train_loss") && !strstr(text, "interpolate.accuracy"), "%.3000s", text);
    free(text);
    static const char *const BAD[][2] = {
        {"\"gated\": false,", "\"gated\": false, \"abs\": 0.1,"},
        {"\"gated\": false,", "\"gated\": \"no\","},
        {"\"count\": {\"abs\": 0,", "\"count\": {\"gated\": false,"},
    };
    char path[700], buf[2048];
    snprintf(path, sizeof path, "%s/tol_bad.json", g_dir);
    for (size_t i = 0; i < sizeof BAD / sizeof BAD[0]; i++) {
        const char *at = strstr(TOL_NOT_GATED, BAD[i][0]);
        ck_assert(at);
        snprintf(buf, sizeof buf, "%.*s%s%s", (int)(at - TOL_NOT_GATED), TOL_NOT_GATED, BAD[i][1],
                 at + strlen(BAD[i][0]));
        rtu_write(path, buf);
        ck_assert_msg(run_compare(path) == 2, "accepted: %s", buf);
    }
    result_record_free(&base);
    result_record_free(&cur);
    remove_tree(g_dir);
}
END_TEST

/* ---- bin/compare --diff ---- */

/* Writes DIR/result.json, DIR/predictions.jsonl and its sidecar for r: per module, its n examples with the first
 * `correct` right and every answer loss equal to the module's mean (index_shift moves the examples' shard indices:
 * other examples).
 * The set means of the record are set to what the lines add up to. */
static void save_run_with_predictions(ResultRecord *r, const char *dir, long index_shift) {
    char p[800], err[512];
    for (int s = 0; s < EVAL_N_SETS; s++) {
        SetEval *se = &r->evaluation.sets[s];
        double sum = 0;
        for (int m = 0; m < se->n_modules; m++) sum += se->modules[m].mean_answer_loss * (double)se->modules[m].n;
        se->mean_answer_loss = sum / (double)se->n;
    }
    snprintf(p, sizeof p, "%s/result.json", dir);
    rtu_save(r, p);
    snprintf(p, sizeof p, "%s/predictions.jsonl", dir);
    FILE *fp = fopen(p, "w");
    ck_assert_ptr_nonnull(fp);
    long n_lines = 0;
    for (int s = 0; s < EVAL_N_SETS; s++) {
        const SetEval *se = &r->evaluation.sets[s];
        long index = index_shift;
        for (int m = 0; m < se->n_modules; m++)
            for (long i = 0; i < se->modules[m].n; i++, index++, n_lines++) {
                char q[64];
                snprintf(q, sizeof q, "Q: %ld + 1 A:", index);
                PredictionLine line = {EVAL_SET_NAMES[s], index, se->modules[m].name, q, "7", "7",
                                       i < se->modules[m].correct, se->modules[m].mean_answer_loss, -1};
                ck_assert_msg(predictions_write_line(fp, p, &line, err, sizeof err) == 0, "%s", err);
            }
    }
    fclose(fp);
    /* the sidecar predictions.meta.json, as evaluate writes it: the lines' count and the sha256 of their bytes */
    char sha[65], meta_path[900];
    ck_assert_msg(sha256_file_hex(p, sha, err, sizeof err) == 0, "%s", err);
    ck_assert_msg(predictions_meta_path(p, meta_path, sizeof meta_path, err, sizeof err) == 0, "%s", err);
    PredictionsHeader h = {r->experiment, r->run, r->code_version, r->backend, r->hardware, r->config_sha256, NULL};
    cJSON *meta = predictions_meta_to_json(&h, n_lines, sha);
    ck_assert_msg(json_save_file(meta_path, meta, err, sizeof err) == 0, "%s", err);
    cJSON_Delete(meta);
}

static const DiffRow *diff_row(const RunDiff *d, const char *name) {
    for (int i = 0; i < d->n_rows; i++)
        if (strcmp(d->rows[i].name, name) == 0) return &d->rows[i];
    ck_abort_msg("no diff row %s", name);
    return NULL;
}

/* Two runs differing in train.lr, 40 vs 60 correct of 100 per module and a higher loss in one module: the config key,
 * the metrics with B - A, and paired intervals that exclude 0 for the large changes and are [0, 0] where no example
 * changed. */
START_TEST(diff_two_runs) {
    setup_dirs();
    char da[700], db[700], err[1024];
    snprintf(da, sizeof da, "%s/dense_qa", g_runs);
    snprintf(db, sizeof db, "%s/dense_qa@1a2b3c4d", g_runs);
    ResultRecord a, b;
    rtu_record(&a, "dense_qa", "dense", "qa", 40);
    rtu_record(&b, "dense_qa", "dense", "qa", 60);
    cJSON_AddItemToObject(cJSON_GetObjectItem(a.config, "train"), "lr", cJSON_CreateNumber(0.002));
    cJSON_AddItemToObject(cJSON_GetObjectItem(b.config, "train"), "lr", cJSON_CreateNumber(0.0005));
    b.evaluation.sets[1].modules[0].mean_answer_loss += 0.25;
    b.training.final_train_loss = 2.0;
    /* extrapolate's second module: the same correct count in both runs */
    b.evaluation.sets[1].modules[1].correct = 40;
    for (int s = 0; s < EVAL_N_SETS; s++) {
        SetEval *se = &b.evaluation.sets[s];
        se->correct = 0;
        for (int m = 0; m < se->n_modules; m++) {
            module_eval_finish(&se->modules[m]);
            se->correct += se->modules[m].correct;
        }
        set_eval_finish(se);
    }
    b.evaluation.mean_accuracy = 0.5 * (b.evaluation.sets[0].accuracy + b.evaluation.sets[1].accuracy);
    save_run_with_predictions(&a, da, 0);
    save_run_with_predictions(&b, db, 0);
    DiffSide sa, sb;
    ck_assert_msg(diff_side_load(&sa, da, err, sizeof err) == 0, "%s", err);
    ck_assert_msg(diff_side_load(&sb, db, err, sizeof err) == 0, "%s", err);
    ck_assert(sa.has_predictions && sb.has_predictions);
    RunDiff d;
    run_diff_compute(&sa, &sb, 500, 1, &d);
    ck_assert_int_eq(d.config.n_rows, 1);
    ck_assert_str_eq(d.config.rows[0].key, "train.lr");
    ck_assert_str_eq(d.config.rows[0].values[0], "0.002");
    ck_assert_str_eq(d.config.rows[0].values[1], "0.0005");
    ck_assert_msg(d.paired, "%s", d.not_paired);
    ck_assert_int_eq(d.n_examples, 500);
    const DiffRow *r = diff_row(&d, "interpolate.accuracy");
    ck_assert(r->in_a && r->in_b && r->has_interval);
    ck_assert_double_eq_tol(r->b - r->a, 0.2, 1e-12);
    ck_assert_msg(r->lo > 0.1 && r->hi < 0.3 && r->lo < 0.2 && r->hi > 0.2, "[%g, %g]", r->lo, r->hi);
    ck_assert_int_eq(r->n_examples, 300);
    r = diff_row(&d, "extrapolate.arithmetic__mul_div_multiple_longer.accuracy"); /* unchanged: [0, 0] */
    ck_assert(r->has_interval && r->lo == 0 && r->hi == 0 && r->n_examples == 100);
    r = diff_row(&d, "evaluation.mean_accuracy"); /* (0.2 + 0.1) / 2 */
    ck_assert_double_eq_tol(r->b - r->a, 0.15, 1e-12);
    ck_assert_msg(r->has_interval && r->lo > 0.05 && r->hi < 0.25, "[%g, %g]", r->lo, r->hi);
    r = diff_row(&d, "extrapolate.arithmetic__add_or_sub_big.mean_answer_loss"); /* every example +0.25 */
    ck_assert_msg(r->has_interval && fabs(r->lo - 0.25) < 1e-9 && fabs(r->hi - 0.25) < 1e-9, "[%g, %g]", r->lo, r->hi);
    r = diff_row(&d, "training.final_train_loss"); /* no examples behind it */
    ck_assert(r->in_a && r->in_b && !r->has_interval);
    ck_assert_double_eq_tol(r->b - r->a, 0.75, 1e-12);
    run_diff_free(&d);

    /* a stale predictions.jsonl (B's lines say 40 correct, its record 60): no intervals, and why */
    ResultRecord stale;
    rtu_record(&stale, "dense_qa", "dense", "qa", 40);
    char tmpdir[700], cmd[2400];
    snprintf(tmpdir, sizeof tmpdir, "%s/stale", g_dir);
    save_run_with_predictions(&stale, tmpdir, 0);
    snprintf(cmd, sizeof cmd, "cp %s/predictions.jsonl %s/predictions.meta.json %s/", tmpdir, tmpdir, db);
    ck_assert_int_eq(system(cmd), 0);
    diff_side_free(&sb);
    ck_assert_msg(diff_side_load(&sb, db, err, sizeof err) == 0, "%s", err);
    run_diff_compute(&sa, &sb, 200, 1, &d);
    ck_assert(!d.paired);
    ck_assert_msg(strstr(d.not_paired, "do not add up to the result records"), "%s", d.not_paired);
    for (int i = 0; i < d.n_rows; i++) ck_assert(!d.rows[i].has_interval);
    run_diff_free(&d);

    /* other examples (shard indices shifted): no intervals, naming the first difference */
    save_run_with_predictions(&b, db, 1000);
    diff_side_free(&sb);
    ck_assert_msg(diff_side_load(&sb, db, err, sizeof err) == 0, "%s", err);
    run_diff_compute(&sa, &sb, 200, 1, &d);
    ck_assert(!d.paired && d.not_paired[0]);
    run_diff_free(&d);

    /* a baseline record prefix: metrics, no intervals (a baseline has no predictions) */
    save(&a, 1);
    char prefix[700];
    snprintf(prefix, sizeof prefix, "%s/dense_qa", g_base);
    DiffSide sbase;
    ck_assert_msg(diff_side_load(&sbase, prefix, err, sizeof err) == 0, "%s", err);
    ck_assert(sbase.is_baseline && !sbase.has_predictions);
    run_diff_compute(&sbase, &sa, 200, 1, &d);
    ck_assert_int_eq(d.config.n_rows, 0);
    ck_assert(!d.paired && strstr(d.not_paired, "baseline record"));
    ck_assert_double_eq(diff_row(&d, "interpolate.accuracy")->b - diff_row(&d, "interpolate.accuracy")->a, 0);
    run_diff_free(&d);
    diff_side_free(&sbase);

    /* neither a run directory nor a baseline record; a run directory without result.json */
    snprintf(prefix, sizeof prefix, "%s/nope", g_runs);
    ck_assert_int_eq(diff_side_load(&sbase, prefix, err, sizeof err), -1);
    ck_assert_msg(strstr(err, "no such run directory") && strstr(err, "nope.result.json"), "%s", err);
    diff_side_free(&sbase);
    snprintf(prefix, sizeof prefix, "%s/empty", g_runs);
    ck_assert_int_eq(mkdir(prefix, 0755), 0);
    ck_assert_int_eq(diff_side_load(&sbase, prefix, err, sizeof err), -1);
    ck_assert_msg(strstr(err, "without result.json"), "%s", err);
    diff_side_free(&sbase);

    /* the command: exit 0 with the table; a missing side exits 2 */
    save_run_with_predictions(&b, db, 0);
    char out_path[700];
    snprintf(out_path, sizeof out_path, "%s/diff.txt", g_dir);
    fflush(stdout);
    int saved = dup(1);
    FILE *cap = fopen(out_path, "w");
    ck_assert_ptr_nonnull(cap);
    dup2(fileno(cap), 1);
    int rc = run_diff_command(da, db, 300);
    int rc_missing = run_diff_command(da, prefix, RUN_DIFF_BOOT_REPLICATES);
    fflush(stdout);
    dup2(saved, 1);
    close(saved);
    fclose(cap);
    ck_assert_int_eq(rc, 0);
    ck_assert_int_eq(rc_missing, 2);
    char *text = rtu_read(out_path);
    ck_assert_msg(strstr(text, "config: 1 key(s) differ") && strstr(text, "train.lr") && strstr(text, "A 0.002  B 0.0005"),
                  "%.3000s", text);
    ck_assert_msg(strstr(text, "interpolate.accuracy") && strstr(text, "+0.2 ") && strstr(text, "(n=300)"), "%.3000s",
                  text);
    ck_assert_msg(strstr(text, "over the 500 evaluation examples both runs share, 300 replicates"), "%.3000s", text);
    free(text);
    diff_side_free(&sa);
    diff_side_free(&sb);
    result_record_free(&a);
    result_record_free(&b);
    result_record_free(&stale);
    remove_tree(g_dir);
}
END_TEST

/* The diff's numbers beyond the gated metrics carry the names runs.csv uses (run_metrics.h): the depth summary of
 * analysis.json and the means of depth_prompts.json, in A only where B has no such record. */
START_TEST(diff_depth_scores) {
    setup_dirs();
    char da[700], db[700], err[1024];
    snprintf(da, sizeof da, "%s/dense_qa", g_runs);
    snprintf(db, sizeof db, "%s/dense_qa@1a2b3c4d", g_runs);
    ResultRecord a;
    rtu_record(&a, "dense_qa", "dense", "qa", 40);
    save_run_with_predictions(&a, da, 0);
    save_run_with_predictions(&a, db, 0);
    rtu_save_depth_records(da, "dense_qa");
    DiffSide sa, sb;
    ck_assert_msg(diff_side_load(&sa, da, err, sizeof err) == 0, "%s", err);
    ck_assert_msg(diff_side_load(&sb, db, err, sizeof err) == 0, "%s", err);
    RunDiff d;
    run_diff_compute(&sa, &sb, 100, 1, &d);
    const DiffRow *r = diff_row(&d, "analysis.depth_fraction");
    ck_assert(r->in_a && !r->in_b && r->a == 0.5);
    r = diff_row(&d, "depth_prompts.counterfactual.depth_fraction");
    ck_assert(r->in_a && !r->in_b && r->a == 0.5);
    r = diff_row(&d, "depth_prompts.zero.depth_centre");
    ck_assert(r->in_a && r->a == 0.3);
    r = diff_row(&d, "training.tokens_per_s");
    ck_assert(r->in_a && r->in_b);
    run_diff_free(&d);
    diff_side_free(&sa);
    diff_side_free(&sb);
    result_record_free(&a);
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
    tcase_add_test(tc, better_fails_unless_allowed);
    tcase_add_test(tc, config_change_note);
    tcase_add_test(tc, seed_spread_rule);
    tcase_add_test(tc, seed_baselines_must_match);
    tcase_add_test(tc, replication_seed_compared_with_spread);
    tcase_add_test(tc, config_change_named);
    tcase_add_test(tc, tolerances_validated);
    tcase_add_test(tc, summary_counts_compared);
    tcase_add_test(tc, not_gated_class);
    tcase_add_test(tc, diff_two_runs);
    tcase_add_test(tc, diff_depth_scores);
    suite_add_tcase(s, tc);
    return run_test_suite(s);
}
