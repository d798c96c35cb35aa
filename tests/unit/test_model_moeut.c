/* MoEUT through the wrapper (f32, CPU backend): KV-cache decoding vs the full forward, causality, the training step
 * (logits equal the eval forward, regularizer ranges, gradients everywhere), init statistics of the DM-math recipe,
 * checkpoint round trip with the 3-D expert tensors. */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "model/model.h"
#include "pipeline/base/atomic_file.h"
#include "model_test_util.h"
#include "suite_runner.h"

START_TEST(decode_matches_forward) { mtu_check_decode(mtu_tiny_moeut(), 31); }
END_TEST

/* Gs=1 (every application shares one layer), DM-math wrapper (no head bias, no final-norm affine). */
START_TEST(decode_matches_forward_gs1) {
    mtu_check_decode(mtu_config("{\"arch\":\"moeut\",\"n_tokens\":9,\"d_model\":12,\"n_layers\":3,\"n_heads\":3,"
                                "\"ff_n_experts\":6,\"ff_expert_size\":4,\"ff_k\":3,\"att_n_experts\":4,\"att_k\":2,"
                                "\"group_size\":1,\"lm_head_bias\":false,\"out_norm_affine\":false}"),
                     32);
}
END_TEST

START_TEST(causal) { mtu_check_causal(mtu_tiny_moeut(), 33); }
END_TEST

START_TEST(train_step) {
    ModelConfig c = mtu_tiny_moeut();
    Backend *be = mtu_backend();
    Model *m = mtu_noisy_model(be, c, 34);
    const int B = 2, T = 6, V = c.n_tokens, N = B * T;
    int32_t in[12], tg[12];
    uint8_t valid[12];
    mtu_tokens(in, N, V, 35);
    mtu_tokens(tg, N, V, 36);
    tg[5] = tg[10] = tg[11] = -1;
    for (int i = 0; i < N; i++) valid[i] = tg[i] >= 0;
    float *lt = malloc(sizeof(float) * N * V), *le = malloc(sizeof(float) * N * V);
    size_t np = model_n_params(m);
    be->zero(be, model_grads(m), np * sizeof(scalar_t));
    StepStats st;
    model_train_step(m, in, tg, valid, B, T, 1.0, &st, lt);
    model_forward_eval(m, in, B, T, le);
    for (int i = 0; i < N * V; i++) ck_assert_msg(fabs(lt[i] - le[i]) < 1e-5, "train/eval logits differ at %d", i);
    ck_assert_int_eq(st.n_counted, 9);
    /* Each module's entropy term lies in [-log E, 0); attention has an o and a v term per module. */
    ck_assert_msg(st.reg_ffn < 0 && st.reg_ffn >= -c.group_size * log((double)c.ff_n_experts) - 1e-6, "reg_ffn %g",
                  st.reg_ffn);
    ck_assert_msg(st.reg_att < 0 && st.reg_att >= -2 * c.group_size * log((double)c.att_n_experts) - 1e-6,
                  "reg_att %g", st.reg_att);
    scalar_t *g = mtu_download(m, model_grads(m));
    mtu_assert_every_tensor_has_gradient(m, g);
    /* No counted target: the regularizers alone still give a gradient (to the routers, not to the head). */
    int32_t none[12];
    for (int i = 0; i < N; i++) none[i] = -1;
    be->zero(be, model_grads(m), np * sizeof(scalar_t));
    model_train_step(m, in, none, valid, B, T, 1.0, &st, NULL);
    ck_assert_int_eq(st.n_counted, 0);
    ck_assert(st.ce_sum == 0 && st.reg_ffn < 0);
    free(g);
    g = mtu_download(m, model_grads(m));
    const ParamTensor *head = model_find_tensor(m, "lm_head.weight");
    const ParamTensor *router = model_find_tensor(m, "transformer.layers.0.ffn.expert_sel");
    double hs = 0, rs = 0;
    for (size_t i = 0; i < head->numel; i++) hs += fabs(g[head->offset + i]);
    for (size_t i = 0; i < router->numel; i++) rs += fabs(g[router->offset + i]);
    ck_assert(hs == 0 && rs > 0);
    free(g);
    free(lt);
    free(le);
    model_free(m);
    backend_destroy(be);
}
END_TEST

/* Routing counts (model_take_routing_counts) against an independent fact: with every FFN router row zero, all E
 * logits tie and topk_select takes experts 0..K-1 (ties: lower index first) for every position, so application a's
 * counts are n positions for e < K and 0 beyond. Training counts the valid positions, model_forward_eval every
 * position, KV-cache decoding nothing; a take resets; the dense model counts nothing. */
START_TEST(routing_counts) {
    ModelConfig c = mtu_tiny_moeut();
    Backend *be = mtu_backend();
    Model *m = mtu_noisy_model(be, c, 37);
    for (int l = 0; l < c.group_size; l++) {
        char name[96];
        snprintf(name, sizeof name, "transformer.layers.%d.ffn.expert_sel", l);
        const ParamTensor *t = model_find_tensor(m, name);
        ck_assert_ptr_nonnull(t);
        be->zero(be, model_params(m) + t->offset, t->numel * sizeof(scalar_t));
    }
    const int B = 2, T = 6, V = c.n_tokens, N = B * T, L = c.n_layers, E = c.ff_n_experts, K = c.ff_k;
    ck_assert_int_eq(model_routed_experts(m), E);
    int32_t in[12], tg[12];
    uint8_t valid[12];
    mtu_tokens(in, N, V, 38);
    mtu_tokens(tg, N, V, 39);
    int n_valid = 0;
    for (int i = 0; i < N; i++) n_valid += valid[i] = (i % 4) != 3;
    int64_t *counts = malloc(sizeof(int64_t) * (size_t)L * E), tokens = -1;
    for (int pass = 0; pass < 3; pass++) {
        int64_t expect_n = 0;
        if (pass == 0) { /* two training steps accumulate */
            be->zero(be, model_grads(m), model_n_params(m) * sizeof(scalar_t));
            model_train_step(m, in, tg, valid, B, T, 1.0, NULL, NULL);
            model_train_step(m, in, tg, valid, B, T, 1.0, NULL, NULL);
            expect_n = 2 * n_valid;
        } else if (pass == 1) { /* an eval forward counts every position; decoding counts nothing */
            float *lg = malloc(sizeof(float) * (size_t)N * V);
            model_forward_eval(m, in, B, T, lg);
            KVCache *kv = kv_cache_create(m, T);
            model_decode(m, kv, in, T, lg);
            kv_cache_free(kv);
            free(lg);
            expect_n = N;
        } /* pass 2: nothing since the last take */
        model_take_routing_counts(m, counts, &tokens);
        ck_assert_int_eq(tokens, expect_n);
        for (int a = 0; a < L; a++)
            for (int e = 0; e < E; e++)
                ck_assert_msg(counts[(size_t)a * E + e] == (e < K ? expect_n : 0), "pass %d app %d expert %d: %lld",
                              pass, a, e, (long long)counts[(size_t)a * E + e]);
    }
    free(counts);
    model_free(m);
    ModelConfig dc = mtu_tiny_dense();
    Model *d = model_create(&dc, be);
    ck_assert_int_eq(model_routed_experts(d), 0);
    model_take_routing_counts(d, NULL, &tokens); /* the dense model has no counts: nothing is written */
    ck_assert_int_eq(tokens, 0);
    model_free(d);
    backend_destroy(be);
}
END_TEST

/* balance "bias" (model/moeut_bias.c) with a dense first layer and a shared expert, against tie facts. With every
 * FFN router row zero, all sigmoid scores are 0.5, so the selection is decided by the bias alone: bias +1 on expert
 * E-1 and -1 on expert 0 select {E-1, 1, .., K-1} at every position (ties: lower index first). Then:
 *  - the routing counts cover the 4 MoEUT applications only (first application 1: the dense layer routes nothing);
 *  - the bias counts of each distinct layer are the sum of its R = 2 applications' routing counts;
 *  - the update moves exactly the selected (overloaded) experts by -gamma and the others by +gamma;
 *  - hand cases: a non-integer mean, and experts exactly at an integer mean, which do not move. */
START_TEST(bias_balance_counts_and_update) {
    ModelConfig c = mtu_config("{\"arch\":\"moeut\",\"n_tokens\":11,\"d_model\":8,\"n_layers\":5,\"n_heads\":2,"
                               "\"ff_n_experts\":5,\"ff_expert_size\":3,\"ff_k\":3,\"att_n_experts\":3,\"att_k\":2,"
                               "\"group_size\":2,\"n_dense_first\":1,\"n_shared_experts\":1,\"balance\":\"bias\","
                               "\"balance_gamma\":0.25}");
    Backend *be = mtu_backend();
    Model *m = mtu_noisy_model(be, c, 41);
    const int E = c.ff_n_experts, K = c.ff_k, Gs = c.group_size;
    ck_assert_int_eq(model_bias_count_len(m), Gs * E);
    scalar_t bias[5] = {-1, 0, 0, 0, 1};
    for (int l = 0; l < Gs; l++) {
        char name[96];
        snprintf(name, sizeof name, "transformer.layers.%d.ffn.expert_sel", l);
        const ParamTensor *t = model_find_tensor(m, name);
        be->zero(be, model_params(m) + t->offset, t->numel * sizeof(scalar_t));
        snprintf(name, sizeof name, "transformer.layers.%d.ffn.expert_bias", l);
        t = model_find_tensor(m, name);
        ck_assert(t != NULL && t->buffer && t->numel == (size_t)E);
        be->to_device(be, model_params(m) + t->offset, bias, sizeof bias);
    }
    int first_app = -1;
    ck_assert_int_eq(model_routed_applications(m, &first_app), 4);
    ck_assert_int_eq(first_app, 1);
    const int B = 2, T = 5, N = B * T;
    int32_t in[10], tg[10];
    uint8_t valid[10];
    mtu_tokens(in, N, c.n_tokens, 42);
    mtu_tokens(tg, N, c.n_tokens, 43);
    int n_valid = 0;
    for (int i = 0; i < N; i++) n_valid += valid[i] = (i % 5) != 4;
    be->zero(be, model_grads(m), model_n_params(m) * sizeof(scalar_t));
    model_reset_routing_counts(m);
    model_train_step(m, in, tg, valid, B, T, 1.0, NULL, NULL);
    model_train_step(m, in, tg, valid, B, T, 1.0, NULL, NULL);
    int64_t routing[4 * 5], tokens = 0;
    model_take_routing_counts(m, routing, &tokens);
    double counts[2 * 5];
    model_take_bias_counts(m, counts);
    for (int e = 0; e < E; e++) {
        const int selected = e == E - 1 || (e >= 1 && e < K);
        for (int a = 0; a < 4; a++)
            ck_assert_msg(routing[a * E + e] == (selected ? 2 * n_valid : 0), "app %d expert %d: %lld", a, e,
                          (long long)routing[a * E + e]);
        for (int l = 0; l < Gs; l++) /* MoEUT applications j = 0..3 use layer j % 2 */
            ck_assert_msg(counts[l * E + e] == (double)(routing[l * E + e] + routing[(l + 2) * E + e]),
                          "layer %d expert %d: %g", l, e, counts[l * E + e]);
    }
    double again[2 * 5];
    model_take_bias_counts(m, again); /* a take resets */
    for (int i = 0; i < Gs * E; i++) ck_assert(again[i] == 0);

    model_apply_bias_update(m, counts);
    for (int l = 0; l < Gs; l++) {
        char name[96];
        snprintf(name, sizeof name, "transformer.layers.%d.ffn.expert_bias", l);
        scalar_t b[5];
        be->to_host(be, b, model_params(m) + model_find_tensor(m, name)->offset, sizeof b);
        for (int e = 0; e < E; e++) {
            const int selected = e == E - 1 || (e >= 1 && e < K);
            ck_assert_msg(b[e] == (scalar_t)((double)bias[e] + (selected ? -0.25 : 0.25)), "layer %d expert %d: %g",
                          l, e, (double)b[e]);
        }
    }
    /* hand counts: layer 0 {1, 2, 2, 0, 1} (mean 1.2: only 2s are over); layer 1 {2, 0, 1, 1, 1} (mean 1: the 1s are
     * exactly at the mean and do not move) */
    scalar_t before[2][5], after[2][5];
    const ParamTensor *tb[2] = {model_find_tensor(m, "transformer.layers.0.ffn.expert_bias"),
                                model_find_tensor(m, "transformer.layers.1.ffn.expert_bias")};
    for (int l = 0; l < 2; l++) be->to_host(be, before[l], model_params(m) + tb[l]->offset, sizeof before[l]);
    const double hand[10] = {1, 2, 2, 0, 1, 2, 0, 1, 1, 1};
    model_apply_bias_update(m, hand);
    for (int l = 0; l < 2; l++) be->to_host(be, after[l], model_params(m) + tb[l]->offset, sizeof after[l]);
    const double step[2][5] = {{0.25, -0.25, -0.25, 0.25, 0.25}, {-0.25, 0.25, 0, 0, 0}};
    for (int l = 0; l < 2; l++)
        for (int e = 0; e < E; e++)
            ck_assert_msg(after[l][e] == (scalar_t)((double)before[l][e] + step[l][e]), "hand layer %d expert %d", l,
                          e);
    model_free(m);
    backend_destroy(be);
}
END_TEST

START_TEST(init_statistics) {
    /* L=18 applications of Gs=2 layers like the paper (s = sqrt(2/18) = 1/3), smaller widths. */
    ModelConfig c = mtu_config("{\"arch\":\"moeut\",\"n_tokens\":64,\"d_model\":256,\"n_layers\":18,\"n_heads\":2,"
                               "\"d_head\":64,\"ff_n_experts\":16,\"ff_expert_size\":32,\"ff_k\":4,"
                               "\"att_n_experts\":4,\"att_k\":2,\"group_size\":2,\"lm_head_bias\":false,"
                               "\"out_norm_affine\":false}");
    Backend *be = mtu_backend();
    Model *m = model_create(&c, be);
    model_init_weights(m, 9);
    const double s = sqrt(2.0 / 18);
    /* The paper's values follow from the same formulas (moeut-spec.md §8.3 item 9). */
    ck_assert_double_eq_tol(s / sqrt(1024.0), 0.010417, 1e-6);
    ck_assert_double_eq_tol(s / sqrt(387.0 * 128), 0.0014977, 1e-7);
    ck_assert_double_eq_tol(s / sqrt(512.0), 0.014731, 1e-6);
    for (int l = 0; l < 2; l++) {
        char n[128];
#define NAME(suffix) (snprintf(n, sizeof n, "transformer.layers.%d.%s", l, suffix), n)
        mtu_expect_std(m, NAME("attention.q.weight"), s / 16);
        mtu_expect_std(m, NAME("attention.k.weight"), s / 16);
        mtu_expect_std(m, NAME("attention.v"), s / 16);
        mtu_expect_std(m, NAME("attention.o"), s / sqrt(128.0));
        mtu_expect_std(m, NAME("ffn.keys"), s / 16);
        mtu_expect_std(m, NAME("ffn.values"), s / sqrt(16.0 * 32));
        mtu_expect_const(m, NAME("ln1.weight"), 1.0);
        mtu_expect_const(m, NAME("ln2.bias"), 0.0);
        /* Routers: global std kept by the renorms (sample std of the Gaussian draw, so only approximately s/16). */
        const char *routers[] = {"ffn.expert_sel", "attention.sel_v", "attention.sel_o"};
        for (int r = 0; r < 3; r++) {
            const ParamTensor *t = model_find_tensor(m, NAME(routers[r]));
            ck_assert_ptr_nonnull(t);
            scalar_t *w = mtu_download(m, model_params(m));
            int rows = (int)t->shape[0], cols = (int)t->shape[1];
            double nmin = INFINITY, nmax = 0;
            for (int i = 0; i < rows; i++) {
                double ss = 0;
                for (int j = 0; j < cols; j++) ss += (double)w[t->offset + (size_t)i * cols + j] * w[t->offset + (size_t)i * cols + j];
                nmin = fmin(nmin, sqrt(ss));
                nmax = fmax(nmax, sqrt(ss));
            }
            free(w);
            MtuStats st = mtu_tensor_stats(m, n);
            ck_assert_msg(fabs(st.std / (s / 16) - 1) < 0.15, "%s std %g", n, st.std);
            /* renorm_keep_std (expert_sel): every row the same norm; renorm_rows (sel_v/o): rows keep unequal
             * norms proportional to their original std. */
            if (r == 0) ck_assert_msg(nmax - nmin < 1e-5 * nmax, "%s row norms %g..%g differ", n, nmin, nmax);
            else ck_assert_msg(nmax - nmin > 1e-3 * nmax, "%s row norms all equal (%g)", n, nmax);
        }
#undef NAME
    }
    mtu_expect_std(m, "embedding.weight", 1.0 / 16);
    ck_assert_ptr_null(model_find_tensor(m, "lm_head.bias"));
    ck_assert_ptr_null(model_find_tensor(m, "out_norm.weight"));
    model_free(m);
    backend_destroy(be);
}
END_TEST

/* Hash routing (model.routing "hash"): decoding routes each new position by its own token id, as the full forward
 * does; perturbing a token moves only its own and later positions. */
#define HASH_MOEUT_JSON                                                                                              \
    "{\"arch\":\"moeut\",\"n_tokens\":11,\"d_model\":8,\"n_layers\":4,\"n_heads\":2,\"d_head\":4,"                   \
    "\"ff_n_experts\":4,\"ff_expert_size\":3,\"ff_k\":1,\"att_n_experts\":3,\"att_k\":2,\"group_size\":2,"           \
    "\"balance\":\"none\",\"routing\":\"hash\",\"n_shared_experts\":1}"
START_TEST(decode_matches_forward_hash) { mtu_check_decode(mtu_config(HASH_MOEUT_JSON), 41); }
END_TEST

START_TEST(causal_hash) { mtu_check_causal(mtu_config(HASH_MOEUT_JSON), 42); }
END_TEST

START_TEST(checkpoint_round_trip) {
    char dir[256], path[512], err[512] = "";
    snprintf(dir, sizeof dir, "/tmp/test_model_moeut.%ld", (long)getpid());
    ck_assert_int_eq(mkdir_p(dir, err, sizeof err), 0);
    snprintf(path, sizeof path, "%s/m.safetensors", dir);
    ModelConfig c = mtu_tiny_moeut();
    c.entropy_reg = 0.125;
    Backend *be = mtu_backend();
    Model *a = mtu_noisy_model(be, c, 40);
    ck_assert_msg(model_save_safetensors(a, path, err, sizeof err) == 0, "%s", err);
    ModelConfig back;
    ck_assert_msg(model_read_checkpoint_config(path, &back, err, sizeof err) == 0, "%s", err);
    ck_assert_int_eq(back.arch, ARCH_MOEUT);
    ck_assert_int_eq(back.att_n_experts, c.att_n_experts);
    ck_assert_int_eq(back.group_size, c.group_size);
    ck_assert(back.entropy_reg == 0.125);
    Model *b = model_create(&back, be);
    ck_assert_msg(model_load_safetensors(b, path, err, sizeof err) == 0, "%s", err);
    scalar_t *pa = mtu_download(a, model_params(a)), *pb = mtu_download(b, model_params(b));
    ck_assert(memcmp(pa, pb, model_n_params(a) * sizeof(scalar_t)) == 0);
    /* A dense model cannot load it (names differ); the error names a tensor. */
    Model *d = model_create(&(ModelConfig){.arch = ARCH_DENSE, .n_tokens = 11, .d_model = 8, .n_layers = 2,
                                           .n_heads = 2, .d_head = 4, .d_ff = 12, .lm_head_bias = true,
                                           .out_norm_affine = true},
                            be);
    ck_assert_int_eq(model_load_safetensors(d, path, err, sizeof err), -1);
    ck_assert_ptr_nonnull(strstr(err, "transformer.layers."));
    model_free(d);
    free(pa);
    free(pb);
    model_free(a);
    model_free(b);
    backend_destroy(be);
    remove_tree(dir);
}
END_TEST

int main(void) {
    Suite *s = suite_create("model_moeut");
    TCase *tc = tcase_create("moeut");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, decode_matches_forward);
    tcase_add_test(tc, decode_matches_forward_gs1);
    tcase_add_test(tc, causal);
    tcase_add_test(tc, train_step);
    tcase_add_test(tc, routing_counts);
    tcase_add_test(tc, bias_balance_counts_and_update);
    tcase_add_test(tc, init_statistics);
    tcase_add_test(tc, checkpoint_round_trip);
    tcase_add_test(tc, decode_matches_forward_hash);
    tcase_add_test(tc, causal_hash);
    suite_add_tcase(s, tc);
    return run_test_suite(s);
}
