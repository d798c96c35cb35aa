/* Arch "moe" (a dense Transformer with a routed FFN; model/moe_layer.c) through the wrapper (f32, CPU backend):
 * KV-cache decoding vs the full forward, causality, the training step (logits equal the eval forward, the Switch loss,
 * gradients everywhere), routing counts, init statistics, a checkpoint round trip, and the function-preservation fact
 * sparse upcycling relies on: every expert a copy of a dense layer's FFN, with renormalised gates, gives the dense
 * model's logits. */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "model/model.h"
#include "model_test_util.h"
#include "suite_runner.h"

/* Tiny "moe": V=11, C=8, L=3 (one dense first layer of d_ff 6, two MoE layers), H=2, D=4, E=5, S=3, K=2. */
static ModelConfig tiny_moe(const char *extra) {
    char json[1024];
    snprintf(json, sizeof json,
             "{\"arch\":\"moe\",\"n_tokens\":11,\"d_model\":8,\"n_layers\":3,\"n_heads\":2,\"d_head\":4,"
             "\"ff_n_experts\":5,\"ff_expert_size\":3,\"ff_k\":2,\"n_dense_first\":1,\"d_ff\":6%s}",
             extra);
    return mtu_config(json);
}

START_TEST(decode_matches_forward) { mtu_check_decode(tiny_moe(""), 41); }
END_TEST

START_TEST(decode_matches_forward_sigmoid_renorm_scaled) {
    mtu_check_decode(tiny_moe(",\"router\":\"sigmoid\",\"router_renorm\":true,\"routed_scaling_factor\":2.5,"
                              "\"lm_head_bias\":false,\"out_norm_affine\":false"),
                     42);
}
END_TEST

START_TEST(causal) { mtu_check_causal(tiny_moe(""), 43); }
END_TEST

START_TEST(train_step) {
    ModelConfig c = tiny_moe(",\"balance_alpha\":0.5");
    Backend *be = mtu_backend();
    Model *m = mtu_noisy_model(be, c, 44);
    const int B = 2, T = 6, V = c.n_tokens, N = B * T;
    int32_t in[12], tg[12];
    uint8_t valid[12];
    mtu_tokens(in, N, V, 45);
    mtu_tokens(tg, N, V, 46);
    tg[5] = tg[10] = tg[11] = -1;
    for (int i = 0; i < N; i++) valid[i] = tg[i] >= 0;
    float *lt = malloc(sizeof(float) * N * V), *le = malloc(sizeof(float) * N * V);
    ck_assert(lt && le);
    size_t np = model_n_params(m);
    be->zero(be, model_grads(m), np * sizeof(scalar_t));
    StepStats st;
    model_train_step(m, in, tg, valid, B, T, 1.0, &st, lt);
    model_forward_eval(m, in, B, T, le);
    for (int i = 0; i < N * V; i++) ck_assert_msg(fabs(lt[i] - le[i]) < 1e-5, "train/eval logits differ at %d", i);
    ck_assert_int_eq(st.n_counted, 9);
    /* one Switch loss per MoE layer, each E sum_i f_i P_i in (0, E] */
    ck_assert_msg(st.reg_ffn > 0 && st.reg_ffn <= 2.0 * c.ff_n_experts, "reg_ffn %g", st.reg_ffn);
    ck_assert(st.reg_att == 0.0);
    scalar_t *g = mtu_download(m, model_grads(m));
    mtu_assert_every_tensor_has_gradient(m, g);
    free(g);
    /* balance "none": no loss term */
    ModelConfig cn = tiny_moe(",\"balance\":\"none\"");
    Model *mn = mtu_noisy_model(be, cn, 44);
    model_train_step(mn, in, tg, valid, B, T, 1.0, &st, NULL);
    ck_assert(st.reg_ffn == 0.0);
    model_free(mn);
    free(lt);
    free(le);
    model_free(m);
    backend_destroy(be);
}
END_TEST

/* With every router row zero, all softmax scores tie and the first K experts are selected at every position: the
 * counts cover the two MoE applications (after the dense one) at the valid positions of training steps and at every
 * position of an eval forward; decoding counts nothing. */
START_TEST(routing_counts) {
    ModelConfig c = tiny_moe("");
    Backend *be = mtu_backend();
    Model *m = mtu_noisy_model(be, c, 47);
    for (int l = 0; l < 2; l++) {
        char name[96];
        snprintf(name, sizeof name, "transformer.layers.%d.ffn.expert_sel", l);
        const ParamTensor *t = model_find_tensor(m, name);
        ck_assert_ptr_nonnull(t);
        be->zero(be, model_params(m) + t->offset, t->numel * sizeof(scalar_t));
    }
    const int B = 2, T = 6, V = c.n_tokens, N = B * T, E = c.ff_n_experts, K = c.ff_k;
    int first = -1;
    ck_assert_int_eq(model_routed_experts(m), E);
    ck_assert_int_eq(model_routed_applications(m, &first), 2);
    ck_assert_int_eq(first, 1);
    int32_t in[12], tg[12];
    uint8_t valid[12];
    mtu_tokens(in, N, V, 48);
    mtu_tokens(tg, N, V, 49);
    int n_valid = 0;
    for (int i = 0; i < N; i++) n_valid += valid[i] = (i % 4) != 3;
    int64_t counts[2 * 5], tokens = -1;
    for (int pass = 0; pass < 2; pass++) {
        int64_t expect_n;
        if (pass == 0) {
            be->zero(be, model_grads(m), model_n_params(m) * sizeof(scalar_t));
            model_train_step(m, in, tg, valid, B, T, 1.0, NULL, NULL);
            model_train_step(m, in, tg, valid, B, T, 1.0, NULL, NULL);
            expect_n = 2 * n_valid;
        } else {
            float *lg = malloc(sizeof(float) * (size_t)N * V);
            model_forward_eval(m, in, B, T, lg);
            KVCache *kv = kv_cache_create(m, T);
            model_decode(m, kv, in, T, lg);
            kv_cache_free(kv);
            free(lg);
            expect_n = N;
        }
        model_take_routing_counts(m, counts, &tokens);
        ck_assert_int_eq(tokens, expect_n);
        for (int a = 0; a < 2; a++)
            for (int e = 0; e < E; e++)
                ck_assert_msg(counts[a * E + e] == (e < K ? expect_n : 0), "pass %d app %d expert %d: %lld", pass, a,
                              e, (long long)counts[a * E + e]);
    }
    model_free(m);
    backend_destroy(be);
}
END_TEST

/* The dense model's recipe, N(0, 2/(L fan_in)), for attention and experts (keys fan_in C, values S), zero biases, the
 * router's rows of equal norm at std sqrt(2/(L C)). */
START_TEST(init_statistics) {
    ModelConfig c = mtu_config("{\"arch\":\"moe\",\"n_tokens\":16,\"d_model\":256,\"n_layers\":6,\"n_heads\":2,"
                               "\"d_head\":32,\"ff_n_experts\":8,\"ff_expert_size\":64,\"n_dense_first\":1,"
                               "\"d_ff\":40}");
    Backend *be = mtu_backend();
    Model *m = model_create(&c, be);
    model_init_weights(m, 9);
    const double L = 6, C = 256, S = 64, HD = 64;
    for (int l = 0; l < 5; l += 4) {
        char n[128];
#define NAME(suffix) (snprintf(n, sizeof n, "transformer.layers.%d.%s", l, suffix), n)
        mtu_expect_std(m, NAME("attention.q.weight"), sqrt(2.0 / (L * C)));
        mtu_expect_std(m, NAME("attention.v.weight"), sqrt(2.0 / (L * C)));
        mtu_expect_std(m, NAME("attention.o.weight"), sqrt(2.0 / (L * HD)));
        mtu_expect_std(m, NAME("ffn.keys"), sqrt(2.0 / (L * C)));
        mtu_expect_std(m, NAME("ffn.values"), sqrt(2.0 / (L * S)));
        mtu_expect_const(m, NAME("ffn.keys_bias"), 0.0);
        mtu_expect_const(m, NAME("ffn.values_bias"), 0.0);
        mtu_expect_const(m, NAME("ln1.weight"), 1.0);
        mtu_expect_const(m, NAME("ln2.bias"), 0.0);
        /* the router: global std kept, every row of the same norm */
        MtuStats s = mtu_tensor_stats(m, NAME("ffn.expert_sel"));
        ck_assert_msg(fabs(s.std / sqrt(2.0 / (L * C)) - 1) < 0.1, "expert_sel std %g", s.std);
        const ParamTensor *t = model_find_tensor(m, n);
        scalar_t *w = malloc(t->numel * sizeof *w);
        be->to_host(be, w, model_params(m) + t->offset, t->numel * sizeof *w);
        double n0 = -1;
        for (int e = 0; e < 8; e++) {
            double ss = 0;
            for (int i = 0; i < 256; i++) ss += (double)w[e * 256 + i] * w[e * 256 + i];
            if (n0 < 0) n0 = sqrt(ss);
            ck_assert_msg(fabs(sqrt(ss) - n0) < 1e-5 * n0, "expert_sel row %d norm %g vs %g", e, sqrt(ss), n0);
        }
        free(w);
#undef NAME
    }
    mtu_expect_std(m, "transformer.dense_layers.0.ffn.linear1.weight", sqrt(2.0 / (L * C)));
    model_free(m);
    backend_destroy(be);
}
END_TEST

START_TEST(checkpoint_round_trip) {
    ModelConfig c = tiny_moe(",\"router_renorm\":true");
    Backend *be = mtu_backend();
    Model *a = mtu_noisy_model(be, c, 50);
    char path[] = "/tmp/test_model_moe_XXXXXX";
    int fd = mkstemp(path);
    ck_assert_int_ge(fd, 0);
    close(fd);
    char err[512] = "";
    ck_assert_msg(model_save_safetensors(a, path, err, sizeof err) == 0, "%s", err);
    ModelConfig rc;
    ck_assert_msg(model_read_checkpoint_config(path, &rc, err, sizeof err) == 0, "%s", err);
    ck_assert_int_eq(rc.arch, ARCH_MOE);
    ck_assert(rc.router_renorm);
    Model *b = model_create(&rc, be);
    ck_assert_msg(model_load_safetensors(b, path, err, sizeof err) == 0, "%s", err);
    scalar_t *pa = mtu_download(a, model_params(a)), *pb = mtu_download(b, model_params(b));
    ck_assert_uint_eq(model_n_params(a), model_n_params(b));
    ck_assert(memcmp(pa, pb, model_n_params(a) * sizeof(scalar_t)) == 0);
    free(pa);
    free(pb);
    unlink(path);
    model_free(a);
    model_free(b);
    backend_destroy(be);
}
END_TEST

/* ---- upcycling by copying preserves the function ---- */

/* dst[cols, rows] = src[rows, cols]^T (host). */
static void transpose(scalar_t *dst, const scalar_t *src, int rows, int cols) {
    for (int r = 0; r < rows; r++)
        for (int c = 0; c < cols; c++) dst[(size_t)c * rows + r] = src[(size_t)r * cols + c];
}

/* Builds the "moe" model of cfg from the dense model d: every tensor of the dense layers copied (the first
 * n_dense_first as the dense prefix, the others' attention and LayerNorms into the MoE layers), every expert of MoE
 * layer i a copy of dense layer n_dense_first + i's FFN (keys[e] = linear1.weight^T, keys_bias[e] = linear1.bias,
 * values[e] = linear2.weight^T, values_bias[e] = linear2.bias); the routers keep their (random) weights. */
static void upcycle_copy(Model *moe, Model *d) {
    Backend *be = model_backend(d);
    const ModelConfig *c = model_config(moe);
    scalar_t *pd = mtu_download(d, model_params(d)), *pm = mtu_download(moe, model_params(moe));
    const int C = c->d_model, S = c->ff_expert_size, E = c->ff_n_experts;
    for (int t = 0; t < model_n_tensors(moe); t++) {
        const ParamTensor *mt = model_tensor(moe, t);
        char src[128];
        int layer;
        char rest[96];
        if (sscanf(mt->name, "transformer.dense_layers.%d.%95s", &layer, rest) == 2)
            snprintf(src, sizeof src, "transformer.layers.%d.%s", layer, rest);
        else if (sscanf(mt->name, "transformer.layers.%d.%95s", &layer, rest) == 2)
            snprintf(src, sizeof src, "transformer.layers.%d.%s", layer + c->n_dense_first, rest);
        else
            snprintf(src, sizeof src, "%s", mt->name);
        scalar_t *dst = pm + mt->offset;
        const char *ffn = strncmp(mt->name, "transformer.layers.", 19) == 0 ? strstr(src, ".ffn.") : NULL;
        if (ffn && strstr(mt->name, "expert_sel")) continue; /* the router: no dense counterpart */
        if (ffn) {
            char base[128];
            snprintf(base, sizeof base, "%.*s.ffn.", (int)(ffn - src), src);
            char name[160];
            const char *kind = ffn + 5;
            const char *from = strcmp(kind, "keys") == 0 || strcmp(kind, "keys_bias") == 0 ? "linear1" : "linear2";
            const int is_bias = strstr(kind, "_bias") != NULL;
            snprintf(name, sizeof name, "%s%s.%s", base, from, is_bias ? "bias" : "weight");
            const ParamTensor *dt = model_find_tensor(d, name);
            ck_assert_msg(dt != NULL, "dense model lacks %s", name);
            const size_t per = mt->numel / (size_t)E;
            ck_assert_uint_eq(per, dt->numel);
            for (int e = 0; e < E; e++) {
                if (is_bias)
                    memcpy(dst + e * per, pd + dt->offset, per * sizeof(scalar_t));
                else if (strcmp(kind, "keys") == 0) /* linear1.weight [S, C] -> keys[e] [C, S] */
                    transpose(dst + e * per, pd + dt->offset, S, C);
                else /* linear2.weight [C, S] -> values[e] [S, C] */
                    transpose(dst + e * per, pd + dt->offset, C, S);
            }
            continue;
        }
        const ParamTensor *dt = model_find_tensor(d, src);
        ck_assert_msg(dt != NULL && dt->numel == mt->numel, "dense model lacks %s", src);
        memcpy(dst, pd + dt->offset, mt->numel * sizeof(scalar_t));
    }
    be->to_device(be, model_params(moe), pm, model_n_params(moe) * sizeof(scalar_t));
    free(pd);
    free(pm);
}

/* Largest |logit difference| of the eval forwards of the two models on the same tokens. */
static double max_logit_diff(Model *a, Model *b, const int32_t *in, int B, int T) {
    const int V = model_config(a)->n_tokens;
    float *la = malloc(sizeof(float) * B * T * V), *lb = malloc(sizeof(float) * B * T * V);
    ck_assert(la && lb);
    model_forward_eval(a, in, B, T, la);
    model_forward_eval(b, in, B, T, lb);
    double worst = 0;
    for (int i = 0; i < B * T * V; i++) worst = fmax(worst, fabs((double)la[i] - lb[i]));
    free(la);
    free(lb);
    return worst;
}

static void check_upcycle(const char *routing, int expect_equal) {
    ModelConfig dc = mtu_config("{\"arch\":\"dense\",\"n_tokens\":11,\"d_model\":8,\"n_layers\":3,\"n_heads\":2,"
                                "\"d_head\":4,\"d_ff\":6}");
    char json[512];
    snprintf(json, sizeof json,
             "{\"arch\":\"moe\",\"n_tokens\":11,\"d_model\":8,\"n_layers\":3,\"n_heads\":2,\"d_head\":4,"
             "\"ff_n_experts\":4,\"ff_expert_size\":6,\"n_dense_first\":1,\"d_ff\":6%s}",
             routing);
    ModelConfig mc = mtu_config(json);
    Backend *be = mtu_backend();
    Model *d = mtu_model_with_noise(be, dc, 51, 52, 0.3); /* noise: non-zero biases, non-trivial LayerNorms */
    Model *m = mtu_model_with_noise(be, mc, 53, 54, 0.3);
    upcycle_copy(m, d);
    enum { B = 2, T = 7 };
    int32_t in[B * T];
    mtu_tokens(in, B * T, dc.n_tokens, 55);
    const double diff = max_logit_diff(d, m, in, B, T);
    if (expect_equal)
        ck_assert_msg(diff < 1e-5, "%s: the upcycled model's logits differ from the dense model's by %g", routing,
                      diff);
    else /* without renormalised gates the copies are scaled by sum_j gate_j != 1: not the dense function */
        ck_assert_msg(diff > 1e-3, "%s: logits equal the dense model's (diff %g) although the gates do not sum to 1",
                      routing, diff);
    /* the training step's logits too (the same forward, with the caches of the backward) */
    if (expect_equal) {
        const int V = dc.n_tokens;
        int32_t tg[B * T];
        mtu_tokens(tg, B * T, V, 56);
        float *ld = malloc(sizeof(float) * B * T * V), *lm = malloc(sizeof(float) * B * T * V);
        ck_assert(ld && lm);
        model_train_step(d, in, tg, NULL, B, T, 1.0, NULL, ld);
        model_train_step(m, in, tg, NULL, B, T, 1.0, NULL, lm);
        for (int i = 0; i < B * T * V; i++) ck_assert_msg(fabs(ld[i] - lm[i]) < 1e-5, "train logits differ at %d", i);
        free(ld);
        free(lm);
    }
    model_free(d);
    model_free(m);
    backend_destroy(be);
}

START_TEST(upcycled_copy_is_the_dense_model) {
    check_upcycle(",\"router\":\"softmax\",\"router_renorm\":true,\"ff_k\":2", 1);
    check_upcycle(",\"router\":\"sigmoid\",\"router_renorm\":true,\"ff_k\":3,\"balance\":\"none\"", 1);
    check_upcycle(",\"router\":\"softmax\",\"router_renorm\":false,\"ff_k\":2", 0);
}
END_TEST

int main(void) {
    Suite *s = suite_create("model_moe");
    TCase *tc = tcase_create("moe");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, decode_matches_forward);
    tcase_add_test(tc, decode_matches_forward_sigmoid_renorm_scaled);
    tcase_add_test(tc, causal);
    tcase_add_test(tc, train_step);
    tcase_add_test(tc, routing_counts);
    tcase_add_test(tc, init_statistics);
    tcase_add_test(tc, checkpoint_round_trip);
    tcase_add_test(tc, upcycled_copy_is_the_dense_model);
    suite_add_tcase(s, tc);
    return run_test_suite(s);
}
