/* result.json / analysis.json / train_summary.json: write-read round trips and strict rejection of bad records. */
#include <check.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "datasets/shard.h"
#include "datasets/shard_hash.h"
#include "pipeline/base/config.h"
#include "pipeline/base/sha256.h"
#include "pipeline/records/result_record.h"
#include "tests/unit/record_test_util.h"
#include "tests/unit/suite_runner.h"

/* cJSON prints doubles with 15 significant digits when that reads back within its own epsilon, so a round trip is
 * exact only to about 1e-15 relative: compare with that slack (a real change is far larger). */
static int same(double a, double b) { return fabs(a - b) <= 1e-14 * fmax(1.0, fabs(a)); }

static void assert_records_equal(const ResultRecord *a, const ResultRecord *b) {
    ck_assert_str_eq(a->run, b->run);
    ck_assert_str_eq(a->arch, b->arch);
    ck_assert_str_eq(a->loss_mode, b->loss_mode);
    ck_assert_str_eq(a->config_sha256, b->config_sha256);
    ck_assert_str_eq(a->tokenizer_sha256, b->tokenizer_sha256);
    ck_assert_str_eq(a->extrapolate_sha256, b->extrapolate_sha256);
    ck_assert_str_eq(a->training.hardware, b->training.hardware);
    ck_assert(cJSON_Compare(a->config, b->config, 1));
    ck_assert_int_eq(a->n_params, b->n_params);
    ck_assert_int_eq(a->training.tokens, b->training.tokens);
    ck_assert(same(a->training.final_train_loss, b->training.final_train_loss));
    ck_assert(same(a->evaluation.mean_accuracy, b->evaluation.mean_accuracy));
    for (int s = 0; s < EVAL_N_SETS; s++) {
        const SetEval *x = &a->evaluation.sets[s], *y = &b->evaluation.sets[s];
        ck_assert_int_eq(x->n, y->n);
        ck_assert_int_eq(x->correct, y->correct);
        ck_assert(same(x->accuracy, y->accuracy) && same(x->ci95[0], y->ci95[0]) && same(x->ci95[1], y->ci95[1]));
        ck_assert_int_eq(x->greedy_agree, y->greedy_agree);
        ck_assert_int_eq(x->n_modules, y->n_modules);
        for (int m = 0; m < x->n_modules; m++) {
            ck_assert_str_eq(x->modules[m].name, y->modules[m].name); /* order preserved */
            ck_assert(same(x->modules[m].mean_answer_loss, y->modules[m].mean_answer_loss));
            ck_assert(same(x->modules[m].ci95[1], y->modules[m].ci95[1]));
        }
    }
}

START_TEST(result_round_trip) {
    char dir[256], path[512], err[512];
    rtu_tmpdir(dir, sizeof dir, "test_record");
    snprintf(path, sizeof path, "%s/sub/result.json", dir);
    ResultRecord r, back;
    rtu_record(&r, "dense_qa", "dense", "qa", 37);
    /* Accuracy and Wilson interval filled from the counts. */
    ck_assert(fabs(r.evaluation.sets[0].accuracy - 0.37) < 1e-15);
    ck_assert(r.evaluation.sets[0].ci95[0] < 0.37 && r.evaluation.sets[0].ci95[1] > 0.37);
    ck_assert_int_eq(result_record_save(&r, path, err, sizeof err), 0);
    ck_assert_msg(result_record_load(&back, path, err, sizeof err) == 0, "%s", err);
    assert_records_equal(&r, &back);
    ck_assert(set_eval_find_module(&back.evaluation.sets[1], "arithmetic__mul_div_multiple_longer") != NULL);
    ck_assert(set_eval_find_module(&back.evaluation.sets[1], "arithmetic__nope") == NULL);
    /* The file carries the schema tag. */
    char *text = rtu_read(path);
    ck_assert(strstr(text, "\"schema\":\t\"dm-math-result\"") != NULL);
    free(text);
    result_record_free(&back);
    result_record_free(&r);
    remove_tree(dir);
}
END_TEST

/* Loads a record after editing its JSON; returns the load status and the message. */
static int load_edited(void (*edit)(cJSON *), char *err, size_t errlen) {
    ResultRecord r, back;
    rtu_record(&r, "moeut_answer", "moeut", "answer_only", 5);
    cJSON *j = result_record_to_json(&r);
    edit(j);
    int rc = result_record_from_json(&back, j, "edited.json", err, errlen);
    result_record_free(&back);
    cJSON_Delete(j);
    result_record_free(&r);
    return rc;
}
static void edit_unknown(cJSON *j) { cJSON_AddNumberToObject(cJSON_GetObjectItem(j, "training"), "bogus", 1); }
static void edit_missing(cJSON *j) { cJSON_DeleteItemFromObject(j, "tokenizer_sha256"); }
static void edit_schema(cJSON *j) { cJSON_ReplaceItemInObject(j, "schema_version", cJSON_CreateNumber(3)); }
static void edit_type(cJSON *j) {
    cJSON *ev = cJSON_GetObjectItem(cJSON_GetObjectItem(cJSON_GetObjectItem(j, "evaluation"), "sets"), "interpolate");
    cJSON_ReplaceItemInObject(ev, "n", cJSON_CreateString("many"));
}
static void edit_counts(cJSON *j) {
    cJSON *ev = cJSON_GetObjectItem(cJSON_GetObjectItem(cJSON_GetObjectItem(j, "evaluation"), "sets"), "extrapolate");
    cJSON_ReplaceItemInObject(ev, "correct", cJSON_CreateNumber(1e6));
}
static void edit_sha(cJSON *j) { cJSON_ReplaceItemInObject(j, "config_sha256", cJSON_CreateString("XYZ")); }
static void edit_mode(cJSON *j) { cJSON_ReplaceItemInObject(j, "loss_mode", cJSON_CreateString("both")); }

/* Edits of the config identity: config, config_sha256, config_text and the overrides are bound together. */
static cJSON *config_train(cJSON *j) { return cJSON_GetObjectItem(cJSON_GetObjectItem(j, "config"), "train"); }
static void edit_config_lr(cJSON *j) { cJSON_AddNumberToObject(config_train(j), "lr", 0.5); }
static void edit_config_steps(cJSON *j) { cJSON_ReplaceItemInObject(config_train(j), "steps", cJSON_CreateNumber(99)); }
static void edit_config_arch(cJSON *j) {
    cJSON *model = cJSON_GetObjectItem(cJSON_GetObjectItem(j, "config"), "model");
    cJSON_ReplaceItemInObject(model, "arch", cJSON_CreateString("moeut"));
}
static void edit_config_dup(cJSON *j) { /* a second "train" after the first: readers that iterate would see it */
    cJSON_AddItemToObject(cJSON_GetObjectItem(j, "config"), "train", cJSON_Parse("{\"steps\": 99}"));
}
static void edit_config_hash(cJSON *j) { /* a well-formed hash of something else */
    cJSON_ReplaceItemInObject(j, "config_sha256", cJSON_CreateString("0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"));
}
static void edit_config_text(cJSON *j) {
    cJSON_ReplaceItemInObject(j, "config_text", cJSON_CreateString("{\"model\": {\"arch\": \"dense\"}, \"train\": {\"steps\": 99}}"));
}
static void edit_config_overrides(cJSON *j) {
    cJSON_AddItemToArray(cJSON_GetObjectItem(j, "overrides"), cJSON_CreateString("train.lr=0.5"));
}
static void edit_config_text_missing(cJSON *j) { cJSON_DeleteItemFromObject(j, "config_text"); }
static void edit_version_one(cJSON *j) {
    cJSON_ReplaceItemInObject(j, "schema_version", cJSON_CreateNumber(1));
    cJSON_DeleteItemFromObject(j, "config_text");
}

START_TEST(config_identity_is_checked) {
    char err[1024];
    const struct {
        void (*edit)(cJSON *);
        const char *want;
    } CASES[] = {
        {edit_config_lr, "edited.json: config: differs from config_text with the overrides applied (train.lr is 0.5, "
                         "but config_text with the overrides gives absent): the record was edited"},
        {edit_config_steps, "config: differs from config_text with the overrides applied (train.steps is 99, but"},
        {edit_config_arch, "(model.arch is \"moeut\", but config_text with the overrides gives \"dense\")"},
        {edit_config_dup, "edited.json: config: differs from config_text"},
        {edit_config_hash, "edited.json: config_sha256: 0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef "
                           "is not the hash of config_text and the overrides ("},
        {edit_config_text, "edited.json: config_sha256: "},
        {edit_config_overrides, "edited.json: config_sha256: "},
        {edit_config_text_missing, "edited.json: missing required key config_text"},
        {edit_version_one, "edited.json: schema is \"dm-math-result\" version 1, expected \"dm-math-result\" version 2 "
                           "(written before records carried config_text: evaluate the run again)"},
    };
    for (size_t i = 0; i < sizeof CASES / sizeof CASES[0]; i++) {
        ck_assert_msg(load_edited(CASES[i].edit, err, sizeof err) == -1, "case %zu accepted", i);
        ck_assert_msg(strstr(err, CASES[i].want), "case %zu: %s", i, err);
    }
    /* the record as written loads, its config_text the run config's text and its hash that text's */
    ResultRecord r, back;
    rtu_record(&r, "dense_qa", "dense", "qa", 5);
    cJSON *j = result_record_to_json(&r);
    ck_assert_msg(result_record_from_json(&back, j, "written.json", err, sizeof err) == 0, "%s", err);
    char hex[65];
    sha256_hex(back.config_text, strlen(back.config_text), hex);
    ck_assert_str_eq(back.config_sha256, hex);
    result_record_free(&back);
    cJSON_Delete(j);
    result_record_free(&r);
}
END_TEST

/* A record string holding \u0000 is refused by the file reader: "dense_qa\u0000evil" must not read as "dense_qa". */
START_TEST(nul_in_record_string_refused) {
    char dir[256], path[512], err[1024];
    rtu_tmpdir(dir, sizeof dir, "test_record_nul");
    snprintf(path, sizeof path, "%s/result.json", dir);
    ResultRecord r, back;
    rtu_record(&r, "dense_qaXXXXXXevil", "dense", "qa", 5);
    rtu_save(&r, path);
    char *text = NULL;
    size_t n = 0;
    ck_assert_msg(read_file_all(path, &text, &n, err, sizeof err) == 0, "%s", err);
    char *mark = strstr(text, "XXXXXX");
    ck_assert_ptr_nonnull(mark);
    memcpy(mark, "\\u0000", 6); /* "run": "dense_qa\u0000evil" */
    rtu_write(path, text);
    ck_assert_int_eq(result_record_load(&back, path, err, sizeof err), -1);
    ck_assert_msg(strstr(err, path) && strstr(err, "a string holds \\u0000"), "%s", err);
    free(text);
    result_record_free(&r);
    remove_tree(dir);
}
END_TEST

/* Well-formed records with impossible numbers: each must be refused naming the field. */
static cJSON *set_of(cJSON *j, const char *set) {
    return cJSON_GetObjectItem(cJSON_GetObjectItem(cJSON_GetObjectItem(j, "evaluation"), "sets"), set);
}
static cJSON *first_module(cJSON *j) { return cJSON_GetObjectItem(set_of(j, "interpolate"), "modules")->child; }
static void edit_acc_two(cJSON *j) { cJSON_ReplaceItemInObject(set_of(j, "interpolate"), "accuracy", cJSON_CreateNumber(2.0)); }
static void edit_acc_inf(cJSON *j) { cJSON_ReplaceItemInObject(set_of(j, "extrapolate"), "accuracy", cJSON_CreateNumber(INFINITY)); }
static void edit_acc_off(cJSON *j) { cJSON_ReplaceItemInObject(set_of(j, "interpolate"), "accuracy", cJSON_CreateNumber(0.5)); }
static void edit_mean_acc(cJSON *j) {
    cJSON_ReplaceItemInObject(cJSON_GetObjectItem(j, "evaluation"), "mean_accuracy", cJSON_CreateNumber(2.0));
}
static void edit_loss_neg(cJSON *j) { cJSON_ReplaceItemInObject(set_of(j, "interpolate"), "mean_answer_loss", cJSON_CreateNumber(-5)); }
static void edit_loss_inf(cJSON *j) {
    cJSON_ReplaceItemInObject(first_module(j), "mean_answer_loss", cJSON_CreateNumber(-INFINITY));
}
static void edit_module_count(cJSON *j) { cJSON_ReplaceItemInObject(first_module(j), "n", cJSON_CreateNumber(-3)); }
static void edit_module_sum(cJSON *j) {
    cJSON *m = first_module(j);
    const double n = cJSON_GetObjectItem(m, "n")->valuedouble + 1;
    cJSON_ReplaceItemInObject(m, "n", cJSON_CreateNumber(n));
    cJSON_ReplaceItemInObject(m, "accuracy",
                              cJSON_CreateNumber(cJSON_GetObjectItem(m, "correct")->valuedouble / n));
}
static void edit_ci(cJSON *j) {
    cJSON *ci = cJSON_GetObjectItem(set_of(j, "interpolate"), "ci95");
    cJSON_ReplaceItemInArray(ci, 1, cJSON_CreateNumber(1.5));
}
static void edit_train_loss(cJSON *j) {
    cJSON_ReplaceItemInObject(cJSON_GetObjectItem(j, "training"), "final_train_loss", cJSON_CreateNumber(NAN));
}
static void edit_params(cJSON *j) { cJSON_ReplaceItemInObject(j, "n_params", cJSON_CreateNumber(-1)); }

START_TEST(result_rejects_bad_records) {
    char err[512];
    ck_assert_int_eq(load_edited(edit_unknown, err, sizeof err), -1);
    ck_assert_msg(strstr(err, "training.bogus") && strstr(err, "edited.json"), "%s", err);
    ck_assert_int_eq(load_edited(edit_missing, err, sizeof err), -1);
    ck_assert_msg(strstr(err, "tokenizer_sha256"), "%s", err);
    ck_assert_int_eq(load_edited(edit_schema, err, sizeof err), -1);
    ck_assert_msg(strstr(err, "version 3, expected \"dm-math-result\" version 2"), "%s", err);
    ck_assert_int_eq(load_edited(edit_type, err, sizeof err), -1);
    ck_assert_msg(strstr(err, "evaluation.sets.interpolate.n"), "%s", err);
    ck_assert_int_eq(load_edited(edit_counts, err, sizeof err), -1);
    ck_assert_msg(strstr(err, "inconsistent counts"), "%s", err);
    ck_assert_int_eq(load_edited(edit_sha, err, sizeof err), -1);
    ck_assert_msg(strstr(err, "config_sha256"), "%s", err);
    ck_assert_int_eq(load_edited(edit_mode, err, sizeof err), -1);
    ck_assert_msg(strstr(err, "loss_mode"), "%s", err);
    const struct {
        void (*edit)(cJSON *);
        const char *field, *value;
    } DOMAIN[] = {
        {edit_acc_two, "evaluation.sets.interpolate.accuracy", ": 2 is not a fraction in [0, 1]"},
        {edit_acc_inf, "evaluation.sets.extrapolate.accuracy", "is not a fraction in [0, 1]"},
        {edit_acc_off, "evaluation.sets.interpolate.accuracy", "disagrees with correct / n"},
        {edit_mean_acc, "evaluation.mean_accuracy", ": 2 is not a fraction in [0, 1]"},
        {edit_loss_neg, "evaluation.sets.interpolate.mean_answer_loss", ": -5 is not a finite number >= 0"},
        {edit_loss_inf, ".mean_answer_loss", "is not a finite number >= 0"},
        {edit_module_count, ".n: -3 is not a count >= 0", "modules"},
        {edit_module_sum, "evaluation.sets.interpolate.modules", "counts add up to"},
        {edit_ci, "evaluation.sets.interpolate.ci95[1]", ": 1.5 is not a fraction in [0, 1]"},
        {edit_train_loss, "training.final_train_loss", "is not a finite number >= 0"},
        {edit_params, "n_params", ": -1 is not a count >= 0"},
    };
    for (size_t k = 0; k < sizeof DOMAIN / sizeof DOMAIN[0]; k++) {
        ck_assert_int_eq(load_edited(DOMAIN[k].edit, err, sizeof err), -1);
        ck_assert_msg(strstr(err, "edited.json: ") && strstr(err, DOMAIN[k].field) && strstr(err, DOMAIN[k].value),
                      "case %zu: %s", k, err);
    }
}
END_TEST

START_TEST(train_summary_reader) {
    char dir[256], path[512], err[512];
    rtu_tmpdir(dir, sizeof dir, "test_record");
    snprintf(path, sizeof path, "%s/train_summary.json", dir);
    rtu_write(path, "{\"steps\": 100, \"tokens\": 102400, \"wall_time_s\": 3.5, \"final_train_loss\": 0.75,"
                    " \"tokens_per_s\": 29257.1, \"backend\": \"cpu\", \"hardware\": \"x86\", \"precision\": \"fp32\","
                    " \"config_sha256\": \"" "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef" "\","
                    " \"n_params\": 999, \"code_version\": \"abc\", \"extra_field_from_train\": [1,2]}");
    TrainSummary s;
    ck_assert_msg(train_summary_load(&s, path, err, sizeof err) == 0, "%s", err); /* unknown keys tolerated */
    ck_assert_int_eq(s.steps, 100);
    ck_assert_int_eq(s.tokens, 102400);
    ck_assert(s.final_train_loss == 0.75);
    ck_assert_str_eq(s.precision, "fp32");
    ck_assert_int_eq(s.n_params, 999);
    ck_assert(s.prov.n_overrides == 0 && s.prov.seed == -1 && s.prov.run_config[0] == '\0'); /* older summary */
    rtu_write(path, "{\"steps\": 100, \"tokens\": 102400, \"wall_time_s\": 3.5, \"final_train_loss\": 0.75,"
                    " \"tokens_per_s\": 29257.1, \"backend\": \"cpu\", \"hardware\": \"x86\", \"precision\": \"fp32\","
                    " \"config_sha256\": \"" "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef" "\","
                    " \"n_params\": 999, \"code_version\": \"abc\", \"overrides\": [\"train.seed=2\"], \"seed\": 2,"
                    " \"run_config\": \"dense_qa\"}");
    ck_assert_msg(train_summary_load(&s, path, err, sizeof err) == 0, "%s", err);
    ck_assert_int_eq(s.prov.n_overrides, 1);
    ck_assert_str_eq(s.prov.overrides[0], "train.seed=2");
    ck_assert_int_eq(s.prov.seed, 2);
    ck_assert_str_eq(s.prov.run_config, "dense_qa");
    rtu_write(path, "{\"steps\": 100}");
    ck_assert_int_eq(train_summary_load(&s, path, err, sizeof err), -1);
    ck_assert_msg(strstr(err, "missing required key") && strstr(err, path), "%s", err);
    remove_tree(dir);
}
END_TEST

START_TEST(analysis_round_trip) {
    char dir[256], path[512], err[512];
    rtu_tmpdir(dir, sizeof dir, "test_record");
    snprintf(path, sizeof path, "%s/analysis.json", dir);
    AnalysisRecord a, b;
    rtu_analysis(&a, "moeut_qa", "moeut", "qa", 4);
    snprintf(a.code_version, sizeof a.code_version, "v-test");
    snprintf(a.backend, sizeof a.backend, "cuda");
    snprintf(a.hardware, sizeof a.hardware, "Test GPU (80 GiB, sm_90)");
    ck_assert_int_eq(analysis_record_save(&a, path, err, sizeof err), 0);
    ck_assert_msg(analysis_record_load(&b, path, err, sizeof err) == 0, "%s", err);
    ck_assert_str_eq(b.code_version, "v-test");
    ck_assert_str_eq(b.backend, "cuda");
    ck_assert_str_eq(b.hardware, "Test GPU (80 GiB, sm_90)");
    ck_assert_int_eq(b.n_layers, 4);
    ck_assert_int_eq(b.n_prompts, 2);
    for (int k = 0; k < 2; k++) {
        ck_assert_str_eq(a.prompts[k].question, b.prompts[k].question);
        ck_assert_int_eq(b.prompts[k].n_positions, 6);
        ck_assert_int_eq(b.prompts[k].n_answer, 2);
        ck_assert(a.prompts[k].model_correct == b.prompts[k].model_correct);
        ck_assert_str_eq(b.prompts[k].pieces[0], "\xE2\x96\x81Q");
        for (int e = 0; e < 4 * 6; e++) ck_assert(same(a.prompts[k].scores[e], b.prompts[k].scores[e]));
    }
    ck_assert_str_eq(b.summary_definition, "test definition");
    analysis_record_free(&b);
    /* A record written before the provenance fields existed loads, with them empty. */
    cJSON *old = analysis_record_to_json(&a);
    cJSON_DeleteItemFromObject(old, "code_version");
    cJSON_DeleteItemFromObject(old, "backend");
    cJSON_DeleteItemFromObject(old, "hardware");
    ck_assert_msg(analysis_record_from_json(&b, old, "old.json", err, sizeof err) == 0, "%s", err);
    ck_assert(b.code_version[0] == '\0' && b.backend[0] == '\0' && b.hardware[0] == '\0' && b.n_prompts == 2);
    analysis_record_free(&b);
    cJSON_Delete(old);
    /* A score row of the wrong width is refused with its position in the message. */
    cJSON *j = analysis_record_to_json(&a);
    cJSON *row = cJSON_GetArrayItem(cJSON_GetObjectItem(cJSON_GetArrayItem(cJSON_GetObjectItem(j, "prompts"), 1), "scores"), 2);
    cJSON_DeleteItemFromArray(row, 0);
    ck_assert_int_eq(analysis_record_from_json(&b, j, "bad.json", err, sizeof err), -1);
    ck_assert_msg(strstr(err, "prompts[1].scores[2]"), "%s", err);
    analysis_record_free(&b);
    cJSON_Delete(j);
    analysis_record_free(&a);
    /* a disabled analysis is a short record that reads back as disabled */
    AnalysisRecord off = {.enabled = false}, back;
    snprintf(off.run, sizeof off.run, "dense_qa");
    snprintf(off.arch, sizeof off.arch, "dense");
    snprintf(off.loss_mode, sizeof off.loss_mode, "qa");
    ck_assert_int_eq(analysis_record_save(&off, path, err, sizeof err), 0);
    ck_assert_msg(analysis_record_load(&back, path, err, sizeof err) == 0, "%s", err);
    ck_assert(!back.enabled && back.n_prompts == 0);
    analysis_record_free(&back);
    remove_tree(dir);
}
END_TEST

/* A provenance as evaluate and analyze record it for `--set train.seed=2 --set train.lr=1e-3`. */
static void sample_provenance(RunProvenance *p) {
    run_provenance_init(p);
    p->n_overrides = 2;
    snprintf(p->overrides[0], RUN_OVERRIDE_MAX, "train.lr=0.001");
    snprintf(p->overrides[1], RUN_OVERRIDE_MAX, "train.seed=2");
    p->seed = 2;
    snprintf(p->run_config, sizeof p->run_config, "dense_qa");
}

static void assert_same_provenance(const RunProvenance *a, const RunProvenance *b) {
    ck_assert_int_eq(a->n_overrides, b->n_overrides);
    for (int i = 0; i < a->n_overrides; i++) ck_assert_str_eq(a->overrides[i], b->overrides[i]);
    ck_assert_int_eq(a->seed, b->seed);
    ck_assert_str_eq(a->run_config, b->run_config);
}

static void drop_provenance(cJSON *j) {
    cJSON_DeleteItemFromObject(j, "overrides");
    cJSON_DeleteItemFromObject(j, "seed");
    cJSON_DeleteItemFromObject(j, "run_config");
}

/* overrides, seed and run_config round-trip through result.json and analysis.json; records without them (no --set,
 * and analysis records written before they existed) still load, with no overrides, seed -1 and no run_config; but a
 * result record whose overrides were dropped no longer matches its config_sha256, and is refused. */
START_TEST(provenance_fields_round_trip) {
    char dir[256], path[512], err[512];
    rtu_tmpdir(dir, sizeof dir, "test_record");
    snprintf(path, sizeof path, "%s/result.json", dir);
    ResultRecord r, back;
    rtu_record(&r, "dense_qa.seed2", "dense", "qa", 37);
    sample_provenance(&r.prov);
    rtu_save(&r, path); /* the overrides are in config_sha256 and applied to config, as evaluate writes them */
    char *text = rtu_read(path);
    ck_assert_msg(strstr(text, "\"overrides\":\t[\"train.lr=0.001\", \"train.seed=2\"]"), "%s", text);
    ck_assert_msg(strstr(text, "\"seed\":\t2,") && strstr(text, "\"run_config\":\t\"dense_qa\""), "%s", text);
    free(text);
    ck_assert_msg(result_record_load(&back, path, err, sizeof err) == 0, "%s", err);
    assert_same_provenance(&r.prov, &back.prov);
    assert_records_equal(&r, &back);
    result_record_free(&back);

    cJSON *old = result_record_to_json(&r);
    drop_provenance(old);
    ck_assert_int_eq(result_record_from_json(&back, old, "dropped.json", err, sizeof err), -1);
    ck_assert_msg(strstr(err, "dropped.json: config_sha256: ") && strstr(err, "is not the hash of config_text"), "%s",
                  err);
    result_record_free(&back);
    cJSON_Delete(old);
    ResultRecord plain; /* no --set: nothing to drop from the hash */
    rtu_record(&plain, "dense_qa", "dense", "qa", 37);
    old = result_record_to_json(&plain);
    result_record_free(&plain);
    drop_provenance(old);
    ck_assert_msg(result_record_from_json(&back, old, "old.json", err, sizeof err) == 0, "%s", err);
    ck_assert_int_eq(back.prov.n_overrides, 0);
    ck_assert_int_eq(back.prov.seed, -1);
    ck_assert_str_eq(back.prov.run_config, "");
    result_record_free(&back);
    /* ... and such a record written again says "no overrides", not a made-up seed or name */
    cJSON *again = result_record_to_json(&(ResultRecord){.prov = {.seed = -1}});
    ck_assert(cJSON_IsArray(cJSON_GetObjectItem(again, "overrides")));
    ck_assert_ptr_null(cJSON_GetObjectItem(again, "seed"));
    ck_assert_ptr_null(cJSON_GetObjectItem(again, "run_config"));
    cJSON_Delete(again);
    /* wrong types are refused, naming the field */
    cJSON_AddItemToObject(old, "overrides", cJSON_CreateIntArray((const int[]){1}, 1));
    ck_assert_int_eq(result_record_from_json(&back, old, "bad.json", err, sizeof err), -1);
    ck_assert_msg(strstr(err, "bad.json: overrides[0]: expected a string"), "%s", err);
    result_record_free(&back);
    cJSON_DeleteItemFromObject(old, "overrides");
    cJSON_AddStringToObject(old, "seed", "2");
    ck_assert_int_eq(result_record_from_json(&back, old, "bad.json", err, sizeof err), -1);
    ck_assert_msg(strstr(err, "bad.json: seed: expected an integer"), "%s", err);
    result_record_free(&back);
    cJSON_Delete(old);
    result_record_free(&r);

    AnalysisRecord a, b;
    rtu_analysis(&a, "dense_qa.seed2", "dense", "qa", 4);
    sample_provenance(&a.prov);
    snprintf(path, sizeof path, "%s/analysis.json", dir);
    ck_assert_int_eq(analysis_record_save(&a, path, err, sizeof err), 0);
    ck_assert_msg(analysis_record_load(&b, path, err, sizeof err) == 0, "%s", err);
    assert_same_provenance(&a.prov, &b.prov);
    analysis_record_free(&b);
    old = analysis_record_to_json(&a);
    drop_provenance(old);
    ck_assert_msg(analysis_record_from_json(&b, old, "old.json", err, sizeof err) == 0, "%s", err);
    ck_assert(b.prov.n_overrides == 0 && b.prov.seed == -1 && b.prov.run_config[0] == '\0' && b.n_prompts == 2);
    analysis_record_free(&b);
    cJSON_Delete(old);
    analysis_record_free(&a);
    remove_tree(dir);
}
END_TEST

/* The dataset identity ignores the shard's provenance header but sees every token. */
START_TEST(shard_content_identity) {
    char dir[256], a[512], b[512], c[512], err[512];
    rtu_tmpdir(dir, sizeof dir, "test_record");
    snprintf(a, sizeof a, "%s/a.shard", dir);
    snprintf(b, sizeof b, "%s/b.shard", dir);
    snprintf(c, sizeof c, "%s/c.shard", dir);
    char *mods[2] = {"arithmetic__add_or_sub", "arithmetic__mul"};
    ShardExample ex[2] = {{0, 3, 2, 0, 0}, {5, 2, 1, 1, 0}};
    uint16_t tok[8] = {5, 6, 7, 8, 9, 10, 11, 12};
    const char *sha = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";
    ck_assert_msg(shard_write(a, "train", sha, mods, 2, ex, 2, tok, 8, "{\"code_version\":\"v1\"}", err, sizeof err) == 0, "%s", err);
    ck_assert_msg(shard_write(b, "train", sha, mods, 2, ex, 2, tok, 8, "{\"code_version\":\"v2\"}", err, sizeof err) == 0, "%s", err);
    tok[7] = 13;
    ck_assert_msg(shard_write(c, "train", sha, mods, 2, ex, 2, tok, 8, "{\"code_version\":\"v1\"}", err, sizeof err) == 0, "%s", err);
    char ha[65], hb[65], hc[65], fa[65], fb[65];
    ck_assert_int_eq(shard_content_sha256(a, ha, err, sizeof err), 0);
    ck_assert_int_eq(shard_content_sha256(b, hb, err, sizeof err), 0);
    ck_assert_int_eq(shard_content_sha256(c, hc, err, sizeof err), 0);
    ck_assert_int_eq(sha256_file_hex(a, fa, err, sizeof err), 0);
    ck_assert_int_eq(sha256_file_hex(b, fb, err, sizeof err), 0);
    ck_assert_str_ne(fa, fb);      /* the files differ (provenance) */
    ck_assert_str_eq(ha, hb);      /* the content does not */
    ck_assert_str_ne(ha, hc);      /* one token more or less is a different dataset */
    ck_assert_int_eq(strlen(ha), 64);
    snprintf(c, sizeof c, "%s/missing.shard", dir);
    ck_assert_int_eq(shard_content_sha256(c, hc, err, sizeof err), -1);
    ck_assert_msg(strstr(err, "missing.shard") != NULL, "%s", err);
    remove_tree(dir);
}
END_TEST

int main(void) {
    Suite *s = suite_create("record");
    TCase *tc = tcase_create("record");
    tcase_add_test(tc, result_round_trip);
    tcase_add_test(tc, result_rejects_bad_records);
    tcase_add_test(tc, train_summary_reader);
    tcase_add_test(tc, analysis_round_trip);
    tcase_add_test(tc, shard_content_identity);
    tcase_add_test(tc, provenance_fields_round_trip);
    tcase_add_test(tc, config_identity_is_checked);
    tcase_add_test(tc, nul_in_record_string_refused);
    suite_add_tcase(s, tc);
    return run_test_suite(s);
}
