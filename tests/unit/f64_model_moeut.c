/* Whole-model gradient check of MoEUT in f64: central finite differences (Richardson) on a random subset of the
 * elements of every tensor against model_train_step's gradients, with the regularizers (masked by `valid`) part of
 * the objective. Top-k routing is piecewise: the check runs only where every routing decision of the step has a
 * margin (gap between the k-th and (k+1)-th router logit) far above the finite-difference step, so no step can flip
 * an expert choice. */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "model/model.h"
#include "model_fd_check.h"
#include "model_test_util.h"
#include "moe_test_util.h"
#include "moeut_test_util.h"
#include "suite_runner.h"

#define FD_STEP 1e-4
#define MIN_MARGIN 1e-2 /* 100 x the step: a step moves a router logit by ~FD_STEP * O(1) */
/* routing "expert_choice" ranks softmax scores, which a step moves by at most 1/4 of the logits' change (the softmax's
 * largest slope is 1/4 per logit pair); 1e-3 keeps 20 x the ~FD_STEP * O(1) / 2 a step can move them */
#define EC_MIN_MARGIN 1e-3

/* Expert capacity in the score order (sigmoid gates, no renormalisation or scaling: gate = sigmoid(logit)): the
 * smallest gap, over the experts of every application of the last training forward that got more than EC
 * assignments, between the EC-th and the (EC+1)-th largest gate of the expert; the step must not reorder them.
 * Infinity without a score-order capacity. */
static double capacity_score_margin(Model *m) {
    const ModelConfig *c = model_config(m);
    if (!(c->ff_capacity_factor > 0) || c->ff_capacity_order != CAPACITY_SCORE) return INFINITY;
    ck_assert(c->router == ROUTER_SIGMOID && !c->router_renorm && c->routed_scaling_factor == 1.0);
    MoeutState *st = moeut_state(m);
    Backend *be = model_backend(m);
    const int N = st->B * st->T, E = c->ff_n_experts, K = c->ff_k, Gs = c->group_size, cap = moeut_capacity(c, N);
    double best = INFINITY;
    for (int a = 0; a < st->n_apps; a++) {
        double *l = mt_download(be, st->hist_f[a % Gs] + (size_t)(a / Gs) * N * E, (size_t)N * E); /* [N, E] */
        int32_t *sel = malloc((size_t)N * K * sizeof *sel);
        ck_assert(sel != NULL);
        be->to_host(be, sel, st->apps[a].sel_f, (size_t)N * K * sizeof *sel);
        for (int e = 0; e < E; e++) {
            double g[256];
            int n_e = 0;
            for (int p = 0; p < N * K; p++)
                if (sel[p] == e) {
                    ck_assert(n_e < 256);
                    g[n_e++] = 1 / (1 + exp(-l[(size_t)(p / K) * E + e]));
                }
            if (n_e <= cap) continue;
            for (int i = 1; i < n_e; i++) /* descending */
                for (int j = i; j > 0 && g[j] > g[j - 1]; j--) {
                    double t = g[j];
                    g[j] = g[j - 1];
                    g[j - 1] = t;
                }
            best = fmin(best, g[cap - 1] - g[cap]);
        }
        free(l);
        free(sel);
    }
    return best;
}

static void run_check(ModelConfig c, uint64_t seed) {
    ck_assert_msg(sizeof(scalar_t) == 8, "this test must be built with -DSCALAR_F64");
    Backend *be = mtu_backend();
    enum { B = 2, T = 5 };
    int32_t in[B * T], tg[B * T], ce_tg[B * T];
    uint8_t valid[B * T];
    /* Pick the first weights/batch (deterministic seed sequence) whose routing margins are all wide. */
    Model *m = NULL;
    double margin = 0, ec_margin = 0;
    uint64_t s = seed;
    for (int attempt = 0; attempt < 50; attempt++, s += 101) {
        m = mtu_model_with_noise(be, c, s, s + 1, 0.2);
        mtu_randomize_buffers(m, s + 5, 0.3); /* balance "bias": a bias that changes selections */
        mtu_tokens(in, B * T, c.n_tokens, s + 2);
        mtu_tokens(tg, B * T, c.n_tokens, s + 3);
        tg[B * T - 1] = -1; /* a trailing pad: not valid, no target */
        for (int i = 0; i < B * T; i++) {
            valid[i] = tg[i] >= 0;
            ce_tg[i] = (i % T < 2) ? -1 : tg[i]; /* "answer-only": the first two targets are question tokens */
        }
        StepStats st;
        model_train_step(m, in, ce_tg, valid, B, T, 1.0, &st, NULL);
        margin = c.arch == ARCH_MOE ? mt_moe_min_topk_margin(m) : fmin(mt_min_topk_margin(m), capacity_score_margin(m));
        ec_margin = c.arch == ARCH_MOE ? INFINITY : mt_min_ec_margin(m); /* routing "expert_choice": the experts'
                                                                           * selections (infinity otherwise) */
        if (margin > MIN_MARGIN && ec_margin > EC_MIN_MARGIN) break;
        model_free(m);
        m = NULL;
    }
    ck_assert_msg(m != NULL, "no seed with routing margins > %g (expert choice: > %g) in 50 tries (last %g, %g)",
                  MIN_MARGIN, EC_MIN_MARGIN, margin, ec_margin);
    printf("routing margin %.3g, expert choice %.3g (seed %llu)\n", margin, ec_margin, (unsigned long long)s);
    int64_t dropped[16] = {0}, n_dropped = 0; /* expert capacity: the case must drop assignments */
    ck_assert(model_routed_applications(m, NULL) <= 16);
    if (model_routing_dropped(m, dropped)) {
        for (int a = 0; a < model_routed_applications(m, NULL); a++) n_dropped += dropped[a];
        ck_assert_msg(n_dropped > 0, "the capacity drops nothing");
        printf("capacity dropped %lld assignments\n", (long long)n_dropped);
    }
    FdBatch b = {in, ce_tg, valid, B, T};
    fd_check_model_covered(m, &b, 5, FD_STEP, 1e-6, 1e-6, s + 4);
    model_free(m);
    backend_destroy(be);
}

START_TEST(grad_tiny_moeut) { run_check(mtu_tiny_moeut(), 1); }
END_TEST

/* Large regularizer coefficients so their gradient is a sizable part of every router's gradient; DM-math wrapper. */
START_TEST(grad_moeut_strong_regularizers) {
    run_check(mtu_config("{\"arch\":\"moeut\",\"n_tokens\":7,\"d_model\":6,\"n_layers\":4,\"n_heads\":2,\"d_head\":6,"
                         "\"ff_n_experts\":4,\"ff_expert_size\":3,\"ff_k\":2,\"att_n_experts\":3,\"att_k\":1,"
                         "\"group_size\":2,\"entropy_reg\":1.0,\"att_entropy_reg\":0.5,\"lm_head_bias\":false,"
                         "\"out_norm_affine\":false}"),
              2);
}
END_TEST

/* The MoE-variant switches (model.router, router_renorm, balance): every gating transform and balancing loss in the
 * whole model's gradient; the Switch loss with alpha 1 (100 x the paper's) so its gradient is a sizable part of the
 * router's. */
#define SWITCH_BASE                                                                                                  \
    "{\"arch\":\"moeut\",\"n_tokens\":7,\"d_model\":6,\"n_layers\":4,\"n_heads\":2,\"d_head\":6,"                      \
    "\"ff_n_experts\":5,\"ff_expert_size\":3,\"ff_k\":2,\"att_n_experts\":3,\"att_k\":1,\"group_size\":2,"

START_TEST(grad_moeut_softmax_renorm_switch) {
    run_check(mtu_config(SWITCH_BASE "\"router\":\"softmax\",\"router_renorm\":true,\"balance\":\"switch\","
                                     "\"balance_alpha\":1.0}"),
              3);
}
END_TEST

START_TEST(grad_moeut_softmax_switch) {
    run_check(mtu_config(SWITCH_BASE "\"router\":\"softmax\",\"balance\":\"switch\",\"balance_alpha\":1.0}"), 4);
}
END_TEST

START_TEST(grad_moeut_sigmoid_renorm_none) {
    run_check(mtu_config(SWITCH_BASE "\"router_renorm\":true,\"balance\":\"none\"}"), 5);
}
END_TEST

/* DeepSeekMoE's shared experts beside the routed ones (their weights in every token's gradient). */
START_TEST(grad_moeut_shared_experts) { run_check(mtu_config(SWITCH_BASE "\"n_shared_experts\":2}"), 6); }
END_TEST

/* A dense first layer with its own weights (d_ff 7), then MoEUT's group of 2 applied twice: 5 applications. */
START_TEST(grad_moeut_dense_first) {
    run_check(mtu_config("{\"arch\":\"moeut\",\"n_tokens\":7,\"d_model\":6,\"n_layers\":5,\"n_heads\":2,\"d_head\":6,"
                         "\"ff_n_experts\":5,\"ff_expert_size\":3,\"ff_k\":2,\"att_n_experts\":3,\"att_k\":1,"
                         "\"group_size\":2,\"n_dense_first\":1,\"d_ff\":7}"),
              7);
}
END_TEST

/* balance "bias" (a random nonzero bias moves the selections; it is not differentiated), sigmoid router. */
START_TEST(grad_moeut_bias_sigmoid) { run_check(mtu_config(SWITCH_BASE "\"balance\":\"bias\"}"), 8); }
END_TEST

/* Everything at once: 2 dense layers, one shared group layer applied twice, a shared expert, softmax renormalised,
 * bias balancing. */
START_TEST(grad_moeut_dense_shared_softmax_bias) {
    run_check(mtu_config("{\"arch\":\"moeut\",\"n_tokens\":7,\"d_model\":6,\"n_layers\":4,\"n_heads\":2,\"d_head\":6,"
                         "\"ff_n_experts\":5,\"ff_expert_size\":3,\"ff_k\":2,\"att_n_experts\":3,\"att_k\":1,"
                         "\"group_size\":1,\"n_dense_first\":2,\"n_shared_experts\":1,\"router\":\"softmax\","
                         "\"router_renorm\":true,\"balance\":\"bias\",\"balance_gamma\":0.01}"),
              9);
}
END_TEST

/* DeepSeek-V3's routed scaling factor: sigmoid gates without renormalisation (their gating transform's gradient reads
 * the gate itself, so it must see the unscaled one), and the DeepSeek-V3 combination (normalised sigmoid gates times
 * 2.5, a shared expert at gate 1, bias balancing). */
START_TEST(grad_moeut_routed_scaling_sigmoid) {
    run_check(mtu_config(SWITCH_BASE "\"routed_scaling_factor\":2.5}"), 10);
}
END_TEST

START_TEST(grad_moeut_routed_scaling_deepseek) {
    run_check(mtu_config(SWITCH_BASE "\"n_shared_experts\":1,\"router_renorm\":true,\"routed_scaling_factor\":2.5,"
                                     "\"balance\":\"bias\"}"),
              11);
}
END_TEST

/* Arch "moe" (model/moe_layer.c): the dense attention and a routed FFN with expert biases, under each router switch:
 * Switch/Mixtral softmax gates, renormalised (Mixtral eq. 1-2) or not (Switch §2) with a strong Switch loss, sigmoid
 * gates scaled by a routed scaling factor, a dense first layer; the DM-math wrapper (no head bias, no norm affine). */
#define MOE_FD_BASE                                                                                                  \
    "{\"arch\":\"moe\",\"n_tokens\":7,\"d_model\":6,\"n_layers\":3,\"n_heads\":2,\"d_head\":4,\"ff_n_experts\":5,"     \
    "\"ff_expert_size\":3,"

START_TEST(grad_moe_softmax_renorm_switch) {
    run_check(mtu_config(MOE_FD_BASE "\"ff_k\":2,\"router_renorm\":true,\"balance_alpha\":1.0}"), 21);
}
END_TEST

START_TEST(grad_moe_switch_top1_dense_first) {
    run_check(mtu_config(MOE_FD_BASE "\"ff_k\":1,\"balance_alpha\":1.0,\"n_dense_first\":1,\"d_ff\":5,"
                                     "\"lm_head_bias\":false,\"out_norm_affine\":false}"),
              22);
}
END_TEST

START_TEST(grad_moe_sigmoid_scaled_none) {
    run_check(mtu_config(MOE_FD_BASE "\"ff_k\":3,\"router\":\"sigmoid\",\"routed_scaling_factor\":2.5,"
                                     "\"balance\":\"none\"}"),
              23);
}
END_TEST

/* Hash routing (Roller et al. 2021): the expert of the input token id, gate 1, no router and no ln2; the attention
 * routers keep their entropy terms. With a shared expert and a dense first layer: every FFN path of the hash layer. */
START_TEST(grad_moeut_hash) {
    run_check(mtu_config("{\"arch\":\"moeut\",\"n_tokens\":7,\"d_model\":6,\"n_layers\":4,\"n_heads\":2,\"d_head\":6,"
                         "\"ff_n_experts\":5,\"ff_expert_size\":3,\"ff_k\":1,\"att_n_experts\":3,\"att_k\":1,"
                         "\"group_size\":2,\"balance\":\"none\",\"routing\":\"hash\",\"att_entropy_reg\":0.5}"),
              12);
}
END_TEST

/* The residual MLP (model.ff_residual_size): DeepSpeed-MoE's Residual-MoE (one routed expert beside a dense MLP of
 * width 4), and Snowflake Arctic's dense residual beside top-2 softmax routing, with a shared expert and a dense first
 * layer (of the default width, which counts the residual MLP) so the paths sum in one gradient. */
START_TEST(grad_moeut_residual_mlp) {
    run_check(mtu_config("{\"arch\":\"moeut\",\"n_tokens\":7,\"d_model\":6,\"n_layers\":4,\"n_heads\":2,\"d_head\":6,"
                         "\"ff_n_experts\":5,\"ff_expert_size\":3,\"ff_k\":1,\"att_n_experts\":3,\"att_k\":1,"
                         "\"group_size\":2,\"ff_residual_size\":4}"),
              12);
}
END_TEST

START_TEST(grad_moeut_hash_shared_dense_first) {
    run_check(mtu_config("{\"arch\":\"moeut\",\"n_tokens\":7,\"d_model\":6,\"n_layers\":3,\"n_heads\":2,\"d_head\":6,"
                         "\"ff_n_experts\":3,\"ff_expert_size\":3,\"ff_k\":1,\"att_n_experts\":3,\"att_k\":1,"
                         "\"group_size\":2,\"n_dense_first\":1,\"n_shared_experts\":1,\"balance\":\"none\","
                         "\"routing\":\"hash\",\"hash_seed\":3}"),
              13);
}
END_TEST

/* DeepSeek-V3's group-limited routing: 6 experts in 3 groups of 2, the best 2 groups eligible (the selection is
 * discrete; the margins cover the group choice too), MoEUT's sigmoid router; and the DeepSeek-V3 combination
 * (normalised sigmoid gates x 2.5, bias balancing, group-limited). */
#define GROUP_BASE                                                                                                   \
    "{\"arch\":\"moeut\",\"n_tokens\":7,\"d_model\":6,\"n_layers\":4,\"n_heads\":2,\"d_head\":6,"                      \
    "\"ff_n_experts\":6,\"ff_expert_size\":3,\"ff_k\":2,\"att_n_experts\":3,\"att_k\":1,\"group_size\":2,"
START_TEST(grad_moeut_group_limited) { run_check(mtu_config(GROUP_BASE "\"n_group\":3,\"topk_group\":2}"), 12); }
END_TEST

START_TEST(grad_moeut_group_limited_deepseek) {
    run_check(mtu_config(GROUP_BASE "\"router_renorm\":true,\"routed_scaling_factor\":2.5,\"balance\":\"bias\","
                                    "\"n_group\":3,\"topk_group\":1}"),
              13);
}
END_TEST

START_TEST(grad_moeut_residual_arctic_shared_dense) {
    run_check(mtu_config("{\"arch\":\"moeut\",\"n_tokens\":7,\"d_model\":6,\"n_layers\":3,\"n_heads\":2,\"d_head\":6,"
                         "\"ff_n_experts\":5,\"ff_expert_size\":3,\"ff_k\":2,\"att_n_experts\":3,\"att_k\":1,"
                         "\"group_size\":1,\"n_dense_first\":1,\"n_shared_experts\":1,\"router\":\"softmax\","
                         "\"router_renorm\":true,\"balance\":\"switch\",\"balance_alpha\":1.0,\"ff_residual_size\":5}"),
              13);
}
END_TEST

/* Expert capacity (EC = 3 of the 20 assignments of N = 10 positions to 5 experts): dropped slots pass no gradient to
 * their expert or gate; the position order with softmax gates renormalised before the dropping (a kept gate's gradient
 * reaches the dropped expert's logit), and the score order on MoEUT's sigmoid gates (its decision moves with the
 * gates: the fixed seed's draw keeps the order under the FD step, else the check would fail, not pass). */
START_TEST(grad_moeut_capacity_position) {
    run_check(mtu_config(SWITCH_BASE "\"router\":\"softmax\",\"router_renorm\":true,\"ff_capacity_factor\":0.75}"), 12);
}
END_TEST

START_TEST(grad_moeut_capacity_score) {
    run_check(mtu_config(SWITCH_BASE "\"ff_capacity_factor\":0.75,\"ff_capacity_order\":\"score\"}"), 13);
}
END_TEST

/* DeepSeek-V3's sequence-wise balance loss (alpha 0.5, 5000 x V3's, so that its gradient is a sizable part of the
 * router's) beside bias balancing with normalised sigmoid gates, and beside the entropy regularizer with softmax; the
 * objective is model_config_objective's (alpha * reg_seq included). */
START_TEST(grad_moeut_seq_balance_bias) {
    run_check(mtu_config(SWITCH_BASE "\"router_renorm\":true,\"balance\":\"bias\",\"seq_balance_alpha\":0.5}"), 14);
}
END_TEST

START_TEST(grad_moeut_seq_balance_softmax) {
    run_check(mtu_config(SWITCH_BASE "\"router\":\"softmax\",\"seq_balance_alpha\":0.5}"), 15);
}
END_TEST

/* Pyramid-MoE (model.ff_n_experts_per_layer): 3 then 6 experts over the group of 2 (every E-sized path per layer:
 * router, experts, the entropy regularizer's histories), and with the Switch loss, bias balancing's buffer of each
 * layer's size and a residual MLP (DeepSpeed-MoE's PR-MoE: pyramid + residual). */
START_TEST(grad_moeut_pyramid) {
    run_check(mtu_config("{\"arch\":\"moeut\",\"n_tokens\":7,\"d_model\":6,\"n_layers\":4,\"n_heads\":2,\"d_head\":6,"
                         "\"ff_n_experts_per_layer\":[3,6],\"ff_expert_size\":3,\"ff_k\":2,\"att_n_experts\":3,"
                         "\"att_k\":1,\"group_size\":2,\"entropy_reg\":1.0}"),
              14);
}
END_TEST

START_TEST(grad_moeut_pyramid_residual_switch) {
    run_check(mtu_config("{\"arch\":\"moeut\",\"n_tokens\":7,\"d_model\":6,\"n_layers\":4,\"n_heads\":2,\"d_head\":6,"
                         "\"ff_n_experts_per_layer\":[6,2],\"ff_expert_size\":3,\"ff_k\":1,\"att_n_experts\":3,"
                         "\"att_k\":1,\"group_size\":2,\"ff_residual_size\":4,\"router\":\"softmax\","
                         "\"balance\":\"switch\",\"balance_alpha\":1.0}"),
              15);
}
END_TEST

/* Expert-choice routing (Zhou et al. 2022): each expert takes its top-c valid positions by softmax score, c =
 * round(CF * n / E); the gates' softmax Jacobian reaches every logit of a chosen position. CF 2 (the paper's), and
 * CF 1 with a shared expert; the check's margin is the gap at each expert's c-th score (mt_min_ec_margin). */
#define EC_BASE                                                                                                      \
    "{\"arch\":\"moeut\",\"n_tokens\":7,\"d_model\":6,\"n_layers\":4,\"n_heads\":2,\"d_head\":6,"                      \
    "\"ff_n_experts\":4,\"ff_expert_size\":3,\"att_n_experts\":3,\"att_k\":1,\"group_size\":2,"                        \
    "\"routing\":\"expert_choice\",\"router\":\"softmax\",\"balance\":\"none\","

START_TEST(grad_moeut_expert_choice) {
    run_check(mtu_config(EC_BASE "\"ff_capacity_factor\":2,\"ff_k\":2}"), 12);
}
END_TEST

START_TEST(grad_moeut_expert_choice_shared) {
    run_check(mtu_config(EC_BASE "\"ff_capacity_factor\":1,\"ff_k\":1,\"n_shared_experts\":1}"), 13);
}
END_TEST

int main(void) {
    Suite *s = suite_create("f64_model_moeut");
    TCase *tc = tcase_create("fd");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, grad_tiny_moeut);
    tcase_add_test(tc, grad_moeut_strong_regularizers);
    tcase_add_test(tc, grad_moeut_softmax_renorm_switch);
    tcase_add_test(tc, grad_moeut_softmax_switch);
    tcase_add_test(tc, grad_moeut_sigmoid_renorm_none);
    tcase_add_test(tc, grad_moeut_shared_experts);
    tcase_add_test(tc, grad_moeut_dense_first);
    tcase_add_test(tc, grad_moeut_bias_sigmoid);
    tcase_add_test(tc, grad_moeut_dense_shared_softmax_bias);
    tcase_add_test(tc, grad_moeut_routed_scaling_sigmoid);
    tcase_add_test(tc, grad_moeut_routed_scaling_deepseek);
    TCase *moe = tcase_create("fd_moe"); /* arch "moe" (CK_RUN_CASE=fd_moe runs these alone) */
    tcase_set_timeout(moe, 60);
    tcase_add_test(moe, grad_moe_softmax_renorm_switch);
    tcase_add_test(moe, grad_moe_switch_top1_dense_first);
    tcase_add_test(moe, grad_moe_sigmoid_scaled_none);
    suite_add_tcase(s, moe);
    tcase_add_test(tc, grad_moeut_hash);
    tcase_add_test(tc, grad_moeut_hash_shared_dense_first);
    tcase_add_test(tc, grad_moeut_capacity_position);
    tcase_add_test(tc, grad_moeut_capacity_score);
    tcase_add_test(tc, grad_moeut_group_limited);
    tcase_add_test(tc, grad_moeut_group_limited_deepseek);
    tcase_add_test(tc, grad_moeut_seq_balance_bias);
    tcase_add_test(tc, grad_moeut_seq_balance_softmax);
    tcase_add_test(tc, grad_moeut_residual_mlp);
    tcase_add_test(tc, grad_moeut_residual_arctic_shared_dense);
    tcase_add_test(tc, grad_moeut_pyramid);
    tcase_add_test(tc, grad_moeut_pyramid_residual_switch);
    tcase_add_test(tc, grad_moeut_expert_choice);
    tcase_add_test(tc, grad_moeut_expert_choice_shared);
    suite_add_tcase(s, tc);
    return run_test_suite(s);
}
