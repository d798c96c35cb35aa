/* The dense model through the wrapper (f32, CPU backend): init statistics, causality, KV-cache decoding vs the full
 * forward, the training step (logits, loss, gradient accumulation), checkpoint round trip and rejection. */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "model/model.h"
#include "pipeline/base/atomic_file.h"
#include "pipeline/base/safetensors.h"
#include "model_test_util.h"
#include "suite_runner.h"

static char g_dir[256];
static void setup(void) {
    snprintf(g_dir, sizeof g_dir, "/tmp/test_model_dense.%ld", (long)getpid());
    char err[256];
    ck_assert_int_eq(mkdir_p(g_dir, err, sizeof err), 0);
}
static void teardown(void) { remove_tree(g_dir); }
static const char *tmp_path(const char *name) {
    static char p[2][512];
    static int k = 0;
    k ^= 1;
    snprintf(p[k], sizeof p[k], "%s/%s", g_dir, name);
    return p[k];
}

/* ---- init statistics ---- */

START_TEST(init_statistics) {
    /* fan_in 1024 and L=18 like the paper's layers (q,k,v,linear1 std sqrt(2/(18*1024)) = 0.0104167), but small
     * widths elsewhere so the model stays ~7M parameters. */
    ModelConfig c = mtu_config("{\"arch\":\"dense\",\"n_tokens\":64,\"d_model\":1024,\"n_layers\":18,\"n_heads\":2,"
                               "\"d_head\":32,\"d_ff\":80,\"lm_head_bias\":true,\"out_norm_affine\":true}");
    Backend *be = mtu_backend();
    Model *m = model_create(&c, be);
    model_init_weights(m, 7);
    const double L = 18;
    ck_assert_double_eq_tol(sqrt(2.0 / (L * 1024)), 0.0104167, 1e-6);
    for (int l = 0; l < 18; l += 17) {
        char n[128];
#define NAME(suffix) (snprintf(n, sizeof n, "transformer.layers.%d.%s", l, suffix), n)
        mtu_expect_std(m, NAME("attention.q.weight"), sqrt(2.0 / (L * 1024)));
        mtu_expect_std(m, NAME("attention.k.weight"), sqrt(2.0 / (L * 1024)));
        mtu_expect_std(m, NAME("attention.v.weight"), sqrt(2.0 / (L * 1024)));
        mtu_expect_std(m, NAME("attention.o.weight"), sqrt(2.0 / (L * 64)));
        mtu_expect_std(m, NAME("ffn.linear1.weight"), sqrt(2.0 / (L * 1024)));
        mtu_expect_std(m, NAME("ffn.linear2.weight"), sqrt(2.0 / (L * 80)));
        mtu_expect_const(m, NAME("ffn.linear1.bias"), 0.0);
        mtu_expect_const(m, NAME("ffn.linear2.bias"), 0.0);
        mtu_expect_const(m, NAME("ln1.weight"), 1.0);
        mtu_expect_const(m, NAME("ln1.bias"), 0.0);
        mtu_expect_const(m, NAME("ln2.weight"), 1.0);
        mtu_expect_const(m, NAME("ln2.bias"), 0.0);
#undef NAME
    }
    /* Not truncated: a normal sample of 65536 values reaches beyond 2 sigma (trunc_normal would cap it there). */
    MtuStats q = mtu_tensor_stats(m, "transformer.layers.3.attention.q.weight");
    ck_assert_msg(q.max > 3.0 * sqrt(2.0 / (L * 1024)), "q max %g: looks truncated", q.max);
    mtu_expect_std(m, "embedding.weight", 1.0 / 32.0);
    mtu_expect_const(m, "out_norm.weight", 1.0);
    mtu_expect_const(m, "out_norm.bias", 0.0);
    /* lm_head: U(-1/32, 1/32): std = bound/sqrt(3), every value inside the bound, extremes close to it. */
    const char *uni[] = {"lm_head.weight", "lm_head.bias"};
    for (int i = 0; i < 2; i++) {
        MtuStats s = mtu_tensor_stats(m, uni[i]);
        ck_assert(s.min >= -1.0 / 32 && s.max <= 1.0 / 32);
        if (i == 0) {
            mtu_expect_std(m, uni[i], (1.0 / 32) / sqrt(3.0));
            ck_assert(s.max > 0.99 / 32 && s.min < -0.99 / 32);
        }
    }
    /* Deterministic in the seed, different across seeds. */
    scalar_t *a = mtu_download(m, model_params(m));
    model_init_weights(m, 7);
    scalar_t *b = mtu_download(m, model_params(m));
    ck_assert(memcmp(a, b, model_n_params(m) * sizeof(scalar_t)) == 0);
    model_init_weights(m, 8);
    scalar_t *d = mtu_download(m, model_params(m));
    ck_assert(memcmp(a, d, model_n_params(m) * sizeof(scalar_t)) != 0);
    free(a);
    free(b);
    free(d);
    model_free(m);
    backend_destroy(be);
}
END_TEST

/* ---- causality and decoding ---- */

START_TEST(causal) { mtu_check_causal(mtu_tiny_dense(), 3); }
END_TEST

START_TEST(decode_matches_forward) { mtu_check_decode(mtu_tiny_dense(), 11); }
END_TEST

START_TEST(decode_matches_forward_no_bias_no_affine) {
    mtu_check_decode(mtu_config("{\"arch\":\"dense\",\"n_tokens\":9,\"d_model\":12,\"n_layers\":3,\"n_heads\":3,\"d_ff\":10,"
                            "\"lm_head_bias\":false,\"out_norm_affine\":false}"),
                 12);
}
END_TEST

/* run_layers with captures: slot i = input of application first+i, last slot = final residual; head(final) equals
 * the logits of the full forward; starting from a captured residual reproduces the rest. */
START_TEST(run_layers_captures) {
    ModelConfig c = mtu_tiny_dense();
    Backend *be = mtu_backend();
    Model *m = mtu_noisy_model(be, c, 21);
    const int B = 1, T = 6, C = c.d_model, V = c.n_tokens, L = c.n_layers;
    int32_t tok[6];
    mtu_tokens(tok, T, V, 2);
    size_t nc = (size_t)B * T * C;
    scalar_t *h = be->alloc(be, nc * sizeof(scalar_t));
    scalar_t *cap = be->alloc(be, (L + 1) * nc * sizeof(scalar_t));
    scalar_t *logits = be->alloc(be, (size_t)T * V * sizeof(scalar_t));
    model_embed(m, h, tok, B, T);
    scalar_t *h0 = malloc(nc * sizeof(scalar_t)), *hc = malloc((L + 1) * nc * sizeof(scalar_t));
    be->to_host(be, h0, h, nc * sizeof(scalar_t));
    model_run_layers(m, h, tok, B, T, 0, cap);
    be->to_host(be, hc, cap, (L + 1) * nc * sizeof(scalar_t));
    ck_assert(memcmp(h0, hc, nc * sizeof(scalar_t)) == 0); /* slot 0 = embedding output */
    scalar_t *hf = malloc(nc * sizeof(scalar_t));
    be->to_host(be, hf, h, nc * sizeof(scalar_t));
    ck_assert(memcmp(hf, hc + L * nc, nc * sizeof(scalar_t)) == 0); /* last slot = final residual */
    model_head(m, logits, h, B, T);
    scalar_t *lg = malloc((size_t)T * V * sizeof(scalar_t));
    be->to_host(be, lg, logits, (size_t)T * V * sizeof(scalar_t));
    float *full = malloc(sizeof(float) * T * V);
    model_forward_eval(m, tok, B, T, full);
    for (int i = 0; i < T * V; i++) ck_assert_msg(fabs(full[i] - lg[i]) < 1e-5, "head mismatch at %d", i);
    /* Resume from the input of application 1. */
    be->copy(be, h, cap + nc, nc * sizeof(scalar_t));
    model_run_layers(m, h, tok, B, T, 1, NULL);
    be->to_host(be, hf, h, nc * sizeof(scalar_t));
    for (size_t i = 0; i < nc; i++) ck_assert(fabs(hf[i] - hc[L * nc + i]) < 1e-5);
    free(h0);
    free(hc);
    free(hf);
    free(lg);
    free(full);
    be->free(be, h);
    be->free(be, cap);
    be->free(be, logits);
    model_free(m);
    backend_destroy(be);
}
END_TEST

/* ---- training step ---- */

START_TEST(train_step_loss_and_accumulation) {
    ModelConfig c = mtu_tiny_dense();
    Backend *be = mtu_backend();
    Model *m = mtu_noisy_model(be, c, 4);
    const int B = 2, T = 6, V = c.n_tokens, N = B * T;
    int32_t in[12], tg[12];
    mtu_tokens(in, N, V, 8);
    mtu_tokens(tg, N, V, 9);
    tg[5] = -1;
    tg[11] = -1;
    tg[0] = -1;
    float *lt = malloc(sizeof(float) * N * V), *le = malloc(sizeof(float) * N * V);
    size_t np = model_n_params(m);
    be->zero(be, model_grads(m), np * sizeof(scalar_t));
    StepStats st;
    model_train_step(m, in, tg, NULL, B, T, 1.0, &st, lt);
    model_forward_eval(m, in, B, T, le);
    ck_assert_int_eq(st.n_counted, 9);
    ck_assert(st.reg_ffn == 0 && st.reg_att == 0);
    double ce = 0;
    for (int i = 0; i < N; i++) {
        for (int v = 0; v < V; v++) ck_assert_msg(fabs(lt[i * V + v] - le[i * V + v]) < 1e-5, "train/eval logits differ");
        if (tg[i] < 0) continue;
        double mx = -INFINITY, s = 0;
        for (int v = 0; v < V; v++) mx = fmax(mx, lt[i * V + v]);
        for (int v = 0; v < V; v++) s += exp(lt[i * V + v] - mx);
        ce += mx + log(s) - lt[i * V + tg[i]];
    }
    ck_assert_msg(fabs(ce - st.ce_sum) < 1e-4 * fabs(ce), "ce_sum %g vs host %g", st.ce_sum, ce);
    scalar_t *g1 = mtu_download(m, model_grads(m));
    double norm = 0;
    for (size_t i = 0; i < np; i++) norm += (double)g1[i] * g1[i];
    ck_assert(norm > 0);
    /* Every tensor receives some gradient (the embedding only on rows of used tokens). */
    mtu_assert_every_tensor_has_gradient(m, g1);
    /* Accumulation: a second identical step doubles the gradients; grad_scale scales them. */
    model_train_step(m, in, tg, NULL, B, T, 1.0, &st, NULL);
    scalar_t *g2 = mtu_download(m, model_grads(m));
    for (size_t i = 0; i < np; i++) ck_assert(fabs(g2[i] - 2 * g1[i]) <= 1e-6 * fabs(g1[i]) + 1e-12);
    be->zero(be, model_grads(m), np * sizeof(scalar_t));
    model_train_step(m, in, tg, NULL, B, T, 0.25, &st, NULL);
    scalar_t *g3 = mtu_download(m, model_grads(m));
    for (size_t i = 0; i < np; i++) ck_assert(fabs(g3[i] - 0.25 * g1[i]) <= 1e-5 * fabs(g1[i]) + 1e-12);
    /* No counted target: CE 0, no gradient (dense has no regularizer). */
    int32_t none[12];
    for (int i = 0; i < N; i++) none[i] = -1;
    be->zero(be, model_grads(m), np * sizeof(scalar_t));
    model_train_step(m, in, none, NULL, B, T, 1.0, &st, NULL);
    ck_assert_int_eq(st.n_counted, 0);
    ck_assert(st.ce_sum == 0);
    scalar_t *g4 = mtu_download(m, model_grads(m));
    for (size_t i = 0; i < np; i++) ck_assert(g4[i] == 0);
    free(g1);
    free(g2);
    free(g3);
    free(g4);
    free(lt);
    free(le);
    model_free(m);
    backend_destroy(be);
}
END_TEST

/* ---- checkpoints ---- */

START_TEST(checkpoint_round_trip) {
    ModelConfig c = mtu_tiny_dense();
    c.lm_head_bias = false; /* a non-default value must survive the trip */
    Backend *be = mtu_backend();
    Model *a = mtu_noisy_model(be, c, 5);
    char err[512] = "";
    const char *path = tmp_path("a.safetensors");
    ck_assert_msg(model_save_safetensors(a, path, err, sizeof err) == 0, "%s", err);
    ModelConfig back;
    ck_assert_msg(model_read_checkpoint_config(path, &back, err, sizeof err) == 0, "%s", err);
    ck_assert_int_eq(back.arch, ARCH_DENSE);
    ck_assert_int_eq(back.d_ff, c.d_ff);
    ck_assert_int_eq(back.d_head, c.d_head);
    ck_assert(!back.lm_head_bias && back.out_norm_affine);
    Model *b = model_create(&back, be);
    ck_assert_msg(model_load_safetensors(b, path, err, sizeof err) == 0, "%s", err);
    scalar_t *pa = mtu_download(a, model_params(a)), *pb = mtu_download(b, model_params(b));
    ck_assert_uint_eq(model_n_params(a), model_n_params(b));
    ck_assert(memcmp(pa, pb, model_n_params(a) * sizeof(scalar_t)) == 0);
    /* The file itself: F32 tensors with the state_dict names/shapes, config and format metadata. */
    StFile f;
    ck_assert_msg(st_read(&f, path, err, sizeof err) == 0, "%s", err);
    ck_assert_int_eq(f.n_tensors, model_n_tensors(a));
    const StTensor *t = st_find(&f, "transformer.layers.1.attention.o.weight");
    ck_assert_ptr_nonnull(t);
    ck_assert_int_eq(t->dtype, ST_F32);
    ck_assert_int_eq(t->ndim, 2);
    ck_assert_int_eq(t->shape[0], c.d_model);
    ck_assert_str_eq(st_meta(&f, "format"), "pt");
    ck_assert_ptr_nonnull(strstr(st_meta(&f, "config"), "\"arch\":\"dense\""));
    st_free(&f);
    free(pa);
    free(pb);
    model_free(a);
    model_free(b);
    backend_destroy(be);
}
END_TEST

/* A deep dense model (12 tensors per layer, so 48 layers are 579 tensors): once refused by a fixed registry limit of
 * 256 tensors ("model: too many tensors", not naming the config) for any n_layers above 21. Every layer registers and
 * its checkpoint round-trips. */
START_TEST(deep_model_registers_every_layer) {
    ModelConfig c = mtu_tiny_dense();
    c.n_layers = 48;
    Backend *be = mtu_backend();
    Model *a = mtu_noisy_model(be, c, 9);
    ck_assert_int_eq(model_n_tensors(a), 1 + 12 * 48 + 2 + 1 + 1); /* embedding, layers, out norm, head, head bias */
    ck_assert_ptr_nonnull(model_find_tensor(a, "transformer.layers.47.ln2.bias"));
    char err[512] = "";
    const char *path = tmp_path("deep.safetensors");
    ck_assert_msg(model_save_safetensors(a, path, err, sizeof err) == 0, "%s", err);
    Model *b = model_create(&c, be);
    ck_assert_msg(model_load_safetensors(b, path, err, sizeof err) == 0, "%s", err);
    scalar_t *pa = mtu_download(a, model_params(a)), *pb = mtu_download(b, model_params(b));
    ck_assert(memcmp(pa, pb, model_n_params(a) * sizeof(scalar_t)) == 0);
    free(pa);
    free(pb);
    model_free(a);
    model_free(b);
    backend_destroy(be);
}
END_TEST

/* Writes the model's tensors as a safetensors file, with one tensor changed by `mode`:
 * 0 = as is in F64, 1 = drop `name`, 2 = wrong shape for `name`, 3 = extra tensor, 4 = `name` as I32, 5 = BF16. */
static void write_variant(Model *m, const char *path, int mode, const char *name) {
    size_t n = model_n_params(m);
    scalar_t *p = mtu_download(m, model_params(m));
    double *d = malloc(n * sizeof(double));
    float *f = malloc(n * sizeof(float));
    uint16_t *bf = malloc(n * sizeof(uint16_t));
    for (size_t i = 0; i < n; i++) {
        d[i] = p[i];
        f[i] = (float)p[i];
        uint32_t u;
        memcpy(&u, &f[i], 4);
        bf[i] = (uint16_t)(u >> 16); /* truncation: exact for values already representable in bf16 */
    }
    StWriter w;
    st_writer_init(&w);
    for (int i = 0; i < model_n_tensors(m); i++) {
        const ParamTensor *t = model_tensor(m, i);
        int is = strcmp(t->name, name) == 0;
        if (mode == 1 && is) continue;
        int64_t shape[4];
        memcpy(shape, t->shape, sizeof shape);
        if (mode == 2 && is) shape[0] += 1;
        if (mode == 4 && is) st_writer_add(&w, t->name, ST_I32, t->ndim, shape, f + t->offset);
        else if (mode == 5) st_writer_add(&w, t->name, ST_BF16, t->ndim, shape, bf + t->offset);
        else if (mode == 2 && is) {
            /* enough bytes for the enlarged shape: reuse the start of the whole buffer */
            st_writer_add(&w, t->name, ST_F64, t->ndim, shape, d);
        } else st_writer_add(&w, t->name, ST_F64, t->ndim, shape, d + t->offset);
    }
    if (mode == 3) {
        int64_t s1 = 3;
        st_writer_add(&w, "extra.bias", ST_F64, 1, &s1, d);
    }
    char err[512];
    ck_assert_msg(st_writer_save(&w, path, err, sizeof err) == 0, "%s", err);
    st_writer_free(&w);
    free(p);
    free(d);
    free(f);
    free(bf);
}

START_TEST(checkpoint_dtypes_and_rejection) {
    ModelConfig c = mtu_tiny_dense();
    Backend *be = mtu_backend();
    Model *a = mtu_noisy_model(be, c, 6);
    Model *b = model_create(&c, be);
    char err[512];
    const char *path = tmp_path("v.safetensors");
    size_t n = model_n_params(a);
    scalar_t *pa = mtu_download(a, model_params(a));

    write_variant(a, path, 0, ""); /* F64: converted exactly to f32 values it came from */
    ck_assert_msg(model_load_safetensors(b, path, err, sizeof err) == 0, "%s", err);
    scalar_t *pb = mtu_download(b, model_params(b));
    ck_assert(memcmp(pa, pb, n * sizeof(scalar_t)) == 0);
    free(pb);
    write_variant(a, path, 5, ""); /* BF16: within bf16 rounding */
    ck_assert_msg(model_load_safetensors(b, path, err, sizeof err) == 0, "%s", err);
    pb = mtu_download(b, model_params(b));
    for (size_t i = 0; i < n; i++) ck_assert(fabs(pb[i] - pa[i]) <= fabs(pa[i]) * (1.0 / 128));
    free(pb);

    const char *victim = "transformer.layers.1.ffn.linear1.bias";
    struct { int mode; const char *frag; } bad[] = {{1, "missing"}, {2, "shape"}, {3, "extra.bias"}, {4, "dtype"}};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        write_variant(a, path, bad[i].mode, victim);
        err[0] = '\0';
        ck_assert_int_eq(model_load_safetensors(b, path, err, sizeof err), -1);
        ck_assert_msg(strstr(err, path) != NULL, "error lacks the path: %s", err);
        ck_assert_msg(strstr(err, bad[i].mode == 3 ? "extra.bias" : victim) != NULL, "error lacks the tensor: %s", err);
        ck_assert_msg(strstr(err, bad[i].frag) != NULL, "error '%s' lacks '%s'", err, bad[i].frag);
        ck_assert(strchr(err, '\n') == NULL);
    }
    /* A file without config metadata has no readable config; a missing file is named. */
    ModelConfig back;
    ck_assert_int_eq(model_read_checkpoint_config(path, &back, err, sizeof err), -1);
    ck_assert_ptr_nonnull(strstr(err, "__metadata__.config"));
    ck_assert_int_eq(model_read_checkpoint_config(tmp_path("none.safetensors"), &back, err, sizeof err), -1);
    ck_assert_ptr_nonnull(strstr(err, "none.safetensors"));
    ck_assert_int_eq(model_load_safetensors(b, tmp_path("none.safetensors"), err, sizeof err), -1);
    /* A checkpoint of a different shape (another d_ff) is refused by load. */
    ModelConfig c2 = c;
    c2.d_ff = 13;
    Model *other = model_create(&c2, be);
    ck_assert_int_eq(model_save_safetensors(other, path, err, sizeof err), 0);
    ck_assert_int_eq(model_load_safetensors(b, path, err, sizeof err), -1);
    ck_assert_ptr_nonnull(strstr(err, "linear1"));
    model_free(other);
    free(pa);
    model_free(a);
    model_free(b);
    backend_destroy(be);
}
END_TEST

int main(void) {
    Suite *s = suite_create("model_dense");
    TCase *tc = tcase_create("dense");
    tcase_set_timeout(tc, 60);
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, init_statistics);
    tcase_add_test(tc, causal);
    tcase_add_test(tc, decode_matches_forward);
    tcase_add_test(tc, decode_matches_forward_no_bias_no_affine);
    tcase_add_test(tc, run_layers_captures);
    tcase_add_test(tc, train_step_loss_and_accumulation);
    tcase_add_test(tc, checkpoint_round_trip);
    tcase_add_test(tc, deep_model_registers_every_layer);
    tcase_add_test(tc, checkpoint_dtypes_and_rejection);
    suite_add_tcase(s, tc);
    return run_test_suite(s);
}
