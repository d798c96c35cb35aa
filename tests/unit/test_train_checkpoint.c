/* Training checkpoints: exact round trip of weights, AdamW moments, step, loader and dropout RNG states; the commit
 * protocol (an uncommitted pending set is dropped, a committed one rolled forward after a crash between renames);
 * a mismatched set is refused with a clear message; state.json's doubles are JSON numbers (null when not finite)
 * that read back to the same bits, its RNG states and counters hex strings, and older states holding the doubles as
 * strings still read to the same values. */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kernels/backend.h"
#include "model/model.h"
#include "model/model_internal.h" /* to inspect the dropout RNG state */
#include "model/optimizer.h"
#include "pipeline/base/rng.h"
#include "model/training/train_checkpoint.h"
#include "pipeline/base/config.h"
#include "pipeline/base/atomic_file.h"
#include "tests/unit/suite_runner.h"

typedef struct {
    Backend *be;
    Model *m;
    AdamW opt;
} Setup;

static void setup_create(Setup *s, uint64_t seed) {
    char err[256];
    s->be = backend_create("cpu", err, sizeof err);
    ck_assert_msg(s->be != NULL, "%s", err);
    ModelConfig cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.arch = ARCH_DENSE;
    cfg.n_tokens = 16, cfg.d_model = 8, cfg.n_layers = 2, cfg.n_heads = 2, cfg.d_head = 4, cfg.d_ff = 12;
    cfg.group_size = 1;
    ck_assert_msg(model_config_validate(&cfg, err, sizeof err) == 0, "%s", err);
    s->m = model_create(&cfg, s->be);
    ck_assert_ptr_nonnull(s->m);
    model_init_weights(s->m, seed);
    model_set_dropout_seed(s->m, seed + 2);
    adamw_init(&s->opt, s->be, model_n_params(s->m), 0.9, 0.999, 1e-8, 0.01);
}

/* Two AdamW updates with deterministic pseudo-gradients so m, v and the weights are all non-trivial. */
static void setup_train_a_little(Setup *s, int salt) {
    size_t n = model_n_params(s->m);
    scalar_t *g = malloc(n * sizeof *g);
    ck_assert_ptr_nonnull(g);
    for (int k = 0; k < 2; k++) {
        for (size_t i = 0; i < n; i++) g[i] = (scalar_t)sin(0.1 * (double)i + k + salt);
        s->be->to_device(s->be, model_grads(s->m), g, n * sizeof *g);
        adamw_update(&s->opt, model_params(s->m), model_grads(s->m), 1e-2, 1.0);
    }
    free(g);
}

static void setup_free(Setup *s) {
    adamw_free(&s->opt);
    model_free(s->m);
    backend_destroy(s->be);
}

static void fill_state(TrainState *st, long step) {
    memset(st, 0, sizeof *st);
    st->step = step;
    st->total_steps = 100;
    snprintf(st->config_sha256, sizeof st->config_sha256, "%064d", 7);
    snprintf(st->backend, sizeof st->backend, "cpu");
    st->tokens = 123456789012ULL;
    st->real_tokens = 987654321ULL;
    st->wall_time_s = 1.0 / 3.0;
    st->last_ce = NAN;
    rng_seed(&st->loader.rng, 99);
    for (int i = 0; i < 17; i++) rng_next_u64(&st->loader.rng);
    st->loader.windows = 42;
    st->loader.examples = 420;
    st->acc = (MetricsAcc){0.1, 0.2, -0.3, -0.4, 0.5 / 7.0, 1.25, 3, 1.0 / 3.0}; /* reg_seq nonzero: in state.json */
    snprintf(st->data_tokenizer_sha256, sizeof st->data_tokenizer_sha256, "%064d", 5);
    st->data_n_examples = 77;
    snprintf(st->data_train_sha256, sizeof st->data_train_sha256, "%064d", 6);
    run_provenance_init(&st->prov);
    st->prov.n_overrides = 1;
    snprintf(st->prov.overrides[0], RUN_OVERRIDE_MAX, "train.seed=2");
    st->prov.seed = 2;
    snprintf(st->prov.run_config, sizeof st->prov.run_config, "dense_qa");
}

static void make_dir(char *dir, size_t n) {
    snprintf(dir, n, "/tmp/test_train_checkpoint.XXXXXX");
    ck_assert_ptr_nonnull(mkdtemp(dir));
}

static void assert_same_buffers(Backend *be, const scalar_t *a, const scalar_t *b, size_t n) {
    scalar_t *ha = malloc(n * sizeof *ha), *hb = malloc(n * sizeof *hb);
    ck_assert(ha && hb);
    be->to_host(be, ha, a, n * sizeof *ha);
    be->to_host(be, hb, b, n * sizeof *hb);
    ck_assert_int_eq(memcmp(ha, hb, n * sizeof *ha), 0);
    free(ha);
    free(hb);
}

static void copy_file(const char *from, const char *to) {
    char *data = NULL, err[256];
    size_t n = 0;
    ck_assert_msg(read_file_all(from, &data, &n, err, sizeof err) == 0, "%s", err);
    ck_assert_msg(write_file_atomic(to, data, n, err, sizeof err) == 0, "%s", err);
    free(data);
}

START_TEST(round_trip_is_exact) {
    char dir[64], err[512];
    make_dir(dir, sizeof dir);
    Setup a, b;
    setup_create(&a, 1);
    setup_train_a_little(&a, 0);
    for (int i = 0; i < 5; i++) rng_next_u64(&a.m->dropout_rng); /* a dropout stream that has moved on */
    TrainState st, back;
    fill_state(&st, 5);
    ck_assert_msg(train_checkpoint_save(dir, a.m, &a.opt, &st, err, sizeof err) == 0, "%s", err);
    ck_assert(train_checkpoint_exists(dir));

    setup_create(&b, 2); /* different weights, fresh optimizer */
    ck_assert_msg(train_checkpoint_load(dir, b.m, &b.opt, &back, err, sizeof err) == 0, "%s", err);
    size_t n = model_n_params(a.m);
    assert_same_buffers(a.be, model_params(a.m), model_params(b.m), n);
    assert_same_buffers(a.be, a.opt.m, b.opt.m, n);
    assert_same_buffers(a.be, a.opt.v, b.opt.v, n);
    ck_assert_int_eq(b.opt.t, a.opt.t);
    ck_assert_mem_eq(&b.m->dropout_rng, &a.m->dropout_rng, sizeof(Rng));
    ck_assert_int_eq(back.step, 5);
    ck_assert_int_eq(back.total_steps, 100);
    ck_assert_str_eq(back.config_sha256, st.config_sha256);
    ck_assert_str_eq(back.data_tokenizer_sha256, st.data_tokenizer_sha256);
    ck_assert_uint_eq(back.tokens, st.tokens);
    ck_assert_uint_eq(back.real_tokens, st.real_tokens);
    ck_assert(back.wall_time_s == st.wall_time_s); /* exact, not approximately */
    ck_assert(isnan(back.last_ce));
    ck_assert_mem_eq(&back.loader, &st.loader, sizeof st.loader);
    ck_assert(memcmp(&back.acc, &st.acc, sizeof st.acc) == 0);
    ck_assert_uint_eq(back.data_n_examples, 77);
    ck_assert_str_eq(back.data_train_sha256, st.data_train_sha256);
    /* data.train_sha256 is optional (states written before it existed lack it) but, when present, a 64-digit string */
    TrainState peek;
    ck_assert_msg(train_state_read(dir, &peek, err, sizeof err) == 0, "%s", err);
    ck_assert_str_eq(peek.data_train_sha256, st.data_train_sha256);
    char path[128], *text = NULL;
    size_t len = 0;
    snprintf(path, sizeof path, "%s/state.json", dir);
    /* the run provenance round-trips; a state.json written before it existed reads as none */
    ck_assert_int_eq(back.prov.n_overrides, 1);
    ck_assert_str_eq(back.prov.overrides[0], "train.seed=2");
    ck_assert_int_eq(back.prov.seed, 2);
    ck_assert_str_eq(back.prov.run_config, "dense_qa");
    cJSON *sj = json_load_file(path, JSON_KIND_STATE, err, sizeof err);
    ck_assert_msg(sj != NULL, "%s", err);
    cJSON_DeleteItemFromObject(sj, "overrides");
    cJSON_DeleteItemFromObject(sj, "seed");
    cJSON_DeleteItemFromObject(sj, "run_config");
    ck_assert_msg(json_save_file(path, sj, err, sizeof err) == 0, "%s", err);
    cJSON_Delete(sj);
    ck_assert_msg(train_state_read(dir, &peek, err, sizeof err) == 0, "%s", err);
    ck_assert(peek.prov.n_overrides == 0 && peek.prov.seed == -1 && peek.prov.run_config[0] == '\0');
    ck_assert_int_eq(peek.step, 5);
    /* well-formed states with impossible numbers are refused naming the field (and restored after each case) */
    {
        cJSON *good = json_load_file(path, JSON_KIND_STATE, err, sizeof err);
        ck_assert_msg(good != NULL, "%s", err);
        const struct {
            const char *key;
            cJSON *value;
            const char *want;
        } FORGED[] = {
            {"step", cJSON_CreateNumber(1e6), "out of range"},
            {"real_tokens", cJSON_CreateNumber(1e12), "out of range"},
            {"wall_time_s", cJSON_CreateString("-3"), "wall_time_s -3"},
            {"last_ce", cJSON_CreateString("inf"), "last_ce inf"},
            {"wall_time_s", cJSON_CreateNumber(-3), "wall_time_s -3"},
        };
        for (size_t k = 0; k < sizeof FORGED / sizeof FORGED[0]; k++) {
            cJSON *f = cJSON_Duplicate(good, 1);
            cJSON_ReplaceItemInObject(f, FORGED[k].key, FORGED[k].value);
            ck_assert_msg(json_save_file(path, f, err, sizeof err) == 0, "%s", err);
            cJSON_Delete(f);
            ck_assert_int_eq(train_state_read(dir, &peek, err, sizeof err), -1);
            ck_assert_msg(strstr(err, FORGED[k].want) && strstr(err, "state.json"), "%s: %s", FORGED[k].key, err);
        }
        ck_assert_msg(json_save_file(path, good, err, sizeof err) == 0, "%s", err);
        cJSON_Delete(good);
        ck_assert_msg(train_state_read(dir, &peek, err, sizeof err) == 0, "%s", err);
    }
    ck_assert_msg(read_file_all(path, &text, &len, err, sizeof err) == 0, "%s", err);
    char *at = strstr(text, st.data_train_sha256);
    ck_assert_ptr_nonnull(at);
    memmove(at + 10, at + 64, strlen(at + 64) + 1); /* the value cut to its first 10 digits: valid JSON, bad hash */
    ck_assert_msg(write_file_atomic(path, text, strlen(text), err, sizeof err) == 0, "%s", err);
    free(text);
    ck_assert_int_eq(train_state_read(dir, &peek, err, sizeof err), -1);
    ck_assert_msg(strstr(err, "data.train_sha256: expected a 64-digit hex string"), "%s", err);
    setup_free(&a);
    setup_free(&b);
    remove_tree(dir);
}
END_TEST

/* state.json's types: doubles as JSON numbers that parse back to the same bits (the text itself, not only what
 * this reader makes of it: any JSON reader's strtod gets them), last_ce NaN as null, the 64-bit RNG words and
 * counters as 16-digit hex strings; an older state with the doubles as "%.17g" strings reads to the same values. */
START_TEST(state_json_numbers_and_old_strings) {
    char dir[64], err[512], path[128];
    make_dir(dir, sizeof dir);
    Setup a;
    setup_create(&a, 1);
    TrainState st, back, old;
    fill_state(&st, 5);
    st.wall_time_s = 0.1 + 0.2; /* 17 significant digits needed */
    st.acc.grad_norm = 0.1;                /* "0.1", not "0.10000000000000001" */
    ck_assert_msg(train_checkpoint_save(dir, a.m, &a.opt, &st, err, sizeof err) == 0, "%s", err);
    snprintf(path, sizeof path, "%s/state.json", dir);
    char *text = NULL;
    size_t len = 0;
    ck_assert_msg(read_file_all(path, &text, &len, err, sizeof err) == 0, "%s", err);
    ck_assert_msg(strstr(text, "\"wall_time_s\":\t0.30000000000000004,") != NULL, "%s", text);
    ck_assert_msg(strstr(text, "\"last_ce\":\tnull,") != NULL, "%s", text);
    ck_assert_msg(strstr(text, "\"grad_norm\":\t0.1,") != NULL, "%s", text);
    cJSON *j = cJSON_Parse(text);
    ck_assert_ptr_nonnull(j);
    const cJSON *acc = cJSON_GetObjectItem(j, "metrics_acc");
    const char *acc_keys[7] = {"loss", "ce", "reg_ffn", "reg_att", "grad_norm", "expert_entropy", "reg_seq"};
    const double acc_want[7] = {st.acc.loss, st.acc.ce, st.acc.reg_ffn, st.acc.reg_att, st.acc.grad_norm,
                                st.acc.expert_entropy, st.acc.reg_seq};
    for (int i = 0; i < 7; i++) {
        const cJSON *v = cJSON_GetObjectItem(acc, acc_keys[i]);
        ck_assert_msg(cJSON_IsNumber(v), "metrics_acc.%s is not a number", acc_keys[i]);
        ck_assert_msg(memcmp(&v->valuedouble, &acc_want[i], sizeof(double)) == 0, "metrics_acc.%s: %.17g != %.17g",
                      acc_keys[i], v->valuedouble, acc_want[i]);
    }
    ck_assert(cJSON_IsNumber(cJSON_GetObjectItem(j, "wall_time_s")));
    ck_assert(cJSON_GetObjectItem(j, "wall_time_s")->valuedouble == st.wall_time_s);
    /* bit patterns stay hex strings */
    const cJSON *ld = cJSON_GetObjectItem(j, "loader");
    ck_assert(cJSON_IsString(cJSON_GetObjectItem(ld, "windows")));
    ck_assert_str_eq(cJSON_GetObjectItem(ld, "windows")->valuestring, "000000000000002a");
    ck_assert(cJSON_IsString(cJSON_GetArrayItem(cJSON_GetObjectItem(j, "dropout_rng"), 0)));
    ck_assert_msg(train_state_read(dir, &back, err, sizeof err) == 0, "%s", err);
    ck_assert(back.wall_time_s == st.wall_time_s && isnan(back.last_ce));
    ck_assert(memcmp(&back.acc, &st.acc, sizeof st.acc) == 0);

    /* an older state: every double as a "%.17g" string (last_ce "nan"), read to the same bits */
    char buf[40];
    snprintf(buf, sizeof buf, "%.17g", st.wall_time_s);
    cJSON_ReplaceItemInObject(j, "wall_time_s", cJSON_CreateString(buf));
    cJSON_ReplaceItemInObject(j, "last_ce", cJSON_CreateString("nan"));
    cJSON *acc_w = cJSON_GetObjectItem(j, "metrics_acc");
    for (int i = 0; i < 6; i++) {
        snprintf(buf, sizeof buf, "%.17g", acc_want[i]);
        cJSON_ReplaceItemInObject(acc_w, acc_keys[i], cJSON_CreateString(buf));
    }
    ck_assert_msg(json_save_file(path, j, err, sizeof err) == 0, "%s", err);
    ck_assert_msg(train_state_read(dir, &old, err, sizeof err) == 0, "%s", err);
    ck_assert(old.wall_time_s == st.wall_time_s && isnan(old.last_ce));
    ck_assert(memcmp(&old.acc, &st.acc, sizeof st.acc) == 0);
    ck_assert_mem_eq(&old.loader, &st.loader, sizeof st.loader);

    /* well-formed JSON of the wrong kind is refused naming the field */
    cJSON_ReplaceItemInObject(j, "wall_time_s", cJSON_CreateNull());
    ck_assert_msg(json_save_file(path, j, err, sizeof err) == 0, "%s", err);
    ck_assert_int_eq(train_state_read(dir, &old, err, sizeof err), -1);
    ck_assert_msg(strstr(err, "state.json: wall_time_s nan"), "null wall_time_s: %s", err);
    cJSON_ReplaceItemInObject(j, "wall_time_s", cJSON_CreateTrue());
    ck_assert_msg(json_save_file(path, j, err, sizeof err) == 0, "%s", err);
    ck_assert_int_eq(train_state_read(dir, &old, err, sizeof err), -1);
    ck_assert_msg(strstr(err, "state.json: wall_time_s"), "boolean wall_time_s: %s", err);
    cJSON_ReplaceItemInObject(acc_w, "ce", cJSON_CreateNumber(-1));
    cJSON_ReplaceItemInObject(j, "wall_time_s", cJSON_CreateNumber(2));
    ck_assert_msg(json_save_file(path, j, err, sizeof err) == 0, "%s", err);
    ck_assert_int_eq(train_state_read(dir, &old, err, sizeof err), -1);
    ck_assert_msg(strstr(err, "state.json: metrics_acc.ce: -1 is not a finite number >= 0"), "negative ce: %s", err);
    cJSON_Delete(j);
    free(text);
    setup_free(&a);
    remove_tree(dir);
}
END_TEST

START_TEST(commit_protocol_and_mismatch) {
    char dir[64], other[64], err[512], p[256], q[256];
    make_dir(dir, sizeof dir);
    make_dir(other, sizeof other);
    Setup a, b;
    setup_create(&a, 1);
    setup_train_a_little(&a, 0);
    TrainState st, back;
    fill_state(&st, 5);
    ck_assert_msg(train_checkpoint_save(dir, a.m, &a.opt, &st, err, sizeof err) == 0, "%s", err);
    /* the step-6 set, saved elsewhere */
    setup_train_a_little(&a, 1);
    fill_state(&st, 6);
    ck_assert_msg(train_checkpoint_save(other, a.m, &a.opt, &st, err, sizeof err) == 0, "%s", err);

    /* 1. an uncommitted pending model (no state.json.pending) is dropped: the step-5 set stays live */
    snprintf(p, sizeof p, "%s/model.safetensors", other);
    snprintf(q, sizeof q, "%s/model.safetensors.pending", dir);
    copy_file(p, q);
    setup_create(&b, 2);
    ck_assert_msg(train_checkpoint_load(dir, b.m, &b.opt, &back, err, sizeof err) == 0, "%s", err);
    ck_assert_int_eq(back.step, 5);
    ck_assert(!file_exists(q));

    /* 2. committed, then a crash after renaming only the model: recovery finishes the step-6 set */
    const char *files[3] = {"model.safetensors", "optim.safetensors", "state.json"};
    for (int i = 0; i < 3; i++) {
        snprintf(p, sizeof p, "%s/%s", other, files[i]);
        snprintf(q, sizeof q, "%s/%s.pending", dir, files[i]);
        copy_file(p, q);
    }
    snprintf(p, sizeof p, "%s/model.safetensors.pending", dir);
    snprintf(q, sizeof q, "%s/model.safetensors", dir);
    ck_assert_int_eq(rename(p, q), 0);
    ck_assert_msg(train_checkpoint_load(dir, b.m, &b.opt, &back, err, sizeof err) == 0, "%s", err);
    ck_assert_int_eq(back.step, 6);
    assert_same_buffers(a.be, model_params(a.m), model_params(b.m), model_n_params(a.m));
    assert_same_buffers(a.be, a.opt.v, b.opt.v, model_n_params(a.m));

    /* 3. a mismatched live set (optimizer state of another checkpoint) is refused, naming the file */
    fill_state(&st, 7);
    setup_train_a_little(&a, 2);
    ck_assert_msg(train_checkpoint_save(other, a.m, &a.opt, &st, err, sizeof err) == 0, "%s", err);
    snprintf(p, sizeof p, "%s/optim.safetensors", other);
    snprintf(q, sizeof q, "%s/optim.safetensors", dir);
    copy_file(p, q);
    ck_assert_int_eq(train_checkpoint_load(dir, b.m, &b.opt, &back, err, sizeof err), -1);
    ck_assert_msg(strstr(err, "optim.safetensors") && strstr(err, "mismatched"), "message: %s", err);

    setup_free(&a);
    setup_free(&b);
    remove_tree(dir);
    remove_tree(other);
}
END_TEST

int main(void) {
    Suite *s = suite_create("train_checkpoint");
    TCase *tc = tcase_create("checkpoint");
    tcase_add_test(tc, round_trip_is_exact);
    tcase_add_test(tc, state_json_numbers_and_old_strings);
    tcase_add_test(tc, commit_protocol_and_mismatch);
    suite_add_tcase(s, tc);
    return run_test_suite(s);
}
