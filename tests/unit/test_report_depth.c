/* bin/report's depth over the evaluation prompts (pipeline/report/report_depth.c) on hand-made depth_prompts.json
 * records of the paper's four run configs, two seeds each, 4 prompts: the levels with their interval, the mean maps,
 * the claims judged prompt by prompt (numbers against hand-computed ones) for all prompts and those answered
 * correctly and wrongly, one verdict line per claim among the paper's claims (counted by the short answer), and the
 * sensitivity table naming the verdicts that flip with the uninformative vector (and, with one seed, the intervals that
 * move across 0, and the short answer's reason: one seed); nothing of it without records. */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pipeline/base/atomic_file.h"
#include "pipeline/records/depth_prompts_record.h"
#include "pipeline/report/report_build.h"

#include "tests/unit/record_test_util.h"
#include "tests/unit/suite_runner.h"
#include "tests/unit/xml_check.h"

static char g_dir[256], g_runs[512], g_out[512];

#define CLAIM0 "| answer-only loss makes the Transformer use more depth than Q+A loss "

/* Levels per config under the counterfactual and evaluation-mean vectors: depth_fraction base + 0.05 on the odd
 * prompts, depth_centre base; seed 2 adds 0.02 to dense_answer only. Under zero, depth_fraction is 0.5 everywhere
 * (no claim can be judged) and depth_centre as under the others. Correct: prompt 0 in every run, prompt 1 in none,
 * prompt 2 in dense_qa only, prompt 3 in the MoEUT runs only. */
static const struct {
    const char *cfg, *arch, *mode;
    double fraction, centre;
    int correct2, correct3;
} CFG[4] = {{"dense_qa", "dense", "qa", 0.25, 0.30, 1, 0},
            {"dense_answer", "dense", "answer_only", 0.50, 0.35, 0, 0},
            {"moeut_qa", "moeut", "qa", 0.80, 0.40, 0, 1},
            {"moeut_answer", "moeut", "answer_only", 0.75, 0.45, 0, 1}};

static void depth_record(DepthPromptsRecord *d, int k, const char *run, int seed) {
    memset(d, 0, sizeof *d);
    snprintf(d->experiment, sizeof d->experiment, "unit");
    snprintf(d->run, sizeof d->run, "%s", run);
    snprintf(d->arch, sizeof d->arch, "%s", CFG[k].arch);
    snprintf(d->loss_mode, sizeof d->loss_mode, "%s", CFG[k].mode);
    run_provenance_init(&d->prov);
    snprintf(d->code_version, sizeof d->code_version, "test-version");
    snprintf(d->backend, sizeof d->backend, "cpu");
    snprintf(d->hardware, sizeof d->hardware, "test cpu");
    d->n_layers = 2;
    d->requested = 4;
    d->sample_seed = 20251105ull;
    d->pool[0] = d->pool[1] = 10;
    d->map_bins = 2;
    for (int b = 0; b < DEPTH_N_VECTORS; b++) {
        d->mean_map[b] = xcalloc(6, sizeof(double));
        for (int c = 0; c < 6; c++) d->mean_map[b][c] = 0.01 * (k + 1) * (c + 1);
    }
    d->n_prompts = 4;
    d->prompts = xcalloc(4, sizeof *d->prompts);
    const double offset = seed == 2 && k == 1 ? 0.02 : 0;
    for (int i = 0; i < 4; i++) {
        DepthPrompt *p = &d->prompts[i];
        p->set = i < 2 ? EVAL_INTERPOLATE : EVAL_EXTRAPOLATE;
        p->index = i;
        snprintf(p->module, sizeof p->module, "arithmetic__mul");
        p->q_len = 9;
        p->a_len = 2;
        p->correct = i == 0 || (i == 2 && CFG[k].correct2) || (i == 3 && CFG[k].correct3);
        for (int b = 0; b < DEPTH_N_VECTORS; b++) {
            p->value[b][DEPTH_MEASURE_FRACTION] =
                b == DEPTH_VEC_ZERO ? 0.5 : CFG[k].fraction + 0.05 * (i % 2) + offset;
            p->value[b][DEPTH_MEASURE_CENTRE] = CFG[k].centre + offset;
        }
    }
}

static void write_runs(bool with_depth, int n_seeds) {
    rtu_tmpdir(g_dir, sizeof g_dir, "test_report_depth");
    snprintf(g_runs, sizeof g_runs, "%s/runs", g_dir);
    snprintf(g_out, sizeof g_out, "%s/out", g_dir);
    char p[800], err[512], run[100];
    for (int k = 0; k < 4; k++)
        for (int s = 1; s <= n_seeds; s++) {
            if (s == 1) snprintf(run, sizeof run, "%s", CFG[k].cfg);
            else snprintf(run, sizeof run, "%s.seed2", CFG[k].cfg);
            ResultRecord r;
            rtu_record(&r, run, CFG[k].arch, CFG[k].mode, 40);
            cJSON_AddNumberToObject(cJSON_GetObjectItemCaseSensitive(r.config, "train"), "seed", s);
            r.prov.seed = s;
            snprintf(r.prov.run_config, sizeof r.prov.run_config, "%s", CFG[k].cfg);
            if (s == 2) snprintf(r.prov.overrides[r.prov.n_overrides++], RUN_OVERRIDE_MAX, "train.seed=2");
            snprintf(p, sizeof p, "%s/%s/result.json", g_runs, run);
            rtu_save(&r, p);
            result_record_free(&r);
            AnalysisRecord a;
            rtu_analysis(&a, run, CFG[k].arch, CFG[k].mode, 2);
            snprintf(p, sizeof p, "%s/%s/analysis.json", g_runs, run);
            ck_assert_msg(analysis_record_save(&a, p, err, sizeof err) == 0, "%s", err);
            analysis_record_free(&a);
            if (!with_depth) continue;
            DepthPromptsRecord d;
            depth_record(&d, k, run, s);
            cJSON *j = depth_prompts_to_json(&d);
            snprintf(p, sizeof p, "%s/%s/%s", g_runs, run, DEPTH_PROMPTS_FILE_NAME);
            ck_assert_msg(json_save_file(p, j, err, sizeof err) == 0, "%s", err);
            cJSON_Delete(j);
            depth_prompts_free(&d);
        }
}

static char *report_md(void) {
    ck_assert_int_eq(report_build("unit", g_runs, g_out, REPORT_DEFAULT_EXPECTED_RUNS), 0);
    char p[700];
    snprintf(p, sizeof p, "%s/report.md", g_out);
    return rtu_read(p);
}

/* The line of the Markdown that contains key (a static copy). */
static const char *md_line(const char *md, const char *key) {
    static char line[8192];
    const char *at = strstr(md, key);
    if (!at) return NULL;
    const char *start = at;
    while (start > md && start[-1] != '\n') start--;
    const char *end = strchr(at, '\n');
    size_t n = end ? (size_t)(end - start) : strlen(start);
    if (n >= sizeof line) n = sizeof line - 1;
    memcpy(line, start, n);
    line[n] = '\0';
    return line;
}

START_TEST(depth_over_prompts) {
    write_runs(true, 2);
    char *md = report_md();
    const char *l;
    ck_assert_msg(strstr(md, "## Depth over the evaluation prompts"), "no section");
    /* levels: dense_qa 0.25, 0.30, 0.25, 0.30 at both seeds -> 0.275; 2 of 4 answered correctly */
    l = md_line(md, "| dense_qa | 2 | 4 | 50.0% | 0.275 [");
    ck_assert_msg(l && strstr(l, "| 0.300 [0.300, 0.300] |"), "levels row: %s", l ? l : "(no line)");
    /* the mean maps, one file per configuration */
    char p[700];
    snprintf(p, sizeof p, "%s/depth_mean_moeut_answer.svg", g_out);
    ck_assert(file_exists(p));
    ck_assert(strstr(md, "](depth_mean_dense_qa.svg)"));
    /* claim 0, dense_answer - dense_qa on depth_fraction: per seed +0.25, +0.27 -> +0.26; t across seeds: sd .014142,
     * half-width 12.7062 * .014142 / sqrt 2 = .12706 -> [+0.133, +0.387], the bootstrap [+0.25, +0.27] inside it */
    l = md_line(md, "Depth (§5) over the sampled evaluation prompts: answer-only loss makes the Transformer");
    ck_assert_msg(l && strstr(l, "depth_fraction of dense_answer > dense_qa, prompt by prompt (the paper's "
                                 "counterfactual vector): consistent. Ours: difference +0.260, bootstrap over seeds "
                                 "and 4 prompts [+0.250, +0.270], t across seeds [+0.133, +0.387]; 2 paired seeds "
                                 "(seed 1: +0.250, seed 2: +0.270)."),
                  "verdict line: %s", l ? l : "(no line)");
    /* claim 3, moeut_answer - moeut_qa = -0.05 at every prompt and seed: contradicted */
    l = md_line(md, "Depth (§5) over the sampled evaluation prompts: MoEUT uses most depth");
    ck_assert_msg(l && strstr(l, ": contradicted. Ours: difference -0.050"), "%s", l ? l : "(no line)");
    /* the claims table: all prompts, answered correctly (prompt 0 only: dense_qa also got prompt 2, dense_answer not),
     * answered wrongly (prompts 1 and 3) */
    l = md_line(md, CLAIM0 "| depth_fraction | ");
    ck_assert_msg(l && strstr(l, "| consistent: +0.260 [+0.133, +0.387] (2 seeds x 4) | consistent: +0.260 [+0.133, "
                                 "+0.387] (2 seeds x 1) | consistent: +0.260 [+0.133, +0.387] (2 seeds x 2) |"),
                  "claims row: %s", l ? l : "(no line)");
    /* MoEUT Q+A vs the Transformer Q+A: both right at both seeds only on prompt 0, both wrong only on prompt 1 */
    l = md_line(md, "| MoEUT uses more depth than the Transformer with Q+A loss | depth_centre | ");
    ck_assert_msg(l && strstr(l, "| consistent: +0.100 [+0.100, +0.100] (2 seeds x 1) | consistent: +0.100 [+0.100, "
                                 "+0.100] (2 seeds x 1) |"),
                  "%s", l ? l : "(no line)");
    /* sensitivity: depth_fraction is flat under zero, so its four verdicts flip; depth_centre's do not */
    const char *sens = strstr(md, "### Sensitivity to the uninformative vector");
    ck_assert(sens);
    l = md_line(sens, CLAIM0 "| depth_fraction | consistent");
    ck_assert_msg(l && strstr(l, "| not resolved at this size: +0.000 [+0.000, +0.000] (2 seeds x 4) | yes: "
                                 "consistent / consistent / not resolved at this size |"),
                  "sensitivity row: %s", l ? l : "(no line)");
    l = md_line(sens, CLAIM0 "| depth_centre | not resolved");
    ck_assert_msg(l && strstr(l, "| no |"), "%s", l ? l : "(no line)");
    ck_assert(strstr(md, "4 verdicts depend on the choice of the vector:"));
    ck_assert(strstr(md, "- MoEUT uses most depth with answer-only loss (more than MoEUT Q+A) (depth_fraction): "
                         "contradicted with the counterfactual mean, contradicted with the evaluation mean, not "
                         "resolved at this size with zero."));
    /* the short answer counts the four new lines: 4 headline + 6 effects + 1 interaction + 4 + 4 depth */
    l = md_line(md, "- Answer: ");
    ck_assert_msg(l && strstr(l, "- Answer: of the 19 claim lines below,"), "%s", l ? l : "(no line)");
    l = md_line(md, "- More depth used");
    ck_assert_msg(l && strstr(l, " Over the sampled evaluation prompts: Transformer answer-only > Q+A, MoEUT > "
                                "Transformer with Q+A, MoEUT > Transformer with answer-only: consistent; MoEUT "
                                "answer-only > Q+A: contradicted."),
                  "%s", l ? l : "(no line)");
    char *html = NULL, err[512], why[256];
    size_t n = 0;
    snprintf(p, sizeof p, "%s/report.html", g_out);
    ck_assert_msg(read_file_all(p, &html, &n, err, sizeof err) == 0, "%s", err);
    ck_assert_msg(xml_check(html, 1, why, sizeof why) == 0, "report.html not well-formed: %s", why);
    free(html);
    free(md);
    remove_tree(g_dir);
}
END_TEST

START_TEST(nothing_without_records) {
    write_runs(false, 2);
    char *md = report_md();
    ck_assert(strstr(md, "No run has depth_prompts.json"));
    ck_assert(!strstr(md, "over the sampled evaluation prompts"));
    ck_assert(!strstr(md, "Sensitivity to the uninformative vector"));
    free(md);
    remove_tree(g_dir);
}
END_TEST

/* One seed: no verdict anywhere, but the sensitivity table still says where the prompts' interval moves across 0. */
START_TEST(one_seed_interval_moves) {
    write_runs(true, 1);
    char *md = report_md();
    const char *sens = strstr(md, "### Sensitivity to the uninformative vector");
    ck_assert(sens);
    const char *l = md_line(sens, CLAIM0 "| depth_fraction |");
    ck_assert_msg(l && strstr(l, "| not resolved at this size: +0.250 [+0.250, +0.250] (1 seed x 4; the interval over "
                                 "prompts only) |") &&
                      strstr(l, "| no verdict changes, but the interval moves: above 0 / above 0 / across 0 |"),
                  "%s", l ? l : "(no line)");
    ck_assert(strstr(sens, "No verdict flips with the choice of the vector."));
    /* the short answer says why nothing is resolved: one seed (on the four prompts, and over the sampled ones);
     * the paper's accuracies: below its scale */
    l = md_line(md, "- More depth used");
    ck_assert_msg(l && strstr(l, "on its four prompts: all 4: not resolved (one seed). Over the sampled evaluation "
                                 "prompts: all 4: not resolved (one seed)."),
                  "%s", l ? l : "(no line)");
    ck_assert(strstr(md, "accuracies (41/48/36/63% on arithmetic__mul_div_multiple_longer): all 4: not resolved (below "
                         "the paper's scale)."));
    free(md);
    remove_tree(g_dir);
}
END_TEST

int main(void) {
    Suite *s = suite_create("report_depth");
    TCase *tc = tcase_create("report_depth");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, depth_over_prompts);
    tcase_add_test(tc, nothing_without_records);
    tcase_add_test(tc, one_seed_interval_moves);
    suite_add_tcase(s, tc);
    return run_test_suite(s);
}
