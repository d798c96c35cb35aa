/* bin/report's routing sections (pipeline/report/report_build.h) on hand-made records: the expert-load table (numbers
 * against hand-computed ones) and heat map for a run with routing statistics, nothing for runs without; the ablation
 * table for two run configs of one family, naming the differing key, and no such section for the standard
 * experiment's distinct families. */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pipeline/base/atomic_file.h"
#include "pipeline/report/report_build.h"

#include "tests/unit/record_test_util.h"
#include "tests/unit/suite_runner.h"
#include "tests/unit/xml_check.h"

static char g_dir[256], g_runs[512], g_out[512];

/* Application 0: counts {3, 1, 0, 0} (max/mean 4 * 3/4 = 3, unused 1/2, entropy H(3/4, 1/4) / ln 4);
 * application 1: {1, 1, 1, 1} (balanced: 1, 0, 1). k = 1 and 4 tokens. */
static RoutingStats *hand_routing(void) {
    const int64_t counts[8] = {3, 1, 0, 0, 1, 1, 1, 1};
    RoutingStats *s = xmalloc(sizeof *s);
    routing_stats_from_counts(s, counts, 0, 2, 4, 1, 4);
    return s;
}

/* One run per entry: name, arch, mode, correct per module, model JSON, routing or not. */
static void write_run(const char *run, const char *arch, const char *mode, long correct, const char *config,
                      int routing) {
    ResultRecord r;
    rtu_record(&r, run, arch, mode, correct);
    cJSON_Delete(r.config);
    r.config = cJSON_Parse(config);
    ck_assert_ptr_nonnull(r.config);
    if (routing)
        for (int s = 0; s < EVAL_N_SETS; s++) r.evaluation.sets[s].routing = hand_routing();
    char p[700];
    snprintf(p, sizeof p, "%s/%s/result.json", g_runs, run);
    rtu_save(&r, p);
    result_record_free(&r);
}

static char *report(const char *expected) {
    ck_assert_int_eq(report_build("unit", g_runs, g_out, expected), 0);
    char p[700];
    snprintf(p, sizeof p, "%s/report.md", g_out);
    return rtu_read(p);
}

static void check_html(void) {
    char p[700], why[256];
    snprintf(p, sizeof p, "%s/report.html", g_out);
    char *html = NULL, err[512];
    size_t n = 0;
    int rc = read_file_all(p, &html, &n, err, sizeof err);
    ck_assert_msg(rc == 0, "%s", err);
    rc = xml_check(html, 1, why, sizeof why);
    ck_assert_msg(rc == 0, "report.html not well-formed: %s", why);
    free(html);
}

static void setup_dirs(const char *tag) {
    rtu_tmpdir(g_dir, sizeof g_dir, tag);
    snprintf(g_runs, sizeof g_runs, "%s/runs", g_dir);
    snprintf(g_out, sizeof g_out, "%s/out", g_dir);
}

#define BASE "{\"model\":{\"arch\":\"moeut\",\"router\":\"sigmoid\"},\"train\":{\"steps\":10,\"seed\":1}}"
#define SOFTMAX "{\"model\":{\"arch\":\"moeut\",\"router\":\"softmax\"},\"train\":{\"steps\":10,\"seed\":1}}"

START_TEST(ablations_and_expert_load) {
    setup_dirs("test_report_routing");
    write_run("moeut_answer", "moeut", "answer_only", 50, BASE, 1);
    write_run("moeut_answer_softmax", "moeut", "answer_only", 60, SOFTMAX, 0);
    char *md = report("moeut_answer,moeut_answer_softmax");
    check_html();
    /* ablation table: baseline row, the differing key, +10 points on every module of both sets, n/a routing */
    ck_assert_msg(strstr(md, "## Ablations: one switch at a time") != NULL, "no ablations section:\n%s", md);
    const char *row = strstr(md, "| moeut_answer_softmax | model.router=\"softmax\" | 1 | 60.0% |");
    ck_assert_msg(row != NULL, "no softmax ablation row:\n%s", md);
    /* baseline row: accuracy, headline, no analysis, the routing means of the expert-load table below */
    ck_assert(strstr(md, "| moeut_answer | baseline | 1 | 50.0% | - | 50.0% | n/a | 2.00 | 25.0% | 0.703 |"));
    /* expert load: means over the two applications: max/mean (3 + 1) / 2, unused (1/2 + 0) / 2,
     * entropy (H(3/4,1/4)/ln 4 + 1) / 2 = (0.40564 + 1) / 2 = 0.703 (H = 0.5623 nats); worst max/mean 3 */
    ck_assert_msg(strstr(md, "| moeut_answer | interpolate | 2 | 4 | 1 | 4 | 2.00 | 25.0% | 0.703 | 3.00 |") != NULL,
                  "expert-load row:\n%s", md);
    ck_assert(strstr(md, "](expert_load_moeut_answer.svg)"));
    ck_assert(!strstr(md, "expert_load_moeut_answer_softmax.svg")); /* no routing: no map */
    char p[700];
    snprintf(p, sizeof p, "%s/expert_load_moeut_answer.svg", g_out);
    ck_assert(file_exists(p));
    free(md);
    remove_tree(g_dir);
}
END_TEST

START_TEST(no_sections_without_routing_or_family) {
    setup_dirs("test_report_routing_none");
    write_run("dense_answer", "dense", "answer_only", 40, BASE, 0);
    write_run("moeut_answer", "moeut", "answer_only", 50, BASE, 0);
    char *md = report("dense_answer,moeut_answer");
    check_html();
    ck_assert(strstr(md, "## Expert load") == NULL);
    ck_assert(strstr(md, "## Ablations") == NULL);
    free(md);
    remove_tree(g_dir);
}
END_TEST

/* Expert capacity: two logged steps whose routing records dropped assignments (counts as hand_routing, 6 tokens,
 * dropped {2, 1}: 8 kept and 3 dropped per step) give the capacity table's row, 16 kept, 6 dropped, 6/22 = 27.27%;
 * a run without them has no row, and no run with them: no table. */
/* A run trained with expert-choice routing: the expert-load section says that evaluation routed it causally, naming
 * the run; the token-choice run is not named. */
#define EXPERT_CHOICE                                                                                                \
    "{\"model\":{\"arch\":\"moeut\",\"router\":\"softmax\",\"routing\":\"expert_choice\","                        \
    "\"ff_capacity_factor\":2},\"train\":{\"steps\":10,\"seed\":1}}"
START_TEST(expert_choice_evaluation_named) {
    setup_dirs("test_report_routing_ec");
    write_run("moeut_answer", "moeut", "answer_only", 50, BASE, 1);
    write_run("moeut_answer_expert_choice", "moeut", "answer_only", 55, EXPERT_CHOICE, 1);
    char *md = report("moeut_answer,moeut_answer_expert_choice");
    check_html();
    const char *p = strstr(md, "Expert-choice routing (model.routing \"expert_choice\": moeut_answer_expert_choice)");
    ck_assert_msg(p != NULL, "no expert-choice note:\n%s", md);
    ck_assert(strstr(p, "route causally") != NULL && strstr(p, "is not measured") != NULL);
    free(md);
    remove_tree(g_dir);

    setup_dirs("test_report_routing_no_ec");
    write_run("moeut_answer", "moeut", "answer_only", 50, BASE, 1);
    md = report("moeut_answer");
    ck_assert(strstr(md, "Expert-choice routing") == NULL);
    free(md);
    remove_tree(g_dir);
}
END_TEST

START_TEST(capacity_dropped_share) {
    setup_dirs("test_report_routing_capacity");
    write_run("moeut_answer", "moeut", "answer_only", 50, BASE, 1);
    write_run("moeut_answer_softmax", "moeut", "answer_only", 60, SOFTMAX, 1);
    char *md = report("moeut_answer,moeut_answer_softmax");
    ck_assert(strstr(md, "Expert capacity") == NULL);
    free(md);
    const int64_t counts[8] = {3, 1, 0, 0, 1, 1, 1, 1}, dropped[2] = {2, 1};
    RoutingStats rs;
    routing_stats_from_counts(&rs, counts, 0, 2, 4, 1, 6);
    routing_stats_set_dropped(&rs, dropped);
    cJSON *line = cJSON_CreateObject();
    cJSON_AddNumberToObject(line, "step", 1);
    cJSON_AddNumberToObject(line, "loss", 3.5);
    cJSON_AddItemToObject(line, "routing", routing_stats_to_json(&rs));
    routing_stats_free(&rs);
    char *l1 = cJSON_PrintUnformatted(line);
    cJSON_ReplaceItemInObject(line, "step", cJSON_CreateNumber(2));
    char *l2 = cJSON_PrintUnformatted(line);
    cJSON_Delete(line);
    char text[8192], p[700];
    snprintf(text, sizeof text, "%s\n%s\n", l1, l2);
    free(l1), free(l2);
    snprintf(p, sizeof p, "%s/moeut_answer_softmax/metrics.jsonl", g_runs);
    rtu_write(p, text);
    md = report("moeut_answer,moeut_answer_softmax");
    check_html();
    ck_assert_msg(strstr(md, "| moeut_answer_softmax | 2 | 16 | 6 | 27.27% |") != NULL, "capacity row:\n%s", md);
    ck_assert(strstr(md, "| moeut_answer | 2 |") == NULL); /* no capacity records: no row */
    free(md);
    remove_tree(g_dir);
}
END_TEST

int main(void) {
    Suite *s = suite_create("report_routing");
    TCase *tc = tcase_create("report_routing");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, ablations_and_expert_load);
    tcase_add_test(tc, no_sections_without_routing_or_family);
    tcase_add_test(tc, capacity_dropped_share);
    tcase_add_test(tc, expert_choice_evaluation_named);
    suite_add_tcase(s, tc);
    return run_test_suite(s);
}
