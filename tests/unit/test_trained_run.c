/* Opening a finished training run (model/training/trained_run.c, shared by evaluate and analyze): run names, the config hash,
 * the "training finished with this config" check, the tokenizer, the checkpoint checks, and a model whose outputs
 * equal the saved one's; every failure is one message naming the file (or option). */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "datasets/bpe_train.h"
#include "kernels/backend.h"
#include "model/model.h"
#include "model/training/trained_run.h"
#include "pipeline/base/atomic_file.h"
#include "pipeline/base/config.h"
#include "pipeline/base/sha256.h"
#include "tests/unit/model_test_util.h"
#include "tests/unit/record_test_util.h"
#include "tests/unit/suite_runner.h"

#define TOK_VOCAB 40 /* the test tokenizer's pieces */

/* A run config with a tiny dense model of n_tokens tokens and width d_model. */
static void write_run_config(const char *path, int n_tokens, int d_model, bool answer_only) {
    char text[2048];
    snprintf(text, sizeof text,
             "{\"description\": \"test\", \"model\": {\"arch\": \"dense\", \"n_tokens\": %d, \"d_model\": %d,"
             " \"n_layers\": 2, \"n_heads\": 2, \"d_ff\": 12, \"lm_head_bias\": true, \"out_norm_affine\": true},"
             " \"train\": {\"loss_on_target_only\": %s, \"steps\": 4, \"batch_size\": 2, \"n_microbatch\": 1,"
             " \"context\": 16, \"lr\": 0.001, \"weight_decay\": 0.01, \"warmup\": 1, \"min_lr_multiplier\": 0.1,"
             " \"grad_clip\": 0.25, \"adam_beta1\": 0.9, \"adam_beta2\": 0.999, \"adam_eps\": 1e-08, \"seed\": 1,"
             " \"checkpoint_every\": 0, \"log_every\": 1, \"precision\": \"fp32\"},"
             " \"evaluate\": {\"max_examples_per_set\": 0, \"greedy_check_examples\": 0}, \"analyze\": {\"enabled\": true}}",
             n_tokens, d_model, answer_only ? "true" : "false");
    rtu_write(path, text);
}

/* train_summary.json naming config_sha256. */
static void write_summary(const char *run_dir, const char *config_sha256) {
    char path[512], text[1024];
    snprintf(path, sizeof path, "%s/train_summary.json", run_dir);
    snprintf(text, sizeof text,
             "{\"steps\": 4, \"tokens\": 128, \"wall_time_s\": 1.5, \"final_train_loss\": 2.5, \"tokens_per_s\": 85.3,"
             " \"backend\": \"cpu\", \"hardware\": \"x86\", \"precision\": \"fp32\", \"config_sha256\": \"%s\","
             " \"n_params\": 1, \"code_version\": \"test\"}",
             config_sha256);
    rtu_write(path, text);
}

static void file_sha(const char *path, char hex[65]) {
    char err[512];
    ck_assert_msg(sha256_file_hex(path, hex, err, sizeof err) == 0, "%s", err);
}

/* A tokenizer of TOK_VOCAB pieces trained on a few arithmetic sentences. */
static void write_tokenizer(const char *path) {
    static const char *const sentences[] = {"What is 1 + 2?", "3", "Calculate 14 - 6.", "8", "What is 7*3?", "21"};
    BpeTrainConfig cfg = {TOK_VOCAB, 16, 1.0, true};
    BpeTrainer *t = bpe_trainer_new(&cfg);
    for (size_t i = 0; i < sizeof sentences / sizeof sentences[0]; i++) bpe_trainer_add(t, sentences[i]);
    BpeVocab v;
    char err[512];
    ck_assert_msg(bpe_trainer_train(t, &v, err, sizeof err) == 0, "%s", err);
    bpe_trainer_free(t);
    cJSON *json = bpe_vocab_to_json(&v, NULL);
    bpe_vocab_free(&v);
    ck_assert_msg(json_save_file(path, json, err, sizeof err) == 0, "%s", err);
    cJSON_Delete(json);
}

/* A checkpoint of a noisy tiny dense model with n_tokens tokens and width d_model. */
static void write_checkpoint(const char *run_dir, int n_tokens, int d_model) {
    char json[512], path[512], err[512];
    snprintf(json, sizeof json,
             "{\"arch\":\"dense\",\"n_tokens\":%d,\"d_model\":%d,\"n_layers\":2,\"n_heads\":2,\"d_ff\":12,"
             "\"lm_head_bias\":true,\"out_norm_affine\":true}",
             n_tokens, d_model);
    Backend *be = mtu_backend();
    Model *m = mtu_noisy_model(be, mtu_config(json), 7);
    snprintf(path, sizeof path, "%s/model.safetensors", run_dir);
    ck_assert_msg(model_save_safetensors(m, path, err, sizeof err) == 0, "%s", err);
    model_free(m);
    backend_destroy(be);
}

/* tmp/ holds data/tokenizer.json, exp/run/ (the run directory) and run.json. */
typedef struct {
    char dir[256], data[320], exp[320], run_dir[384], config[320];
} Fixture;

static void fixture(Fixture *f) {
    rtu_tmpdir(f->dir, sizeof f->dir, "test_trained_run");
    snprintf(f->data, sizeof f->data, "%s/data", f->dir);
    snprintf(f->exp, sizeof f->exp, "%s/exp", f->dir);
    snprintf(f->run_dir, sizeof f->run_dir, "%s/run", f->exp);
    snprintf(f->config, sizeof f->config, "%s/run.json", f->dir);
    char err[512];
    ck_assert_msg(mkdir_p(f->data, err, sizeof err) == 0, "%s", err);
    ck_assert_msg(mkdir_p(f->run_dir, err, sizeof err) == 0, "%s", err);
    char path[512];
    snprintf(path, sizeof path, "%s/tokenizer.json", f->data);
    write_tokenizer(path);
}

START_TEST(config_names_and_hash) {
    Fixture f;
    fixture(&f);
    write_run_config(f.config, 64, 8, true);
    char err[2048], want_sha[65], slashed[512];
    file_sha(f.config, want_sha);
    snprintf(slashed, sizeof slashed, "%s//", f.run_dir); /* trailing slashes do not change the names */
    TrainedRun r;
    ck_assert_msg(trained_run_read_config(&r, slashed, f.config, NULL, 0, err, sizeof err) == 0, "%s", err);
    ck_assert_str_eq(r.experiment, "exp");
    ck_assert_str_eq(r.run, "run");
    ck_assert_str_eq(r.arch, "dense");
    ck_assert_str_eq(r.loss_mode, "answer_only");
    ck_assert_str_eq(r.config_sha256, want_sha);
    ck_assert_int_eq(r.config_mc.n_tokens, 64);
    ck_assert_int_eq(r.tc.steps, 4);
    ck_assert(cJSON_IsObject(cJSON_GetObjectItemCaseSensitive(r.config, "evaluate")));
    trained_run_close(&r);

    write_run_config(f.config, 64, 8, false);
    ck_assert_msg(trained_run_read_config(&r, f.run_dir, f.config, NULL, 0, err, sizeof err) == 0, "%s", err);
    ck_assert_str_eq(r.loss_mode, "qa");
    trained_run_close(&r);

    /* errors name the file */
    char path[512];
    snprintf(path, sizeof path, "%s/missing.json", f.dir);
    ck_assert_int_eq(trained_run_read_config(&r, f.run_dir, path, NULL, 0, err, sizeof err), -1);
    ck_assert_msg(strstr(err, "missing.json"), "%s", err);
    trained_run_close(&r);
    rtu_write(f.config, "{\"description\": \"x\", \"model\": {\"arch\": \"dense\"}}");
    ck_assert_int_eq(trained_run_read_config(&r, f.run_dir, f.config, NULL, 0, err, sizeof err), -1);
    ck_assert_msg(strstr(err, f.config), "%s", err);
    trained_run_close(&r);
    remove_tree(f.dir);
}
END_TEST

START_TEST(open_requires_finished_training_with_this_config) {
    Fixture f;
    fixture(&f);
    write_run_config(f.config, 64, 8, false);
    char err[2048], sha[65];
    file_sha(f.config, sha);
    TrainedRun r;

    /* no train_summary.json: not finished */
    ck_assert_msg(trained_run_read_config(&r, f.run_dir, f.config, NULL, 0, err, sizeof err) == 0, "%s", err);
    ck_assert_int_eq(trained_run_open(&r, f.data, err, sizeof err), -1);
    ck_assert_msg(strstr(err, "train_summary.json: missing: training of") && strstr(err, "has not finished"), "%s", err);
    trained_run_close(&r);

    /* trained with another config */
    write_summary(f.run_dir, "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef");
    ck_assert_msg(trained_run_read_config(&r, f.run_dir, f.config, NULL, 0, err, sizeof err) == 0, "%s", err);
    ck_assert_int_eq(trained_run_open(&r, f.data, err, sizeof err), -1);
    ck_assert_msg(strstr(err, "config_sha256 0123456789ab... differs from") && strstr(err, f.config), "%s", err);
    trained_run_close(&r);

    /* finished with this config, but no tokenizer in the data directory */
    write_summary(f.run_dir, sha);
    ck_assert_msg(trained_run_read_config(&r, f.run_dir, f.config, NULL, 0, err, sizeof err) == 0, "%s", err);
    ck_assert_int_eq(trained_run_open(&r, f.exp, err, sizeof err), -1);
    ck_assert_msg(strstr(err, "tokenizer.json"), "%s", err);
    trained_run_close(&r);

    ck_assert_msg(trained_run_read_config(&r, f.run_dir, f.config, NULL, 0, err, sizeof err) == 0, "%s", err);
    ck_assert_msg(trained_run_open(&r, f.data, err, sizeof err) == 0, "%s", err);
    ck_assert_int_eq(tokenizer_vocab_size(r.tok), TOK_VOCAB);
    ck_assert_int_eq(r.summary.steps, 4);
    ck_assert_str_eq(r.summary.config_sha256, sha);
    trained_run_close(&r);
    remove_tree(f.dir);
}
END_TEST

/* train_summary.json records the tokenizer the run was trained with: a data directory re-tokenized since (another
 * tokenizer.json, shards consistent with it) is refused, naming both; the same tokenizer opens. It used to be
 * evaluated with the other pieces and recorded under the new tokenizer's hash. */
START_TEST(open_refuses_another_tokenizer) {
    Fixture f;
    fixture(&f);
    write_run_config(f.config, 64, 8, false);
    char err[2048], sha[65], tok_sha[65], path[512], text[1024];
    file_sha(f.config, sha);
    snprintf(path, sizeof path, "%s/tokenizer.json", f.data);
    file_sha(path, tok_sha);
    const char *recorded[2] = {"fedcba9876543210fedcba9876543210fedcba9876543210fedcba9876543210", tok_sha};
    for (int k = 0; k < 2; k++) {
        snprintf(path, sizeof path, "%s/train_summary.json", f.run_dir);
        snprintf(text, sizeof text,
                 "{\"steps\": 4, \"tokens\": 128, \"wall_time_s\": 1.5, \"final_train_loss\": 2.5, \"tokens_per_s\": 85.3,"
                 " \"backend\": \"cpu\", \"hardware\": \"x86\", \"precision\": \"fp32\", \"config_sha256\": \"%s\","
                 " \"n_params\": 1, \"code_version\": \"test\", \"tokenizer_sha256\": \"%s\"}",
                 sha, recorded[k]);
        rtu_write(path, text);
        TrainedRun r;
        ck_assert_msg(trained_run_read_config(&r, f.run_dir, f.config, NULL, 0, err, sizeof err) == 0, "%s", err);
        int rc = trained_run_open(&r, f.data, err, sizeof err);
        if (k == 0) {
            ck_assert_int_eq(rc, -1);
            ck_assert_msg(strstr(err, "tokenizer.json (sha256 ") && strstr(err, "is not the tokenizer") &&
                              strstr(err, "(fedcba987654...)"), "%s", err);
        } else {
            ck_assert_msg(rc == 0, "%s", err);
            ck_assert_str_eq(r.summary.tokenizer_sha256, tok_sha);
        }
        trained_run_close(&r);
    }
    remove_tree(f.dir);
}
END_TEST

/* read_config + open (asserting success), ready for load_model. */
static void open_ok(TrainedRun *r, const Fixture *f) {
    char err[2048], sha[65];
    file_sha(f->config, sha);
    write_summary(f->run_dir, sha);
    ck_assert_msg(trained_run_read_config(r, f->run_dir, f->config, NULL, 0, err, sizeof err) == 0, "%s", err);
    ck_assert_msg(trained_run_open(r, f->data, err, sizeof err) == 0, "%s", err);
}

START_TEST(load_model_checks_and_loads_the_checkpoint) {
    Fixture f;
    fixture(&f);
    char err[2048];
    TrainedRun r;

    /* no checkpoint */
    write_run_config(f.config, 64, 8, false);
    open_ok(&r, &f);
    ck_assert_int_eq(trained_run_load_model(&r, "cpu", err, sizeof err), -1);
    ck_assert_msg(strstr(err, "model.safetensors"), "%s", err);
    trained_run_close(&r);

    /* unknown backend */
    write_checkpoint(f.run_dir, 64, 8);
    open_ok(&r, &f);
    ck_assert_int_eq(trained_run_load_model(&r, "nope", err, sizeof err), -1);
    ck_assert_msg(strncmp(err, "--backend nope: ", 16) == 0, "%s", err);
    trained_run_close(&r);

    /* a checkpoint of another width than the run config's model */
    write_checkpoint(f.run_dir, 64, 12);
    open_ok(&r, &f);
    ck_assert_int_eq(trained_run_load_model(&r, "cpu", err, sizeof err), -1);
    ck_assert_msg(strstr(err, "model.safetensors: the checkpoint's model config differs from") && strstr(err, f.config),
                  "%s", err);
    trained_run_close(&r);

    /* a model with fewer tokens than the tokenizer has pieces */
    write_run_config(f.config, 20, 8, false);
    write_checkpoint(f.run_dir, 20, 8);
    open_ok(&r, &f);
    ck_assert_int_eq(trained_run_load_model(&r, "cpu", err, sizeof err), -1);
    ck_assert_msg(strstr(err, "model has 20 tokens but the tokenizer 40"), "%s", err);
    trained_run_close(&r);

    /* the good case: fp32, and the loaded model computes what the saved one did */
    write_run_config(f.config, 64, 8, false);
    write_checkpoint(f.run_dir, 64, 8);
    open_ok(&r, &f);
    ck_assert_msg(trained_run_load_model(&r, "cpu", err, sizeof err) == 0, "%s", err);
    ck_assert_int_eq(r.be->precision, PRECISION_FP32);
    ck_assert_int_eq(model_config(r.model)->n_tokens, 64);
    Backend *be = mtu_backend();
    Model *saved = mtu_noisy_model(be, *model_config(r.model), 7);
    enum { T = 9, V = 64 };
    int32_t tokens[T];
    mtu_tokens(tokens, T, V, 3);
    float *want = malloc(sizeof(float) * T * V), *got = malloc(sizeof(float) * T * V);
    ck_assert(want && got);
    model_forward_eval(saved, tokens, 1, T, want);
    model_forward_eval(r.model, tokens, 1, T, got);
    ck_assert_int_eq(memcmp(want, got, sizeof(float) * T * V), 0);
    free(want);
    free(got);
    model_free(saved);
    backend_destroy(be);
    trained_run_close(&r);
    trained_run_close(&r); /* a closed (zeroed) run closes again harmlessly */
    remove_tree(f.dir);
}
END_TEST

/* --set overrides: applied to the config the stages read, recorded (effective seed, run_config name), hashed as
 * config_sha256; a run trained with other overrides is refused naming both lists; a malformed one is a usage error. */
START_TEST(overrides_must_match_training) {
    Fixture f;
    fixture(&f);
    write_run_config(f.config, 64, 8, false);
    char err[2048], sha[65];
    TrainedRun r;
    const char *sets[] = {"train.seed=3", "evaluate.max_examples_per_set=5"};
    ck_assert_msg(trained_run_read_config(&r, f.run_dir, f.config, sets, 2, err, sizeof err) == 0, "%s", err);
    ck_assert_int_eq(r.tc.seed, 3);
    ck_assert_int_eq(r.prov.seed, 3);
    ck_assert_str_eq(r.prov.run_config, "run");
    ck_assert_int_eq(r.prov.n_overrides, 2);
    ck_assert_str_eq(r.prov.overrides[0], "evaluate.max_examples_per_set=5");
    ck_assert_str_eq(r.prov.overrides[1], "train.seed=3");
    const cJSON *ev = cJSON_GetObjectItemCaseSensitive(r.config, "evaluate");
    ck_assert_int_eq(cJSON_GetObjectItemCaseSensitive(ev, "max_examples_per_set")->valueint, 5);
    snprintf(sha, sizeof sha, "%s", r.config_sha256);
    char file[65];
    file_sha(f.config, file);
    ck_assert_str_ne(sha, file);
    trained_run_close(&r);

    /* trained without --set (an older summary has no "overrides"): refused naming both lists */
    write_summary(f.run_dir, file);
    ck_assert_msg(trained_run_read_config(&r, f.run_dir, f.config, sets, 2, err, sizeof err) == 0, "%s", err);
    ck_assert_int_eq(trained_run_open(&r, f.data, err, sizeof err), -1);
    ck_assert_msg(strstr(err, "train_summary.json: the run was trained with no --set, this stage was given --set "
                              "evaluate.max_examples_per_set=5 --set train.seed=3: pass the same --set as train"),
                  "%s", err);
    trained_run_close(&r);

    /* trained with the same overrides (in another order): opens */
    char path[512], text[1024];
    snprintf(path, sizeof path, "%s/train_summary.json", f.run_dir);
    snprintf(text, sizeof text,
             "{\"steps\": 4, \"tokens\": 128, \"wall_time_s\": 1.5, \"final_train_loss\": 2.5, \"tokens_per_s\": 85.3,"
             " \"backend\": \"cpu\", \"hardware\": \"x86\", \"precision\": \"fp32\", \"config_sha256\": \"%s\","
             " \"overrides\": [\"evaluate.max_examples_per_set=5\", \"train.seed=3\"], \"seed\": 3,"
             " \"run_config\": \"run\", \"n_params\": 1, \"code_version\": \"test\"}",
             sha);
    rtu_write(path, text);
    const char *reordered[] = {"evaluate.max_examples_per_set=5", "train.seed=3"};
    ck_assert_msg(trained_run_read_config(&r, f.run_dir, f.config, reordered, 2, err, sizeof err) == 0, "%s", err);
    ck_assert_msg(trained_run_open(&r, f.data, err, sizeof err) == 0, "%s", err);
    ck_assert_int_eq(r.summary.prov.seed, 3);
    trained_run_close(&r);
    /* ... and without them it is refused the other way round */
    ck_assert_msg(trained_run_read_config(&r, f.run_dir, f.config, NULL, 0, err, sizeof err) == 0, "%s", err);
    ck_assert_int_eq(trained_run_open(&r, f.data, err, sizeof err), -1);
    ck_assert_msg(strstr(err, "trained with --set evaluate.max_examples_per_set=5 --set train.seed=3, this stage was "
                              "given no --set"), "%s", err);
    trained_run_close(&r);

    /* a malformed --set is a usage error */
    const char *bad[] = {"seed=3"};
    ck_assert_int_eq(trained_run_read_config(&r, f.run_dir, f.config, bad, 1, err, sizeof err), CONFIG_USAGE_ERROR);
    ck_assert_msg(strstr(err, "--set 'seed=3'"), "%s", err);
    trained_run_close(&r);
    remove_tree(f.dir);
}
END_TEST

int main(void) {
    Suite *s = suite_create("trained_run");
    TCase *tc = tcase_create("trained_run");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, config_names_and_hash);
    tcase_add_test(tc, open_requires_finished_training_with_this_config);
    tcase_add_test(tc, overrides_must_match_training);
    tcase_add_test(tc, open_refuses_another_tokenizer);
    tcase_add_test(tc, load_model_checks_and_loads_the_checkpoint);
    suite_add_tcase(s, tc);
    return run_test_suite(s);
}
