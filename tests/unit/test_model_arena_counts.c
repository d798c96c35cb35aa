/* Every per-token buffer of a Model lives in ONE backend allocation (the activation arena): with the CPU backend's
 * alloc/free wrapped to track LIVE allocations, a dense and a MoEUT model (with expert dropout, so the masks are
 * used) hold exactly
 *   params + grads + the arena
 * after model_create, training steps and eval calls; growing B*T re-plans into again exactly one arena allocation;
 * calls of sizes already planned allocate nothing. Separate on purpose, and checked as such below:
 *   - the KV cache: one allocation per cache (decode state that must outlive the arena's re-plans; model/kv_cache.c)
 *   - AdamW m and v: the trainer's optimizer state (model/optimizer.c), one allocation each
 * A re-plan loses nothing: a model that went through several re-plans computes bit-identical logits, losses and
 * gradients to a fresh one. And the LayerImpl notices a re-plan between train_begin and its forwards. */
#include <check.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/model_internal.h" /* the LayerImpl hooks, for the re-plan guard test */
#include "model/optimizer.h"
#include "model_test_util.h"
#include "suite_runner.h"

/* ---- a CPU backend whose allocations are tracked ---- */

enum { MAX_LIVE = 64 };
static struct {
    void *(*alloc)(Backend *, size_t);
    void (*free)(Backend *, void *);
    void *ptr[MAX_LIVE];
    size_t bytes[MAX_LIVE];
    int live, allocs;
} g;

static void *tracking_alloc(Backend *be, size_t bytes) {
    ck_assert_int_lt(g.live, MAX_LIVE);
    void *p = g.alloc(be, bytes);
    g.ptr[g.live] = p;
    g.bytes[g.live] = bytes;
    g.live++;
    g.allocs++;
    return p;
}
static void tracking_free(Backend *be, void *p) {
    int i = 0;
    while (i < g.live && g.ptr[i] != p) i++;
    ck_assert_msg(i < g.live, "free of a pointer that is not live");
    g.live--;
    g.ptr[i] = g.ptr[g.live];
    g.bytes[i] = g.bytes[g.live];
    g.free(be, p);
}

static Backend *tracking_backend(void) {
    Backend *be = mtu_backend();
    memset(&g, 0, sizeof g);
    g.alloc = be->alloc;
    g.free = be->free;
    be->alloc = tracking_alloc;
    be->free = tracking_free;
    return be;
}

/* Bytes of the live allocation at p (asserting there is one). */
static size_t live_bytes(const void *p) {
    for (int i = 0; i < g.live; i++)
        if (g.ptr[i] == p) return g.bytes[i];
    ck_abort_msg("no live allocation at %p", p);
    return 0;
}

/* Exactly params + grads + the arena (+ MoEUT's routing counts, + `extra` more, named by the caller), the arena
 * being the one live block that is neither params nor grads, of model_activation_bytes bytes. */
static void expect_live(Model *m, int extra) {
    const size_t pbytes = model_n_params(m) * sizeof(scalar_t);
    ck_assert_uint_eq(live_bytes(model_params(m)), pbytes);
    ck_assert_uint_eq(live_bytes(model_grads(m)), pbytes);
    const int arena = model_activation_bytes(m) > 0;
    /* MoEUT's routing counts: [L, E] int64, not per token, made once at model_create (model.h) */
    const int counts = m->routing_counts != NULL;
    ck_assert_msg(g.live == 2 + arena + counts + extra, "%d live allocations, expected params + grads%s%s + %d",
                  g.live, arena ? " + arena" : "", counts ? " + routing counts" : "", extra);
    if (arena) ck_assert_uint_eq(live_bytes(m->arena.block), model_activation_bytes(m));
    if (counts)
        ck_assert_uint_eq(live_bytes(m->routing_counts),
                          (size_t)m->cfg.n_layers * (size_t)m->cfg.ff_n_experts * sizeof(int64_t));
}

/* ---- configs and batches ---- */

static ModelConfig dense_cfg(void) { return mtu_tiny_dense(); }
static ModelConfig moeut_cfg(void) {
    return mtu_config("{\"arch\":\"moeut\",\"n_tokens\":11,\"d_model\":8,\"n_layers\":4,\"n_heads\":2,\"d_head\":4,"
                      "\"ff_n_experts\":5,\"ff_expert_size\":3,\"ff_k\":2,\"att_n_experts\":3,\"att_k\":2,"
                      "\"group_size\":2,\"ff_expert_dropout\":0.2,\"att_expert_dropout\":0.2}");
}
static ModelConfig cfg_of(int arch) { return arch ? moeut_cfg() : dense_cfg(); }

typedef struct {
    int B, T;
    int32_t in[64], tg[64];
    uint8_t valid[64];
} Batch;

static Batch batch(int B, int T, int V, uint64_t seed) {
    Batch b;
    memset(&b, 0, sizeof b);
    ck_assert_int_le(B * T, 64);
    b.B = B, b.T = T;
    mtu_tokens(b.in, (size_t)(B * T), V, seed);
    mtu_tokens(b.tg, (size_t)(B * T), V, seed + 1);
    for (int i = 0; i < B * T; i++) {
        b.valid[i] = i % 4 != 0; /* some masked positions, so the regularizer mask matters */
        if (!b.valid[i]) b.tg[i] = -1;
    }
    return b;
}

static StepStats step(Model *m, const Batch *b, float *logits) {
    StepStats st;
    model_train_step(m, b->in, b->tg, b->valid, b->B, b->T, 0.5, &st, logits);
    return st;
}

/* ---- tests ---- */

/* The whole life of a model: create, train, eval, grow, decode, optimizer, free. */
static void check_live_allocations(int arch) {
    Backend *be = tracking_backend();
    ModelConfig c = cfg_of(arch);
    Model *m = model_create(&c, be);
    model_init_weights(m, 3);
    model_set_dropout_seed(m, 5);
    const int V = c.n_tokens;
    ck_assert_uint_eq(model_activation_bytes(m), 0); /* nothing until a call needs it */
    expect_live(m, 0);

    Batch b1 = batch(2, 5, V, 11);
    float logits[64 * 11];
    step(m, &b1, logits);
    expect_live(m, 0);
    ck_assert_uint_gt(model_activation_bytes(m), 0);
    const int after_first = g.allocs;
    step(m, &b1, logits); /* same size: no allocation at all */
    ck_assert_int_eq(g.allocs, after_first);

    /* eval calls (smaller than the training plan, then larger): still one arena */
    model_forward_eval(m, b1.in, 1, 7, logits);
    expect_live(m, 0);
    model_forward_eval(m, b1.in, 3, 4, logits);
    expect_live(m, 0);
    int before = g.allocs;
    model_forward_eval(m, b1.in, 2, 6, logits);
    step(m, &b1, logits);
    ck_assert_int_eq(g.allocs, before);

    /* the layer-level eval entry points with caller buffers */
    scalar_t *h = be->alloc(be, (size_t)9 * c.d_model * sizeof(scalar_t));
    scalar_t *lg = be->alloc(be, (size_t)9 * V * sizeof(scalar_t));
    expect_live(m, 2);
    model_embed(m, h, b1.in, 1, 9);
    model_run_layers(m, h, b1.in, 1, 9, 1, NULL);
    model_head(m, lg, h, 1, 9);
    expect_live(m, 2);
    be->free(be, h);
    be->free(be, lg);

    /* growing B*T re-plans the whole arena: again exactly one allocation, and larger */
    const size_t small = model_activation_bytes(m);
    Batch b2 = batch(4, 8, V, 12);
    step(m, &b2, logits);
    expect_live(m, 0);
    ck_assert_uint_gt(model_activation_bytes(m), small);
    before = g.allocs;
    step(m, &b1, logits); /* smaller again: fits */
    step(m, &b2, logits);
    ck_assert_int_eq(g.allocs, before);

    /* reserving up front: later calls of those sizes never allocate */
    model_reserve_activations(m, 60, 50);
    expect_live(m, 0);
    before = g.allocs;
    Batch b3 = batch(6, 10, V, 13);
    step(m, &b3, logits);
    model_forward_eval(m, b3.in, 5, 10, logits);
    ck_assert_int_eq(g.allocs, before);

    /* KV cache: one allocation of its own; decoding allocates nothing else */
    KVCache *kv = kv_cache_create(m, 12);
    expect_live(m, 1);
    before = g.allocs;
    model_decode(m, kv, b1.in, 5, logits);
    for (int i = 0; i < 3; i++) model_decode(m, kv, &b1.in[5 + i], 1, logits);
    ck_assert_int_eq(g.allocs, before);
    kv_cache_free(kv);
    expect_live(m, 0);

    /* AdamW m and v: the trainer's, one allocation each */
    AdamW opt;
    adamw_init(&opt, be, model_n_params(m), 0.9, 0.999, 1e-8, 0.01);
    expect_live(m, 2);
    adamw_free(&opt);
    expect_live(m, 0);

    model_free(m);
    ck_assert_int_eq(g.live, 0);
    backend_destroy(be);
}

START_TEST(dense_live_allocations) { check_live_allocations(0); }
END_TEST
START_TEST(moeut_live_allocations) { check_live_allocations(1); }
END_TEST

/* A model whose arena was re-planned several times (eval and training growth in between) gives bit-identical
 * logits, loss, regularizers and gradients to a fresh model: nothing the arena held had to survive. */
static void check_replan_is_invisible(int arch) {
    Backend *be = mtu_backend();
    ModelConfig c = cfg_of(arch);
    const int V = c.n_tokens;
    Model *a = mtu_noisy_model(be, c, 21), *b = mtu_noisy_model(be, c, 21);
    model_set_dropout_seed(a, 9);
    model_set_dropout_seed(b, 9);
    Batch small = batch(1, 4, V, 31), big = batch(3, 7, V, 32);
    float la[64 * 11], lb[64 * 11];

    /* a: a small step and eval calls that re-plan, then the big step; its dropout stream is restored after */
    Rng saved = a->dropout_rng;
    step(a, &small, la);
    model_forward_eval(a, small.in, 2, 2, la);
    model_forward_eval(a, big.in, 3, 7, la);
    a->dropout_rng = saved;
    const size_t n = model_n_params(a);
    be->zero(be, model_grads(a), n * sizeof(scalar_t));
    StepStats sa = step(a, &big, la);
    StepStats sb = step(b, &big, lb);
    ck_assert_mem_eq(la, lb, (size_t)21 * V * sizeof(float));
    ck_assert(sa.ce_sum == sb.ce_sum && sa.reg_ffn == sb.reg_ffn && sa.reg_att == sb.reg_att);
    scalar_t *ga = mtu_download(a, model_grads(a)), *gb = mtu_download(b, model_grads(b));
    ck_assert_mem_eq(ga, gb, n * sizeof(scalar_t));
    free(ga), free(gb);

    /* and the eval path after training growth equals a fresh eval */
    Model *fresh = mtu_noisy_model(be, c, 21);
    model_forward_eval(a, big.in, 2, 5, la);
    model_forward_eval(fresh, big.in, 2, 5, lb);
    ck_assert_mem_eq(la, lb, (size_t)10 * V * sizeof(float));
    model_free(a), model_free(b), model_free(fresh);
    backend_destroy(be);
}

START_TEST(dense_replan_is_invisible) { check_replan_is_invisible(0); }
END_TEST
START_TEST(moeut_replan_is_invisible) { check_replan_is_invisible(1); }
END_TEST

/* Driving the LayerImpl by hand (as the layer tests do): an eval call with more tokens between train_begin and the
 * forwards re-plans the arena under the prepared step; the next forward refuses to run on moved buffers (the one
 * before the eval call runs). Globals keep the objects reachable for LeakSanitizer at the exit. */
static Backend *g_be;
static Model *g_m;
static scalar_t *g_h;
static float g_logits[40 * 11];
static void guard_case(int arch) {
    g_be = mtu_backend();
    ModelConfig c = cfg_of(arch);
    g_m = model_create(&c, g_be);
    model_init_weights(g_m, 1);
    const size_t nc = (size_t)2 * 3 * c.d_model;
    g_h = g_be->alloc(g_be, 3 * nc * sizeof(scalar_t)); /* h_0, h_1, h_2 */
    model_layers_train_begin(g_m, 2, 3, NULL, NULL);
    model_app_impl(g_m, 0)->forward_train(g_m, 0, g_h, g_h + nc);
    int32_t tok[40] = {0};
    model_forward_eval(g_m, tok, 4, 10, g_logits);
    model_app_impl(g_m, 1)->forward_train(g_m, 1, g_h + nc, g_h + 2 * nc); /* dies */
}
START_TEST(dense_replan_after_train_begin_dies) { guard_case(0); }
END_TEST
START_TEST(moeut_replan_after_train_begin_dies) { guard_case(1); }
END_TEST

int main(void) {
    Suite *s = suite_create("model_arena_counts");
    TCase *tc = tcase_create("arena");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, dense_live_allocations);
    tcase_add_test(tc, moeut_live_allocations);
    tcase_add_test(tc, dense_replan_is_invisible);
    tcase_add_test(tc, moeut_replan_is_invisible);
    tcase_add_exit_test(tc, dense_replan_after_train_begin_dies, 1);
    tcase_add_exit_test(tc, moeut_replan_after_train_begin_dies, 1);
    suite_add_tcase(s, tc);
    return run_test_suite(s);
}
