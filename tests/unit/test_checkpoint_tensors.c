/* A checkpoint's tensor list against the model its __metadata__.config describes (model_read_checkpoint_config):
 * model_visit_tensors goes through exactly the tensors model_create registers (names, shapes, offsets, buffers, in
 * order) and stops when told; a complete checkpoint passes; a header claiming 100,000 layers is refused on the counts
 * alone, at once; a missing, misshapen or extra tensor is refused naming it, all before a model is built. */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "kernels/backend.h"
#include "model/model.h"
#include "pipeline/base/atomic_file.h"
#include "pipeline/base/safetensors.h"
#include "tests/unit/model_test_util.h"
#include "tests/unit/suite_runner.h"

static char g_dir[256], g_path[512];

static void setup(void) {
    snprintf(g_dir, sizeof g_dir, "/tmp/test_checkpoint_tensors.%ld", (long)getpid());
    remove_tree(g_dir);
    char err[256];
    ck_assert_int_eq(mkdir_p(g_dir, err, sizeof err), 0);
    snprintf(g_path, sizeof g_path, "%s/w.safetensors", g_dir);
}
static void teardown(void) { remove_tree(g_dir); }

/* Every switch that changes the tensor list: a dense prefix, shared experts, the residual MLP, balance "bias"'s
 * buffers, hash routing (no router, no ln2), arch "moe", a pyramid of expert counts. */
#define MOEUT_BASE                                                                                                    \
    "\"arch\":\"moeut\",\"n_tokens\":11,\"d_model\":8,\"n_layers\":6,\"n_heads\":2,\"d_head\":4,"                    \
    "\"ff_expert_size\":3,\"att_n_experts\":3,\"att_k\":2,\"group_size\":2"
static const char *const CONFIGS[] = {
    "{\"arch\":\"dense\",\"n_tokens\":11,\"d_model\":8,\"n_layers\":3,\"n_heads\":2,\"d_ff\":12}",
    "{" MOEUT_BASE ",\"ff_n_experts\":5,\"ff_k\":2}",
    "{" MOEUT_BASE ",\"ff_n_experts\":5,\"ff_k\":2,\"n_dense_first\":2,\"d_ff\":7,\"n_shared_experts\":1,"
    "\"ff_residual_size\":4,\"balance\":\"bias\",\"lm_head_bias\":false,\"out_norm_affine\":false}",
    "{" MOEUT_BASE ",\"ff_n_experts\":5,\"ff_k\":1,\"balance\":\"none\",\"routing\":\"hash\"}",
    "{" MOEUT_BASE ",\"ff_k\":2,\"ff_n_experts_per_layer\":[3,7]}",
    "{\"arch\":\"moe\",\"n_tokens\":13,\"d_model\":6,\"n_layers\":3,\"n_heads\":2,\"d_head\":4,\"ff_n_experts\":5,"
    "\"ff_expert_size\":3,\"ff_k\":2,\"n_dense_first\":1,\"d_ff\":7}",
};
#define N_CONFIGS ((int)(sizeof CONFIGS / sizeof CONFIGS[0]))

typedef struct {
    ParamTensor t[512];
    int n, stop_after; /* stop_after > 0: return 1 once that many were seen */
} Seen;

static int collect(void *ctx, const ParamTensor *t) {
    Seen *s = ctx;
    ck_assert_int_lt(s->n, 512);
    s->t[s->n++] = *t;
    return s->stop_after > 0 && s->n >= s->stop_after;
}

START_TEST(visit_is_the_registry) {
    for (int c = 0; c < N_CONFIGS; c++) {
        ModelConfig cfg = mtu_config(CONFIGS[c]);
        Seen *s = calloc(1, sizeof *s);
        char err[512] = "";
        ck_assert_msg(model_visit_tensors(&cfg, collect, s, err, sizeof err) == 0, "%s", err);
        Backend *be = backend_cpu_create();
        Model *m = model_create(&cfg, be);
        ck_assert_int_eq(s->n, model_n_tensors(m));
        for (int i = 0; i < s->n; i++) {
            const ParamTensor *t = model_tensor(m, i);
            ck_assert_str_eq(s->t[i].name, t->name);
            ck_assert_int_eq(s->t[i].ndim, t->ndim);
            for (int d = 0; d < t->ndim; d++) ck_assert_int_eq(s->t[i].shape[d], t->shape[d]);
            ck_assert_uint_eq(s->t[i].offset, t->offset);
            ck_assert_uint_eq(s->t[i].numel, t->numel);
            ck_assert_int_eq(s->t[i].buffer, t->buffer);
        }
        model_free(m);
        backend_destroy(be);
        /* a visitor that says stop is not called again */
        s->n = 0;
        s->stop_after = 3;
        ck_assert_int_eq(model_visit_tensors(&cfg, collect, s, err, sizeof err), 1);
        ck_assert_int_eq(s->n, 3);
        free(s);
    }
}
END_TEST

/* The config's checkpoint as model_save_safetensors writes it, then rewritten with extra, missing or reshaped
 * tensors or another config (the data of the tensors kept is the saved one). */
static void save_model(const char *json) {
    ModelConfig cfg = mtu_config(json);
    Backend *be = backend_cpu_create();
    Model *m = model_create(&cfg, be);
    model_init_weights(m, 1);
    char err[512] = "";
    ck_assert_msg(model_save_safetensors(m, g_path, err, sizeof err) == 0, "%s", err);
    model_free(m);
    backend_destroy(be);
}

typedef enum { EDIT_NONE, EDIT_DROP, EDIT_RESHAPE, EDIT_EXTRA } Edit;

/* Rewrites g_path: its metadata config replaced by config (NULL: kept), and `edit` applied to tensor `name`. */
static void rewrite(const char *config, Edit edit, const char *name) {
    StFile f;
    char err[512] = "";
    ck_assert_msg(st_read(&f, g_path, err, sizeof err) == 0, "%s", err);
    StWriter w;
    st_writer_init(&w);
    for (int i = 0; i < f.n_tensors; i++) {
        const StTensor *t = &f.tensors[i];
        if (edit == EDIT_DROP && strcmp(t->name, name) == 0) continue;
        int64_t shape[8];
        memcpy(shape, t->shape, sizeof shape);
        int ndim = t->ndim;
        if (edit == EDIT_RESHAPE && strcmp(t->name, name) == 0 && ndim == 2) { /* [a, b] -> [b, a] */
            shape[0] = t->shape[1];
            shape[1] = t->shape[0];
        }
        st_writer_add(&w, t->name, t->dtype, ndim, shape, t->data);
    }
    static float extra = 1;
    if (edit == EDIT_EXTRA) st_writer_add(&w, name, ST_F32, 0, NULL, &extra);
    st_writer_meta(&w, "config", config ? config : st_meta(&f, "config"));
    st_writer_meta(&w, "format", "pt");
    char tmp[600];
    snprintf(tmp, sizeof tmp, "%s.new", g_path);
    ck_assert_msg(st_writer_save(&w, tmp, err, sizeof err) == 0, "%s", err);
    st_writer_free(&w);
    st_free(&f);
    ck_assert_int_eq(rename(tmp, g_path), 0);
}

static void expect_refused(const char *needle) {
    ModelConfig cfg;
    char err[1024] = "";
    ck_assert_int_eq(model_read_checkpoint_config(g_path, &cfg, err, sizeof err), -1);
    ck_assert_msg(strstr(err, g_path) == err && strstr(err, needle), "expected '%s' in: %s", needle, err);
}

START_TEST(complete_checkpoints_pass) {
    for (int c = 0; c < N_CONFIGS; c++) {
        save_model(CONFIGS[c]);
        ModelConfig cfg;
        char err[1024] = "";
        ck_assert_msg(model_read_checkpoint_config(g_path, &cfg, err, sizeof err) == 0, "%s: %s", CONFIGS[c], err);
    }
}
END_TEST

START_TEST(mismatched_tensor_lists_are_refused) {
    const char *dense = CONFIGS[0];
    save_model(dense);
    rewrite(NULL, EDIT_DROP, "transformer.layers.2.ln2.bias");
    expect_refused("transformer.layers.2.ln2.bias: missing tensor");
    save_model(dense);
    rewrite(NULL, EDIT_RESHAPE, "transformer.layers.1.ffn.linear1.weight");
    expect_refused("transformer.layers.1.ffn.linear1.weight: shape [8,12], expected [12,8]");
    save_model(dense);
    rewrite(NULL, EDIT_EXTRA, "transformer.layers.3.ln1.bias");
    expect_refused("transformer.layers.3.ln1.bias: unexpected tensor (not a parameter of this dense model)");
    /* balance "bias"'s buffers are part of the list: a file without them is incomplete */
    save_model(CONFIGS[2]);
    rewrite(NULL, EDIT_DROP, "transformer.layers.1.ffn.expert_bias");
    expect_refused("transformer.layers.1.ffn.expert_bias: missing tensor");
}
END_TEST

/* The 3-layer dense model's tensors under a config of 100,000 (and of 16 million) layers: refused on the counts, in
 * milliseconds and without the memory such a model would take. */
START_TEST(forged_layer_count_refused_at_once) {
    const char *claims[] = {"100000", "16777216"};
    for (int k = 0; k < 2; k++) {
        save_model(CONFIGS[0]);
        char config[512];
        snprintf(config, sizeof config,
                 "{\"arch\":\"dense\",\"n_tokens\":11,\"d_model\":8,\"n_layers\":%s,\"n_heads\":2,\"d_ff\":12}",
                 claims[k]);
        rewrite(config, EDIT_NONE, NULL);
        struct rusage before, after;
        getrusage(RUSAGE_SELF, &before);
        struct timespec t0, t1;
        clock_gettime(CLOCK_MONOTONIC, &t0);
        expect_refused("__metadata__.config describes a dense model of");
        clock_gettime(CLOCK_MONOTONIC, &t1);
        getrusage(RUSAGE_SELF, &after);
        const double secs = (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec);
        ck_assert_msg(secs < 0.5, "%s layers: %.3f s", claims[k], secs);
        ck_assert_msg(after.ru_maxrss - before.ru_maxrss < 16 * 1024, "%s layers: max RSS grew by %ld KiB", claims[k],
                      after.ru_maxrss - before.ru_maxrss);
    }
}
END_TEST

int main(void) {
    Suite *s = suite_create("checkpoint_tensors");
    TCase *tc = tcase_create("checkpoint_tensors");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, visit_is_the_registry);
    tcase_add_test(tc, complete_checkpoints_pass);
    tcase_add_test(tc, mismatched_tensor_lists_are_refused);
    tcase_add_test(tc, forged_layer_count_refused_at_once);
    suite_add_tcase(s, tc);
    return run_test_suite(s);
}
