/* Sparse upcycling (model/upcycle.h), f32 on the CPU backend: copy keeps the dense model's function when the gates sum
 * to 1 (logits within f32 rounding; f64_upcycle.c checks the same at f64 rounding), and not without that; split's
 * pieces of one replica add up to the dense FFN; the noise's scale; seeding; the metadata; every refusal. */
#include "upcycle_test_util.h"

#include "model/train_config.h"
#include "suite_runner.h"

/* f32: the same function computed along another summation order */
#define UPC_TOL 2e-5

START_TEST(copy_keeps_function_softmax_renorm) {
    ModelConfig t = upc_target("\"ff_n_experts\":3,\"ff_expert_size\":12,\"ff_k\":2,\"router\":\"softmax\","
                               "\"router_renorm\":true,\"balance\":\"none\"");
    double d = upc_copy_logit_diff(&t);
    ck_assert_msg(d < UPC_TOL, "relative logit difference %g", d);
}
END_TEST

START_TEST(copy_keeps_function_sigmoid_renorm_dense_first) {
    /* layer 0 stays dense (transformer.dense_layers.0, every tensor copied), layers 1-2 become MoE layers 0-1 */
    ModelConfig t = upc_target("\"ff_n_experts\":4,\"ff_expert_size\":12,\"ff_k\":3,\"router\":\"sigmoid\","
                               "\"router_renorm\":true,\"balance\":\"switch\",\"n_dense_first\":1,\"d_ff\":12");
    double d = upc_copy_logit_diff(&t);
    ck_assert_msg(d < UPC_TOL, "relative logit difference %g", d);
}
END_TEST

START_TEST(copy_without_renorm_changes_function) {
    /* gates that do not sum to 1 scale the FFN: the check above can fail */
    ModelConfig t = upc_target("\"ff_n_experts\":3,\"ff_expert_size\":12,\"ff_k\":2,\"router\":\"softmax\","
                               "\"balance\":\"none\"");
    double d = upc_copy_logit_diff(&t);
    ck_assert_msg(d > 1e-3, "relative logit difference %g: expected a visible change", d);
}
END_TEST

/* The FFN tensor "transformer.layers.<l>.ffn.<suffix>" of f as doubles into buf. */
static void load_ffn(const StFile *f, int l, const char *suffix, double *buf) {
    char n[128];
    snprintf(n, sizeof n, "transformer.layers.%d.ffn.%s", l, suffix);
    const StTensor *t = st_find(f, n);
    ck_assert_msg(t != NULL, "%s missing", n);
    st_to_f64(t, buf);
}

/* ReLU(u W1^T + b1) W2^T + b2 of dense layer a of file f, for one input u[C], into y[C]. */
static void dense_ffn(const StFile *f, int a, const double *u, double *y, int C, int F) {
    double *w1 = malloc(sizeof(double) * F * C), *b1 = malloc(sizeof(double) * F), *w2 = malloc(sizeof(double) * C * F),
           *b2 = malloc(sizeof(double) * C);
    load_ffn(f, a, "linear1.weight", w1);
    load_ffn(f, a, "linear1.bias", b1);
    load_ffn(f, a, "linear2.weight", w2);
    load_ffn(f, a, "linear2.bias", b2);
    for (int c = 0; c < C; c++) y[c] = b2[c];
    for (int h = 0; h < F; h++) {
        double z = b1[h];
        for (int c = 0; c < C; c++) z += u[c] * w1[h * C + c];
        if (z > 0)
            for (int c = 0; c < C; c++) y[c] += z * w2[c * F + h];
    }
    free(w1), free(b1), free(w2), free(b2);
}

/* sum over the experts e0 .. e0+G-1 of MoE layer l (gate 1 each) for u[C], into y[C]. */
static void pieces_ffn(const StFile *f, int l, int e0, int G, const double *u, double *y, int C, int E, int S) {
    double *k = malloc(sizeof(double) * E * C * S), *kb = malloc(sizeof(double) * E * S),
           *v = malloc(sizeof(double) * E * S * C), *vb = malloc(sizeof(double) * E * C);
    load_ffn(f, l, "keys", k);
    load_ffn(f, l, "keys_bias", kb);
    load_ffn(f, l, "values", v);
    load_ffn(f, l, "values_bias", vb);
    for (int c = 0; c < C; c++) y[c] = 0;
    for (int e = e0; e < e0 + G; e++) {
        for (int c = 0; c < C; c++) y[c] += vb[e * C + c];
        for (int s = 0; s < S; s++) {
            double z = kb[e * S + s];
            for (int c = 0; c < C; c++) z += u[c] * k[(e * C + c) * S + s];
            if (z > 0)
                for (int c = 0; c < C; c++) y[c] += z * v[(e * S + s) * C + c];
        }
    }
    free(k), free(kb), free(v), free(vb);
}

START_TEST(split_pieces_sum_to_dense_ffn) {
    /* d_ff 12 = G 3 pieces of S 4; E 6 = 2 replicas, each with its own permutation */
    const int C = 8, F = 12, S = 4, G = 3, E = 6;
    const char *dense = upc_path("dense.safetensors"), *out = upc_path("split.safetensors");
    upc_write_dense(dense, 9);
    ModelConfig t = upc_target("\"ff_n_experts\":6,\"ff_expert_size\":4,\"ff_k\":3,\"router\":\"softmax\","
                               "\"balance\":\"switch\"");
    UpcycleOptions o = upc_options(UPCYCLE_SPLIT, 4, 0.0);
    upc_convert_ok(dense, &t, &o, out);
    StFile fd, fm;
    char err[512];
    ck_assert(st_read(&fd, dense, err, sizeof err) == 0);
    ck_assert(st_read(&fm, out, err, sizeof err) == 0);
    Rng r;
    rng_seed(&r, 21);
    for (int a = 0; a < 3; a++)
        for (int rep = 0; rep < E / G; rep++)
            for (int trial = 0; trial < 4; trial++) {
                double u[8], yd[8], ym[8];
                for (int c = 0; c < C; c++) u[c] = 2.0 * rng_normal(&r);
                dense_ffn(&fd, a, u, yd, C, F);
                pieces_ffn(&fm, a, rep * G, G, u, ym, C, E, S);
                for (int c = 0; c < C; c++)
                    ck_assert_msg(fabs(yd[c] - ym[c]) < 1e-5 * (1 + fabs(yd[c])),
                                  "layer %d replica %d: %g vs %g", a, rep, yd[c], ym[c]);
            }
    /* the two replicas are permuted differently (a replica is not a copy of the other), and a single piece is not
     * the whole FFN */
    const StTensor *kb = st_find(&fm, "transformer.layers.0.ffn.keys_bias");
    double b[6 * 4];
    st_to_f64(kb, b);
    ck_assert_msg(memcmp(b, b + G * S, sizeof(double) * G * S) != 0, "both replicas have the same permutation");
    double u[8] = {1, -1, 0.5, 2, -0.3, 0.7, 1.1, -2}, yd[8], y1[8];
    dense_ffn(&fd, 0, u, yd, C, F);
    pieces_ffn(&fm, 0, 0, 1, u, y1, C, E, S);
    double diff = 0;
    for (int c = 0; c < C; c++) diff = fmax(diff, fabs(yd[c] - y1[c]));
    ck_assert_msg(diff > 1e-3, "one piece computes the whole FFN");
    st_free(&fd);
    st_free(&fm);
}
END_TEST

START_TEST(seeded_and_recorded) {
    const char *dense = upc_path("dense.safetensors");
    upc_write_dense(dense, 2);
    ModelConfig t = upc_target("\"ff_n_experts\":4,\"ff_expert_size\":6,\"ff_k\":2,\"balance\":\"none\"");
    UpcycleOptions o = upc_options(UPCYCLE_SPLIT, 7, 0.1);
    const char *a = upc_path("a.safetensors"), *b = upc_path("b.safetensors"), *c = upc_path("c.safetensors");
    upc_convert_ok(dense, &t, &o, a);
    upc_convert_ok(dense, &t, &o, b);
    o.seed = 8;
    upc_convert_ok(dense, &t, &o, c);
    char ha[65], hb[65], hc[65], hd[65], err[512];
    ck_assert(sha256_file_hex(a, ha, err, sizeof err) == 0);
    ck_assert(sha256_file_hex(b, hb, err, sizeof err) == 0);
    ck_assert(sha256_file_hex(c, hc, err, sizeof err) == 0);
    ck_assert(sha256_file_hex(dense, hd, err, sizeof err) == 0);
    ck_assert_str_eq(ha, hb);
    ck_assert_str_ne(ha, hc);
    StFile f;
    ck_assert(st_read(&f, a, err, sizeof err) == 0);
    cJSON *u = cJSON_Parse(st_meta(&f, "upcycle"));
    ck_assert_ptr_nonnull(u);
    ck_assert_str_eq(cJSON_GetObjectItem(u, "method")->valuestring, "split");
    ck_assert_str_eq(cJSON_GetObjectItem(u, "from")->valuestring, "dense_qa");
    ck_assert_int_eq((int)cJSON_GetObjectItem(u, "seed")->valuedouble, 7);
    ck_assert_double_eq(cJSON_GetObjectItem(u, "noise")->valuedouble, 0.1);
    ck_assert_str_eq(cJSON_GetObjectItem(u, "source")->valuestring, dense);
    ck_assert_str_eq(cJSON_GetObjectItem(u, "source_sha256")->valuestring, hd);
    cJSON_Delete(u);
    st_free(&f);
}
END_TEST

START_TEST(noise_scale_and_exact_biases) {
    /* copy with noise 0.2: keys[e] - W1^T has std 0.2 * std(W1); the biases stay exact copies */
    const int C = 8, F = 12, E = 8;
    const char *dense = upc_path("dense.safetensors"), *out = upc_path("noisy.safetensors");
    upc_write_dense(dense, 4);
    ModelConfig t = upc_target("\"ff_n_experts\":8,\"ff_expert_size\":12,\"ff_k\":2,\"balance\":\"none\"");
    UpcycleOptions o = upc_options(UPCYCLE_COPY, 1, 0.2);
    upc_convert_ok(dense, &t, &o, out);
    StFile fd, fm;
    char err[512];
    ck_assert(st_read(&fd, dense, err, sizeof err) == 0);
    ck_assert(st_read(&fm, out, err, sizeof err) == 0);
    double w1[12 * 8], b1[12], keys[8 * 8 * 12], kb[8 * 12];
    st_to_f64(st_find(&fd, "transformer.layers.1.ffn.linear1.weight"), w1);
    st_to_f64(st_find(&fd, "transformer.layers.1.ffn.linear1.bias"), b1);
    st_to_f64(st_find(&fm, "transformer.layers.1.ffn.keys"), keys);
    st_to_f64(st_find(&fm, "transformer.layers.1.ffn.keys_bias"), kb);
    double m = 0, ss = 0, dd = 0;
    for (int i = 0; i < F * C; i++) m += w1[i] / (F * C);
    for (int i = 0; i < F * C; i++) ss += (w1[i] - m) * (w1[i] - m) / (F * C - 1);
    for (int e = 0; e < E; e++)
        for (int c = 0; c < C; c++)
            for (int s = 0; s < F; s++) {
                double d = keys[(e * C + c) * F + s] - w1[s * C + c];
                dd += d * d / (E * C * F);
            }
    ck_assert_msg(fabs(sqrt(dd) / (0.2 * sqrt(ss)) - 1.0) < 0.1, "noise std %g, expected %g", sqrt(dd),
                  0.2 * sqrt(ss));
    for (int e = 0; e < E; e++)
        for (int s = 0; s < F; s++) ck_assert_double_eq(kb[e * F + s], b1[s]);
    st_free(&fd);
    st_free(&fm);
}
END_TEST

START_TEST(refusals) {
    char dense[512]; /* upc_path's buffers are reused */
    snprintf(dense, sizeof dense, "%s", upc_path("dense.safetensors"));
    upc_write_dense(dense, 1);
    UpcycleOptions copy = upc_options(UPCYCLE_COPY, 1, 0.0), split = upc_options(UPCYCLE_SPLIT, 1, 0.0);
    ModelConfig moeut = mtu_config("{\"arch\":\"moeut\",\"n_tokens\":19,\"d_model\":8,\"n_layers\":4,\"n_heads\":2,"
                                   "\"d_head\":4,\"ff_n_experts\":4,\"ff_expert_size\":12,\"ff_k\":2,"
                                   "\"att_n_experts\":2,\"att_k\":1,\"group_size\":2}");
    upc_convert_refused(dense, &moeut, &copy, "shared across applications");
    ModelConfig dense_cfg = mtu_config(UPC_DENSE);
    upc_convert_refused(dense, &dense_cfg, &copy, "not a routed MoE");
    ModelConfig wide = mtu_config("{\"arch\":\"moe\",\"n_tokens\":19,\"d_model\":16,\"n_layers\":3,\"n_heads\":2,"
                                  "\"d_head\":4,\"lm_head_bias\":true,\"out_norm_affine\":true,\"ff_n_experts\":2,"
                                  "\"ff_expert_size\":12,\"ff_k\":1,\"balance\":\"none\"}");
    upc_convert_refused(dense, &wide, &copy, "model.d_model: 16, the dense checkpoint has 8");
    ModelConfig heads = mtu_config("{\"arch\":\"moe\",\"n_tokens\":19,\"d_model\":8,\"n_layers\":3,\"n_heads\":1,"
                                   "\"d_head\":4,\"lm_head_bias\":true,\"out_norm_affine\":true,\"ff_n_experts\":2,"
                                   "\"ff_expert_size\":12,\"ff_k\":1,\"balance\":\"none\"}");
    upc_convert_refused(dense, &heads, &copy, "model.n_heads");
    ModelConfig s6 = upc_target("\"ff_n_experts\":4,\"ff_expert_size\":6,\"ff_k\":2,\"balance\":\"none\"");
    upc_convert_refused(dense, &s6, &copy, "ff_expert_size must be 12");
    ModelConfig s5 = upc_target("\"ff_n_experts\":4,\"ff_expert_size\":5,\"ff_k\":2,\"balance\":\"none\"");
    upc_convert_refused(dense, &s5, &split, "does not divide the dense d_ff 12");
    ModelConfig e5 = upc_target("\"ff_n_experts\":5,\"ff_expert_size\":4,\"ff_k\":2,\"balance\":\"none\"");
    upc_convert_refused(dense, &e5, &split, "not a multiple of the 3 pieces");
    ModelConfig prefix = upc_target("\"ff_n_experts\":2,\"ff_expert_size\":12,\"ff_k\":1,\"balance\":\"none\","
                                    "\"n_dense_first\":1,\"d_ff\":24");
    upc_convert_refused(dense, &prefix, &copy, "model.d_ff: 24");
    /* a source that is not dense: a converted (moe) checkpoint */
    ModelConfig ok = upc_target("\"ff_n_experts\":2,\"ff_expert_size\":12,\"ff_k\":1,\"balance\":\"none\"");
    char moe[512];
    snprintf(moe, sizeof moe, "%s", upc_path("moe.safetensors"));
    upc_convert_ok(dense, &ok, &copy, moe);
    upc_convert_refused(moe, &ok, &copy, "not a dense checkpoint");
    /* a dense checkpoint with a tensor too many */
    StFile f;
    char err[512];
    ck_assert(st_read(&f, dense, err, sizeof err) == 0);
    StWriter w;
    st_writer_init(&w);
    for (int i = 0; i < f.n_tensors; i++) {
        float *x = malloc(f.tensors[i].numel * sizeof *x);
        st_to_f32(&f.tensors[i], x);
        st_writer_add(&w, f.tensors[i].name, ST_F32, f.tensors[i].ndim, f.tensors[i].shape, x);
    }
    float extra[2] = {1, 2};
    int64_t two = 2;
    st_writer_add(&w, "transformer.layers.0.ffn.gate.weight", ST_F32, 1, &two, extra);
    st_writer_meta(&w, "config", st_meta(&f, "config"));
    char odd[512];
    snprintf(odd, sizeof odd, "%s", upc_path("odd.safetensors"));
    ck_assert(st_writer_save(&w, odd, err, sizeof err) == 0);
    for (int i = 0; i < w.n; i++)
        if (w.t[i].data != extra) free((void *)w.t[i].data);
    st_writer_free(&w);
    st_free(&f);
    upc_convert_refused(odd, &ok, &copy, "transformer.layers.0.ffn.gate.weight: unexpected tensor");
}
END_TEST

/* The run config's "upcycle" section: strict keys and values, and only with arch "moe". */
static int parse_run(const char *model, const char *upcycle, char *err, size_t errlen) {
    char json[2048];
    snprintf(json, sizeof json, "{\"description\":\"t\",\"model\":%s,\"train\":{\"loss_on_target_only\":true,"
             "\"steps\":5,\"batch_size\":2,\"n_microbatch\":1,\"context\":8,\"lr\":0.001,\"weight_decay\":0,"
             "\"warmup\":0,\"min_lr_multiplier\":0.1,\"grad_clip\":0,\"adam_beta1\":0.9,\"adam_beta2\":0.999,"
             "\"adam_eps\":1e-8,\"seed\":1,\"checkpoint_every\":0,\"log_every\":1,\"precision\":\"fp32\"},"
             "\"evaluate\":{},\"analyze\":{}%s%s}", model, upcycle ? ",\"upcycle\":" : "", upcycle ? upcycle : "");
    cJSON *root = cJSON_Parse(json);
    ck_assert_ptr_nonnull(root);
    ModelConfig mc;
    TrainConfig tc;
    int rc = run_config_parse(root, "run.json", &mc, &tc, err, errlen);
    cJSON_Delete(root);
    return rc;
}

START_TEST(run_config_section) {
    const char *moe = "{\"arch\":\"moe\",\"n_tokens\":19,\"d_model\":8,\"n_layers\":3,\"n_heads\":2,\"d_head\":4,"
                      "\"ff_n_experts\":2,\"ff_expert_size\":12,\"ff_k\":1,\"balance\":\"none\"}";
    char err[1024] = "";
    ck_assert_msg(parse_run(moe, NULL, err, sizeof err) == 0, "%s", err);
    ck_assert_msg(parse_run(moe, "{\"from\":\"dense_qa\",\"method\":\"copy\",\"seed\":1}", err, sizeof err) == 0,
                  "%s", err);
    ck_assert_msg(parse_run(moe, "{\"from\":\"dense_qa\",\"method\":\"split\",\"seed\":0,\"noise\":0.5}", err,
                            sizeof err) == 0, "%s", err);
    static const struct { const char *upcycle, *want; } bad[] = {
        {"{\"from\":\"dense_qa\",\"method\":\"clone\",\"seed\":1}", "run.json: upcycle.method: expected \"copy\""},
        {"{\"from\":\"dense_qa\",\"method\":\"copy\",\"seed\":-1}", "run.json: upcycle.seed: must be >= 0"},
        {"{\"from\":\"dense_qa\",\"method\":\"copy\",\"seed\":1,\"noise\":-0.1}", "run.json: upcycle.noise"},
        {"{\"from\":\"\",\"method\":\"copy\",\"seed\":1}", "run.json: upcycle.from"},
        {"{\"from\":\"a/b\",\"method\":\"copy\",\"seed\":1}", "run.json: upcycle.from"},
        {"{\"method\":\"copy\",\"seed\":1}", "upcycle.from"},
        {"{\"from\":\"dense_qa\",\"method\":\"copy\",\"seed\":1,\"nosie\":0}", "upcycle.nosie: unknown key"},
        {"3", "upcycle"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        err[0] = '\0';
        ck_assert_msg(parse_run(moe, bad[i].upcycle, err, sizeof err) != 0, "accepted %s", bad[i].upcycle);
        ck_assert_msg(strstr(err, bad[i].want) != NULL, "'%s' lacks '%s'", err, bad[i].want);
    }
    const char *up = "{\"from\":\"dense_qa\",\"method\":\"copy\",\"seed\":1}";
    ck_assert(parse_run("{\"arch\":\"dense\",\"n_tokens\":19,\"d_model\":8,\"n_layers\":3,\"n_heads\":2,\"d_ff\":12}",
                        up, err, sizeof err) != 0);
    ck_assert_msg(strstr(err, "run.json: upcycle: model.arch \"dense\" is not a routed MoE"), "%s", err);
    ck_assert(parse_run("{\"arch\":\"moeut\",\"n_tokens\":19,\"d_model\":8,\"n_layers\":4,\"n_heads\":2,\"d_head\":4,"
                        "\"ff_n_experts\":4,\"ff_expert_size\":12,\"ff_k\":2,\"att_n_experts\":2,\"att_k\":1,"
                        "\"group_size\":2}", up, err, sizeof err) != 0);
    ck_assert_msg(strstr(err, "run.json: upcycle: model.arch \"moeut\" cannot be upcycled"), "%s", err);
}
END_TEST

int main(void) {
    Suite *s = suite_create("upcycle");
    TCase *tc = tcase_create("upcycle");
    tcase_set_timeout(tc, 120);
    tcase_add_checked_fixture(tc, upc_setup, upc_teardown);
    tcase_add_test(tc, copy_keeps_function_softmax_renorm);
    tcase_add_test(tc, copy_keeps_function_sigmoid_renorm_dense_first);
    tcase_add_test(tc, copy_without_renorm_changes_function);
    tcase_add_test(tc, split_pieces_sum_to_dense_ffn);
    tcase_add_test(tc, seeded_and_recorded);
    tcase_add_test(tc, noise_scale_and_exact_biases);
    tcase_add_test(tc, refusals);
    tcase_add_test(tc, run_config_section);
    suite_add_tcase(s, tc);
    return run_test_suite(s);
}
