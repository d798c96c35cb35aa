/* MoEUT initialisation statistics of the DM-math 244M configuration (dm-math-training-code.md §C.2,
 * moeut-spec.md §8.3.9) on ONE distinct layer: a bare Model with a layer-sized registry (about 113M parameters)
 * instead of the whole model. Expected stds with s = sqrt(2/18): keys, q, k, v, routers s/32 = 0.0104167;
 * values s/sqrt(387*128) = 0.0014977; o s/sqrt(512) = 0.0147314. FFN router rows end with equal L2 norm
 * (renorm_keep_std, about 0.333); the attention routers get renorm_rows (unequal norms); LayerNorms 1 / 0. */
#include "model/moeut_internal.h" /* (a direct model/ include makes the build link the nn library) */
#include "tests/unit/moeut_test_util.h"
#include "tests/unit/suite_runner.h"

static const char *CFG_244M =
    "{\"arch\":\"moeut\",\"n_tokens\":512,\"d_model\":1024,\"n_layers\":18,\"n_heads\":4,\"d_head\":128,"
    "\"ff_n_experts\":387,\"ff_expert_size\":128,\"ff_k\":16,\"att_n_experts\":10,\"att_k\":2,\"group_size\":2,"
    "\"lm_head_bias\":false,\"out_norm_affine\":false}";

typedef struct {
    double mean, std; /* unbiased std */
    size_t n;
} TensorStats;

/* Streams a backend tensor through a host chunk (the largest tensors are 50M elements). */
static TensorStats tensor_stats(Backend *be, const scalar_t *dev, size_t n) {
    const size_t chunk = (size_t)1 << 20;
    scalar_t *buf = mt_xmalloc(chunk * sizeof(scalar_t));
    double sum = 0, sumsq = 0;
    for (size_t done = 0; done < n; done += chunk) {
        size_t k = n - done < chunk ? n - done : chunk;
        be->to_host(be, buf, dev + done, k * sizeof(scalar_t));
        double s = 0, s2 = 0;
        for (size_t i = 0; i < k; i++) s += buf[i], s2 += (double)buf[i] * buf[i];
        sum += s, sumsq += s2;
    }
    free(buf);
    TensorStats t = {sum / (double)n, 0, n};
    t.std = sqrt((sumsq - (double)n * t.mean * t.mean) / (double)(n - 1));
    return t;
}

/* Row L2 norms of a [rows, cols] tensor; returns min and max. */
static void row_norm_range(Backend *be, const scalar_t *dev, int rows, int cols, double *lo, double *hi) {
    double *x = mt_download(be, dev, (size_t)rows * cols);
    *lo = INFINITY, *hi = 0;
    for (int r = 0; r < rows; r++) {
        double ss = 0;
        for (int c = 0; c < cols; c++) ss += x[(size_t)r * cols + c] * x[(size_t)r * cols + c];
        *lo = fmin(*lo, sqrt(ss)), *hi = fmax(*hi, sqrt(ss));
    }
    free(x);
}

START_TEST(init_statistics_244M) {
    Backend *be = mtu_backend();
    ModelConfig cfg = mtu_config(CFG_244M);
    /* A bare Model holding only distinct layer 0 (the wrapper's model_create would allocate all 228M parameters
     * and their gradients). */
    Model *m = calloc(1, sizeof *m);
    ck_assert_ptr_nonnull(m);
    m->cfg = cfg;
    m->be = be;
    m->impls[LAYER_MOEUT] = &moeut_layer_impl;
    m->n_distinct[LAYER_MOEUT] = 1;
    m->n_apps_of[LAYER_MOEUT] = cfg.n_layers;
    m->layer_prefix[LAYER_MOEUT] = "transformer.layers";
    m->impls[LAYER_MOEUT]->register_params(m, 0);
    const size_t C = 1024, H = 4, D = 128, EA = 10, E = 387, S = 128, V = 512;
    const size_t layer_params =
        2 * H * D * C + 2 * H * EA * C * D + 2 * H * EA * C + 2 * C /* attention */ + 2 * E * S * C + E * C + 2 * C;
    ck_assert_uint_eq(m->n_params, layer_params); /* moeut-spec.md §6.9 per-layer formula */
    ck_assert_uint_eq(2 * layer_params + 2 * V * C, 227981312); /* dm-math-training-code.md §A */
    ck_assert_uint_eq(2 * layer_params + 2 * 8000 * C + 8000 + 2 * C, 243326784); /* moeut-spec.md §8.3.9 */
    m->params = be->alloc(be, m->n_params * sizeof(scalar_t));
    Rng rng;
    rng_seed(&rng, 1234);
    m->impls[LAYER_MOEUT]->init_params(m, 0, &rng);

    const double s = sqrt(2.0 / 18.0);
    struct {
        const char *name;
        double want, rel_tol;
    } expect[] = {
        /* tolerances ~5-10 standard errors of a std estimate (1/sqrt(2n)) */
        {"ffn.keys", 0.0104167, 1e-3},        {"ffn.values", 0.0014977, 1e-3},   {"attention.o", 0.0147314, 3e-3},
        {"attention.v", 0.0104167, 3e-3},     {"attention.q.weight", 0.0104167, 1e-2},
        {"attention.k.weight", 0.0104167, 1e-2}, {"ffn.expert_sel", 0.0104167, 1e-2},
        {"attention.sel_v", 0.0104167, 3e-2}, {"attention.sel_o", 0.0104167, 3e-2},
    };
    ck_assert_double_eq_tol(s / 32, 0.0104167, 1e-7);
    ck_assert_double_eq_tol(s / sqrt(387.0 * 128), 0.0014977, 1e-7);
    ck_assert_double_eq_tol(s / sqrt(512.0), 0.0147314, 1e-7);
    for (size_t i = 0; i < sizeof expect / sizeof expect[0]; i++) {
        const ParamTensor *t = mt_tensor(m, 0, expect[i].name);
        TensorStats st = tensor_stats(be, m->params + t->offset, t->numel);
        ck_assert_msg(fabs(st.std / expect[i].want - 1) < expect[i].rel_tol, "%s: std %.7g, want %.7g", t->name,
                      st.std, expect[i].want);
        ck_assert_msg(fabs(st.mean) < 6 * st.std / sqrt((double)st.n), "%s: mean %g", t->name, st.mean);
    }
    /* FFN router: renorm_keep_std -> equal row norms = global std * sqrt(C) (approximately; 0.3328 in the spec's run) */
    double lo, hi;
    const ParamTensor *sel = mt_tensor(m, 0, "ffn.expert_sel");
    row_norm_range(be, m->params + sel->offset, (int)E, (int)C, &lo, &hi);
    TensorStats sst = tensor_stats(be, m->params + sel->offset, sel->numel);
    ck_assert_msg((hi - lo) / hi < 1e-5, "FFN router row norms differ: %.7g .. %.7g", lo, hi);
    ck_assert_msg(fabs(hi / (sst.std * sqrt((double)C)) - 1) < 2e-3, "row norm %g vs std*sqrt(C) %g", hi,
                  sst.std * sqrt((double)C));
    ck_assert_msg(fabs(hi - 0.3333) < 0.004, "FFN router row norm %g", hi);
    /* attention routers: renorm_rows keeps per-row stds, so the norms stay unequal */
    const char *att_sel[2] = {"attention.sel_v", "attention.sel_o"};
    for (int i = 0; i < 2; i++) {
        const ParamTensor *t = mt_tensor(m, 0, att_sel[i]);
        row_norm_range(be, m->params + t->offset, (int)(H * EA), (int)C, &lo, &hi);
        ck_assert_msg((hi - lo) / hi > 1e-3, "%s rows unexpectedly equal-norm (%g .. %g)", t->name, lo, hi);
    }
    const char *ln[4] = {"ln1.weight", "ln1.bias", "ln2.weight", "ln2.bias"};
    for (int i = 0; i < 4; i++) {
        const ParamTensor *t = mt_tensor(m, 0, ln[i]);
        double *x = mt_download(be, m->params + t->offset, t->numel);
        for (size_t j = 0; j < t->numel; j++) ck_assert_double_eq(x[j], (i % 2 == 0) ? 1.0 : 0.0);
        free(x);
    }
    m->impls[LAYER_MOEUT]->destroy(m);
    be->free(be, m->params);
    free(m->tensors); /* the registry's array (model_free's part of a Model) */
    free(m);
    backend_destroy(be);
}
END_TEST

/* Registration: names, shapes and order of one layer's tensors (the reference state_dict). */
START_TEST(registration_names_and_shapes) {
    Backend *be = mtu_backend();
    ModelConfig cfg = mtu_config("{\"arch\":\"moeut\",\"n_tokens\":7,\"d_model\":16,\"n_layers\":4,\"n_heads\":2,"
                                "\"d_head\":8,\"ff_n_experts\":6,\"ff_expert_size\":5,\"ff_k\":2,\"att_n_experts\":3,"
                                "\"att_k\":2,\"group_size\":2}");
    Model *m = model_create(&cfg, be);
    struct {
        const char *suffix;
        int ndim;
        int64_t shape[3];
    } want[] = {
        {"attention.q.weight", 2, {16, 16}}, {"attention.k.weight", 2, {16, 16}}, {"attention.v", 3, {6, 16, 8}},
        {"attention.o", 3, {6, 8, 16}},      {"attention.sel_v", 2, {6, 16}},     {"attention.sel_o", 2, {6, 16}},
        {"ffn.keys", 3, {6, 16, 5}},         {"ffn.values", 3, {6, 5, 16}},       {"ffn.expert_sel", 2, {6, 16}},
        {"ln1.weight", 1, {16}},             {"ln1.bias", 1, {16}},               {"ln2.weight", 1, {16}},
        {"ln2.bias", 1, {16}},
    };
    for (int layer = 0; layer < 2; layer++) {
        size_t prev = 0;
        for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
            const ParamTensor *t = mt_tensor(m, layer, want[i].suffix);
            ck_assert_int_eq(t->ndim, want[i].ndim);
            for (int d = 0; d < t->ndim; d++) ck_assert_int_eq(t->shape[d], want[i].shape[d]);
            if (i > 0) ck_assert_uint_gt(t->offset, prev); /* registration order */
            prev = t->offset;
        }
    }
    ck_assert_ptr_null(model_find_tensor(m, "transformer.layers.2.ffn.keys")); /* only Gs distinct layers */
    model_free(m);
    backend_destroy(be);
}
END_TEST

int main(void) {
    Suite *s = suite_create("moeut_init");
    TCase *tc = tcase_create("init");
    tcase_set_timeout(tc, 300);
    tcase_add_test(tc, registration_names_and_shapes);
    tcase_add_test(tc, init_statistics_244M);
    suite_add_tcase(s, tc);
    return run_test_suite(s);
}
