/* The plan of make reproduce (pipeline/plan/stage_plan.h): which stages run, judged from the files' time stamps and the
 * train.inputs stamps as make judges them, and the estimates from the effective configs and the measured records. A
 * scratch layout (experiments/, data/, runs/, reports/, bin/, datasets/ under /tmp) whose files get explicit time
 * stamps, one second apart, in the order make would write them. */
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
static char g_exp[300], g_data[300], g_runs[300], g_report[300], g_bin[300], g_datasets[300];
static PlannedRun g_run[2];
static long g_clock; /* the next time stamp, seconds */

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
    return (StagePlanRequest){.exp_dir = g_exp, .data_dir = g_data, .runs_dir = g_runs, .report_dir = g_report,
                              .bin_dir = g_bin, .datasets_dir = g_datasets, .backend = backend, .nproc = "1",
                              .resume = true, .runs = g_run, .n_runs = 2, .cores = 1};
}

/* Every output, written in make's order, so that nothing is left to do. */
static void everything_made(void) {
    put(in(g_data, "fetch.args"), "--config x");
    put(in(g_data, "raw/fetch.stamp"), NULL);
    put(in(g_data, "raw/manifest.json"), NULL);
    put(in(g_data, "tokenize_manifest.json"), NULL);
    StagePlanRequest req = request("cpu");
    for (int i = 0; i < 2; i++) {
        char dir[4096], stamp[8192];
        ck_assert(snprintf(dir, sizeof dir, "%s/%s", g_runs, g_run[i].dir) < (int)sizeof dir);
        stage_plan_inputs_text(&req, &g_run[i], stamp, sizeof stamp);
        put(in(dir, "train.inputs"), stamp);
        put(in(dir, "train_summary.json"), NULL);
        put(in(dir, "result.json"), NULL);
        put(in(dir, "predictions.jsonl"), NULL);
        put(in(dir, "analysis.json"), NULL);
    }
    put(in(g_report, "report.html"), NULL);
}

/* The plan as "stage run" words joined by ", " ("report" alone for a stage of no run). */
static const char *plan_of(const StagePlanRequest *req) {
    static char text[2048];
    PlannedStage *stages;
    int n;
    char err[1024];
    ck_assert_msg(stage_plan_decide(req, &stages, &n, err, sizeof err) == 0, "%s", err);
    size_t len = 0;
    text[0] = '\0';
    for (int i = 0; i < n; i++)
        len += (size_t)snprintf(text + len, sizeof text - len, "%s%s%s%s", i ? ", " : "",
                                stage_kind_name(stages[i].kind), stages[i].run[0] ? " " : "", stages[i].run);
    free(stages);
    return text;
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
    snprintf(g_report, sizeof g_report, "%s/reports/x", g_root);
    snprintf(g_bin, sizeof g_bin, "%s/bin", g_root);
    snprintf(g_datasets, sizeof g_datasets, "%s/datasets", g_root);
    memset(g_run, 0, sizeof g_run);
    snprintf(g_run[0].dir, sizeof g_run[0].dir, "dense_qa");
    snprintf(g_run[0].config, sizeof g_run[0].config, "dense_qa");
    snprintf(g_run[1].dir, sizeof g_run[1].dir, "dense_qa.seed2");
    snprintf(g_run[1].config, sizeof g_run[1].config, "dense_qa");
    g_run[1].sets[g_run[1].n_sets++] = xstrdup("train.seed=2");
    g_clock = 1000000000;
    /* the inputs first: configs, archives, programs */
    char *config = rtu_read("experiments/ci/dense_qa.json");
    put(in(g_exp, "dense_qa.json"), config);
    free(config);
    put(in(g_exp, "data.json"), "{}");
    put(in(g_datasets, "dm_math_v1.0.json"), "{}");
    put(in(g_datasets, "sample.tar.gz"), NULL);
    put(in(g_bin, "evaluate"), NULL);
    put(in(g_bin, "analyze"), NULL);
    put(in(g_bin, "report"), NULL);
}

static void teardown(void) {
    for (int i = 0; i < 2; i++)
        for (int k = 0; k < g_run[i].n_sets; k++) free(g_run[i].sets[k]);
    nftw(g_root, remove_entry, 16, FTW_DEPTH | FTW_PHYS);
}

START_TEST(nothing_made_runs_everything_in_makes_order) {
    StagePlanRequest req = request("cpu");
    ck_assert_str_eq(plan_of(&req), "fetch, tokenize, train dense_qa, evaluate dense_qa, train dense_qa.seed2, "
                                    "evaluate dense_qa.seed2, analyze dense_qa, analyze dense_qa.seed2, report");
}
END_TEST

START_TEST(up_to_date_runs_nothing) {
    everything_made();
    StagePlanRequest req = request("cpu");
    ck_assert_str_eq(plan_of(&req), "");
}
END_TEST

START_TEST(other_inputs_redo_the_runs_but_not_the_data) {
    everything_made();
    StagePlanRequest req = request("cuda");
    ck_assert_str_eq(plan_of(&req), "train dense_qa, evaluate dense_qa, train dense_qa.seed2, evaluate dense_qa.seed2, "
                                    "analyze dense_qa, analyze dense_qa.seed2, report");
    /* one run's stamp of other overrides: that run only */
    put(in(g_runs, "dense_qa.seed2/train.inputs"), "backend=cpu nproc=1 set=train.lr=2");
    req = request("cpu");
    ck_assert_str_eq(plan_of(&req), "train dense_qa.seed2, evaluate dense_qa.seed2, analyze dense_qa.seed2, report");
    /* the same text with other blanks is the same stamp (make compares $(strip)ped text) */
    put(in(g_runs, "dense_qa.seed2/train.inputs"), "backend=cpu  nproc=1 set=train.seed=2\n");
    put(in(g_runs, "dense_qa.seed2/train_summary.json"), NULL);
    put(in(g_runs, "dense_qa.seed2/result.json"), NULL);
    put(in(g_runs, "dense_qa.seed2/predictions.jsonl"), NULL);
    put(in(g_runs, "dense_qa.seed2/analysis.json"), NULL);
    put(in(g_report, "report.html"), NULL);
    ck_assert_str_eq(plan_of(&req), "");
}
END_TEST

START_TEST(time_stamps_decide_like_make) {
    StagePlanRequest req = request("cpu");
    everything_made();
    put(in(g_exp, "dense_qa.json"), NULL); /* a config edited: both runs of it */
    ck_assert_str_eq(plan_of(&req), "train dense_qa, evaluate dense_qa, train dense_qa.seed2, evaluate dense_qa.seed2, "
                                    "analyze dense_qa, analyze dense_qa.seed2, report");
    everything_made();
    put(in(g_bin, "evaluate"), NULL); /* a new program: its stage, not training */
    ck_assert_str_eq(plan_of(&req), "evaluate dense_qa, evaluate dense_qa.seed2, report");
    everything_made();
    put(in(g_bin, "report"), NULL);
    ck_assert_str_eq(plan_of(&req), "report");
    everything_made();
    ck_assert(remove(in(g_runs, "dense_qa/predictions.jsonl")) == 0); /* either output of evaluate */
    ck_assert_str_eq(plan_of(&req), "evaluate dense_qa, report");
    everything_made();
    put(in(g_runs, "dense_qa/train_summary.json"), NULL); /* retrained by hand: its later stages */
    ck_assert_str_eq(plan_of(&req), "evaluate dense_qa, analyze dense_qa, report");
    everything_made();
    put(in(g_runs, "dense_qa/result.json"), NULL); /* a newer record: the report */
    ck_assert_str_eq(plan_of(&req), "report");
}
END_TEST

START_TEST(data_stages) {
    StagePlanRequest req = request("cpu");
    const char *all_runs = "train dense_qa, evaluate dense_qa, train dense_qa.seed2, evaluate dense_qa.seed2, "
                           "analyze dense_qa, analyze dense_qa.seed2, report";
    char want[1024];
    everything_made();
    ck_assert(remove(in(g_data, "raw/fetch.stamp")) == 0); /* fetch alone: an unchanged raw/ re-tokenizes nothing */
    ck_assert_str_eq(plan_of(&req), "fetch");
    everything_made();
    put(in(g_datasets, "sample.tar.gz"), NULL); /* a new archive: fetch */
    ck_assert_str_eq(plan_of(&req), "fetch");
    everything_made();
    put(in(g_data, "fetch.args"), NULL); /* other fetch arguments (SOURCE=) */
    ck_assert_str_eq(plan_of(&req), "fetch");
    everything_made();
    req.fetch_args = "--config x"; /* the stamp's text as make compares it: the same text, other blanks */
    ck_assert_str_eq(plan_of(&req), "");
    req.fetch_args = " --config   x\n";
    ck_assert_str_eq(plan_of(&req), "");
    req.fetch_args = "--config x --source 'file:///y.tar.gz'"; /* SOURCE= given: make rewrites the stamp, fetch */
    ck_assert_str_eq(plan_of(&req), "fetch");
    req.fetch_args = NULL;
    everything_made();
    put(in(g_data, "raw/manifest.json"), NULL); /* new raw data: tokenize and every run */
    snprintf(want, sizeof want, "tokenize, %s", all_runs);
    ck_assert_str_eq(plan_of(&req), want);
    everything_made();
    put(in(g_exp, "data.json"), NULL); /* data.json: everything */
    snprintf(want, sizeof want, "fetch, tokenize, %s", all_runs);
    ck_assert_str_eq(plan_of(&req), want);
}
END_TEST

START_TEST(inputs_text_sorts_like_make) {
    StagePlanRequest req = request("cuda");
    PlannedRun r;
    memset(&r, 0, sizeof r);
    char *sets[] = {"train.seed=2", "train.lr=1e-3", "train.lr=1e-3", "model.d_model=64"};
    for (int i = 0; i < 4; i++) r.sets[r.n_sets++] = sets[i];
    char text[512];
    stage_plan_inputs_text(&req, &r, text, sizeof text);
    ck_assert_str_eq(text, "backend=cuda nproc=1 set=model.d_model=64,train.lr=1e-3,train.seed=2");
    r.sets[0] = "a.note=";  /* an empty value: the next word still gets its comma */
    r.sets[1] = "b.x=1";
    r.n_sets = 2;
    stage_plan_inputs_text(&req, &r, text, sizeof text);
    ck_assert_str_eq(text, "backend=cuda nproc=1 set=a.note=,b.x=1");
    r.n_sets = 0;
    stage_plan_inputs_text(&req, &r, text, sizeof text);
    ck_assert_str_eq(text, "backend=cuda nproc=1 set=");
}
END_TEST

/* The estimate line of the plan's one train stage of run dir (the plan: both runs redone on backend). */
static const char *estimate_of(const char *backend, bool resume, StageKind kind, const char *dir) {
    static char line[512];
    StagePlanRequest req = request(backend);
    req.resume = resume;
    PlannedStage *stages;
    int n;
    char err[1024];
    ck_assert_msg(stage_plan_decide(&req, &stages, &n, err, sizeof err) == 0, "%s", err);
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

/* The plan's stages as "seconds basis" lines, estimated under req. */
static const char *estimates(const StagePlanRequest *req) {
    static char text[4096];
    PlannedStage *stages;
    int n;
    char err[1024];
    ck_assert_msg(stage_plan_decide(req, &stages, &n, err, sizeof err) == 0, "%s", err);
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
    ck_assert_str_eq(estimates(&req), "train dense_qa 11 7591 tokens/s (default); evaluate dense_qa 1 default; "
                                      "train dense_qa.seed2 11 7591 tokens/s (default); evaluate dense_qa.seed2 1 "
                                      "default");
    req.jobs = 2;
    req.threads = 1;
    ck_assert_str_eq(estimates(&req), "train dense_qa 5 7591 tokens/s (default), 2 runs at once; evaluate dense_qa "
                                      "1 default; train dense_qa.seed2 5 7591 tokens/s (default), 2 runs at once; "
                                      "evaluate dense_qa.seed2 1 default");
}
END_TEST

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
    put(in(g_exp, "dense_qa.json"), config); /* the config saved again (or an edit reverted): train is planned */
    free(config);
    StagePlanRequest req = request("cpu");
    const char *noop = "train dense_qa 3 " STAGE_PLAN_NOOP_BASIS;
    ck_assert_msg(strncmp(estimates(&req), noop, strlen(noop)) == 0, "%s", estimates(&req));
    /* another NPROC (the stamp): still a no-op */
    req.nproc = "2";
    ck_assert_msg(strncmp(estimates(&req), noop, strlen(noop)) == 0, "%s", estimates(&req));
    req.nproc = "1";
    /* not with RESUME=0, another backend, steps left, or new data */
    req.resume = false;
    ck_assert_msg(strncmp(estimates(&req), "train dense_qa 82 1000 tokens/s", 31) == 0, "%s", estimates(&req));
    req = request("cuda");
    ck_assert_msg(strncmp(estimates(&req), "train dense_qa 0 200000", 23) == 0, "%s", estimates(&req));
    req = request("cpu");
    put(in(g_data, "tokenize_manifest.json"), NULL);
    ck_assert_msg(strncmp(estimates(&req), "train dense_qa 82 1000 tokens/s", 31) == 0, "%s", estimates(&req));
    /* the summary counts it */
    PlannedStage s[2] = {{STAGE_TRAIN, "a", 3, STAGE_PLAN_NOOP_BASIS}, {STAGE_EVALUATE, "a", 2, "last evaluation"}};
    char line[1024];
    stage_plan_summary("x", "cpu", s, 2, line, sizeof line);
    ck_assert_str_eq(line, "reproduce: EXPERIMENT=x on cpu: 2 stages to run (train, evaluate), about 5 s in all (an "
                           "estimate; 1 train finds its run already trained and leaves it as is)");
}
END_TEST

/* The directories as bin/runs --keep will leave them: a kept run brought back decides from its own files; a run
 * moved aside (none) is trained; RESUME=0 trains every run. */
START_TEST(runs_as_keep_will_leave_them) {
    everything_made();
    StagePlanRequest req = request("cpu");
    char kept[4096];
    ck_assert(snprintf(kept, sizeof kept, "%s/dense_qa@0123abcd", g_runs) < (int)sizeof kept);
    put(in(kept, "train.inputs"), "backend=cpu nproc=1 set=");
    const char *dirs[2] = {kept, NULL};
    req.run_dirs = dirs;
    /* the kept run has no records: trained and evaluated; the other run moved aside: a fresh run */
    ck_assert_str_eq(plan_of(&req), "train dense_qa, evaluate dense_qa, train dense_qa.seed2, evaluate dense_qa.seed2, "
                                    "analyze dense_qa, analyze dense_qa.seed2, report");
    put(in(kept, "train_summary.json"), NULL);
    put(in(kept, "result.json"), NULL);
    put(in(kept, "predictions.jsonl"), NULL);
    put(in(kept, "analysis.json"), NULL);
    char own[4096];
    ck_assert(snprintf(own, sizeof own, "%s/dense_qa.seed2", g_runs) < (int)sizeof own);
    dirs[1] = own;
    put(in(g_report, "report.html"), NULL);
    /* up to date, but a run comes back: make's --keep then removes the report, and make remakes it */
    ck_assert_str_eq(plan_of(&req), "report");
    ck_assert(snprintf(kept, sizeof kept, "%s/dense_qa", g_runs) < (int)sizeof kept);
    dirs[0] = kept;
    ck_assert_str_eq(plan_of(&req), "");
    req.resume = false; /* RESUME=0 */
    ck_assert_str_eq(plan_of(&req), "train dense_qa, evaluate dense_qa, train dense_qa.seed2, evaluate dense_qa.seed2, "
                                    "analyze dense_qa, analyze dense_qa.seed2, report");
}
END_TEST

START_TEST(a_bad_override_is_an_error) {
    StagePlanRequest req = request("cpu");
    g_run[1].sets[g_run[1].n_sets++] = xstrdup("train.stepz=80");
    PlannedStage *stages;
    int n;
    char err[1024];
    ck_assert(stage_plan_decide(&req, &stages, &n, err, sizeof err) == 0);
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

/* An upcycled run (its initial checkpoint converted from another run): the conversion is redone when the source run's
 * train_summary.json is newer than init.safetensors or the file is missing, and then the run is retrained. */
START_TEST(upcycled_run_follows_its_source) {
    snprintf(g_run[1].upcycle_from, sizeof g_run[1].upcycle_from, "dense_qa");
    everything_made();
    char dir[4096];
    ck_assert(snprintf(dir, sizeof dir, "%s/%s", g_runs, g_run[1].dir) < (int)sizeof dir);
    /* make's order: the conversion before the upcycled run's training and records */
    put(in(dir, "init.safetensors"), NULL);
    put(in(dir, "train_summary.json"), NULL);
    put(in(dir, "result.json"), NULL);
    put(in(dir, "predictions.jsonl"), NULL);
    put(in(dir, "analysis.json"), NULL);
    put(in(g_report, "report.html"), NULL);
    StagePlanRequest req = request("cpu");
    ck_assert_str_eq(plan_of(&req), "");
    /* the dense run trained again: its records, the conversion and everything of the upcycled run */
    char src[4096];
    ck_assert(snprintf(src, sizeof src, "%s/dense_qa", g_runs) < (int)sizeof src);
    put(in(src, "train_summary.json"), NULL);
    ck_assert_str_eq(plan_of(&req), "evaluate dense_qa, upcycle dense_qa.seed2, train dense_qa.seed2, "
                                    "evaluate dense_qa.seed2, analyze dense_qa, analyze dense_qa.seed2, report");
    /* no initial checkpoint: converted, then trained */
    everything_made();
    ck_assert(remove(in(dir, "init.safetensors")) == 0);
    ck_assert_str_eq(plan_of(&req), "upcycle dense_qa.seed2, train dense_qa.seed2, evaluate dense_qa.seed2, "
                                    "analyze dense_qa.seed2, report");
}
END_TEST

int main(void) {
    Suite *s = suite_create("stage_plan");
    TCase *tc = tcase_create("stage_plan");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, nothing_made_runs_everything_in_makes_order);
    tcase_add_test(tc, up_to_date_runs_nothing);
    tcase_add_test(tc, other_inputs_redo_the_runs_but_not_the_data);
    tcase_add_test(tc, time_stamps_decide_like_make);
    tcase_add_test(tc, data_stages);
    tcase_add_test(tc, inputs_text_sorts_like_make);
    tcase_add_test(tc, train_estimates);
    tcase_add_test(tc, jobs_and_threads_count);
    tcase_add_test(tc, an_already_trained_run_is_a_no_op);
    tcase_add_test(tc, runs_as_keep_will_leave_them);
    tcase_add_test(tc, a_bad_override_is_an_error);
    tcase_add_test(tc, summary_and_durations);
    tcase_add_test(tc, writes_the_plan_file);
    tcase_add_test(tc, upcycled_run_follows_its_source);
    suite_add_tcase(s, tc);
    return run_test_suite(s);
}
