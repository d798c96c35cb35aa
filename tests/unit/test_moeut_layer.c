/* MoEUT layer, float32: forward semantics against the independent host reference (moeut-spec.md §8.3.3, §8.3.4),
 * causality, KV-cache decoding, train/eval agreement, expert dropout and the regularizer plumbing. */
#include "model/moeut_internal.h" /* (a direct model/ include makes the build link the nn library) */
#include "tests/unit/moeut_reference.h"
#include "tests/unit/suite_runner.h"

/* A config string with the shape parameters that vary between the tests. */
static ModelConfig cfg_of(int n_layers, int group_size, int EA, int KA, int E, int K, double ff_drop, double att_drop) {
    char json[1024];
    snprintf(json, sizeof json,
             "{\"arch\":\"moeut\",\"n_tokens\":7,\"d_model\":16,\"n_layers\":%d,\"n_heads\":2,\"d_head\":8,"
             "\"ff_n_experts\":%d,\"ff_expert_size\":6,\"ff_k\":%d,\"att_n_experts\":%d,\"att_k\":%d,"
             "\"group_size\":%d,\"ff_expert_dropout\":%.17g,\"att_expert_dropout\":%.17g,\"lm_head_bias\":false,"
             "\"out_norm_affine\":false}",
             n_layers, E, K, EA, KA, group_size, ff_drop, att_drop);
    return mtu_config(json);
}

/* In-place eval forward of applications [0, L) on host x (B sequences of T tokens). */
static double *infer_layers(Model *m, const double *x, int B, int T) {
    Backend *be = model_backend(m);
    const size_t nc = (size_t)B * T * model_config(m)->d_model;
    scalar_t *h = be->alloc(be, nc * sizeof(scalar_t));
    mt_upload(be, h, x, nc);
    for (int a = 0; a < model_config(m)->n_layers; a++)
        model_app_impl(m, a)->forward_infer(m, a, h, B, T, NULL, NULL, 0);
    double *y = mt_download(be, h, nc);
    be->free(be, h);
    return y;
}

static void assert_close(const double *a, const double *b, size_t n, double tol, const char *what) {
    double worst = 0;
    size_t at = 0;
    for (size_t i = 0; i < n; i++) {
        double e = fabs(a[i] - b[i]) / (1 + fabs(b[i]));
        if (e > worst) worst = e, at = i;
    }
    ck_assert_msg(worst <= tol, "%s: element %zu differs: %.9g vs %.9g (rel %.3g > %.3g)", what, at, a[at],
                  b[at], worst, tol);
}

/* The eval forward of the single layer of f on x ~ N(0,1) [B,T,C] (drawn from f->rng) equals the reference's closed
 * forms (MT_REF_DENSE) within 2e-5. Returns max |y - x|, how far the layer moved the residual stream. */
static double check_dense_closed_forms(MtLayerModel *f, int B, int T, const char *what) {
    const size_t nc = (size_t)B * T * f->cfg.d_model;
    double *x = mt_randn(nc, 1.0, &f->rng), *ref = mt_xmalloc(nc * sizeof(double));
    RefLayer P;
    ref_load(f->m, 0, &P);
    ref_layer_forward(&f->cfg, &P, x, B, T, ref, MT_REF_DENSE);
    double *y = infer_layers(f->m, x, B, T);
    assert_close(y, ref, nc, 2e-5, what);
    double moved = 0;
    for (size_t i = 0; i < nc; i++) moved = fmax(moved, fabs(y[i] - x[i]));
    ref_free(&P);
    free(x), free(y), free(ref);
    return moved;
}

/* §8.3.3 and §8.3.4 (first bullet): with K = E the σ-MoE is the dense map sum_e σ(l_e) ReLU(x1 Keys_e) Values_e, and
 * with EA = KA = 1 SwitchHead is out = sum_h σ(lo_h) attn_h(σ(lv_h) x V_h) O_h, both through the generic top-k path. */
START_TEST(dense_equivalence_K_eq_E_and_EA_1) {
    MtLayerModel f = mt_layer_model(cfg_of(1, 1, 1, 1, 4, 4, 0, 0), 101);
    double moved = check_dense_closed_forms(&f, 2, 6, "K=E, EA=1 vs dense formulas");
    /* the layer must actually do something beyond the residual */
    ck_assert_msg(moved > 0.1, "layer output equals its input (%g)", moved);
    mt_layer_model_free(&f);
}
END_TEST

/* §8.3.4 (second bullet): KA = EA with the EA experts of each head identical gives v = (sum_e σ(lv_e)) x V_h and
 * out = sum_h (sum_e σ(lo_e)) r_h O_h. */
START_TEST(identical_attention_experts_sum_their_gates) {
    MtLayerModel f = mt_layer_model(cfg_of(1, 1, 3, 3, 5, 5, 0, 0), 102);
    const int H = f.cfg.n_heads, EA = f.cfg.att_n_experts;
    const char *names[2] = {"attention.v", "attention.o"};
    for (int w = 0; w < 2; w++) { /* copy expert h*EA into h*EA+1 .. h*EA+EA-1 */
        const ParamTensor *t = mt_tensor(f.m, 0, names[w]);
        size_t per = t->numel / (size_t)(H * EA);
        double *x = mt_download(f.be, model_params(f.m) + t->offset, t->numel);
        for (int h = 0; h < H; h++)
            for (int e = 1; e < EA; e++)
                memcpy(x + (size_t)(h * EA + e) * per, x + (size_t)h * EA * per, per * sizeof(double));
        mt_upload(f.be, model_params(f.m) + t->offset, x, t->numel);
        free(x);
    }
    check_dense_closed_forms(&f, 2, 5, "KA=EA identical experts vs summed gates");
    mt_layer_model_free(&f);
}
END_TEST

/* The general layer (top-k routing in both SwitchHead routers and the σ-MoE) against the host reference, for the
 * eval forward and the training forward; two distinct layers applied twice (ABAB). */
START_TEST(general_forward_matches_reference) {
    MtLayerModel f = mt_layer_model(cfg_of(4, 2, 4, 2, 7, 3, 0, 0), 103);
    const int B = 3, T = 5;
    const size_t nc = (size_t)B * T * f.cfg.d_model;
    double *x = mt_randn(nc, 1.0, &f.rng);
    double *ref = mt_xmalloc(nc * sizeof(double)), *tmp = mt_xmalloc(nc * sizeof(double));
    RefLayer P[2];
    for (int l = 0; l < 2; l++) ref_load(f.m, l, &P[l]);
    memcpy(ref, x, nc * sizeof(double));
    for (int a = 0; a < f.cfg.n_layers; a++) {
        ref_layer_forward(&f.cfg, &P[a % 2], ref, B, T, tmp, MT_REF_TOPK);
        memcpy(ref, tmp, nc * sizeof(double));
    }
    double *y = infer_layers(f.m, x, B, T);
    assert_close(y, ref, nc, 1e-4, "eval forward vs reference");
    MtStack s = mt_stack(f.m, B, T, NULL);
    mt_stack_forward(&s, x, NULL, tmp, NULL);
    assert_close(tmp, y, nc, 1e-6, "training forward vs eval forward");
    mt_stack_free(&s);
    for (int l = 0; l < 2; l++) ref_free(&P[l]);
    free(x), free(y), free(ref), free(tmp);
    mt_layer_model_free(&f);
}
END_TEST

/* §8.3.4: perturbing token t' of one sequence changes no output at t < t' and nothing in the other sequences. */
START_TEST(causality) {
    MtLayerModel f = mt_layer_model(cfg_of(2, 1, 4, 2, 6, 2, 0, 0), 104);
    const int B = 2, T = 6, C = f.cfg.d_model, tp = 3;
    const size_t nc = (size_t)B * T * C;
    double *x = mt_randn(nc, 1.0, &f.rng);
    double *y0 = infer_layers(f.m, x, B, T);
    for (int c = 0; c < C; c++) x[(size_t)tp * C + c] += 0.5 * rng_normal(&f.rng); /* sequence 0, position tp */
    double *y1 = infer_layers(f.m, x, B, T);
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T; t++) {
            double d = 0;
            for (int c = 0; c < C; c++) {
                size_t i = ((size_t)b * T + t) * C + c;
                d = fmax(d, fabs(y1[i] - y0[i]));
            }
            if (b == 0 && t >= tp)
                ck_assert_msg(d > 1e-3, "position %d did not react to the perturbation at %d (%g)", t, tp, d);
            else
                ck_assert_msg(d <= 1e-6, "sequence %d position %d changed by %g after perturbing (0, %d)", b, t, d, tp);
        }
    free(x), free(y0), free(y1);
    mt_layer_model_free(&f);
}
END_TEST

/* §8.3.5: decoding through the KV cache in uneven chunks (RoPE offset = cache length) equals the full forward. */
START_TEST(kv_cache_matches_full_forward) {
    MtLayerModel f = mt_layer_model(cfg_of(4, 2, 4, 2, 6, 2, 0, 0), 105);
    Backend *be = f.be;
    Model *m = f.m;
    const int T = 9, C = f.cfg.d_model, L = f.cfg.n_layers, HD = f.cfg.n_heads * f.cfg.d_head;
    double *x = mt_randn((size_t)T * C, 1.0, &f.rng);
    double *full = infer_layers(m, x, 1, T);
    LayerKV kv[4];
    for (int a = 0; a < L; a++) {
        kv[a].k = be->alloc(be, (size_t)T * HD * sizeof(scalar_t));
        kv[a].v = be->alloc(be, (size_t)T * HD * sizeof(scalar_t));
    }
    const int chunks[] = {4, 1, 3, 1};
    int pos = 0;
    scalar_t *h = be->alloc(be, (size_t)T * C * sizeof(scalar_t));
    for (size_t ci = 0; ci < sizeof chunks / sizeof chunks[0]; ci++) {
        int n = chunks[ci];
        mt_upload(be, h, x + (size_t)pos * C, (size_t)n * C);
        for (int a = 0; a < L; a++) model_app_impl(m, a)->forward_infer(m, a, h, 1, n, NULL, &kv[a], pos);
        double *y = mt_download(be, h, (size_t)n * C);
        assert_close(y, full + (size_t)pos * C, (size_t)n * C, 2e-5, "KV-cache chunk vs full forward");
        free(y);
        pos += n;
    }
    ck_assert_int_eq(pos, T);
    be->free(be, h);
    for (int a = 0; a < L; a++) be->free(be, kv[a].k), be->free(be, kv[a].v);
    free(x), free(full);
    mt_layer_model_free(&f);
}
END_TEST

/* Expert-dropout masks: each entry dropped with probability p, never fewer than k survivors per row, deterministic
 * in the RNG. */
START_TEST(dropout_mask_properties) {
    const long rows = 4000;
    const int E = 10, k = 3;
    uint8_t *mask = mt_xmalloc((size_t)rows * E), *again = mt_xmalloc((size_t)rows * E);
    Rng r1, r2;
    rng_seed(&r1, 7);
    rng_seed(&r2, 7);
    moeut_make_drop_mask(&r1, mask, rows, E, k, 0.3);
    moeut_make_drop_mask(&r2, again, rows, E, k, 0.3);
    ck_assert_int_eq(memcmp(mask, again, (size_t)rows * E), 0);
    long dropped = 0;
    for (long i = 0; i < rows; i++) {
        int kept = 0;
        for (int e = 0; e < E; e++) kept += !mask[i * E + e], dropped += mask[i * E + e];
        ck_assert_int_ge(kept, k);
    }
    /* P(fewer than 3 of 10 kept) = 1.6e-3 at p = 0.3, so the refill barely moves the rate: 0.3 +- 5 sigma */
    double rate = (double)dropped / (double)(rows * E);
    ck_assert_msg(fabs(rate - 0.3) < 5 * sqrt(0.21 / (rows * E)), "drop rate %g", rate);
    /* p close to 1: the refill leaves exactly k, and which ones varies between rows */
    moeut_make_drop_mask(&r1, mask, rows, E, k, 0.999);
    long first_kept[10] = {0};
    for (long i = 0; i < rows; i++) {
        int kept = 0;
        for (int e = 0; e < E; e++) kept += !mask[i * E + e], first_kept[e] += !mask[i * E + e];
        ck_assert_int_eq(kept, k);
    }
    for (int e = 0; e < E; e++) /* uniform refill: each expert kept in ~k/E = 30% of the rows */
        ck_assert_msg(fabs((double)first_kept[e] / rows - 0.3) < 0.05, "expert %d kept in %ld rows", e, first_kept[e]);
    free(mask), free(again);
}
END_TEST

/* In training, no dropped expert is ever selected (masks replayed from the same RNG state, in the layer's order
 * v, o, ffn), dropout changes some selections, and the eval forward ignores dropout. */
START_TEST(expert_dropout_in_layer) {
    MtLayerModel f = mt_layer_model(cfg_of(1, 1, 5, 2, 8, 3, 0.5, 0.5), 106);
    Backend *be = f.be;
    Model *m = f.m;
    const ModelConfig cfg = f.cfg;
    model_set_dropout_seed(m, 77);
    const int B = 2, T = 6, N = B * T, H = cfg.n_heads, EA = cfg.att_n_experts, E = cfg.ff_n_experts;
    const int KA = cfg.att_k, K = cfg.ff_k;
    const size_t nc = (size_t)N * cfg.d_model;
    double *x = mt_randn(nc, 1.0, &f.rng);
    Rng replay = m->dropout_rng;
    MtStack s = mt_stack(m, B, T, NULL);
    mt_stack_forward(&s, x, NULL, NULL, NULL);
    uint8_t *mv = mt_xmalloc((size_t)N * H * EA), *mo = mt_xmalloc((size_t)N * H * EA), *mf = mt_xmalloc((size_t)N * E);
    moeut_make_drop_mask(&replay, mv, (long)N * H, EA, KA, 0.5);
    moeut_make_drop_mask(&replay, mo, (long)N * H, EA, KA, 0.5);
    moeut_make_drop_mask(&replay, mf, N, E, K, 0.5);
    MoeutAppCache *ac = &moeut_state(m)->apps[0];
    int32_t *sv = mt_xmalloc((size_t)N * H * KA * sizeof(int32_t));
    int32_t *so = mt_xmalloc((size_t)N * H * KA * sizeof(int32_t));
    int32_t *sf = mt_xmalloc((size_t)N * K * sizeof(int32_t));
    be->to_host(be, sv, ac->sel_v, (size_t)N * H * KA * sizeof(int32_t));
    be->to_host(be, so, ac->sel_o, (size_t)N * H * KA * sizeof(int32_t));
    be->to_host(be, sf, ac->sel_f, (size_t)N * K * sizeof(int32_t));
    for (int n = 0; n < N; n++) {
        for (int h = 0; h < H; h++)
            for (int j = 0; j < KA; j++) {
                int gv = sv[(n * H + h) * KA + j], go = so[(n * H + h) * KA + j];
                ck_assert_int_eq(gv / EA, h); /* global ids h*EA+e */
                ck_assert_int_eq(go / EA, h);
                ck_assert_msg(!mv[(size_t)n * H * EA + gv], "dropped v expert %d selected at token %d", gv, n);
                ck_assert_msg(!mo[(size_t)n * H * EA + go], "dropped o expert %d selected at token %d", go, n);
            }
        for (int j = 0; j < K; j++) ck_assert_msg(!mf[(size_t)n * E + sf[n * K + j]], "dropped ffn expert selected");
    }
    /* the same forward without dropout selects differently somewhere */
    double *y_drop = mt_xmalloc(nc * sizeof(double));
    mt_stack_forward(&s, x, NULL, y_drop, NULL);
    ModelConfig nodrop = cfg;
    nodrop.ff_expert_dropout = nodrop.att_expert_dropout = 0;
    m->cfg = nodrop;
    double *y_plain = mt_xmalloc(nc * sizeof(double));
    mt_stack_forward(&s, x, NULL, y_plain, NULL);
    double diff = 0;
    for (size_t i = 0; i < nc; i++) diff = fmax(diff, fabs(y_drop[i] - y_plain[i]));
    ck_assert_msg(diff > 1e-3, "expert dropout had no effect (%g)", diff);
    /* eval mode ignores dropout: equal to the no-dropout training forward */
    m->cfg = cfg;
    double *y_eval = infer_layers(m, x, B, T);
    assert_close(y_eval, y_plain, nc, 1e-6, "eval forward with dropout configured");
    mt_stack_free(&s);
    free(x), free(mv), free(mo), free(mf), free(sv), free(so), free(sf), free(y_drop), free(y_plain), free(y_eval);
    mt_layer_model_free(&f);
}
END_TEST

/* Zero routers give uniform softmax routing: every module's term is -log(#experts), summed over the Gs distinct
 * layers (FFN) and over v and o (attention); random routers give a value in (-log E, 0]. */
START_TEST(regularizer_values) {
    MtLayerModel f = mt_layer_model(cfg_of(4, 2, 4, 2, 6, 2, 0, 0), 107);
    Model *m = f.m;
    const ModelConfig cfg = f.cfg;
    for (int l = 0; l < 2; l++) { /* zero routers (mt_fill_tensor draws nothing from the RNG) */
        mt_fill_tensor(m, l, "ffn.expert_sel", 0);
        mt_fill_tensor(m, l, "attention.sel_v", 0);
        mt_fill_tensor(m, l, "attention.sel_o", 0);
    }
    const int B = 2, T = 5;
    const size_t nc = (size_t)B * T * cfg.d_model;
    double *x = mt_randn(nc, 1.0, &f.rng);
    MtStack s = mt_stack(m, B, T, NULL);
    StepStats st;
    mt_stack_forward(&s, x, NULL, NULL, &st);
    ck_assert_double_eq_tol(st.reg_ffn, -2 * log((double)cfg.ff_n_experts), 1e-5);
    ck_assert_double_eq_tol(st.reg_att, -2 * 2 * log((double)cfg.att_n_experts), 1e-5);
    for (int l = 0; l < 2; l++) mt_randomize_layer(m, l, 3.0, &f.rng);
    mt_stack_forward(&s, x, NULL, NULL, &st);
    ck_assert_msg(st.reg_ffn > -2 * log((double)cfg.ff_n_experts) + 1e-4 && st.reg_ffn <= 0, "reg_ffn %g", st.reg_ffn);
    ck_assert_msg(st.reg_att > -4 * log((double)cfg.att_n_experts) + 1e-4 && st.reg_att <= 0, "reg_att %g", st.reg_att);
    mt_stack_free(&s);
    free(x);
    mt_layer_model_free(&f);
}
END_TEST

/* f32 backward (with expert dropout, a padding mask and strong regularizers): the derivative of the objective along
 * the normalised gradient direction d = g/|g| equals |g| (central difference over +-eta along d). The f64 tests
 * check every gradient element; this one runs the f32 build and the sanitizers through the backward. */
START_TEST(backward_directional_derivative_f32) {
    char json[1024];
    snprintf(json, sizeof json,
             "{\"arch\":\"moeut\",\"n_tokens\":7,\"d_model\":16,\"n_layers\":2,\"n_heads\":2,\"d_head\":8,"
             "\"ff_n_experts\":6,\"ff_expert_size\":6,\"ff_k\":2,\"att_n_experts\":4,\"att_k\":2,\"group_size\":1,"
             "\"entropy_reg\":0.5,\"att_entropy_reg\":0.3,\"ff_expert_dropout\":0.2,\"att_expert_dropout\":0.2}");
    MtLayerModel f = mt_layer_model(mtu_config(json), 108);
    Backend *be = f.be;
    Model *m = f.m;
    model_set_dropout_seed(m, 5);
    const int B = 2, T = 5;
    static const uint8_t valid[10] = {1, 1, 1, 0, 0, 1, 1, 1, 1, 0};
    const size_t nc = (size_t)B * T * f.cfg.d_model, np = model_n_params(m);
    double *x = mt_randn(nc, 1.0, &f.rng), *proj = mt_randn(nc, 0.3, &f.rng);
    MtStack s = mt_stack(m, B, T, valid);
    Rng drop_state = m->dropout_rng;
    mt_stack_forward(&s, x, proj, NULL, NULL);
    double *dx = mt_stack_backward(&s, proj);
    double *g = mt_download(be, model_grads(m), np), *p0 = mt_download(be, model_params(m), np);
    double norm = 0;
    for (size_t i = 0; i < np; i++) {
        ck_assert_msg(isfinite(g[i]), "gradient %zu not finite", i);
        norm += g[i] * g[i];
    }
    for (size_t i = 0; i < nc; i++) ck_assert_msg(isfinite(dx[i]), "input gradient %zu not finite", i);
    norm = sqrt(norm);
    ck_assert_msg(norm > 1e-2, "gradient norm %g", norm);
    const double eta = 2e-3;
    double J[2];
    double *p = mt_xmalloc(np * sizeof(double));
    for (int side = 0; side < 2; side++) {
        double sign = side == 0 ? 1 : -1;
        for (size_t i = 0; i < np; i++) p[i] = p0[i] + sign * eta * g[i] / norm;
        mt_upload(be, model_params(m), p, np);
        m->dropout_rng = drop_state;
        J[side] = mt_stack_forward(&s, x, proj, NULL, NULL);
    }
    double numeric = (J[0] - J[1]) / (2 * eta);
    ck_assert_msg(fabs(numeric / norm - 1) < 2e-2, "directional derivative %.6g vs |g| %.6g", numeric, norm);
    mt_stack_free(&s);
    free(x), free(proj), free(dx), free(g), free(p0), free(p);
    mt_layer_model_free(&f);
}
END_TEST

/* The backward makes each application's router-logit gradients in its regularizer-gradient slots (no copy): a second
 * forward and backward (regularizers() rewrote the slots) repeats the first one's input gradient bit for bit, and a
 * second backward after one regularizers() dies instead of starting from spent slots. */
START_TEST(backward_twice_after_one_regularizers_dies) {
    MtLayerModel f = mt_layer_model(cfg_of(4, 2, 4, 2, 6, 2, 0, 0), 109);
    const int B = 2, T = 5;
    const size_t nc = (size_t)B * T * f.cfg.d_model;
    double *x = mt_randn(nc, 1.0, &f.rng), *proj = mt_randn(nc, 0.3, &f.rng);
    MtStack s = mt_stack(f.m, B, T, NULL);
    mt_stack_forward(&s, x, proj, NULL, NULL);
    double *dx1 = mt_stack_backward(&s, proj);
    mt_stack_forward(&s, x, proj, NULL, NULL);
    free(x); /* (no longer needed: freed before the call that dies, which the sanitizer build would report as a leak) */
    double *dx2 = mt_stack_backward(&s, proj);
    for (size_t i = 0; i < nc; i++) ck_assert_msg(dx1[i] == dx2[i], "input gradient %zu differs on the repeat", i);
    free(dx1), free(dx2);
    free(mt_stack_backward(&s, proj)); /* dies */
}
END_TEST

int main(void) {
    Suite *s = suite_create("moeut_layer");
    TCase *tc = tcase_create("forward");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, dense_equivalence_K_eq_E_and_EA_1);
    tcase_add_test(tc, identical_attention_experts_sum_their_gates);
    tcase_add_test(tc, general_forward_matches_reference);
    tcase_add_test(tc, causality);
    tcase_add_test(tc, kv_cache_matches_full_forward);
    tcase_add_test(tc, dropout_mask_properties);
    tcase_add_test(tc, expert_dropout_in_layer);
    tcase_add_test(tc, regularizer_values);
    tcase_add_test(tc, backward_directional_derivative_f32);
    tcase_add_exit_test(tc, backward_twice_after_one_regularizers_dies, 1);
    suite_add_tcase(s, tc);
    return run_test_suite(s);
}
