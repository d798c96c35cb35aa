/* Shared checks of sparse upcycling (model/upcycle.h) for test_upcycle.c (f32) and f64_upcycle.c (f64): the converted
 * model's logits against the dense model's, the split's pieces against the dense FFN, the refusals. UPC_TOL is the
 * relative tolerance of a function-preserving conversion in the build's precision. */
#ifndef TESTS_UNIT_UPCYCLE_TEST_UTIL_H
#define TESTS_UNIT_UPCYCLE_TEST_UTIL_H

#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "model/model.h"
#include "model/upcycle.h"
#include "pipeline/base/atomic_file.h"
#include "pipeline/base/safetensors.h"
#include "pipeline/base/sha256.h"
#include "model_test_util.h"

static char upc_dir[256];
static void upc_setup(void) {
    snprintf(upc_dir, sizeof upc_dir, "/tmp/test_upcycle.%ld", (long)getpid());
    char err[256];
    ck_assert_int_eq(mkdir_p(upc_dir, err, sizeof err), 0);
}
static void upc_teardown(void) { remove_tree(upc_dir); }
static const char *upc_path(const char *name) {
    static char p[4][512];
    static int k = 0;
    k = (k + 1) % 4;
    snprintf(p[k], sizeof p[k], "%s/%s", upc_dir, name);
    return p[k];
}

/* The dense source: V=19, C=8, L=3, H=2, D=4, d_ff=12, head bias and affine final norm (every wrapper tensor). */
#define UPC_DENSE "{\"arch\":\"dense\",\"n_tokens\":19,\"d_model\":8,\"n_layers\":3,\"n_heads\":2,\"d_head\":4," \
                  "\"d_ff\":12,\"lm_head_bias\":true,\"out_norm_affine\":true}"
/* A target with the dense shapes; extra: the routing keys as JSON members (without braces). */
static inline ModelConfig upc_target(const char *extra) {
    char json[1024];
    snprintf(json, sizeof json, "{\"arch\":\"moe\",\"n_tokens\":19,\"d_model\":8,\"n_layers\":3,\"n_heads\":2,"
             "\"d_head\":4,\"lm_head_bias\":true,\"out_norm_affine\":true,%s}", extra);
    return mtu_config(json);
}

/* A trained-looking dense checkpoint (init + noise on every tensor, so biases and LayerNorms matter) at path. */
static inline void upc_write_dense(const char *path, uint64_t seed) {
    Backend *be = mtu_backend();
    Model *d = mtu_noisy_model(be, mtu_config(UPC_DENSE), seed);
    char err[512] = "";
    ck_assert_msg(model_save_safetensors(d, path, err, sizeof err) == 0, "%s", err);
    model_free(d);
    backend_destroy(be);
}

static inline UpcycleOptions upc_options(UpcycleMethod method, long seed, double noise) {
    UpcycleOptions o;
    memset(&o, 0, sizeof o);
    snprintf(o.from, sizeof o.from, "dense_qa");
    o.method = method;
    o.seed = seed;
    o.noise = noise;
    return o;
}

/* Converts and asserts success. */
static inline void upc_convert_ok(const char *dense, const ModelConfig *t, const UpcycleOptions *o, const char *out) {
    char err[1024] = "";
    int rc = upcycle_run(dense, t, o, "target.json", out, err, sizeof err);
    ck_assert_msg(rc == 0, "conversion refused: %s", err);
}

/* Converts and asserts a refusal whose message contains want (and no output file). */
static inline void upc_convert_refused(const char *dense, const ModelConfig *t, const UpcycleOptions *o,
                                       const char *want) {
    char err[1024] = "";
    const char *out = upc_path("refused.safetensors");
    int rc = upcycle_run(dense, t, o, "target.json", out, err, sizeof err);
    ck_assert_msg(rc != 0, "converted, expected a refusal containing '%s'", want);
    ck_assert_msg(strstr(err, want) != NULL, "message '%s' lacks '%s'", err, want);
    ck_assert_msg(strchr(err, '\n') == NULL, "not one line: %s", err);
    ck_assert(!file_exists(out));
}

/* The eval logits [B*T*V] of the model in path (its own config) on tokens[B,T]. */
static inline float *upc_logits(const char *path, const int32_t *tokens, int B, int T, int *V) {
    char err[1024] = "";
    ModelConfig c;
    ck_assert_msg(model_read_checkpoint_config(path, &c, err, sizeof err) == 0, "%s", err);
    Backend *be = mtu_backend();
    Model *m = model_create(&c, be);
    ck_assert_msg(model_load_safetensors(m, path, err, sizeof err) == 0, "%s", err);
    *V = c.n_tokens;
    float *logits = malloc((size_t)B * T * c.n_tokens * sizeof *logits);
    ck_assert_ptr_nonnull(logits);
    model_forward_eval(m, tokens, B, T, logits);
    model_free(m);
    backend_destroy(be);
    return logits;
}

/* max |a - b| / (1 + max |a|) over n logits. */
static inline double upc_rel_diff(const float *a, const float *b, size_t n) {
    double md = 0, ma = 0;
    for (size_t i = 0; i < n; i++) {
        md = fmax(md, fabs((double)a[i] - (double)b[i]));
        ma = fmax(ma, fabs((double)a[i]));
    }
    return md / (1.0 + ma);
}

/* The relative difference between the dense model's logits and those of its conversion into target (copy, no
 * noise) on random tokens. */
static inline double upc_copy_logit_diff(const ModelConfig *target) {
    const char *dense = upc_path("dense.safetensors"), *out = upc_path("moe.safetensors");
    upc_write_dense(dense, 5);
    UpcycleOptions o = upc_options(UPCYCLE_COPY, 3, 0.0);
    upc_convert_ok(dense, target, &o, out);
    enum { B = 2, T = 7 };
    int32_t tokens[B * T];
    mtu_tokens(tokens, B * T, 19, 11);
    int V = 0;
    float *ld = upc_logits(dense, tokens, B, T, &V), *lm = upc_logits(out, tokens, B, T, &V);
    double d = upc_rel_diff(ld, lm, (size_t)B * T * V);
    free(ld);
    free(lm);
    return d;
}

#endif
