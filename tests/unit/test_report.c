/* bin/report on hand-made records: the headline table with the paper's numbers beside ours, a missing run listed as
 * missing, per-module tables, depth maps, well-formed self-contained HTML, deterministic output. */
#define STAGE_NO_MAIN
#include "stages/report.c"

#include <check.h>

#include "tests/unit/record_test_util.h"
#include "tests/unit/xml_check.h"
#include "tests/unit/suite_runner.h"

static char g_dir[256], g_runs[512], g_out[512];

/* runs/: dense_qa (40/100 per module, analysis, metrics), dense_answer (48), moeut_answer (63, analysis);
 * moeut_qa is missing. */
static void make_runs(void) {
    rtu_tmpdir(g_dir, sizeof g_dir, "test_report");
    snprintf(g_runs, sizeof g_runs, "%s/runs", g_dir);
    snprintf(g_out, sizeof g_out, "%s/out", g_dir);
    const struct { const char *run, *arch, *mode; long correct; int analysis; } R[3] = {
        {"dense_qa", "dense", "qa", 40, 1}, {"dense_answer", "dense", "answer_only", 48, 0},
        {"moeut_answer", "moeut", "answer_only", 63, 1}};
    char p[700], err[512];
    for (int i = 0; i < 3; i++) {
        ResultRecord r;
        rtu_record(&r, R[i].run, R[i].arch, R[i].mode, R[i].correct);
        snprintf(p, sizeof p, "%s/%s/result.json", g_runs, R[i].run);
        ck_assert_msg(result_record_save(&r, p, err, sizeof err) == 0, "%s", err);
        result_record_free(&r);
        if (R[i].analysis) {
            AnalysisRecord a;
            rtu_analysis(&a, R[i].run, R[i].arch, R[i].mode, 4);
            snprintf(p, sizeof p, "%s/%s/analysis.json", g_runs, R[i].run);
            ck_assert_msg(analysis_record_save(&a, p, err, sizeof err) == 0, "%s", err);
            analysis_record_free(&a);
        }
    }
    /* dense_answer's run config disabled the analysis: a record that says so */
    AnalysisRecord off = {.enabled = false};
    snprintf(off.experiment, sizeof off.experiment, "unit");
    snprintf(off.run, sizeof off.run, "dense_answer");
    snprintf(off.arch, sizeof off.arch, "dense");
    snprintf(off.loss_mode, sizeof off.loss_mode, "answer_only");
    snprintf(p, sizeof p, "%s/dense_answer/analysis.json", g_runs);
    ck_assert_msg(analysis_record_save(&off, p, err, sizeof err) == 0, "%s", err);
    snprintf(p, sizeof p, "%s/dense_qa/metrics.jsonl", g_runs);
    rtu_write(p, "{\"step\": 0, \"loss\": 6.3, \"ce\": 6.2}\n{\"step\": 10, \"loss\": 3.1, \"ce\": 3.0}\n"
                 "{\"step\": 20, \"loss\": 1.6, \"ce\": 1.5}\n");
}

static int run_report(void) {
    char a1[600], a2[600];
    snprintf(a1, sizeof a1, "--runs=%s", g_runs);
    snprintf(a2, sizeof a2, "--out=%s", g_out);
    char *argv[] = {"report", "--experiment", "unit", a1, a2, NULL};
    return report_main(5, argv);
}

static char *read_out(const char *name) {
    char p[700];
    snprintf(p, sizeof p, "%s/%s", g_out, name);
    return rtu_read(p);
}

START_TEST(headline_missing_and_html) {
    make_runs();
    ck_assert_int_eq(run_report(), 0);
    char *md = read_out("report.md");
    /* headline table: paper numbers beside ours, with intervals and n */
    const char *row_t = strstr(md, "| Transformer | 41% | 40.0% [");
    ck_assert_msg(row_t != NULL, "no Transformer headline row:\n%s", md);
    ck_assert_msg(strstr(row_t, "(n=100) | 48% | 48.0% [") != NULL, "Transformer answer-only cell");
    const char *row_m = strstr(md, "| MoEUT | 36% | missing | 63% | 63.0% [");
    ck_assert_msg(row_m != NULL, "MoEUT row must show Q+A missing and answer-only 63.0%%:\n%s", md);
    /* the missing run is listed, not dropped */
    ck_assert(strstr(md, "| moeut_qa | MISSING: no result.json |") != NULL);
    ck_assert(strstr(md, "1 of 4 expected runs have no result record") != NULL);
    ck_assert(strstr(md, "MISSING: ") && strstr(md, "moeut_qa/result.json does not exist"));
    /* per-module tables and the caveats section */
    ck_assert(strstr(md, "## Per-module accuracy: interpolate") && strstr(md, "## Per-module accuracy: extrapolate"));
    ck_assert(strstr(md, "| arithmetic__mul | 40.0% ["));
    ck_assert(strstr(md, "## What this run can and cannot show"));
    ck_assert(strstr(md, "cannot reproduce the paper's numbers")); /* 12k params, 10k tokens */
    ck_assert(strstr(md, "went from 6.200 (step 0) to 1.500 (step 20), so the model learned"));
    /* depth maps: 2 prompts x 2 analysed runs, linked from the Markdown and present as files */
    ck_assert(strstr(md, "](depth_dense_qa_1.svg)") && strstr(md, "](depth_moeut_answer_2.svg)"));
    ck_assert(strstr(md, "| dense_answer | disabled |  |  |"));
    ck_assert(strstr(md, "| 48.00% | disabled |")); /* overview column of dense_answer */
    ck_assert(strstr(md, "| moeut_qa | MISSING: no result.json |  |  |  |  |  |  | missing |"));
    ck_assert(strstr(md, "test definition"));
    char p[700];
    snprintf(p, sizeof p, "%s/depth_moeut_answer_2.svg", g_out);
    ck_assert(file_exists(p));
    snprintf(p, sizeof p, "%s/loss_qa.svg", g_out);
    ck_assert(file_exists(p));
    /* provenance: each value once with the runs sharing it, config hashes per run, each distinct config once */
    ck_assert(strstr(md, "- code version: test-version (all 3 runs)"));
    ck_assert(strstr(md, "| dense_qa | aaaaaaaa"));
    ck_assert_int_eq(count_substr(md, "\"description\":\t\"hand-made\""), 1);
    ck_assert(strstr(md, "### Run config of dense_qa, dense_answer, moeut_answer"));
    /* HTML: well-formed, self-contained (inline SVG, no external references), figures inlined */
    char *html = read_out("report.html");
    char why[256];
    ck_assert_msg(xml_check(html, 1, why, sizeof why) == 0, "report.html not well-formed: %s", why);
    ck_assert_int_eq(count_substr(html, "<svg "), 2 + 4);
    ck_assert(strstr(html, "src=") == NULL && strstr(html, "href=") == NULL);
    ck_assert(strstr(html, "<td>MoEUT</td><td>36%</td><td>missing</td>") != NULL);
    /* deterministic: a second run writes the same bytes */
    ck_assert_int_eq(run_report(), 0);
    char *md2 = read_out("report.md"), *html2 = read_out("report.html");
    ck_assert(strcmp(md, md2) == 0 && strcmp(html, html2) == 0);
    free(md);
    free(md2);
    free(html);
    free(html2);
    remove_tree(g_dir);
}
END_TEST

START_TEST(no_runs_at_all) {
    rtu_tmpdir(g_dir, sizeof g_dir, "test_report");
    snprintf(g_runs, sizeof g_runs, "%s/runs", g_dir);
    snprintf(g_out, sizeof g_out, "%s/out", g_dir);
    char err[512];
    ck_assert_int_eq(mkdir_p(g_runs, err, sizeof err), 0); /* the experiment exists but nothing has finished */
    ck_assert_int_eq(run_report(), 0);
    char *md = read_out("report.md");
    ck_assert(strstr(md, "No run has a result record yet"));
    ck_assert_int_eq(count_substr(md, "MISSING: no result.json"), 4);
    free(md);
    remove_tree(g_dir);
}
END_TEST

static void cleanup_dir(void) { remove_tree(g_dir); }

/* A runs directory that does not exist is a wrong path: exit 1 before anything is written. */
static void check_no_output_left(void) {
    struct stat st;
    int out_exists = stat(g_out, &st) == 0;
    remove_tree(g_dir);
    if (out_exists) {
        fprintf(stderr, "report created %s for a missing runs directory\n", g_out);
        _exit(3); /* a different exit status fails the exit test */
    }
}
START_TEST(missing_runs_dir_dies) {
    rtu_tmpdir(g_dir, sizeof g_dir, "test_report");
    snprintf(g_runs, sizeof g_runs, "%s/no_such_runs", g_dir);
    snprintf(g_out, sizeof g_out, "%s/out", g_dir);
    atexit(check_no_output_left);
    run_report();
}
END_TEST

/* A malformed metrics line is an error (exit 1), not a silently wrong curve. */
START_TEST(bad_metrics_line_dies) {
    make_runs();
    atexit(cleanup_dir); /* the stage exits through die() */
    char p[700];
    snprintf(p, sizeof p, "%s/dense_qa/metrics.jsonl", g_runs);
    rtu_write(p, "{\"step\": 0, \"loss\": 6.3}\n{\"step\": oops}\n");
    run_report();
}
END_TEST

/* moeut_qa has no result record yet: still training, or killed in the middle of a metrics line. Its metrics.jsonl
 * is not the report's business (it made the whole report fail). */
START_TEST(unfinished_run_with_torn_metrics) {
    make_runs();
    char p[700];
    snprintf(p, sizeof p, "%s/moeut_qa/metrics.jsonl", g_runs);
    rtu_write(p, "{\"step\": 0, \"loss\": 6.3}\n{\"step\": 1, \"lo");
    ck_assert_int_eq(run_report(), 0);
    char *md = read_out("report.md");
    ck_assert_int_eq(count_substr(md, "MISSING: no result.json"), 1);
    free(md);
    remove_tree(g_dir);
}
END_TEST

/* An analysis record of another run (a copied file) is refused like a result record of another run. */
START_TEST(analysis_of_another_run_dies) {
    make_runs();
    atexit(cleanup_dir);
    char from[700], to[700], err[512];
    snprintf(from, sizeof from, "%s/moeut_answer/analysis.json", g_runs);
    snprintf(to, sizeof to, "%s/dense_qa/analysis.json", g_runs);
    char *text = rtu_read(from);
    ck_assert_int_eq(write_file_atomic(to, text, strlen(text), err, sizeof err), 0);
    free(text);
    run_report();
}
END_TEST

/* dense_answer evaluated on other eval sets than dense_qa (re-tokenized data, or a run copied in): refused, naming
 * both records and the field, with no output directory; it used to be reported side by side. */
static void check_no_report_dir(void) {
    struct stat st;
    int out_exists = stat(g_out, &st) == 0;
    remove_tree(g_dir);
    if (out_exists) _exit(3);
}
START_TEST(records_of_other_data_die) {
    make_runs();
    atexit(check_no_report_dir);
    ResultRecord r;
    rtu_record(&r, "dense_answer", "dense", "answer_only", 48);
    rtu_sha(r.interpolate_sha256, 'f');
    char p[700], err[512];
    snprintf(p, sizeof p, "%s/dense_answer/result.json", g_runs);
    ck_assert_msg(result_record_save(&r, p, err, sizeof err) == 0, "%s", err);
    result_record_free(&r);
    run_report();
}
END_TEST

/* Records of experiment "unit" reported as --experiment tiny (runs copied from another experiment): refused, with no
 * output directory; they used to be reported under the other experiment's title. */
START_TEST(records_of_another_experiment_die) {
    make_runs();
    atexit(check_no_report_dir);
    char a1[600], a2[600];
    snprintf(a1, sizeof a1, "--runs=%s", g_runs);
    snprintf(a2, sizeof a2, "--out=%s", g_out);
    char *argv[] = {"report", "--experiment", "tiny", a1, a2, NULL};
    report_main(5, argv);
}
END_TEST

int main(void) {
    Suite *s = suite_create("report");
    TCase *tc = tcase_create("report");
    tcase_add_test(tc, headline_missing_and_html);
    tcase_add_test(tc, no_runs_at_all);
    tcase_add_exit_test(tc, bad_metrics_line_dies, 1);
    tcase_add_exit_test(tc, missing_runs_dir_dies, 1);
    tcase_add_test(tc, unfinished_run_with_torn_metrics);
    tcase_add_exit_test(tc, analysis_of_another_run_dies, 1);
    tcase_add_exit_test(tc, records_of_other_data_die, 1);
    tcase_add_exit_test(tc, records_of_another_experiment_die, 1);
    suite_add_tcase(s, tc);
    return run_test_suite(s);
}
