/* The plan of make reproduce (pipeline/plan/stage_plan.h): make's dry run's stage list as bin/runs reads it, and the
 * estimates from the effective configs and the measured records. A scratch layout (experiments/, data/, runs/ under
 * /tmp) whose files get explicit time stamps, one second apart, in the order make would write them. (Which stages run
 * is make's decision: tests/e2e/test_make_console.sh checks the plan make makes.) */
#include <check.h>
#include <fcntl.h>
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "pipeline/plan/stage_plan.h"
#include "pipeline/records/config_override.h"
#include "pipeline/base/log.h"
#include "tests/unit/record_test_util.h"
#include "tests/unit/suite_runner.h"

static char g_root[256];
static char g_exp[300], g_data[300], g_runs[300];
static PlannedRun g_run[2];
static long g_clock; /* the next time stamp, seconds */
/* Every stage of both runs, as make's dry run lists them when both are trained again. */
static const char *const ALL_RUN_STAGES = "train dense_qa\nevaluate dense_qa\ntrain dense_qa.seed2\n"
                                         "evaluate dense_qa.seed2\nanalyze dense_qa\nanalyze dense_qa.seed2\nreport\n";

static const char *in(const char *dir, const char *name) {
    static char paths[8][4096];
    static int next;
    char *p = paths[next++ % 8];
    ck_assert(snprintf(p, sizeof paths[0], "%s/%s", dir, name) < (int)sizeof paths[0]);
    return p;
}

/* Writes path (text, or empty) with the next time stamp (parent directories made). */
static void put(const char *path, const char *text) {
    char dir[4096], err[512];
    snprintf(dir, sizeof dir, "%s", path);
    *strrchr(dir, '/') = '\0';
    ck_assert_msg(mkdir_p(dir, err, sizeof err) == 0, "%s", err);
    rtu_write(path, text ? text : "");
    struct timespec t[2] = {{g_clock, 0}, {g_clock, 0}};
    g_clock++;
    ck_assert(utimensat(AT_FDCWD, path, t, 0) == 0);
}

/* One core, one job, unless a test says otherwise: the estimates do not depend on the machine running the test. */
static StagePlanRequest request(const char *backend) {
    return (StagePlanRequest){.exp_dir = g_exp, .data_dir = g_data, .runs_dir = g_runs, .backend = backend,
                              .nproc = "1", .resume = true, .runs = g_run, .n_runs = 2, .cores = 1};
}

/* Every output, written in make's order. */
static void everything_made(void) {
    put(in(g_data, "tokenize_manifest.json"), NULL);
    for (int i = 0; i < 2; i++) {
        char dir[4096];
        ck_assert(snprintf(dir, sizeof dir, "%s/%s", g_runs, g_run[i].dir) < (int)sizeof dir);
        put(in(dir, "train_summary.json"), NULL);
        put(in(dir, "result.json"), NULL);
        put(in(dir, "predictions.jsonl"), NULL);
        put(in(dir, "analysis.json"), NULL);
    }
}

/* The stages of list, parsed under req (which must succeed). Free with free(). */
static PlannedStage *parsed(const StagePlanRequest *req, const char *list, int *n) {
    PlannedStage *stages;
    char err[1024];
    ck_assert_msg(stage_plan_parse(req, list, &stages, n, err, sizeof err) == 0, "%s", err);
    return stages;
}

/* The plan of list as "stage run" words joined by ", " ("report" alone for a stage of no run). */
static const char *plan_of(const char *list) {
    static char text[2048];
    StagePlanRequest req = request("cpu");
    int n;
    PlannedStage *stages = parsed(&req, list, &n);
    size_t len = 0;
    text[0] = '\0';
    for (int i = 0; i < n; i++)
        len += (size_t)snprintf(text + len, sizeof text - len, "%s%s%s%s", i ? ", " : "",
                                stage_kind_name(stages[i].kind), stages[i].run[0] ? " " : "", stages[i].run);
    free(stages);
    return text;
}

/* The error of a list that must be refused. */
static const char *refusal_of(const char *list) {
    static char err[1024];
    StagePlanRequest req = request("cpu");
    PlannedStage sentinel, *stages = &sentinel; /* reset to NULL */
    int n = -1;
    ck_assert_msg(stage_plan_parse(&req, list, &stages, &n, err, sizeof err) == -1, "accepted: %s", list);
    ck_assert(stages == NULL && n == 0);
    return err;
}

static int remove_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw) {
    (void)st, (void)flag, (void)ftw;
    return remove(path);
}

static void setup(void) {
    rtu_tmpdir(g_root, sizeof g_root, "test_stage_plan");
    snprintf(g_exp, sizeof g_exp, "%s/experiments/x", g_root);
    snprintf(g_data, sizeof g_data, "%s/data/x", g_root);
    snprintf(g_runs, sizeof g_runs, "%s/runs/x", g_root);
    memset(g_run, 0, sizeof g_run);
    snprintf(g_run[0].dir, sizeof g_run[0].dir, "dense_qa");
    snprintf(g_run[0].config, sizeof g_run[0].config, "dense_qa");
    snprintf(g_run[1].dir, sizeof g_run[1].dir, "dense_qa.seed2");
    snprintf(g_run[1].config, sizeof g_run[1].config, "dense_qa");
    g_run[1].sets[g_run[1].n_sets++] = xstrdup("train.seed=2");
    g_clock = 1000000000;
    /* the inputs first: the run config */
    char *config = rtu_read("experiments/ci/dense_qa.json");
    put(in(g_exp, "dense_qa.json"), config);
    free(config);
}

static void teardown(void) {
    for (int i = 0; i < 2; i++)
        for (int k = 0; k < g_run[i].n_sets; k++) free(g_run[i].sets[k]);
    nftw(g_root, remove_entry, 16, FTW_DEPTH | FTW_PHYS);
}

START_TEST(the_list_is_makes_in_its_order) {
    /* as make -n prints the stage lines, less the script's name: a blank after a stage of no run, blank lines */
    ck_assert_str_eq(plan_of("fetch \ntokenize \n\nupcycle dense_qa.seed2\n  train\tdense_qa.seed2\n"
                             "evaluate dense_qa.seed2\r\nanalyze dense_qa.seed2\nreport \n"),
                     "fetch, tokenize, upcycle dense_qa.seed2, train dense_qa.seed2, evaluate dense_qa.seed2, "
                     "analyze dense_qa.seed2, report");
    ck_assert_str_eq(plan_of(""), ""); /* everything up to date */
    /* a repeated line is one stage, at its first place (make -n can print a recipe line twice: a target reached
     * through two goals); the runs' names are looked up sorted, so their order in the plan does not matter */
    ck_assert_str_eq(plan_of("train dense_qa.seed2\ntrain dense_qa\nreport \ntrain dense_qa.seed2\n"
                             "evaluate dense_qa\nreport \ntrain dense_qa\nevaluate dense_qa.seed2\nevaluate dense_qa\n"),
                     "train dense_qa.seed2, train dense_qa, report, evaluate dense_qa, evaluate dense_qa.seed2");
    ck_assert_str_eq(plan_of("\n"), "");
    /* a line printed twice is one stage: make runs a recipe once */
    ck_assert_str_eq(plan_of("report\nevaluate dense_qa\nreport\nevaluate dense_qa"), "report, evaluate dense_qa");
}
END_TEST

START_TEST(a_list_make_cannot_have_printed_is_refused) {
    ck_assert_str_eq(refusal_of("fetch\ncompare\n"), "stage list, line 2: unknown stage 'compare'");
    ck_assert_str_eq(refusal_of("train\n"), "stage list, line 1: train takes one run directory");
    ck_assert_str_eq(refusal_of("report\n\ntrain dense_qa extra\n"),
                     "stage list, line 3: train takes one run directory");
    ck_assert_str_eq(refusal_of("fetch dense_qa\n"), "stage list, line 1: fetch takes no run");
    ck_assert_str_eq(refusal_of("evaluate dense_qa.seed3\n"),
                     "stage list, line 1: evaluate dense_qa.seed3: not a run directory of this plan");
    ck_assert_str_eq(refusal_of("Train dense_qa\n"), "stage list, line 1: unknown stage 'Train'");
}
END_TEST

/* The estimate line of the plan's one stage of kind of run dir (the plan: both runs redone on backend). */
static const char *estimate_of(const char *backend, bool resume, StageKind kind, const char *dir) {
    static char line[512];
    StagePlanRequest req = request(backend);
    req.resume = resume;
    int n;
    PlannedStage *stages = parsed(&req, ALL_RUN_STAGES, &n);
    char err[1024];
    ck_assert_msg(stage_plan_estimate(&req, stages, n, err, sizeof err) == 0, "%s", err);
    line[0] = '\0';
    for (int i = 0; i < n; i++)
        if (stages[i].kind == kind && strcmp(stages[i].run, dir) == 0)
            snprintf(line, sizeof line, "%ld %s", stages[i].seconds, stages[i].basis);
    free(stages);
    return line;
}

START_TEST(train_estimates) {
    /* experiments/ci/dense_qa.json: 40 steps x 8 windows x 256 tokens = 81920 tokens, 922,112 parameters (default:
     * 7e9 / 922112 = 7591 tokens/s); 200 examples per set */
    ck_assert_str_eq(estimate_of("cpu", true, STAGE_TRAIN, "dense_qa"), "11 7591 tokens/s (default)");
    ck_assert_str_eq(estimate_of("cuda", true, STAGE_TRAIN, "dense_qa"), "0 200000 tokens/s (default)");
    ck_assert_str_eq(estimate_of("cpu", true, STAGE_EVALUATE, "dense_qa"), "1 default");
    /* a finished run on this backend: its own throughput; the others get the experiment's mean */
    put(in(g_runs, "dense_qa/train_summary.json"), "{\"tokens_per_s\": 1024.4, \"backend\": \"cpu\"}");
    put(in(g_runs, "dense_qa/result.json"), "{\"evaluation\": {\"wall_time_s\": 3.4}}");
    ck_assert_str_eq(estimate_of("cuda", true, STAGE_TRAIN, "dense_qa"), "0 200000 tokens/s (default)");
    ck_assert_str_eq(estimate_of("cpu", true, STAGE_TRAIN, "dense_qa"), "80 1024 tokens/s (dense_qa's last run)");
    ck_assert_str_eq(estimate_of("cpu", true, STAGE_EVALUATE, "dense_qa"), "3 last evaluation");
    char want[512];
    snprintf(want, sizeof want, "80 1024 tokens/s (%s on cpu)", g_runs);
    ck_assert_str_eq(estimate_of("cpu", true, STAGE_TRAIN, "dense_qa.seed2"), want);
    /* an interrupted run: what is left at its own rate (doubles written as strings, as state.json writes them) */
    put(in(g_runs, "dense_qa.seed2/state.json"),
        "{\"tokens\": 40960, \"wall_time_s\": \"40.0\", \"backend\": \"cpu\"}");
    ck_assert_str_eq(estimate_of("cpu", true, STAGE_TRAIN, "dense_qa.seed2"),
                     "40 1024 tokens/s (dense_qa.seed2's interrupted run)");
    ck_assert_str_eq(estimate_of("cpu", false, STAGE_TRAIN, "dense_qa.seed2"),
                     "80 1024 tokens/s (dense_qa.seed2's interrupted run)");
    /* too short to measure (start-up dominates): the mean, for what is left */
    put(in(g_runs, "dense_qa.seed2/state.json"), "{\"tokens\": 40960, \"wall_time_s\": 5, \"backend\": \"cpu\"}");
    snprintf(want, sizeof want, "40 1024 tokens/s (%s on cpu)", g_runs);
    ck_assert_str_eq(estimate_of("cpu", true, STAGE_TRAIN, "dense_qa.seed2"), want);
    /* an unreadable record is no measurement, not an error */
    put(in(g_runs, "dense_qa.seed2/state.json"), "not json");
    snprintf(want, sizeof want, "80 1024 tokens/s (%s on cpu)", g_runs);
    ck_assert_str_eq(estimate_of("cpu", true, STAGE_TRAIN, "dense_qa.seed2"), want);
    /* the run's overrides size it: 80 steps */
    g_run[1].sets[g_run[1].n_sets++] = xstrdup("train.steps=80");
    snprintf(want, sizeof want, "160 1024 tokens/s (%s on cpu)", g_runs);
    ck_assert_str_eq(estimate_of("cpu", true, STAGE_TRAIN, "dense_qa.seed2"), want);
}
END_TEST

/* The train and evaluate stages of list as "stage run seconds basis", estimated under req. */
static const char *estimates(const StagePlanRequest *req, const char *list) {
    static char text[4096];
    int n;
    PlannedStage *stages = parsed(req, list, &n);
    char err[1024];
    ck_assert_msg(stage_plan_estimate(req, stages, n, err, sizeof err) == 0, "%s", err);
    size_t len = 0;
    text[0] = '\0';
    for (int i = 0; i < n; i++)
        if (stages[i].kind == STAGE_TRAIN || stages[i].kind == STAGE_EVALUATE)
            len += (size_t)snprintf(text + len, sizeof text - len, "%s%s %s %ld %s", len ? "; " : "",
                                    stage_kind_name(stages[i].kind), stages[i].run, stages[i].seconds,
                                    stages[i].basis);
    free(stages);
    return text;
}

/* make -jN and THREADS: runs train side by side while they have cores of their own; evaluations take one thread. */
START_TEST(jobs_and_threads_count) {
    StagePlanRequest req = request("cpu");
    req.cores = 2;
    /* one job: one at a time, whatever the threads */
    ck_assert_int_eq(stage_plan_at_once(&req, STAGE_TRAIN, 12), 1);
    req.threads = 1;
    ck_assert_int_eq(stage_plan_at_once(&req, STAGE_TRAIN, 12), 1);
    /* -j2 THREADS=1 on 2 cores: 2 runs at once; without THREADS each run takes every core: 1 */
    req.jobs = 2;
    ck_assert_int_eq(stage_plan_at_once(&req, STAGE_TRAIN, 12), 2);
    ck_assert_int_eq(stage_plan_at_once(&req, STAGE_TRAIN, 1), 1); /* never more than planned */
    req.threads = 0;
    ck_assert_int_eq(stage_plan_at_once(&req, STAGE_TRAIN, 12), 1);
    ck_assert_int_eq(stage_plan_at_once(&req, STAGE_EVALUATE, 12), 2); /* one thread each */
    /* -j (no limit) THREADS=2 on 16 cores: 8; NPROC=2 ranks of 2 threads: 4; a GPU: 1 */
    req.cores = 16;
    req.jobs = STAGE_PLAN_JOBS_UNLIMITED;
    req.threads = 2;
    ck_assert_int_eq(stage_plan_at_once(&req, STAGE_TRAIN, 12), 8);
    req.nproc = "2";
    ck_assert_int_eq(stage_plan_at_once(&req, STAGE_TRAIN, 12), 4);
    ck_assert_int_eq(stage_plan_at_once(&req, STAGE_REPORT, 1), 1);
    req.backend = "cuda";
    ck_assert_int_eq(stage_plan_at_once(&req, STAGE_TRAIN, 12), 1);
    /* the estimate: each train's own time over the runs at once (2 x 11 s at 7591 tokens/s -> 5 s each) */
    req = request("cpu");
    req.cores = 2;
    ck_assert_str_eq(estimates(&req, ALL_RUN_STAGES),
                     "train dense_qa 11 7591 tokens/s (default); evaluate dense_qa 1 default; "
                     "train dense_qa.seed2 11 7591 tokens/s (default); evaluate dense_qa.seed2 1 default");
    req.jobs = 2;
    req.threads = 1;
    ck_assert_str_eq(estimates(&req, ALL_RUN_STAGES),
                     "train dense_qa 5 7591 tokens/s (default), 2 runs at once; evaluate dense_qa 1 default; "
                     "train dense_qa.seed2 5 7591 tokens/s (default), 2 runs at once; "
                     "evaluate dense_qa.seed2 1 default");
}
END_TEST

/* Whether text starts with prefix (an estimates() line, whose later stages a test does not spell out). */
static bool starts_with(const char *text, const char *prefix) { return strncmp(text, prefix, strlen(prefix)) == 0; }

/* A run already trained with the asked config: train finds it finished and leaves it as is (a no-op, seconds). */
START_TEST(an_already_trained_run_is_a_no_op) {
    char path[4096], err[1024], state[512];
    ck_assert(snprintf(path, sizeof path, "%s/dense_qa.json", g_exp) < (int)sizeof path);
    LoadedConfig lc;
    ck_assert_msg(config_load_with_overrides(&lc, path, NULL, 0, err, sizeof err) == 0, "%s", err);
    everything_made();
    snprintf(state, sizeof state, "{\"step\": 40, \"total_steps\": 40, \"config_sha256\": \"%s\", \"backend\": "
             "\"cpu\", \"tokens\": 81920, \"wall_time_s\": \"60\"}", lc.sha256);
    loaded_config_free(&lc);
    put(in(g_runs, "dense_qa/state.json"), state);
    put(in(g_runs, "dense_qa/train_summary.json"), "{\"tokens_per_s\": 1000, \"backend\": \"cpu\"}");
    char *config = rtu_read("experiments/ci/dense_qa.json");
    put(in(g_exp, "dense_qa.json"), config); /* the config saved again (or an edit reverted): make trains */
    free(config);
    StagePlanRequest req = request("cpu");
    const char *noop = "train dense_qa 3 " STAGE_PLAN_NOOP_BASIS, *trained = "train dense_qa 82 1000 tokens/s";
    const char *got = estimates(&req, ALL_RUN_STAGES);
    ck_assert_msg(starts_with(got, noop), "%s", got);
    /* another NPROC (the stamp): still a no-op */
    req.nproc = "2";
    got = estimates(&req, ALL_RUN_STAGES);
    ck_assert_msg(starts_with(got, noop), "%s", got);
    req.nproc = "1";
    /* not with RESUME=0, another backend, the data tokenized again in this make or since, or a new initial checkpoint
     * (an upcycled run's conversion in this make) */
    req.resume = false;
    got = estimates(&req, ALL_RUN_STAGES);
    ck_assert_msg(starts_with(got, trained), "%s", got);
    req = request("cuda");
    got = estimates(&req, ALL_RUN_STAGES);
    ck_assert_msg(starts_with(got, "train dense_qa 0 200000"), "%s", got);
    req = request("cpu");
    got = estimates(&req, "tokenize\ntrain dense_qa\n");
    ck_assert_msg(starts_with(got, trained), "%s", got);
    got = estimates(&req, "upcycle dense_qa\ntrain dense_qa\n");
    ck_assert_msg(starts_with(got, trained), "%s", got);
    got = estimates(&req, "upcycle dense_qa.seed2\ntrain dense_qa\n"); /* another run's conversion */
    ck_assert_msg(starts_with(got, noop), "%s", got);
    put(in(g_data, "tokenize_manifest.json"), NULL);
    got = estimates(&req, ALL_RUN_STAGES);
    ck_assert_msg(starts_with(got, trained), "%s", got);
    /* the summary counts it */
    PlannedStage s[2] = {{STAGE_TRAIN, "a", 3, STAGE_PLAN_NOOP_BASIS}, {STAGE_EVALUATE, "a", 2, "last evaluation"}};
    char line[1024];
    stage_plan_summary("x", "cpu", s, 2, line, sizeof line);
    ck_assert_str_eq(line, "reproduce: EXPERIMENT=x on cpu: 2 stages to run (train, evaluate), about 5 s in all (an "
                           "estimate; 1 train finds its run already trained and leaves it as is)");
}
END_TEST

/* The estimates read the records of the directories as bin/runs --keep will leave them: a kept run brought back its
 * own, a run moved aside (none: a fresh run) the experiment's. */
START_TEST(estimates_read_the_runs_as_keep_will_leave_them) {
    char kept[4096], mean[512];
    ck_assert(snprintf(kept, sizeof kept, "%s/dense_qa@0123abcd", g_runs) < (int)sizeof kept);
    put(in(g_runs, "dense_qa/train_summary.json"), "{\"tokens_per_s\": 1000, \"backend\": \"cpu\"}");
    put(in(kept, "train_summary.json"), "{\"tokens_per_s\": 2048, \"backend\": \"cpu\"}");
    StagePlanRequest req = request("cpu");
    const char *list = "train dense_qa\ntrain dense_qa.seed2\n";
    /* as the directories are: dense_qa's own run; the other, never trained, the mean of both summaries */
    snprintf(mean, sizeof mean, "train dense_qa 82 1000 tokens/s (dense_qa's last run); train dense_qa.seed2 54 "
             "1524 tokens/s (%s on cpu)", g_runs);
    ck_assert_str_eq(estimates(&req, list), mean);
    /* dense_qa comes back from dense_qa@0123abcd; dense_qa.seed2 moved aside */
    const char *dirs[2] = {kept, NULL};
    req.run_dirs = dirs;
    snprintf(mean, sizeof mean, "train dense_qa 40 2048 tokens/s (dense_qa's last run); train dense_qa.seed2 54 "
             "1524 tokens/s (%s on cpu)", g_runs);
    ck_assert_str_eq(estimates(&req, list), mean);
}
END_TEST

START_TEST(a_bad_override_is_an_error) {
    StagePlanRequest req = request("cpu");
    g_run[1].sets[g_run[1].n_sets++] = xstrdup("train.stepz=80");
    int n;
    PlannedStage *stages = parsed(&req, ALL_RUN_STAGES, &n);
    char err[1024];
    ck_assert(stage_plan_estimate(&req, stages, n, err, sizeof err) == -1);
    ck_assert_msg(strstr(err, "stepz") != NULL, "%s", err);
    free(stages);
}
END_TEST

START_TEST(summary_and_durations) {
    char d[64];
    const long seconds[] = {0, 89, 90, 5399, 5400, 4 * 3600 + 29 * 60 + 31};
    const char *want[] = {"0 s", "89 s", "2 min", "90 min", "1 h 30 min", "4 h 30 min"};
    for (int i = 0; i < 6; i++) {
        stage_plan_duration(seconds[i], d, sizeof d);
        ck_assert_str_eq(d, want[i]);
    }
    PlannedStage s[5] = {{STAGE_FETCH, "", 5, "default"},
                         {STAGE_TRAIN, "a", 100, "900 tokens/s (runs/x on cpu)"},
                         {STAGE_TRAIN, "b", 50, "500 tokens/s (b's last run)"},
                         {STAGE_TRAIN, "c", 100, "900 tokens/s (runs/x on cpu)"},
                         {STAGE_REPORT, "", 2, "default"}};
    char line[1024];
    stage_plan_summary("x", "cpu", s, 5, line, sizeof line);
    ck_assert_str_eq(line, "reproduce: EXPERIMENT=x on cpu: 5 stages to run (fetch, 3 train, report), about 4 min in "
                           "all (an estimate; training at 500 tokens/s (b's last run); 900 tokens/s (runs/x on cpu))");
    stage_plan_summary("x", "cuda", s + 4, 1, line, sizeof line);
    ck_assert_str_eq(line, "reproduce: EXPERIMENT=x on cuda: 1 stage to run (report), about 2 s in all (an estimate)");
    stage_plan_summary("x", "cpu", s, 0, line, sizeof line);
    ck_assert_str_eq(line, "reproduce: everything is up to date for EXPERIMENT=x (cpu): nothing to fetch, tokenize, "
                           "train, evaluate, analyze or report");
}
END_TEST

START_TEST(writes_the_plan_file) {
    PlannedStage s[2] = {{STAGE_TOKENIZE, "", 10, "default"}, {STAGE_TRAIN, "a", 16, "5000 tokens/s (default)"}};
    char dir[512], err[512];
    ck_assert(snprintf(dir, sizeof dir, "%s/build/reproduce/x", g_root) < (int)sizeof dir);
    put(in(dir, "started"), "fetch - 1\n"); /* a count from an earlier make starts over */
    ck_assert_msg(stage_plan_write(dir, s, 2, 1234.5, err, sizeof err) == 0, "%s", err);
    char *plan = rtu_read(in(dir, "plan")), *started = rtu_read(in(dir, "started")),
         *start = rtu_read(in(dir, "plan_start"));
    ck_assert_str_eq(plan, "tokenize - 10 default\ntrain a 16 5000 tokens/s (default)\n");
    ck_assert_str_eq(started, "");
    ck_assert_str_eq(start, "1234.500\n");
    free(plan), free(started), free(start);
}
END_TEST

int main(void) {
    Suite *s = suite_create("stage_plan");
    TCase *tc = tcase_create("stage_plan");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, the_list_is_makes_in_its_order);
    tcase_add_test(tc, a_list_make_cannot_have_printed_is_refused);
    tcase_add_test(tc, train_estimates);
    tcase_add_test(tc, jobs_and_threads_count);
    tcase_add_test(tc, an_already_trained_run_is_a_no_op);
    tcase_add_test(tc, estimates_read_the_runs_as_keep_will_leave_them);
    tcase_add_test(tc, a_bad_override_is_an_error);
    tcase_add_test(tc, summary_and_durations);
    tcase_add_test(tc, writes_the_plan_file);
    suite_add_tcase(s, tc);
    return run_test_suite(s);
}
