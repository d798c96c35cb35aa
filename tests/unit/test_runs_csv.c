/* The runs of an experiment as one CSV (pipeline/records/runs_csv.c), on hand-made records: which directories become rows
 * (symbolic links, directories without a result.json and plain files skipped; natural order of the names), the
 * columns (the fixed ones, the union of the runs' flattened config keys in their order, the metrics with the union
 * of the modules), the cells (seed, joined overrides, the variant key shared by the seeds of one configuration,
 * numbers that read back to the same double, empty where a run lacks a key), the metric names make diff shows and
 * the depth scores of analysis.json and depth_prompts.json, RFC 4180 quoting, the atomic write, and the errors (a
 * record of another run, two experiments, nothing to export, a depth record that does not load) naming the file. */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "pipeline/base/atomic_file.h"
#include "pipeline/records/run_identity.h"
#include "pipeline/records/runs_csv.h"
#include "tests/unit/record_test_util.h"
#include "tests/unit/suite_runner.h"

static char g_runs[256];

/* runs/<dir>/result.json from rtu_record, with config (JSON text), the record's run name, seed and overrides. */
static void write_run(const char *dir, const char *run, const char *arch, long correct, const char *config, long seed,
                      const char *const *overrides, int n_overrides, void (*alter)(ResultRecord *)) {
    ResultRecord r;
    rtu_record(&r, run, arch, "qa", correct);
    cJSON_Delete(r.config);
    r.config = cJSON_Parse(config);
    ck_assert_msg(r.config != NULL, "bad test config %s", config);
    r.prov.seed = seed;
    char cfg[128];
    long s;
    bool suffix;
    run_name_split(dir, cfg, sizeof cfg, &s, &suffix);
    snprintf(r.prov.run_config, sizeof r.prov.run_config, "%s", cfg);
    for (int i = 0; i < n_overrides; i++) snprintf(r.prov.overrides[i], RUN_OVERRIDE_MAX, "%s", overrides[i]);
    r.prov.n_overrides = n_overrides;
    if (alter) alter(&r);
    char p[512];
    snprintf(p, sizeof p, "%s/%s/result.json", g_runs, dir);
    rtu_save(&r, p);
    result_record_free(&r);
}

static int col(const RunsTable *t, const char *name) {
    for (int c = 0; c < t->n_cols; c++)
        if (strcmp(t->cols[c], name) == 0) return c;
    ck_abort_msg("no column %s", name);
    return -1;
}
static const char *cell(const RunsTable *t, int row, const char *name) { return t->cells[row][col(t, name)]; }

#define DENSE_CONFIG                                                                                                 \
    "{\"description\":\"hand-made, \\\"quoted\\\"\\nsecond line\",\"model\":{\"arch\":\"dense\",\"d_model\":64},"   \
    "\"train\":{\"steps\":10,\"lr\":0.001,\"seed\":1}}"
#define MOEUT_CONFIG                                                                                                 \
    "{\"description\":\"moe\",\"model\":{\"arch\":\"moeut\",\"d_model\":64,\"ff_n_experts\":8},"                     \
    "\"train\":{\"steps\":10,\"lr\":0.3333333333333333,\"seed\":1},\"comment\":[1,\"a,b\"]}"

/* b's interpolate set has another third module (a run evaluated on other modules: their union makes the columns) */
static void other_module(ResultRecord *r) {
    free(r->evaluation.sets[EVAL_INTERPOLATE].modules[2].name);
    r->evaluation.sets[EVAL_INTERPOLATE].modules[2].name = xstrdup("arithmetic__new");
    r->training.wall_time_s = 2.0 / 3.0; /* cJSON writes it with 17 digits, exactly */
}

/* a run's depth records (rtu_save_depth_records: depth summary 0.5; over the prompts, depth_fraction 0.5 under the
 * counterfactual vector, 0.15 under the others, depth_centre 0.3) */
static void write_depth(const char *dir, const char *run) {
    char p[512];
    snprintf(p, sizeof p, "%s/%s", g_runs, dir);
    rtu_save_depth_records(p, run);
}

static void setup(void) {
    rtu_tmpdir(g_runs, sizeof g_runs, "test_runs_csv");
    const char *ov_a[] = {"train.lr=0.001", "train.steps=10"};
    const char *ov_s[] = {"train.lr=0.001", "train.seed=2", "train.steps=10"};
    write_run("a", "a", "dense", 33, DENSE_CONFIG, 1, ov_a, 2, NULL);
    write_run("a.seed2", "a.seed2", "dense", 40, DENSE_CONFIG, 2, ov_s, 3, NULL);
    write_run("a.seed10", "a.seed10", "dense", 41, DENSE_CONFIG, 10, ov_s, 3, NULL);
    write_depth("a", "a");
    /* moved aside: its record carries the name without the variant */
    write_run("b@0123abcd", "b", "moeut", 50, MOEUT_CONFIG, 1, NULL, 0, other_module);
    char p[512], q[512];
    /* a run directory reached by a symbolic link is read like the others: its record names the link */
    snprintf(p, sizeof p, "%s.elsewhere", g_runs);
    ck_assert_int_eq(mkdir(p, 0755), 0);
    snprintf(p, sizeof p, "%s.elsewhere/b@0123abcd", g_runs);
    snprintf(q, sizeof q, "%s/b@0123abcd", g_runs);
    ck_assert_int_eq(rename(q, p), 0);
    ck_assert_int_eq(symlink(p, q), 0);
    snprintf(p, sizeof p, "%s/unfinished/train_summary.json", g_runs);
    rtu_write(p, "{}");
    snprintf(p, sizeof p, "%s/notes.txt", g_runs);
    rtu_write(p, "not a run");
    snprintf(q, sizeof q, "%s/.hidden/result.json", g_runs);
    rtu_write(q, "{ not even JSON");
}
static void teardown(void) {
    char p[512];
    snprintf(p, sizeof p, "%s.elsewhere", g_runs);
    remove_tree(p);
    remove_tree(g_runs);
}

START_TEST(rows_columns_and_cells) {
    RunsTable t;
    char err[1024];
    ck_assert_msg(runs_table_load(&t, g_runs, err, sizeof err) == 0, "%s", err);
    ck_assert_int_eq(t.n_rows, 4);
    const char *order[4] = {"a", "a.seed2", "a.seed10", "b@0123abcd"};
    for (int r = 0; r < 4; r++) ck_assert_str_eq(cell(&t, r, "run"), order[r]);
    /* the fixed columns first, then the config keys' union in the runs' order, then the metrics under the names make
     * diff shows (run_metrics.h) */
    const char *head[] = {"run",         "run_config",        "variant",       "seed",       "overrides",
                          "arch",        "loss_mode",         "backend",       "code_version", "n_params",
                          "description", "model.arch",        "model.d_model", "model.ff_n_experts",
                          "train.steps", "train.lr",          "train.seed",    "comment",    "training.steps",
                          "training.tokens", "training.final_train_loss", "evaluation.mean_accuracy",
                          "interpolate.n", "interpolate.accuracy", "interpolate.mean_answer_loss"};
    for (int c = 0; c < (int)(sizeof head / sizeof head[0]); c++) ck_assert_str_eq(t.cols[c], head[c]);
    ck_assert_int_gt(col(&t, "evaluation.wall_time_s"), col(&t, "extrapolate.arithmetic__add_or_sub_big.accuracy"));
    ck_assert_str_eq(t.cols[t.n_cols - 1], "depth_prompts.zero.depth_centre");
    int n_params = 0;
    for (int c = 0; c < t.n_cols; c++) n_params += strcmp(t.cols[c], "n_params") == 0;
    ck_assert_int_eq(n_params, 1); /* an identity column, not repeated among the metrics */
    /* identity */
    ck_assert_str_eq(cell(&t, 0, "run_config"), "a");
    ck_assert_str_eq(cell(&t, 3, "run_config"), "b");
    ck_assert_str_eq(cell(&t, 0, "seed"), "1");
    ck_assert_str_eq(cell(&t, 2, "seed"), "10");
    ck_assert_str_eq(cell(&t, 0, "overrides"), "train.lr=0.001;train.steps=10");
    ck_assert_str_eq(cell(&t, 3, "overrides"), "");
    ck_assert_int_eq((int)strlen(cell(&t, 0, "variant")), 8);
    ck_assert_str_eq(cell(&t, 0, "variant"), cell(&t, 1, "variant")); /* seeds of one configuration */
    ck_assert_str_ne(cell(&t, 0, "variant"), cell(&t, 3, "variant"));
    ck_assert_str_eq(cell(&t, 3, "arch"), "moeut");
    ck_assert_str_eq(cell(&t, 0, "n_params"), "12345");
    /* config cells: strings as they are, numbers exact, arrays as JSON, empty where absent */
    ck_assert_str_eq(cell(&t, 0, "description"), "hand-made, \"quoted\"\nsecond line");
    ck_assert_str_eq(cell(&t, 0, "model.ff_n_experts"), "");
    ck_assert_str_eq(cell(&t, 3, "model.ff_n_experts"), "8");
    ck_assert_str_eq(cell(&t, 3, "train.lr"), "0.3333333333333333"); /* the shortest text of 1/3 that reads back */
    ck_assert_str_eq(cell(&t, 0, "train.lr"), "0.001");
    ck_assert_str_eq(cell(&t, 3, "comment"), "[1,\"a,b\"]");
    ck_assert_str_eq(cell(&t, 0, "comment"), "");
    /* metrics: accuracies per set and module, the modules' union (empty where a run has no such module) */
    ck_assert_str_eq(cell(&t, 0, "interpolate.accuracy"), "0.33");
    ck_assert_str_eq(cell(&t, 0, "interpolate.n"), "300");
    ck_assert_str_eq(cell(&t, 0, "extrapolate.mean_answer_loss"), "0.6");
    ck_assert_str_eq(cell(&t, 1, "extrapolate.arithmetic__mul_div_multiple_longer.accuracy"), "0.4");
    ck_assert_str_eq(cell(&t, 0, "interpolate.arithmetic__div.accuracy"), "0.33");
    ck_assert_str_eq(cell(&t, 0, "interpolate.arithmetic__div.n"), "100");
    ck_assert_str_eq(cell(&t, 0, "interpolate.arithmetic__div.mean_answer_loss"), "0.7");
    ck_assert_str_eq(cell(&t, 3, "interpolate.arithmetic__div.accuracy"), "");
    ck_assert_str_eq(cell(&t, 3, "interpolate.arithmetic__new.accuracy"), "0.5");
    ck_assert_str_eq(cell(&t, 0, "interpolate.arithmetic__new.accuracy"), "");
    ck_assert_int_lt(col(&t, "interpolate.arithmetic__new.accuracy"),
                     col(&t, "extrapolate.arithmetic__add_or_sub_big.accuracy"));
    ck_assert_str_eq(cell(&t, 0, "interpolate.greedy_disagreements"), "0");
    ck_assert_str_eq(cell(&t, 0, "training.final_train_loss"), "1.25");
    ck_assert_str_eq(cell(&t, 0, "training.steps"), "10");
    ck_assert_str_eq(cell(&t, 3, "training.wall_time_s"), "0.6666666666666666");
    ck_assert(strtod(cell(&t, 3, "training.wall_time_s"), NULL) == 2.0 / 3.0);
    ck_assert(strtod(cell(&t, 3, "train.lr"), NULL) == 1.0 / 3.0);
    ck_assert_str_eq(cell(&t, 0, "evaluation.mean_accuracy"), "0.33");
    /* the depth scores: a's analysis.json summary and its depth_prompts.json means; empty for the runs without */
    ck_assert_str_eq(cell(&t, 0, "analysis.depth_fraction"), "0.5");
    ck_assert_str_eq(cell(&t, 0, "depth_prompts.n"), "2");
    ck_assert_str_eq(cell(&t, 0, "depth_prompts.counterfactual.depth_fraction"), "0.5");
    ck_assert_str_eq(cell(&t, 0, "depth_prompts.counterfactual.depth_centre"), "0.3");
    ck_assert(strtod(cell(&t, 0, "depth_prompts.eval_mean.depth_fraction"), NULL) == (0.1 + 0.2) / 2);
    ck_assert_str_eq(cell(&t, 1, "analysis.depth_fraction"), "");
    ck_assert_str_eq(cell(&t, 3, "depth_prompts.counterfactual.depth_fraction"), "");
    ck_assert_int_lt(col(&t, "evaluation.wall_time_s"), col(&t, "analysis.depth_fraction"));

    /* the CSV text: header first, CRLF, the quoted fields */
    StrBuf b;
    sb_init(&b);
    runs_table_csv(&t, &b);
    ck_assert_msg(strncmp(b.data, "run,run_config,variant,seed,overrides,arch,loss_mode,backend,code_version,n_params,"
                                  "description,model.arch,",
                          strlen("run,run_config,variant,seed,overrides,arch,loss_mode,backend,code_version,n_params,"
                                 "description,model.arch,")) == 0,
                  "%s", b.data);
    ck_assert_msg(strstr(b.data, ",\"hand-made, \"\"quoted\"\"\nsecond line\",dense,64,,10,0.001,1,,") != NULL, "%s",
                  b.data);
    ck_assert_msg(strstr(b.data, ",\"[1,\"\"a,b\"\"]\",") != NULL, "%s", b.data);
    int records = 0;
    for (const char *p = b.data; (p = strstr(p, "\r\n")); p += 2) records++;
    ck_assert_int_eq(records, 5);
    ck_assert(b.data[b.len - 1] == '\n' && b.data[b.len - 2] == '\r');
    sb_free(&b);
    runs_table_free(&t);
}
END_TEST

START_TEST(csv_quoting) {
    const struct {
        const char *in, *out;
    } CASES[] = {
        {"plain", "plain"},          {"", ""},
        {"a,b", "\"a,b\""},          {"say \"hi\"", "\"say \"\"hi\"\"\""},
        {"two\nlines", "\"two\nlines\""}, {"cr\r", "\"cr\r\""},
        {" spaced ", " spaced "},    {"1e-08", "1e-08"},
    };
    for (size_t i = 0; i < sizeof CASES / sizeof CASES[0]; i++) {
        StrBuf b;
        sb_init(&b);
        csv_put_field(&b, CASES[i].in);
        ck_assert_str_eq(b.data ? b.data : "", CASES[i].out);
        sb_free(&b);
    }
}
END_TEST

START_TEST(export_writes_atomically) {
    char out[512], err[1024];
    snprintf(out, sizeof out, "%s/../%s.export/EXP/runs.csv", g_runs, strrchr(g_runs, '/') + 1);
    int rows = 0, cols = 0;
    ck_assert_msg(runs_csv_export(g_runs, out, &rows, &cols, err, sizeof err) == 0, "%s", err);
    ck_assert_int_eq(rows, 4);
    char *text = NULL;
    size_t n = 0;
    ck_assert_msg(read_file_all(out, &text, &n, err, sizeof err) == 0, "%s", err);
    ck_assert(strncmp(text, "run,run_config,", 15) == 0);
    /* a failing export (a record of another run) leaves the earlier table as it was */
    char p[512];
    snprintf(p, sizeof p, "%s/c", g_runs);
    write_run("c", "zzz", "dense", 1, DENSE_CONFIG, 1, NULL, 0, NULL);
    ck_assert_int_eq(runs_csv_export(g_runs, out, &rows, &cols, err, sizeof err), -1);
    ck_assert_msg(strstr(err, "/c/result.json: run is \"zzz\", but the directory is \"c\""), "%s", err);
    char *again = NULL;
    ck_assert_msg(read_file_all(out, &again, &n, err, sizeof err) == 0, "%s", err);
    ck_assert_str_eq(again, text);
    free(again);
    free(text);
    char dir[512];
    snprintf(dir, sizeof dir, "%s/../%s.export", g_runs, strrchr(g_runs, '/') + 1);
    remove_tree(dir);
}
END_TEST

static void another_experiment(ResultRecord *r) { snprintf(r->experiment, sizeof r->experiment, "other"); }

START_TEST(errors_name_the_file) {
    char err[1024];
    RunsTable t;
    write_run("d", "d", "dense", 1, DENSE_CONFIG, 1, NULL, 0, another_experiment);
    ck_assert_int_eq(runs_table_load(&t, g_runs, err, sizeof err), -1);
    ck_assert_msg(strstr(err, "/d/result.json: experiment \"other\"") && strstr(err, "/a/result.json"), "%s", err);
    /* a record that does not load: the reader's message, naming the file */
    char p[512];
    snprintf(p, sizeof p, "%s/d/result.json", g_runs);
    rtu_write(p, "{\"schema\": \"dm-math-result\"}");
    ck_assert_int_eq(runs_table_load(&t, g_runs, err, sizeof err), -1);
    ck_assert_msg(strstr(err, "/d/result.json") != NULL, "%s", err);
    /* nothing to export, or no directory */
    char empty[256];
    rtu_tmpdir(empty, sizeof empty, "test_runs_csv_empty");
    ck_assert_int_eq(runs_table_load(&t, empty, err, sizeof err), -1);
    ck_assert_msg(strstr(err, "no run directory with a result.json") && strstr(err, empty), "%s", err);
    remove_tree(empty);
    ck_assert_int_eq(runs_table_load(&t, empty, err, sizeof err), -1);
    ck_assert_msg(strstr(err, "cannot open the runs directory"), "%s", err);
}
END_TEST

/* The depth records are read like result.json: one of another run, or one that does not load, is an error naming it
 * (never a row with its depth cells quietly empty). */
START_TEST(depth_records_are_checked) {
    char err[1024], p[512];
    RunsTable t;
    write_depth("a.seed2", "zzz");
    ck_assert_int_eq(runs_table_load(&t, g_runs, err, sizeof err), -1);
    ck_assert_msg(strstr(err, "/a.seed2/analysis.json: run is \"zzz\", but the directory is \"a.seed2\""), "%s", err);
    write_depth("a.seed2", "a.seed2");
    ck_assert_msg(runs_table_load(&t, g_runs, err, sizeof err) == 0, "%s", err);
    ck_assert_str_eq(cell(&t, 1, "depth_prompts.counterfactual.depth_fraction"), "0.5");
    runs_table_free(&t);
    snprintf(p, sizeof p, "%s/a.seed2/%s", g_runs, DEPTH_PROMPTS_FILE_NAME);
    rtu_write(p, "{\"schema\": \"dm-math-depth-prompts\"}");
    ck_assert_int_eq(runs_table_load(&t, g_runs, err, sizeof err), -1);
    ck_assert_msg(strstr(err, "/a.seed2/depth_prompts.json") != NULL, "%s", err);
}
END_TEST

/* Runs that cannot be read are errors naming them, never rows left out (run_dirs.h): a link to another run's directory
 * (its record names that run), a link that leads nowhere, a result.json that is a FIFO (refused at once, not read). */
START_TEST(unreadable_runs_are_errors) {
    char err[1024], p[512], target[512];
    RunsTable t;
    snprintf(p, sizeof p, "%s/alias", g_runs);
    ck_assert_int_eq(symlink("a", p), 0);
    ck_assert_int_eq(runs_table_load(&t, g_runs, err, sizeof err), -1);
    ck_assert_msg(strstr(err, "/alias/result.json: run is \"a\", but the directory is \"alias\""), "%s", err);
    unlink(p);
    snprintf(target, sizeof target, "%s/gone", g_runs);
    ck_assert_int_eq(symlink(target, p), 0);
    ck_assert_int_eq(runs_table_load(&t, g_runs, err, sizeof err), -1);
    ck_assert_msg(strstr(err, "/alias: a symbolic link whose target cannot be read"), "%s", err);
    unlink(p);
    snprintf(p, sizeof p, "%s/a/result.json", g_runs);
    unlink(p);
    ck_assert_int_eq(mkfifo(p, 0644), 0);
    ck_assert_int_eq(runs_table_load(&t, g_runs, err, sizeof err), -1);
    ck_assert_msg(strstr(err, "/a/result.json: not a regular file (a FIFO)"), "%s", err);
}
END_TEST

int main(void) {
    Suite *s = suite_create("runs_csv");
    TCase *tc = tcase_create("runs_csv");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, rows_columns_and_cells);
    tcase_add_test(tc, csv_quoting);
    tcase_add_test(tc, export_writes_atomically);
    tcase_add_test(tc, errors_name_the_file);
    tcase_add_test(tc, depth_records_are_checked);
    tcase_add_test(tc, unreadable_runs_are_errors);
    suite_add_tcase(s, tc);
    return run_test_suite(s);
}
