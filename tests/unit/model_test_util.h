/* Shared helpers for the model tests (tests/unit/test_model_*.c, f64_model_*.c): tiny configs, model creation on the
 * CPU backend, deterministic token batches. Header-only (static functions) so each test stays one translation unit. */
#ifndef TESTS_UNIT_MODEL_TEST_UTIL_H
#define TESTS_UNIT_MODEL_TEST_UTIL_H

#include <check.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "kernels/backend.h"
#include "model/model.h"
#include "pipeline/base/rng.h"

/* Parses a JSON text into a ModelConfig (asserting success). */
static inline ModelConfig mtu_config(const char *json) {
    cJSON *o = cJSON_Parse(json);
    ck_assert_msg(o != NULL, "bad JSON in test: %s", json);
    ModelConfig c;
    char err[512] = "";
    int rc = model_config_from_json(&c, o, "test.json", err, sizeof err);
    ck_assert_msg(rc == 0, "config rejected: %s", err);
    cJSON_Delete(o);
    return c;
}

/* Tiny dense model: V=11, C=8, L=2, H=2, D=4 (n_rot 2), d_ff=12; affine final norm and head bias on, so every kind
 * of wrapper tensor is covered. */
static inline ModelConfig mtu_tiny_dense(void) {
    return mtu_config("{\"arch\":\"dense\",\"n_tokens\":11,\"d_model\":8,\"n_layers\":2,\"n_heads\":2,\"d_ff\":12,"
                      "\"lm_head_bias\":true,\"out_norm_affine\":true}");
}

/* Tiny MoEUT: V=11, C=8, L=4 applications of Gs=2 layers, H=2, D=4, EA=3, KA=2, E=5, S=3, K=2. */
static inline ModelConfig mtu_tiny_moeut(void) {
    return mtu_config("{\"arch\":\"moeut\",\"n_tokens\":11,\"d_model\":8,\"n_layers\":4,\"n_heads\":2,\"d_head\":4,"
                      "\"ff_n_experts\":5,\"ff_expert_size\":3,\"ff_k\":2,\"att_n_experts\":3,\"att_k\":2,"
                      "\"group_size\":2,\"lm_head_bias\":true,\"out_norm_affine\":true}");
}

static inline Backend *mtu_backend(void) {
    char err[256] = "";
    Backend *be = backend_create("cpu", err, sizeof err);
    ck_assert_msg(be != NULL, "cpu backend: %s", err);
    return be;
}

/* Random tokens in [0, V). */
static inline void mtu_tokens(int32_t *t, size_t n, int V, uint64_t seed) {
    Rng r;
    rng_seed(&r, seed);
    for (size_t i = 0; i < n; i++) t[i] = (int32_t)rng_below(&r, (uint64_t)V);
}

/* Host copy of all parameters (scalar_t). */
static inline scalar_t *mtu_download(Model *m, const scalar_t *dev) {
    size_t n = model_n_params(m);
    scalar_t *h = malloc(n * sizeof(scalar_t));
    ck_assert_ptr_nonnull(h);
    model_backend(m)->to_host(model_backend(m), h, dev, n * sizeof(scalar_t));
    return h;
}

/* model_init_weights(init_seed) plus N(0, noise_std) on every parameter, drawn from an RNG seeded with noise_seed,
 * so LayerNorm affines and biases are not at their special init values. */
static inline Model *mtu_model_with_noise(Backend *be, ModelConfig c, uint64_t init_seed, uint64_t noise_seed,
                                          double noise_std) {
    Model *m = model_create(&c, be);
    model_init_weights(m, init_seed);
    size_t n = model_n_params(m);
    scalar_t *p = mtu_download(m, model_params(m));
    Rng r;
    rng_seed(&r, noise_seed);
    for (size_t i = 0; i < n; i++) p[i] += (scalar_t)(noise_std * rng_normal(&r));
    be->to_device(be, model_params(m), p, n * sizeof(scalar_t));
    free(p);
    return m;
}

/* Fills every buffer of the model (balance "bias"'s expert_bias) with N(0, std^2) values: a trained-looking bias
 * that moves selections (a fresh model's is 0). No-op without buffers. */
static inline void mtu_randomize_buffers(Model *m, uint64_t seed, double std) {
    Backend *be = model_backend(m);
    Rng r;
    rng_seed(&r, seed);
    for (int t = 0; t < model_n_tensors(m); t++) {
        const ParamTensor *pt = model_tensor(m, t);
        if (!pt->buffer) continue;
        scalar_t *x = malloc(pt->numel * sizeof *x);
        ck_assert(x != NULL);
        for (size_t i = 0; i < pt->numel; i++) x[i] = (scalar_t)(std * rng_normal(&r));
        be->to_device(be, model_params(m) + pt->offset, x, pt->numel * sizeof *x);
        free(x);
    }
}

/* A model with non-trivial weights everywhere: init + N(0, 0.05) noise (so biases and LayerNorm affines matter). */
static inline Model *mtu_noisy_model(Backend *be, ModelConfig c, uint64_t seed) {
    return mtu_model_with_noise(be, c, seed, seed + 100, 0.05);
}

/* Perturbing token tp of sequence 0 must leave the logits of positions < tp (and all of sequence 1) unchanged and
 * change position tp. */
static inline void mtu_check_causal(ModelConfig c, uint64_t seed) {
    Backend *be = mtu_backend();
    Model *m = mtu_noisy_model(be, c, seed);
    const int B = 2, T = 7, V = c.n_tokens, tp = 4;
    int32_t tok[14];
    mtu_tokens(tok, 14, V, seed + 2);
    float *a = malloc(sizeof(float) * B * T * V), *b = malloc(sizeof(float) * B * T * V);
    ck_assert(a && b);
    model_forward_eval(m, tok, B, T, a);
    tok[tp] = (tok[tp] + 1) % V; /* perturb position tp of sequence 0 */
    model_forward_eval(m, tok, B, T, b);
    for (int t = 0; t < T; t++) {
        double diff0 = 0, diff1 = 0;
        for (int v = 0; v < V; v++) {
            diff0 = fmax(diff0, fabs(a[(0 * T + t) * V + v] - b[(0 * T + t) * V + v]));
            diff1 = fmax(diff1, fabs(a[(1 * T + t) * V + v] - b[(1 * T + t) * V + v]));
        }
        if (t < tp) ck_assert_msg(diff0 < 1e-6, "position %d changed by %g after perturbing %d", t, diff0, tp);
        else if (t == tp) ck_assert_msg(diff0 > 1e-4, "position %d unchanged (%g) after perturbing it", t, diff0);
        ck_assert_msg(diff1 < 1e-6, "sequence 1 position %d changed by %g", t, diff1);
    }
    free(a);
    free(b);
    model_free(m);
    backend_destroy(be);
}

/* Decoding n0 tokens at once and then one at a time must reproduce the full forward's logits row by row. */
static inline void mtu_check_decode(ModelConfig c, uint64_t seed) {
    Backend *be = mtu_backend();
    Model *m = mtu_noisy_model(be, c, seed);
    const int T = 10, V = c.n_tokens, n0 = 4;
    int32_t tok[10];
    mtu_tokens(tok, T, V, seed + 1);
    float *full = malloc(sizeof(float) * T * V), *dec = malloc(sizeof(float) * T * V);
    model_forward_eval(m, tok, 1, T, full);
    KVCache *kv = kv_cache_create(m, T);
    for (int pass = 0; pass < 2; pass++) { /* the second pass checks kv_cache_reset */
        memset(dec, 0, sizeof(float) * T * V);
        model_decode(m, kv, tok, n0, dec);
        ck_assert_int_eq(kv_cache_length(kv), n0);
        for (int t = n0; t < T; t++) model_decode(m, kv, tok + t, 1, dec + (size_t)t * V);
        ck_assert_int_eq(kv_cache_length(kv), T);
        double worst = 0, scale = 0;
        for (int i = 0; i < T * V; i++) {
            worst = fmax(worst, fabs(full[i] - dec[i]));
            scale = fmax(scale, fabs(full[i]));
        }
        ck_assert_msg(scale > 0.1, "degenerate logits");
        ck_assert_msg(worst < 1e-5 * fmax(1.0, scale), "decode differs from the full forward by %g", worst);
        kv_cache_reset(kv);
        ck_assert_int_eq(kv_cache_length(kv), 0);
    }
    kv_cache_free(kv);
    free(full);
    free(dec);
    model_free(m);
    backend_destroy(be);
}

/* Every parameter tensor has a nonzero entry in g (a host copy of the model's gradients). */
static inline void mtu_assert_every_tensor_has_gradient(Model *m, const scalar_t *g) {
    for (int t = 0; t < model_n_param_tensors(m); t++) {
        const ParamTensor *p = model_tensor(m, t);
        double s = 0;
        for (size_t i = 0; i < p->numel; i++) s += fabs(g[p->offset + i]);
        ck_assert_msg(s > 0, "no gradient for %s", p->name);
    }
}

typedef struct {
    double mean, std, min, max;
    size_t n;
} MtuStats;

static inline MtuStats mtu_tensor_stats(Model *m, const char *name) {
    const ParamTensor *t = model_find_tensor(m, name);
    ck_assert_msg(t != NULL, "missing %s", name);
    scalar_t *h = malloc(t->numel * sizeof(scalar_t));
    ck_assert_ptr_nonnull(h);
    model_backend(m)->to_host(model_backend(m), h, model_params(m) + t->offset, t->numel * sizeof(scalar_t));
    MtuStats s = {0, 0, INFINITY, -INFINITY, t->numel};
    for (size_t i = 0; i < t->numel; i++) {
        s.mean += h[i];
        if (h[i] < s.min) s.min = h[i];
        if (h[i] > s.max) s.max = h[i];
    }
    s.mean /= (double)t->numel;
    for (size_t i = 0; i < t->numel; i++) s.std += (h[i] - s.mean) * (h[i] - s.mean);
    s.std = sqrt(s.std / (double)(t->numel - 1));
    free(h);
    return s;
}

/* Gaussian/uniform sample of n values: std within 5 standard errors (~1/sqrt(2n) relative for a normal, a bit more
 * for the uniform's 4th moment) and mean within 5 standard errors of 0. */
static inline void mtu_expect_std(Model *m, const char *name, double want_std) {
    MtuStats s = mtu_tensor_stats(m, name);
    double rel = fabs(s.std / want_std - 1.0), tol = 5.0 / sqrt(2.0 * (double)s.n);
    ck_assert_msg(rel < tol, "%s: std %.6g, expected %.6g (rel err %.3g > %.3g)", name, s.std, want_std, rel, tol);
    ck_assert_msg(fabs(s.mean) < 5.0 * want_std / sqrt((double)s.n), "%s: mean %.3g", name, s.mean);
}
static inline void mtu_expect_const(Model *m, const char *name, double v) {
    MtuStats s = mtu_tensor_stats(m, name);
    ck_assert_msg(s.min == v && s.max == v, "%s: values in [%g, %g], expected all %g", name, s.min, s.max, v);
}

#endif
