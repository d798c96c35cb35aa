/* --set KEY=VALUE overrides: parsing (types, string fallback, malformed arguments, duplicates), applying (nested
 * keys, missing sections), the canonical list, and config_sha256 (the file's hash without overrides, independent of
 * the arguments' order, different for different overrides). */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "model/train_config.h"
#include "pipeline/base/atomic_file.h"
#include "pipeline/base/config.h"
#include "pipeline/records/config_override.h"
#include "pipeline/base/sha256.h"
#include "tests/unit/suite_runner.h"

static char g_dir[256], g_cfg[512];

static const char *CFG = "{\"model\": {\"d_model\": 64, \"sub\": {\"x\": 1}}, \"train\": {\"lr\": 0.5, \"seed\": 1, "
                         "\"precision\": \"fp32\"}, \"evaluate\": {}}\n";

static void setup(void) {
    snprintf(g_dir, sizeof g_dir, "/tmp/test_config_override.%ld", (long)getpid());
    char err[256];
    ck_assert_int_eq(mkdir_p(g_dir, err, sizeof err), 0);
    snprintf(g_cfg, sizeof g_cfg, "%s/dense_qa.json", g_dir);
    ck_assert_int_eq(write_file_atomic(g_cfg, CFG, strlen(CFG), err, sizeof err), 0);
}
static void teardown(void) { remove_tree(g_dir); }

/* Loads g_cfg with the given --set arguments; returns the status, fills c (freed by the caller on success). */
static int load(LoadedConfig *c, char *err, size_t errlen, int n, const char *const *sets) {
    return config_load_with_overrides(c, g_cfg, sets, n, err, errlen);
}

static const cJSON *at(const cJSON *root, const char *section, const char *key) {
    return cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(root, section), key);
}

START_TEST(values_are_json_or_strings) {
    const char *sets[] = {"train.lr=1e-3", "train.seed=2", "train.precision=bf16", "evaluate.flag=true",
                          "evaluate.name=\"x y\"", "evaluate.list=[1,2]", "evaluate.empty="};
    LoadedConfig c;
    char err[512] = "";
    ck_assert_msg(load(&c, err, sizeof err, 7, sets) == 0, "%s", err);
    ck_assert(cJSON_IsNumber(at(c.json, "train", "lr")) && at(c.json, "train", "lr")->valuedouble == 1e-3);
    ck_assert(cJSON_IsNumber(at(c.json, "train", "seed")) && at(c.json, "train", "seed")->valueint == 2);
    ck_assert_str_eq(at(c.json, "train", "precision")->valuestring, "bf16"); /* not JSON: taken as a string */
    ck_assert(cJSON_IsTrue(at(c.json, "evaluate", "flag")));
    ck_assert_str_eq(at(c.json, "evaluate", "name")->valuestring, "x y");
    ck_assert_int_eq(cJSON_GetArraySize(at(c.json, "evaluate", "list")), 2);
    ck_assert_str_eq(at(c.json, "evaluate", "empty")->valuestring, "");
    /* untouched keys stay */
    ck_assert_int_eq(at(c.json, "model", "d_model")->valueint, 64);
    /* canonical: KEY=<compact JSON>, sorted by KEY */
    ck_assert_int_eq(c.prov.n_overrides, 7);
    const char *want[] = {"evaluate.empty=\"\"", "evaluate.flag=true", "evaluate.list=[1,2]", "evaluate.name=\"x y\"",
                          "train.lr=0.001", "train.precision=\"bf16\"", "train.seed=2"};
    for (int i = 0; i < 7; i++) ck_assert_str_eq(c.prov.overrides[i], want[i]);
    ck_assert_str_eq(c.prov.run_config, "dense_qa");
    ck_assert_int_eq(c.prov.seed, -1); /* the caller sets it from the validated train.seed */
    loaded_config_free(&c);
}
END_TEST

START_TEST(nested_keys) {
    const char *sets[] = {"model.sub.x=5", "model.sub.y=6", "model.new.z=7"};
    LoadedConfig c;
    char err[512] = "";
    ck_assert_msg(load(&c, err, sizeof err, 3, sets) == 0, "%s", err);
    const cJSON *sub = at(c.json, "model", "sub");
    ck_assert_int_eq(cJSON_GetObjectItemCaseSensitive(sub, "x")->valueint, 5);
    ck_assert_int_eq(cJSON_GetObjectItemCaseSensitive(sub, "y")->valueint, 6);
    /* a nested object the file lacks is created (the section's strict reader then names the unknown key) */
    ck_assert_int_eq(cJSON_GetObjectItemCaseSensitive(at(c.json, "model", "new"), "z")->valueint, 7);
    loaded_config_free(&c);
    /* a path through a value that is not an object: usage error naming the argument */
    const char *bad[] = {"train.lr.x=1"};
    ck_assert_int_eq(load(&c, err, sizeof err, 1, bad), CONFIG_USAGE_ERROR);
    ck_assert_msg(strstr(err, "--set train.lr.x") && strstr(err, "not an object"), "%s", err);
}
END_TEST

/* null removes a key (its default then applies); removing an absent key is not an error. */
START_TEST(null_removes_the_key) {
    const char *sets[] = {"model.d_model=null", "model.absent=null", "model.sub.x=null"};
    LoadedConfig c;
    char err[512] = "";
    ck_assert_msg(load(&c, err, sizeof err, 3, sets) == 0, "%s", err);
    ck_assert_ptr_null(cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(c.json, "model"), "d_model"));
    ck_assert_ptr_null(cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(c.json, "model"), "absent"));
    ck_assert_ptr_null(cJSON_GetObjectItemCaseSensitive(at(c.json, "model", "sub"), "x"));
    ck_assert_ptr_nonnull(at(c.json, "train", "lr"));
    loaded_config_free(&c);
}
END_TEST

START_TEST(usage_errors_name_the_argument) {
    struct {
        const char *arg, *second, *want;
    } cases[] = {
        {"train.lr", NULL, "--set 'train.lr': expected KEY=VALUE"},
        {"lr=1", NULL, "--set 'lr=1': KEY must be a dotted path section.key"},
        {".lr=1", NULL, "--set '.lr=1': KEY must be"},
        {"train.=1", NULL, "--set 'train.=1': KEY must be"},
        {"train..lr=1", NULL, "--set 'train..lr=1': KEY must be"},
        {"=1", NULL, "--set '=1': KEY must be"},
        {"trian.lr=1", NULL, "--set trian.lr: "},
        {"train.lr=1", "train.lr=2", "--set 'train.lr=2': train.lr is already set"},
        /* a JSON string holding \u0000 would be cut short ("a"): refused, the text itself is not JSON-decoded */
        {"train.precision=\"a\\u0000b\"", NULL, "--set 'train.precision=\"a\\u0000b\"': a JSON string in VALUE holds "
                                                 "\\u0000"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const char *sets[2] = {cases[i].arg, cases[i].second};
        LoadedConfig c;
        char err[512] = "";
        ck_assert_int_eq(load(&c, err, sizeof err, cases[i].second ? 2 : 1, sets), CONFIG_USAGE_ERROR);
        ck_assert_msg(strstr(err, cases[i].want), "case %zu: %s", i, err);
        ck_assert_ptr_null(c.json);
    }
    /* the missing section is named with the file */
    const char *sets[] = {"trian.lr=1"};
    LoadedConfig c;
    char err[512] = "";
    ck_assert_int_eq(load(&c, err, sizeof err, 1, sets), CONFIG_USAGE_ERROR);
    ck_assert_msg(strstr(err, "has no section \"trian\"") && strstr(err, "dense_qa.json"), "%s", err);
}
END_TEST

START_TEST(unreadable_file_is_not_a_usage_error) {
    LoadedConfig c;
    char err[512] = "";
    ck_assert_int_eq(config_load_with_overrides(&c, "/nonexistent/x.json", NULL, 0, err, sizeof err), -1);
    ck_assert_msg(strstr(err, "/nonexistent/x.json"), "%s", err);
}
END_TEST

START_TEST(sha256_without_overrides_is_the_file_hash) {
    LoadedConfig c;
    char err[512] = "", file_hex[65];
    ck_assert_msg(load(&c, err, sizeof err, 0, NULL) == 0, "%s", err);
    sha256_hex(CFG, strlen(CFG), file_hex);
    ck_assert_str_eq(c.sha256, file_hex);
    ck_assert_int_eq(c.prov.n_overrides, 0);
    loaded_config_free(&c);
}
END_TEST

START_TEST(sha256_with_overrides_follows_the_interface) {
    const char *ab[] = {"train.seed=2", "train.lr=1e-3"}, *ba[] = {"train.lr=0.001", "train.seed=2"};
    const char *other[] = {"train.seed=3", "train.lr=1e-3"};
    LoadedConfig c1, c2, c3;
    char err[512] = "";
    ck_assert_msg(load(&c1, err, sizeof err, 2, ab) == 0, "%s", err);
    ck_assert_msg(load(&c2, err, sizeof err, 2, ba) == 0, "%s", err);
    ck_assert_msg(load(&c3, err, sizeof err, 2, other) == 0, "%s", err);
    /* file bytes, then "\n--set " + canonical override per override in KEY order */
    char *text = NULL, want[65];
    if (asprintf(&text, "%s\n--set train.lr=0.001\n--set train.seed=2", CFG) < 0) ck_abort_msg("asprintf");
    sha256_hex(text, strlen(text), want);
    free(text);
    ck_assert_str_eq(c1.sha256, want);
    ck_assert_str_eq(c2.sha256, want); /* order of the arguments and spelling of the number do not matter */
    ck_assert_str_ne(c3.sha256, want);
    char file_hex[65];
    sha256_hex(CFG, strlen(CFG), file_hex);
    ck_assert_str_ne(c1.sha256, file_hex);
    /* the same value as the file's still counts as an override (the run is recorded as given) */
    const char *same[] = {"train.seed=1"};
    LoadedConfig c4;
    ck_assert_msg(load(&c4, err, sizeof err, 1, same) == 0, "%s", err);
    ck_assert_str_ne(c4.sha256, file_hex);
    loaded_config_free(&c1);
    loaded_config_free(&c2);
    loaded_config_free(&c3);
    loaded_config_free(&c4);
}
END_TEST

/* An override of an unknown key reaches the section's strict reader, which names it with the closest valid key. */
START_TEST(unknown_key_reported_with_suggestion) {
    static const char *RUN =
        "{\"description\": \"d\", \"model\": {\"arch\": \"dense\", \"n_tokens\": 16, \"d_model\": 8, \"n_layers\": 1, "
        "\"n_heads\": 1, \"d_ff\": 16}, \"train\": {\"loss_on_target_only\": false, \"steps\": 2, \"batch_size\": 1, "
        "\"n_microbatch\": 1, \"context\": 4, \"lr\": 0.1, \"weight_decay\": 0, \"warmup\": 0, "
        "\"min_lr_multiplier\": 0.1, \"grad_clip\": 0, \"adam_beta1\": 0.9, \"adam_beta2\": 0.99, \"adam_eps\": 1e-8, "
        "\"seed\": 1, \"checkpoint_every\": 0, \"log_every\": 1, \"precision\": \"fp32\"}, \"evaluate\": {}, "
        "\"analyze\": {}}";
    char err[512] = "";
    ck_assert_int_eq(write_file_atomic(g_cfg, RUN, strlen(RUN), err, sizeof err), 0);
    ModelConfig mc;
    TrainConfig tc;
    const char *typo[] = {"train.learning_rate=1e-3"}, *mtypo[] = {"model.d_modle=16"};
    const char *wrong_type[] = {"train.steps=many"}, *good[] = {"train.steps=7", "model.d_model=16"};
    LoadedConfig c;
    ck_assert_msg(load(&c, err, sizeof err, 1, typo) == 0, "%s", err);
    ck_assert_int_eq(run_config_parse(c.json, g_cfg, &mc, &tc, err, sizeof err), -1);
    ck_assert_msg(strstr(err, "dense_qa.json: train.learning_rate: unknown key (did you mean train.lr?)"), "%s", err);
    loaded_config_free(&c);
    ck_assert_msg(load(&c, err, sizeof err, 1, mtypo) == 0, "%s", err);
    ck_assert_int_eq(run_config_parse(c.json, g_cfg, &mc, &tc, err, sizeof err), -1);
    ck_assert_msg(strstr(err, "model.d_modle: unknown key (did you mean model.d_model?)"), "%s", err);
    loaded_config_free(&c);
    /* the model section's own reader: a misspelt arch before the missing arch it causes */
    cJSON *model = cJSON_Parse("{\"arc\": \"dense\", \"d_model\": 8}");
    ck_assert_int_eq(model_config_from_json(&mc, model, "m.json", err, sizeof err), -1);
    ck_assert_msg(strstr(err, "m.json: model.arc: unknown key (did you mean model.arch?)"), "%s", err);
    cJSON_Delete(model);
    ck_assert_msg(load(&c, err, sizeof err, 1, wrong_type) == 0, "%s", err);
    ck_assert_int_eq(run_config_parse(c.json, g_cfg, &mc, &tc, err, sizeof err), -1);
    ck_assert_msg(strstr(err, "train.steps: expected an integer, got a string"), "%s", err);
    loaded_config_free(&c);
    ck_assert_msg(load(&c, err, sizeof err, 2, good) == 0, "%s", err);
    ck_assert_msg(run_config_parse(c.json, g_cfg, &mc, &tc, err, sizeof err) == 0, "%s", err);
    ck_assert_int_eq(tc.steps, 7);
    ck_assert_int_eq(mc.d_model, 16);
    loaded_config_free(&c);
}
END_TEST

START_TEST(provenance_describe_and_compare) {
    RunProvenance a, b;
    run_provenance_init(&a);
    run_provenance_init(&b);
    char text[256];
    run_provenance_describe_overrides(&a, text, sizeof text);
    ck_assert_str_eq(text, "no --set");
    ck_assert(run_provenance_same_overrides(&a, &b));
    a.n_overrides = 2;
    snprintf(a.overrides[0], RUN_OVERRIDE_MAX, "train.lr=0.001");
    snprintf(a.overrides[1], RUN_OVERRIDE_MAX, "train.seed=2");
    run_provenance_describe_overrides(&a, text, sizeof text);
    ck_assert_str_eq(text, "--set train.lr=0.001 --set train.seed=2");
    ck_assert(!run_provenance_same_overrides(&a, &b));
    b = a;
    ck_assert(run_provenance_same_overrides(&a, &b));
    snprintf(b.overrides[1], RUN_OVERRIDE_MAX, "train.seed=3");
    ck_assert(!run_provenance_same_overrides(&a, &b));
    run_provenance_set_config_name(&a, "experiments/tiny/moeut_answer.json");
    ck_assert_str_eq(a.run_config, "moeut_answer");
    run_provenance_set_config_name(&a, "plain");
    ck_assert_str_eq(a.run_config, "plain");
}
END_TEST

int main(void) {
    Suite *s = suite_create("config_override");
    TCase *tc = tcase_create("config_override");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, values_are_json_or_strings);
    tcase_add_test(tc, nested_keys);
    tcase_add_test(tc, null_removes_the_key);
    tcase_add_test(tc, usage_errors_name_the_argument);
    tcase_add_test(tc, unreadable_file_is_not_a_usage_error);
    tcase_add_test(tc, sha256_without_overrides_is_the_file_hash);
    tcase_add_test(tc, sha256_with_overrides_follows_the_interface);
    tcase_add_test(tc, unknown_key_reported_with_suggestion);
    tcase_add_test(tc, provenance_describe_and_compare);
    suite_add_tcase(s, tc);
    return run_test_suite(s);
}
