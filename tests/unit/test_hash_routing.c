/* Hash routing (model.routing "hash", model/hash_routing.h): the token -> expert table (its definition, balance and
 * seed), the layer's tensors and parameter count (no router, no ln2), routing by the input token id in every path
 * (training, eval, model_embed + model_run_layers, repeated batches of the depth analysis), and gradients. The KV
 * cache and causality are checked in test_model_moeut.c. */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "model/hash_routing.h"
#include "model/model.h"
#include "pipeline/base/atomic_file.h"
#include "model_test_util.h"
#include "suite_runner.h"

/* V=11, C=8, L=4 applications of Gs=2 layers, H=2, D=4, EA=3, KA=2, E=4, S=3, K=1. */
#define HASH_JSON(extra)                                                                                             \
    "{\"arch\":\"moeut\",\"n_tokens\":11,\"d_model\":8,\"n_layers\":4,\"n_heads\":2,\"d_head\":4,"                   \
    "\"ff_n_experts\":4,\"ff_expert_size\":3,\"ff_k\":1,\"att_n_experts\":3,\"att_k\":2,\"group_size\":2,"           \
    "\"lm_head_bias\":true,\"out_norm_affine\":true,\"balance\":\"none\",\"routing\":\"hash\"" extra "}"

/* The table's definition (hash_routing.h), against vectors computed from it independently (a Python transcription of
 * the definition): V = 10, E = 3, seeds 1 and 2. */
START_TEST(table_definition) {
    int32_t t[10];
    const int32_t want1[10] = {1, 2, 2, 1, 0, 0, 0, 0, 1, 2}; /* perm = 4 2 8 1 9 3 0 6 7 5 */
    const int32_t want2[10] = {0, 2, 0, 2, 1, 0, 1, 1, 2, 0}; /* perm = 9 8 3 2 4 6 1 7 5 0 */
    hash_routing_table(t, 10, 3, 1);
    ck_assert(memcmp(t, want1, sizeof t) == 0);
    hash_routing_table(t, 10, 3, 2);
    ck_assert(memcmp(t, want2, sizeof t) == 0);
}
END_TEST

/* Every expert owns floor(V/E) or ceil(V/E) ids; the same seed gives the same table, another seed another one. */
START_TEST(table_balanced_and_seeded) {
    const int cases[][2] = {{11, 4}, {64, 8}, {1000, 7}, {5, 5}, {97, 1}};
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        const int V = cases[c][0], E = cases[c][1];
        int32_t *a = malloc(sizeof(int32_t) * V), *b = malloc(sizeof(int32_t) * V);
        int *count = calloc((size_t)E, sizeof(int));
        hash_routing_table(a, V, E, 7);
        for (int v = 0; v < V; v++) {
            ck_assert(a[v] >= 0 && a[v] < E);
            count[a[v]]++;
        }
        for (int e = 0; e < E; e++)
            ck_assert_msg(count[e] == V / E || count[e] == (V + E - 1) / E, "V %d E %d expert %d owns %d", V, E, e,
                          count[e]);
        hash_routing_table(b, V, E, 7);
        ck_assert(memcmp(a, b, sizeof(int32_t) * V) == 0);
        hash_routing_table(b, V, E, 8);
        if (E > 1 && V >= 64) ck_assert_msg(memcmp(a, b, sizeof(int32_t) * V) != 0, "seed 8 = seed 7 (V %d)", V);
        free(a);
        free(b);
        free(count);
    }
}
END_TEST

/* No router and no ln2 in any MoEUT layer; the parameter count follows; model_count_params agrees. */
START_TEST(tensors_and_count) {
    ModelConfig c = mtu_config(HASH_JSON(""));
    Backend *be = mtu_backend();
    Model *m = model_create(&c, be);
    for (int l = 0; l < c.group_size; l++) {
        char name[96];
        const char *gone[] = {"ffn.expert_sel", "ln2.weight", "ln2.bias"}, *kept[] = {"ffn.keys", "ffn.values",
                                                                                     "ln1.weight", "attention.sel_v"};
        for (int i = 0; i < 3; i++) {
            snprintf(name, sizeof name, "transformer.layers.%d.%s", l, gone[i]);
            ck_assert_msg(model_find_tensor(m, name) == NULL, "%s exists", name);
        }
        for (int i = 0; i < 4; i++) {
            snprintf(name, sizeof name, "transformer.layers.%d.%s", l, kept[i]);
            ck_assert_msg(model_find_tensor(m, name) != NULL, "%s missing", name);
        }
    }
    ck_assert_uint_eq(model_n_params(m), model_count_params(&c));
    ck_assert_uint_eq(model_n_state(m), model_n_params(m)); /* the table is not a tensor */
    ModelConfig topk = mtu_config("{\"arch\":\"moeut\",\"n_tokens\":11,\"d_model\":8,\"n_layers\":4,\"n_heads\":2,"
                                  "\"d_head\":4,\"ff_n_experts\":4,\"ff_expert_size\":3,\"ff_k\":1,\"att_n_experts\":3,"
                                  "\"att_k\":2,\"group_size\":2,\"lm_head_bias\":true,\"out_norm_affine\":true,"
                                  "\"balance\":\"none\"}");
    ck_assert_uint_eq(model_count_params(&topk) - model_count_params(&c),
                      (size_t)c.group_size * ((size_t)c.ff_n_experts * c.d_model + 2 * (size_t)c.d_model));
    model_free(m);
    backend_destroy(be);
}
END_TEST

/* counts[a][e] = the positions (valid ones in training) whose input token the table sends to e, in every
 * application. */
static void expect_counts_of_tokens(Model *m, const int32_t *in, const uint8_t *valid, int N, int times) {
    const ModelConfig *c = model_config(m);
    const int E = c->ff_n_experts;
    int first = -1, A = model_routed_applications(m, &first);
    ck_assert_int_eq(A, c->n_layers);
    int32_t *table = malloc(sizeof(int32_t) * c->n_tokens);
    hash_routing_table(table, c->n_tokens, E, (uint64_t)c->hash_seed);
    int64_t want[16] = {0}, n = 0, tokens = -1;
    for (int i = 0; i < N; i++)
        if (!valid || valid[i]) want[table[in[i]]] += times, n += times;
    int64_t *counts = malloc(sizeof(int64_t) * (size_t)A * E);
    model_take_routing_counts(m, counts, &tokens);
    ck_assert_int_eq(tokens, n);
    for (int a = 0; a < A; a++)
        for (int e = 0; e < E; e++)
            ck_assert_msg(counts[(size_t)a * E + e] == want[e], "app %d expert %d: %lld, want %lld", a, e,
                          (long long)counts[(size_t)a * E + e], (long long)want[e]);
    free(counts);
    free(table);
}

START_TEST(routes_by_input_token) {
    ModelConfig c = mtu_config(HASH_JSON(",\"hash_seed\":5"));
    Backend *be = mtu_backend();
    Model *m = mtu_noisy_model(be, c, 61);
    const int B = 2, T = 6, N = B * T, V = c.n_tokens;
    int32_t in[12], tg[12];
    uint8_t valid[12];
    mtu_tokens(in, N, V, 62);
    mtu_tokens(tg, N, V, 63);
    for (int i = 0; i < N; i++) valid[i] = (i % 5) != 4;
    float *lg = malloc(sizeof(float) * N * V);
    model_forward_eval(m, in, B, T, lg);
    expect_counts_of_tokens(m, in, NULL, N, 1);
    be->zero(be, model_grads(m), model_n_params(m) * sizeof(scalar_t));
    StepStats st;
    model_train_step(m, in, tg, valid, B, T, 1.0, &st, NULL);
    model_train_step(m, in, tg, valid, B, T, 1.0, NULL, NULL);
    expect_counts_of_tokens(m, in, valid, N, 2);
    ck_assert(st.reg_ffn == 0.0); /* balance "none" */
    /* every parameter is used: no dead router or ln2 left behind */
    scalar_t *g = mtu_download(m, model_grads(m));
    mtu_assert_every_tensor_has_gradient(m, g);
    free(g);
    free(lg);
    model_free(m);
    backend_destroy(be);
}
END_TEST

/* The depth analysis's path: model_embed + model_run_layers + model_head gives model_forward_eval's logits, and
 * model_run_layers on n copies of the embedded sequence, given the ids of each copy, routes each copy alike. */
START_TEST(embed_run_layers_and_repeats) {
    ModelConfig c = mtu_config(HASH_JSON(""));
    Backend *be = mtu_backend();
    Model *m = mtu_noisy_model(be, c, 64);
    const int T = 7, V = c.n_tokens, C = c.d_model, R = 3;
    int32_t in[7], in_copies[3 * 7];
    mtu_tokens(in, T, V, 65);
    for (int r = 0; r < R; r++) memcpy(in_copies + r * T, in, sizeof in);
    float *ref = malloc(sizeof(float) * T * V), *got = malloc(sizeof(float) * R * T * V);
    model_forward_eval(m, in, 1, T, ref);
    scalar_t *h = be->alloc(be, sizeof(scalar_t) * R * T * C), *logits = be->alloc(be, sizeof(scalar_t) * R * T * V);
    model_embed(m, h, in, 1, T);
    for (int r = 1; r < R; r++) be->copy(be, h + (size_t)r * T * C, h, sizeof(scalar_t) * T * C);
    model_run_layers(m, h, in_copies, R, T, 0, NULL);
    model_head(m, logits, h, R, T);
    scalar_t *host = malloc(sizeof(scalar_t) * R * T * V);
    be->to_host(be, host, logits, sizeof(scalar_t) * R * T * V);
    double worst = 0;
    for (int r = 0; r < R; r++)
        for (int i = 0; i < T * V; i++) worst = fmax(worst, fabs((double)host[(size_t)r * T * V + i] - ref[i]));
    ck_assert_msg(worst < 1e-5, "embed + run_layers differs from the eval forward by %g", worst);
    free(host);
    be->free(be, h);
    be->free(be, logits);
    /* another seed routes otherwise: the logits change (same weights) */
    ModelConfig c2 = mtu_config(HASH_JSON(",\"hash_seed\":2"));
    Model *m2 = mtu_noisy_model(be, c2, 64);
    model_forward_eval(m2, in, 1, T, got);
    worst = 0;
    for (int i = 0; i < T * V; i++) worst = fmax(worst, fabs(got[i] - ref[i]));
    ck_assert_msg(worst > 1e-4, "hash_seed 2 gives the logits of seed 1 (%g)", worst);
    model_free(m2);
    free(ref);
    free(got);
    model_free(m);
    backend_destroy(be);
}
END_TEST

/* The checkpoint's config carries routing "hash" and hash_seed: a model created from it routes as the saved one. */
START_TEST(checkpoint_is_self_describing) {
    char dir[256], path[512], err[512] = "";
    snprintf(dir, sizeof dir, "/tmp/test_hash_routing.%ld", (long)getpid());
    ck_assert_int_eq(mkdir_p(dir, err, sizeof err), 0);
    snprintf(path, sizeof path, "%s/m.safetensors", dir);
    ModelConfig c = mtu_config(HASH_JSON(",\"hash_seed\":9"));
    Backend *be = mtu_backend();
    Model *a = mtu_noisy_model(be, c, 66);
    ck_assert_msg(model_save_safetensors(a, path, err, sizeof err) == 0, "%s", err);
    ModelConfig back;
    ck_assert_msg(model_read_checkpoint_config(path, &back, err, sizeof err) == 0, "%s", err);
    ck_assert_int_eq(back.routing, ROUTING_HASH);
    ck_assert_int_eq(back.hash_seed, 9);
    Model *b = model_create(&back, be);
    ck_assert_msg(model_load_safetensors(b, path, err, sizeof err) == 0, "%s", err);
    const int T = 6, V = c.n_tokens;
    int32_t in[6];
    mtu_tokens(in, T, V, 67);
    float la[66], lb[66];
    model_forward_eval(a, in, 1, T, la);
    model_forward_eval(b, in, 1, T, lb);
    ck_assert(memcmp(la, lb, sizeof la) == 0);
    model_free(a);
    model_free(b);
    backend_destroy(be);
    remove_tree(dir);
}
END_TEST

/* The ids are an argument of every layer call: a hash model's layers run without them end the program (exit 1, one
 * line naming the missing ids), never route by stale ids of an earlier call. */
START_TEST(layers_without_ids_die) {
    ModelConfig c = mtu_config(HASH_JSON(""));
    Backend *be = mtu_backend();
    Model *m = mtu_noisy_model(be, c, 68);
    const int T = 5;
    int32_t in[5];
    mtu_tokens(in, T, c.n_tokens, 69);
    scalar_t *h = be->alloc(be, sizeof(scalar_t) * T * c.d_model);
    model_embed(m, h, in, 1, T);
    model_run_layers(m, h, in, 1, T, 0, NULL); /* with them: fine */
    model_run_layers(m, h, NULL, 1, T, 0, NULL); /* dies */
}
END_TEST

int main(void) {
    Suite *s = suite_create("hash_routing");
    TCase *tc = tcase_create("hash");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, table_definition);
    tcase_add_test(tc, table_balanced_and_seeded);
    tcase_add_test(tc, tensors_and_count);
    tcase_add_test(tc, routes_by_input_token);
    tcase_add_test(tc, embed_run_layers_and_repeats);
    tcase_add_test(tc, checkpoint_is_self_describing);
    tcase_add_exit_test(tc, layers_without_ids_die, 1);
    suite_add_tcase(s, tc);
    return run_test_suite(s);
}
