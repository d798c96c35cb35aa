/* Model configs: strict JSON parsing, validation messages, defaults, serialisation round trip, n_rot, parameter counts
 * (the paper's exact numbers, and model_count_params == model_n_params of created models), tensor registry. */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "model/model.h"
#include "model/train_config.h"
#include "pipeline/base/config.h"
#include "model_test_util.h"
#include "suite_runner.h"

/* Runs model_config_from_json on a JSON text; returns rc and fills err. */
static int parse(const char *json, ModelConfig *c, char *err, size_t errlen) {
    cJSON *o = cJSON_Parse(json);
    ck_assert_msg(o != NULL, "bad JSON in test: %s", json);
    err[0] = '\0';
    int rc = model_config_from_json(c, o, "exp.json", err, errlen);
    cJSON_Delete(o);
    return rc;
}

/* Asserts that the JSON is rejected with a message containing every given fragment. */
static void expect_error(const char *json, const char *frag1, const char *frag2) {
    ModelConfig c;
    char err[512];
    int rc = parse(json, &c, err, sizeof err);
    ck_assert_msg(rc == -1, "accepted: %s", json);
    ck_assert_msg(strstr(err, frag1) != NULL, "error '%s' lacks '%s'", err, frag1);
    if (frag2) ck_assert_msg(strstr(err, frag2) != NULL, "error '%s' lacks '%s'", err, frag2);
    ck_assert_msg(strchr(err, '\n') == NULL, "error is not one line: %s", err);
}

#define DENSE_BASE "\"arch\":\"dense\",\"n_tokens\":16,\"d_model\":8,\"n_layers\":2,\"n_heads\":2,\"d_ff\":12"
#define MOEUT_BASE                                                                                                   \
    "\"arch\":\"moeut\",\"n_tokens\":16,\"d_model\":8,\"n_layers\":4,\"n_heads\":2,\"ff_n_experts\":6,"           \
    "\"att_n_experts\":3"

/* The dense base config with one key set to a raw JSON value (replacing the base value, or added). */
static const char *dense_with(const char *key, const char *value) {
    static char buf[1024];
    const char *keys[] = {"arch", "n_tokens", "d_model", "n_layers", "n_heads", "d_ff"};
    const char *vals[] = {"\"dense\"", "16", "8", "2", "2", "12"};
    size_t k = (size_t)snprintf(buf, sizeof buf, "{");
    int replaced = 0;
    for (int i = 0; i < 6; i++) {
        const char *v = vals[i];
        if (strcmp(keys[i], key) == 0) v = value, replaced = 1;
        k += (size_t)snprintf(buf + k, sizeof buf - k, "%s\"%s\":%s", i ? "," : "", keys[i], v);
    }
    if (!replaced) k += (size_t)snprintf(buf + k, sizeof buf - k, ",\"%s\":%s", key, value);
    snprintf(buf + k, sizeof buf - k, "}");
    return buf;
}

START_TEST(dense_defaults) {
    ModelConfig c;
    char err[512];
    ck_assert_int_eq(parse("{" DENSE_BASE "}", &c, err, sizeof err), 0);
    ck_assert_int_eq(c.arch, ARCH_DENSE);
    ck_assert_int_eq(c.d_head, 4); /* d_model / n_heads */
    ck_assert(c.lm_head_bias);
    ck_assert(c.out_norm_affine);
    ck_assert(c.dropout == 0.0);
    ck_assert_int_eq(c.d_ff, 12);
}
END_TEST

START_TEST(moeut_defaults_are_reference_ctor) {
    ModelConfig c;
    char err[512];
    ck_assert_int_eq(parse("{\"arch\":\"moeut\",\"n_tokens\":16,\"d_model\":8,\"n_layers\":4,\"n_heads\":2,"
                           "\"ff_n_experts\":10,\"att_n_experts\":3}",
                           &c, err, sizeof err),
                     0);
    ck_assert_int_eq(c.arch, ARCH_MOEUT);
    ck_assert_int_eq(c.group_size, 2);
    ck_assert_int_eq(c.ff_k, 8);
    ck_assert_int_eq(c.att_k, 2);
    ck_assert_int_eq(c.ff_expert_size, 128);
    ck_assert_double_eq_tol(c.entropy_reg, 0.01, 1e-15);
    ck_assert_double_eq_tol(c.att_entropy_reg, 0.001, 1e-15);
    ck_assert(c.ff_expert_dropout == 0.0 && c.att_expert_dropout == 0.0);
    ck_assert_int_eq(c.d_head, 4);
    ck_assert(c.lm_head_bias && c.out_norm_affine);
}
END_TEST

START_TEST(moeut_default_ff_k_is_8) {
    /* With ff_n_experts=6 the default ff_k=8 is too large: the default shows up as an error naming ff_k. */
    expect_error("{" MOEUT_BASE "}", "exp.json: model.ff_k:", "ff_n_experts");
}
END_TEST

START_TEST(errors_name_the_key) {
    expect_error("{" DENSE_BASE ",\"foo\":1}", "exp.json: model.foo:", "unknown key");
    expect_error(dense_with("n_tokens", "\"16\""), "exp.json: model.n_tokens:", "integer");
    expect_error(dense_with("d_ff", "1.5"), "exp.json: model.d_ff:", NULL);
    expect_error("{" DENSE_BASE ",\"lm_head_bias\":1}", "exp.json: model.lm_head_bias:", "boolean");
    expect_error("{" DENSE_BASE ",\"dropout\":0.1}", "exp.json: model.dropout:", "0");
    expect_error("{" DENSE_BASE ",\"d_head\":0}", "exp.json: model.d_head:", NULL);
    expect_error("{\"arch\":\"dense\",\"n_tokens\":16,\"d_model\":8,\"n_layers\":2,\"n_heads\":2}", "exp.json: model.d_ff:",
                 "missing");
    expect_error("{\"n_tokens\":16}", "exp.json: model.arch:", "missing");
    expect_error("{\"arch\":\"rnn\"}", "exp.json: model.arch:", "rnn");
    expect_error("{\"arch\":3}", "exp.json: model.arch:", NULL);
    expect_error("[1]", "exp.json: model:", "object");
    expect_error("{" DENSE_BASE ",\"n_layers\":3,\"n_layers\":2}", "exp.json: model.n_layers:", "duplicate");
    expect_error("{\"arch\":\"dense\",\"n_tokens\":16,\"d_model\":9,\"n_layers\":2,\"n_heads\":2,\"d_ff\":4}",
                 "exp.json: model.d_head:", "divisible");
    expect_error(dense_with("n_tokens", "0"), "exp.json: model.n_tokens:", ">= 1");
    expect_error(dense_with("n_heads", "-2"), "exp.json: model.n_heads:", NULL);
    expect_error(dense_with("d_model", "1e12"), "exp.json: model.d_model:", NULL);
}
END_TEST

START_TEST(other_arch_keys_rejected) {
    expect_error("{" DENSE_BASE ",\"group_size\":2}", "exp.json: model.group_size:", "moeut");
    expect_error("{" DENSE_BASE ",\"entropy_reg\":0.01}", "exp.json: model.entropy_reg:", NULL);
    expect_error("{" MOEUT_BASE ",\"ff_k\":2,\"d_ff\":12}", "exp.json: model.d_ff:", "dense");
}
END_TEST

START_TEST(moeut_values_validated) {
    expect_error("{" MOEUT_BASE ",\"ff_k\":2,\"group_size\":3}", "exp.json: model.group_size:", "multiple");
    expect_error("{" MOEUT_BASE ",\"ff_k\":2,\"att_k\":4}", "exp.json: model.att_k:", NULL);
    expect_error("{" MOEUT_BASE ",\"ff_k\":0}", "exp.json: model.ff_k:", NULL);
    expect_error("{" MOEUT_BASE ",\"ff_k\":2,\"entropy_reg\":-1}", "exp.json: model.entropy_reg:", NULL);
    expect_error("{" MOEUT_BASE ",\"ff_k\":2,\"ff_expert_dropout\":1.0}", "exp.json: model.ff_expert_dropout:", NULL);
    expect_error("{" MOEUT_BASE ",\"ff_k\":2,\"att_expert_dropout\":-0.1}", "exp.json: model.att_expert_dropout:", NULL);
    expect_error("{\"arch\":\"moeut\",\"n_tokens\":16,\"d_model\":8,\"n_layers\":4,\"n_heads\":2,\"att_n_experts\":3}",
                 "exp.json: model.ff_n_experts:", "missing");
}
END_TEST

static void round_trip(const char *json) {
    ModelConfig a, b;
    char err[512];
    ck_assert_int_eq(parse(json, &a, err, sizeof err), 0);
    cJSON *o = model_config_to_json(&a);
    ck_assert_ptr_nonnull(o);
    ck_assert_int_eq(model_config_from_json(&b, o, "round", err, sizeof err), 0);
    /* Field by field (not memcmp: struct padding is unspecified). */
    ck_assert_int_eq(a.arch, b.arch);
    ck_assert_int_eq(a.n_tokens, b.n_tokens);
    ck_assert_int_eq(a.d_model, b.d_model);
    ck_assert_int_eq(a.n_layers, b.n_layers);
    ck_assert_int_eq(a.n_heads, b.n_heads);
    ck_assert_int_eq(a.d_head, b.d_head);
    ck_assert_int_eq(a.d_ff, b.d_ff);
    ck_assert_int_eq(a.ff_n_experts, b.ff_n_experts);
    ck_assert_int_eq(a.ff_expert_size, b.ff_expert_size);
    ck_assert_int_eq(a.ff_k, b.ff_k);
    ck_assert_int_eq(a.att_n_experts, b.att_n_experts);
    ck_assert_int_eq(a.att_k, b.att_k);
    ck_assert_int_eq(a.group_size, b.group_size);
    ck_assert(a.entropy_reg == b.entropy_reg && a.att_entropy_reg == b.att_entropy_reg);
    ck_assert(a.ff_expert_dropout == b.ff_expert_dropout && a.att_expert_dropout == b.att_expert_dropout);
    ck_assert(a.dropout == b.dropout && a.lm_head_bias == b.lm_head_bias && a.out_norm_affine == b.out_norm_affine);
    ck_assert(a.router == b.router && a.router_renorm == b.router_renorm && a.balance == b.balance);
    ck_assert(a.balance_alpha == b.balance_alpha && a.balance_gamma == b.balance_gamma);
    ck_assert(a.n_dense_first == b.n_dense_first && a.n_shared_experts == b.n_shared_experts);
    ck_assert(a.routed_scaling_factor == b.routed_scaling_factor);
    ck_assert(a.routing == b.routing && a.hash_seed == b.hash_seed);
    ck_assert(a.ff_capacity_factor == b.ff_capacity_factor && a.ff_capacity_order == b.ff_capacity_order);
    ck_assert(a.n_group == b.n_group && a.topk_group == b.topk_group);
    ck_assert(a.seq_balance_alpha == b.seq_balance_alpha);
    ck_assert(a.ff_residual_size == b.ff_residual_size);
    ck_assert(a.ff_n_experts_per_layer.n == b.ff_n_experts_per_layer.n && a.ff_n_experts == b.ff_n_experts);
    for (int i = 0; i < a.ff_n_experts_per_layer.n; i++)
        ck_assert(a.ff_n_experts_per_layer.v[i] == b.ff_n_experts_per_layer.v[i]);
    /* Every key is written (d_head included), none of the other arch. */
    ck_assert_ptr_nonnull(cJSON_GetObjectItemCaseSensitive(o, "d_head"));
    ck_assert_ptr_nonnull(cJSON_GetObjectItemCaseSensitive(o, "lm_head_bias"));
    if (a.arch == ARCH_DENSE) {
        ck_assert_ptr_null(cJSON_GetObjectItemCaseSensitive(o, "group_size"));
        ck_assert_ptr_nonnull(cJSON_GetObjectItemCaseSensitive(o, "d_ff"));
    } else {
        /* the dense prefix's width only with a dense prefix */
        ck_assert(!cJSON_GetObjectItemCaseSensitive(o, "d_ff") == (a.n_dense_first == 0));
        /* the balancing coefficient of the chosen balance only */
        ck_assert(!cJSON_GetObjectItemCaseSensitive(o, "entropy_reg") == (a.balance != BALANCE_ENTROPY));
        ck_assert(!cJSON_GetObjectItemCaseSensitive(o, "balance_alpha") == (a.balance != BALANCE_SWITCH));
        ck_assert(!cJSON_GetObjectItemCaseSensitive(o, "balance_gamma") == (a.balance != BALANCE_BIAS));
        ck_assert(!cJSON_GetObjectItemCaseSensitive(o, "router") == (a.routing == ROUTING_HASH)); /* no router */
        ck_assert(!cJSON_GetObjectItemCaseSensitive(o, "hash_seed") == (a.routing != ROUTING_HASH));
        ck_assert_ptr_nonnull(cJSON_GetObjectItemCaseSensitive(o, "balance"));
    }
    cJSON_Delete(o);
}

/* The MoE-variant switches: defaults are MoEUT's, values are checked strictly, a coefficient of another balance is
 * refused, each combination round-trips, and the objective's FFN coefficient follows the balance. */
START_TEST(moe_variant_switches) {
    ModelConfig c;
    char err[512];
    ck_assert_int_eq(parse("{" MOEUT_BASE ",\"ff_k\":2}", &c, err, sizeof err), 0);
    ck_assert(c.router == ROUTER_SIGMOID && !c.router_renorm && c.balance == BALANCE_ENTROPY);
    ck_assert(model_config_ffn_balance_coef(&c) == c.entropy_reg);
    ck_assert_int_eq(parse("{" MOEUT_BASE ",\"ff_k\":2,\"router\":\"softmax\",\"router_renorm\":true,"
                           "\"balance\":\"switch\",\"balance_alpha\":0.02}", &c, err, sizeof err), 0);
    ck_assert(c.router == ROUTER_SOFTMAX && c.router_renorm && c.balance == BALANCE_SWITCH);
    ck_assert(model_config_ffn_balance_coef(&c) == 0.02);
    ck_assert_int_eq(parse("{" MOEUT_BASE ",\"ff_k\":2,\"balance\":\"switch\"}", &c, err, sizeof err), 0);
    ck_assert(c.balance_alpha == 0.01); /* Fedus et al.'s alpha */
    ck_assert_int_eq(parse("{" MOEUT_BASE ",\"ff_k\":2,\"balance\":\"none\"}", &c, err, sizeof err), 0);
    ck_assert(model_config_ffn_balance_coef(&c) == 0);
    expect_error("{" MOEUT_BASE ",\"ff_k\":2,\"router\":\"relu\"}", "exp.json: model.router:", "\"softmax\"");
    expect_error("{" MOEUT_BASE ",\"ff_k\":2,\"router\":1}", "exp.json: model.router:", "string");
    expect_error("{" MOEUT_BASE ",\"ff_k\":2,\"balance\":\"aux\"}", "exp.json: model.balance:", "\"switch\"");
    expect_error("{" MOEUT_BASE ",\"ff_k\":2,\"router_renorm\":\"yes\"}", "exp.json: model.router_renorm:", "boolean");
    expect_error("{" MOEUT_BASE ",\"ff_k\":2,\"balance\":\"switch\",\"entropy_reg\":0.01}",
                 "exp.json: model.entropy_reg:", "no effect");
    expect_error("{" MOEUT_BASE ",\"ff_k\":2,\"balance_alpha\":0.01}", "exp.json: model.balance_alpha:", "\"entropy\"");
    expect_error("{" MOEUT_BASE ",\"ff_k\":2,\"balance\":\"switch\",\"balance_alpha\":-1}",
                 "exp.json: model.balance_alpha:", ">= 0");
    expect_error("{" DENSE_BASE ",\"router\":\"softmax\"}", "exp.json: model.router:", "moeut");
    round_trip("{" MOEUT_BASE ",\"ff_k\":2,\"router\":\"softmax\",\"balance\":\"switch\",\"balance_alpha\":0.03}");
    round_trip("{" MOEUT_BASE ",\"ff_k\":2,\"router_renorm\":true,\"balance\":\"none\"}");
}
END_TEST

/* The MoE-variant switches: the dense prefix (n_dense_first, its d_ff), shared experts and the
 * bias balancing (balance "bias", balance_gamma): defaults, strict refusals naming the key, round trips. */
START_TEST(moe_structure_switches) {
    ModelConfig c;
    char err[512];
    ck_assert_int_eq(parse("{" MOEUT_BASE ",\"ff_k\":2}", &c, err, sizeof err), 0);
    ck_assert(c.n_dense_first == 0 && c.n_shared_experts == 0 && c.balance_gamma == 0.001);
    /* the dense prefix's FFN width defaults to the active width of a MoE layer: (K + K_s) * S */
    ck_assert_int_eq(parse("{" MOEUT_BASE ",\"ff_k\":2,\"ff_expert_size\":5,\"n_shared_experts\":1,"
                           "\"n_dense_first\":2}", &c, err, sizeof err), 0);
    ck_assert_int_eq(c.d_ff, (2 + 1) * 5);
    ck_assert_int_eq(parse("{" MOEUT_BASE ",\"ff_k\":2,\"n_dense_first\":2,\"d_ff\":9}", &c, err, sizeof err), 0);
    ck_assert_int_eq(c.d_ff, 9);
    ck_assert_int_eq(parse("{" MOEUT_BASE ",\"ff_k\":2,\"balance\":\"bias\"}", &c, err, sizeof err), 0);
    ck_assert(c.balance == BALANCE_BIAS && c.balance_gamma == 0.001 && model_config_ffn_balance_coef(&c) == 0);
    /* n_layers 4, group_size 2 (default): 4 - 1 = 3 MoEUT applications do not fill groups of 2 */
    expect_error("{" MOEUT_BASE ",\"ff_k\":2,\"n_dense_first\":1}", "exp.json: model.group_size:",
                 "3 MoEUT applications");
    expect_error("{" MOEUT_BASE ",\"ff_k\":2,\"n_dense_first\":4}", "exp.json: model.n_dense_first:",
                 "at least one MoEUT application");
    expect_error("{" MOEUT_BASE ",\"ff_k\":2,\"n_dense_first\":-2}", "exp.json: model.n_dense_first:", NULL);
    expect_error("{" MOEUT_BASE ",\"ff_k\":2,\"d_ff\":12}", "exp.json: model.d_ff:", "n_dense_first 0");
    expect_error("{" MOEUT_BASE ",\"ff_k\":2,\"n_dense_first\":2,\"d_ff\":0}", "exp.json: model.d_ff:", ">= 1");
    expect_error("{" MOEUT_BASE ",\"ff_k\":2,\"n_shared_experts\":-1}", "exp.json: model.n_shared_experts:", NULL);
    expect_error("{" MOEUT_BASE ",\"ff_k\":2,\"balance_gamma\":0.01}", "exp.json: model.balance_gamma:",
                 "no effect with model.balance \"entropy\"");
    expect_error("{" MOEUT_BASE ",\"ff_k\":2,\"balance\":\"bias\",\"entropy_reg\":0.01}",
                 "exp.json: model.entropy_reg:", "\"bias\"");
    expect_error("{" MOEUT_BASE ",\"ff_k\":2,\"balance\":\"bias\",\"balance_gamma\":-1}",
                 "exp.json: model.balance_gamma:", ">= 0");
    expect_error("{" DENSE_BASE ",\"n_dense_first\":1}", "exp.json: model.n_dense_first:", "moeut");
    expect_error("{" DENSE_BASE ",\"n_shared_experts\":1}", "exp.json: model.n_shared_experts:", "moeut");
    round_trip("{" MOEUT_BASE ",\"ff_k\":2,\"n_dense_first\":2,\"n_shared_experts\":2,\"balance\":\"bias\","
               "\"balance_gamma\":0.005}");
    round_trip("{" MOEUT_BASE ",\"ff_k\":2,\"group_size\":1,\"n_dense_first\":1,\"d_ff\":7}");
}
END_TEST

/* DeepSeek-V3's routed scaling factor: default 1 (MoEUT), any finite value > 0, refused otherwise, MoEUT only. */
START_TEST(routed_scaling_factor_key) {
    ModelConfig c;
    char err[512];
    ck_assert_int_eq(parse("{" MOEUT_BASE ",\"ff_k\":2}", &c, err, sizeof err), 0);
    ck_assert(c.routed_scaling_factor == 1.0);
    ck_assert_int_eq(parse("{" MOEUT_BASE ",\"ff_k\":2,\"routed_scaling_factor\":2.5}", &c, err, sizeof err), 0);
    ck_assert(c.routed_scaling_factor == 2.5);
    expect_error("{" MOEUT_BASE ",\"ff_k\":2,\"routed_scaling_factor\":0}", "exp.json: model.routed_scaling_factor:",
                 "finite number > 0, got 0");
    expect_error("{" MOEUT_BASE ",\"ff_k\":2,\"routed_scaling_factor\":-2.5}",
                 "exp.json: model.routed_scaling_factor:", "got -2.5");
    expect_error("{" MOEUT_BASE ",\"ff_k\":2,\"routed_scaling_factor\":1e999}",
                 "exp.json: model.routed_scaling_factor:", "> 0, got inf");
    expect_error("{" MOEUT_BASE ",\"ff_k\":2,\"routed_scaling_factor\":\"2.5\"}",
                 "exp.json: model.routed_scaling_factor:", "expected a number");
    expect_error("{" DENSE_BASE ",\"routed_scaling_factor\":2.5}", "exp.json: model.routed_scaling_factor:", "moeut");
    /* NaN cannot be written in JSON; validate refuses it all the same */
    ck_assert_int_eq(parse("{" MOEUT_BASE ",\"ff_k\":2}", &c, err, sizeof err), 0);
    c.routed_scaling_factor = NAN;
    ck_assert_int_eq(model_config_validate(&c, err, sizeof err), -1);
    ck_assert_msg(strstr(err, "model.routed_scaling_factor: must be a finite number > 0") != NULL, "%s", err);
    round_trip("{" MOEUT_BASE ",\"ff_k\":2,\"router_renorm\":true,\"routed_scaling_factor\":2.5}");
}
END_TEST

/* model.routing: "topk" by default (ff_capacity_factor there: the token-choice capacity); "expert_choice" needs a
 * capacity factor, the softmax router without renormalisation or scaling, no balancing term, ff_k = round(CF) (the
 * causal evaluation's k) and none of the token-choice keys; dense configs know neither key. The capacity c = round(CF n / E) in [1, n]. */
#define EC_OK MOEUT_BASE ",\"routing\":\"expert_choice\",\"router\":\"softmax\",\"balance\":\"none\""
START_TEST(routing_key) {
    ModelConfig c;
    char err[512];
    ck_assert_int_eq(parse("{" MOEUT_BASE ",\"ff_k\":2}", &c, err, sizeof err), 0);
    ck_assert_int_eq(c.routing, ROUTING_TOPK);
    ck_assert(c.ff_capacity_factor == 0.0);
    ck_assert_int_eq(model_config_ec_capacity(&c, 100), 0);
    ck_assert_int_eq(model_config_train_routing_k(&c), 2);
    ck_assert_int_eq(parse("{" EC_OK ",\"ff_capacity_factor\":2,\"ff_k\":2}", &c, err, sizeof err), 0);
    ck_assert_int_eq(c.routing, ROUTING_EXPERT_CHOICE);
    ck_assert(c.ff_capacity_factor == 2.0);
    ck_assert_int_eq(model_config_train_routing_k(&c), 6);
    ck_assert_int_eq(model_config_ec_capacity(&c, 0), 0);
    ck_assert_int_eq(model_config_ec_capacity(&c, 1), 1);  /* round(1/3) = 0, at least 1 */
    ck_assert_int_eq(model_config_ec_capacity(&c, 2), 1);  /* round(2/3) */
    ck_assert_int_eq(model_config_ec_capacity(&c, 9), 3);
    ck_assert_int_eq(model_config_ec_capacity(&c, 6), 2);
    ck_assert_int_eq(model_config_ec_capacity(&c, 100), 33); /* round(33.33) */
    ck_assert_int_eq(parse("{" EC_OK ",\"ff_capacity_factor\":6,\"ff_k\":6}", &c, err, sizeof err), 0);
    ck_assert_int_eq(model_config_ec_capacity(&c, 5), 5); /* CF = E: every expert takes every position */
    ck_assert_int_eq(parse("{" EC_OK ",\"ff_capacity_factor\":1.5,\"ff_k\":2}", &c, err, sizeof err), 0);
    ck_assert_int_eq(model_config_ec_capacity(&c, 6), 2); /* round(1.5) = 2: halves away from zero */
    round_trip("{" EC_OK ",\"ff_capacity_factor\":2,\"ff_k\":2,\"n_shared_experts\":1}");
    round_trip("{" MOEUT_BASE ",\"ff_k\":2}");
    expect_error("{" MOEUT_BASE ",\"ff_k\":2,\"routing\":\"choice\"}", "exp.json: model.routing:", "expert_choice");
    expect_error("{" EC_OK ",\"ff_k\":2}", "exp.json: model.ff_capacity_factor:", "got 0");
    expect_error("{" EC_OK ",\"ff_capacity_factor\":-1,\"ff_k\":2}", "exp.json: model.ff_capacity_factor:",
                 "must be a finite number >= 0");
    expect_error("{" EC_OK ",\"ff_capacity_factor\":7,\"ff_k\":6}", "exp.json: model.ff_capacity_factor:",
                 "got 7");
    expect_error("{" EC_OK ",\"ff_capacity_factor\":2,\"ff_k\":3}", "exp.json: model.ff_k:", "set ff_k 2, got 3");
    expect_error("{" MOEUT_BASE ",\"routing\":\"expert_choice\",\"balance\":\"none\",\"ff_capacity_factor\":2,"
                 "\"ff_k\":2}", "exp.json: model.router:", "set router \"softmax\"");
    expect_error("{" EC_OK ",\"ff_capacity_factor\":2,\"ff_k\":2,\"router_renorm\":true}",
                 "exp.json: model.router_renorm:", "expert_choice");
    expect_error("{" EC_OK ",\"ff_capacity_factor\":2,\"ff_k\":2,\"routed_scaling_factor\":2.5}",
                 "exp.json: model.routed_scaling_factor:", "expert_choice");
    expect_error("{" MOEUT_BASE ",\"routing\":\"expert_choice\",\"router\":\"softmax\",\"ff_capacity_factor\":2,"
                 "\"ff_k\":2}", "exp.json: model.balance:", "set balance \"none\"");
    expect_error("{" EC_OK ",\"ff_capacity_factor\":2,\"ff_k\":2,\"ff_expert_dropout\":0.1}",
                 "exp.json: model.ff_expert_dropout:", "expert_choice");
    expect_error("{" DENSE_BASE ",\"routing\":\"topk\"}", "exp.json: model.routing:", "moeut");
    expect_error("{" DENSE_BASE ",\"ff_capacity_factor\":2}", "exp.json: model.ff_capacity_factor:", "moeut");
    /* the token-choice keys that have no effect when the experts choose */
    expect_error("{" EC_OK ",\"ff_capacity_factor\":2,\"ff_k\":2,\"ff_capacity_order\":\"score\"}",
                 "exp.json: model.ff_capacity_order:", "model.routing \"expert_choice\"");
    expect_error("{" EC_OK ",\"ff_capacity_factor\":2,\"ff_k\":2,\"n_group\":2,\"topk_group\":1}",
                 "exp.json: model.n_group:", "model.routing \"expert_choice\"");
    expect_error("{" EC_OK ",\"ff_capacity_factor\":2,\"ff_k\":2,\"seq_balance_alpha\":0.001}",
                 "exp.json: model.seq_balance_alpha:", "model.routing \"expert_choice\"");
}
END_TEST

/* model.routing: "topk" (default), "hash" (Roller et al.: k = 1, balance "none", no router keys, hash_seed default
 * 1). */
#define HASH_BASE MOEUT_BASE ",\"ff_k\":1,\"balance\":\"none\",\"routing\":\"hash\""
START_TEST(routing_hash_key) {
    ModelConfig c;
    char err[512];
    ck_assert_int_eq(parse("{" MOEUT_BASE ",\"ff_k\":2}", &c, err, sizeof err), 0);
    ck_assert_int_eq(c.routing, ROUTING_TOPK);
    ck_assert_int_eq(c.hash_seed, 1);
    ck_assert_int_eq(parse("{" HASH_BASE "}", &c, err, sizeof err), 0);
    ck_assert_int_eq(c.routing, ROUTING_HASH);
    ck_assert_int_eq(c.hash_seed, 1);
    ck_assert_int_eq(parse("{" HASH_BASE ",\"hash_seed\":0,\"n_shared_experts\":1}", &c, err, sizeof err), 0);
    ck_assert_int_eq(c.hash_seed, 0);
    /* topk writes "routing" and no hash_seed; hash writes both and none of the router's keys */
    cJSON *o = model_config_to_json(&c);
    ck_assert_str_eq(cJSON_GetObjectItemCaseSensitive(o, "routing")->valuestring, "hash");
    ck_assert_ptr_nonnull(cJSON_GetObjectItemCaseSensitive(o, "hash_seed"));
    const char *router_keys[] = {"router", "router_renorm", "routed_scaling_factor", "ff_expert_dropout"};
    for (int i = 0; i < 4; i++) ck_assert_ptr_null(cJSON_GetObjectItemCaseSensitive(o, router_keys[i]));
    cJSON_Delete(o);
    round_trip("{" HASH_BASE ",\"hash_seed\":12345}");
    round_trip("{" MOEUT_BASE ",\"ff_k\":2,\"routing\":\"topk\"}");
    ck_assert_int_eq(parse("{" MOEUT_BASE ",\"ff_k\":2}", &c, err, sizeof err), 0);
    o = model_config_to_json(&c);
    ck_assert_str_eq(cJSON_GetObjectItemCaseSensitive(o, "routing")->valuestring, "topk");
    ck_assert_ptr_null(cJSON_GetObjectItemCaseSensitive(o, "hash_seed"));
    cJSON_Delete(o);
    /* refusals, one line each, naming the key */
    expect_error("{" MOEUT_BASE ",\"routing\":\"random\"}", "exp.json: model.routing:", "unknown value \"random\"");
    expect_error("{" MOEUT_BASE ",\"routing\":1}", "exp.json: model.routing:", "expected a string");
    expect_error("{" DENSE_BASE ",\"routing\":\"hash\"}", "exp.json: model.routing:", "moeut");
    expect_error("{" MOEUT_BASE ",\"ff_k\":2,\"balance\":\"none\",\"routing\":\"hash\"}", "exp.json: model.ff_k:",
                 "exactly 1 expert; set ff_k 1, got 2");
    expect_error("{" MOEUT_BASE ",\"ff_k\":1,\"routing\":\"hash\"}", "exp.json: model.balance:",
                 "set balance \"none\", got \"entropy\"");
    expect_error("{" MOEUT_BASE ",\"ff_k\":1,\"routing\":\"hash\",\"balance\":\"bias\"}", "exp.json: model.balance:",
                 "got \"bias\"");
    expect_error("{" HASH_BASE ",\"router\":\"softmax\"}", "exp.json: model.router:",
                 "has no effect with model.routing \"hash\"");
    expect_error("{" HASH_BASE ",\"router_renorm\":false}", "exp.json: model.router_renorm:", "no effect");
    expect_error("{" HASH_BASE ",\"routed_scaling_factor\":2}", "exp.json: model.routed_scaling_factor:", "no effect");
    expect_error("{" HASH_BASE ",\"ff_expert_dropout\":0.1}", "exp.json: model.ff_expert_dropout:", "no effect");
    expect_error("{" MOEUT_BASE ",\"ff_k\":2,\"hash_seed\":3}", "exp.json: model.hash_seed:",
                 "has no effect with model.routing \"topk\"");
    expect_error("{" HASH_BASE ",\"hash_seed\":-1}", "exp.json: model.hash_seed:", "must be >= 0, got -1");
    expect_error("{" HASH_BASE ",\"hash_seed\":1.5}", "exp.json: model.hash_seed:", "expected an integer");
    expect_error("{\"arch\":\"moeut\",\"n_tokens\":5,\"d_model\":8,\"n_layers\":4,\"n_heads\":2,\"ff_n_experts\":6,"
                 "\"att_n_experts\":3,\"ff_k\":1,\"balance\":\"none\",\"routing\":\"hash\"}",
                 "exp.json: model.ff_n_experts:", "6 experts for 5 token ids");
    /* validate refuses what JSON cannot say */
    ck_assert_int_eq(parse("{" HASH_BASE "}", &c, err, sizeof err), 0);
    c.ff_expert_dropout = 0.5;
    ck_assert_int_eq(model_config_validate(&c, err, sizeof err), -1);
    ck_assert_msg(strstr(err, "model.ff_expert_dropout: routing \"hash\"") != NULL, "%s", err);
    c.ff_expert_dropout = 0;
    c.routing = (RoutingKind)7;
    ck_assert_int_eq(model_config_validate(&c, err, sizeof err), -1);
    ck_assert_msg(strstr(err, "model.routing: invalid value 7") != NULL, "%s", err);
}
END_TEST

/* Group-limited routing (DeepSeek-V3 §2.1.2): n_group 1 by default (topk_group then 1), topk_group defaults to
 * n_group, which keeps every group and is refused (no effect); the settings topk_select accepts, nothing else. */
START_TEST(group_limited_keys) {
    ModelConfig c;
    char err[512];
    ck_assert_int_eq(parse("{" MOEUT_BASE ",\"ff_k\":2}", &c, err, sizeof err), 0);
    ck_assert(c.n_group == 1 && c.topk_group == 1);
    ck_assert_int_eq(parse("{" MOEUT_BASE ",\"ff_k\":2,\"n_group\":1}", &c, err, sizeof err), 0);
    ck_assert_int_eq(parse("{" MOEUT_BASE ",\"ff_k\":2,\"n_group\":3,\"topk_group\":1}", &c, err, sizeof err), 0);
    ck_assert(c.n_group == 3 && c.topk_group == 1);
    ck_assert_int_eq(parse("{" MOEUT_BASE ",\"ff_k\":4,\"n_group\":3,\"topk_group\":2}", &c, err, sizeof err), 0);
    expect_error("{" MOEUT_BASE ",\"ff_k\":2,\"topk_group\":1}", "exp.json: model.topk_group:",
                 "no effect with model.n_group 1");
    expect_error("{" MOEUT_BASE ",\"ff_k\":2,\"n_group\":1,\"topk_group\":1}", "exp.json: model.topk_group:",
                 "no effect with model.n_group 1");
    expect_error("{" MOEUT_BASE ",\"ff_k\":2,\"n_group\":3}", "exp.json: model.topk_group:", "limits nothing");
    expect_error("{" MOEUT_BASE ",\"ff_k\":2,\"n_group\":3,\"topk_group\":3}", "exp.json: model.topk_group:",
                 "3 of 3 groups kept");
    expect_error("{" MOEUT_BASE ",\"ff_k\":2,\"n_group\":4,\"topk_group\":1}", "exp.json: model.n_group:",
                 "ff_n_experts 6 must split into 4 groups of >= 2");
    expect_error("{" MOEUT_BASE ",\"ff_k\":2,\"n_group\":6,\"topk_group\":1}", "exp.json: model.n_group:",
                 "groups of >= 2 experts");
    expect_error("{" MOEUT_BASE ",\"ff_k\":2,\"n_group\":0}", "exp.json: model.n_group:", "[1, 64], got 0");
    expect_error("{" MOEUT_BASE ",\"ff_k\":2,\"n_group\":65,\"topk_group\":1}", "exp.json: model.n_group:",
                 "got 65");
    expect_error("{" MOEUT_BASE ",\"ff_k\":2,\"n_group\":3,\"topk_group\":0}", "exp.json: model.topk_group:",
                 "[1, n_group 3], got 0");
    expect_error("{" MOEUT_BASE ",\"ff_k\":2,\"n_group\":3,\"topk_group\":4}", "exp.json: model.topk_group:",
                 "got 4");
    expect_error("{" MOEUT_BASE ",\"ff_k\":3,\"n_group\":3,\"topk_group\":1}", "exp.json: model.topk_group:",
                 "1 groups of 2 experts hold fewer than ff_k 3");
    expect_error("{" MOEUT_BASE ",\"ff_k\":2,\"n_group\":1.5}", "exp.json: model.n_group:", "expected an integer");
    expect_error("{" DENSE_BASE ",\"n_group\":2}", "exp.json: model.n_group:", "moeut");
    /* validate alone (a config built in code) */
    ck_assert_int_eq(parse("{" MOEUT_BASE ",\"ff_k\":2}", &c, err, sizeof err), 0);
    c.topk_group = 2;
    ck_assert_int_eq(model_config_validate(&c, err, sizeof err), -1);
    ck_assert_msg(strstr(err, "model.topk_group: must be 1 with n_group 1, got 2") != NULL, "%s", err);
    round_trip("{" MOEUT_BASE ",\"ff_k\":4,\"n_group\":3,\"topk_group\":2}");
    round_trip("{" MOEUT_BASE ",\"ff_k\":2}");
}
END_TEST

/* DeepSeek-V3's sequence-wise balance loss: default 0 (off), any finite value >= 0, beside every balance; MoEUT only. */
START_TEST(seq_balance_alpha_key) {
    ModelConfig c;
    char err[512];
    ck_assert_int_eq(parse("{" MOEUT_BASE ",\"ff_k\":2}", &c, err, sizeof err), 0);
    ck_assert(c.seq_balance_alpha == 0.0);
    ck_assert_int_eq(parse("{" MOEUT_BASE ",\"ff_k\":2,\"seq_balance_alpha\":0.0001,\"balance\":\"bias\"}", &c, err,
                           sizeof err),
                     0);
    ck_assert(c.seq_balance_alpha == 0.0001 && c.balance == BALANCE_BIAS);
    ck_assert_int_eq(parse("{" MOEUT_BASE ",\"ff_k\":2,\"seq_balance_alpha\":0.5}", &c, err, sizeof err), 0);
    expect_error("{" MOEUT_BASE ",\"ff_k\":2,\"seq_balance_alpha\":-1e-4}", "exp.json: model.seq_balance_alpha:",
                 "finite number >= 0, got -0.0001");
    expect_error("{" MOEUT_BASE ",\"ff_k\":2,\"seq_balance_alpha\":1e999}", "exp.json: model.seq_balance_alpha:",
                 "got inf");
    expect_error("{" MOEUT_BASE ",\"ff_k\":2,\"seq_balance_alpha\":true}", "exp.json: model.seq_balance_alpha:",
                 "expected a number");
    expect_error("{" DENSE_BASE ",\"seq_balance_alpha\":0.1}", "exp.json: model.seq_balance_alpha:", "moeut");
    /* the objective gains alpha * reg_seq, and only then */
    ck_assert_int_eq(parse("{" MOEUT_BASE ",\"ff_k\":2,\"seq_balance_alpha\":0.5}", &c, err, sizeof err), 0);
    ck_assert(model_config_objective(&c, 2.0, 0.0, 0.0, 3.0) == 2.0 + 0.5 * 3.0);
    c.seq_balance_alpha = 0.0;
    ck_assert(model_config_objective(&c, 2.0, 0.0, 0.0, 3.0) == 2.0);
    round_trip("{" MOEUT_BASE ",\"ff_k\":2,\"seq_balance_alpha\":0.0001,\"balance\":\"bias\"}");
}
END_TEST

START_TEST(to_json_round_trips) {
    round_trip("{" DENSE_BASE ",\"d_head\":3,\"lm_head_bias\":false}");
    round_trip("{" MOEUT_BASE ",\"ff_k\":3,\"entropy_reg\":0.0123456789,\"out_norm_affine\":false,\"d_head\":5}");
}
END_TEST

START_TEST(n_rot_rule) {
    ModelConfig c = {0};
    int cases[][2] = {{64, 32}, {128, 64}, {82, 40}, {96, 48}, {4, 2}, {6, 2}, {3, 0}, {1, 0}, {2, 0}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        c.d_head = cases[i][0];
        ck_assert_int_eq(model_config_n_rot(&c), cases[i][1]);
    }
}
END_TEST

/* Reads the "model" section of an experiment file. */
static ModelConfig read_experiment_model(const char *path) {
    char err[512] = "";
    cJSON *root = json_load_file(path, JSON_KIND_CONFIG, err, sizeof err);
    ck_assert_msg(root != NULL, "%s", err);
    const cJSON *model = cJSON_GetObjectItemCaseSensitive(root, "model");
    ck_assert_msg(model != NULL, "%s has no model section", path);
    ModelConfig c;
    ck_assert_msg(model_config_from_json(&c, model, path, err, sizeof err) == 0, "%s", err);
    cJSON_Delete(root);
    return c;
}

START_TEST(paper_param_counts) {
    /* dm-math-training-code.md §A: 228,223,228 (dense) and 227,981,312 (MoEUT), from the shipped run configs. */
    const char *dense_runs[] = {"experiments/paper/dense_qa.json", "experiments/paper/dense_answer.json"};
    const char *moeut_runs[] = {"experiments/paper/moeut_qa.json", "experiments/paper/moeut_answer.json"};
    for (int i = 0; i < 2; i++) {
        ModelConfig d = read_experiment_model(dense_runs[i]);
        ck_assert_int_eq(d.arch, ARCH_DENSE);
        ck_assert_uint_eq(model_count_params(&d), 228223228u);
        ck_assert_int_eq(model_config_n_rot(&d), 32);
        ModelConfig m = read_experiment_model(moeut_runs[i]);
        ck_assert_int_eq(m.arch, ARCH_MOEUT);
        ck_assert_uint_eq(model_count_params(&m), 227981312u);
        ck_assert_int_eq(model_config_n_rot(&m), 64);
    }
    /* The C4 244M MoEUT (V=8000, head bias, affine final norm): 243,326,784 (moeut-spec.md §8.3 item 9). */
    ModelConfig c4 = mtu_config("{\"arch\":\"moeut\",\"n_tokens\":8000,\"d_model\":1024,\"n_layers\":18,\"n_heads\":4,"
                                "\"d_head\":128,\"ff_n_experts\":387,\"ff_expert_size\":128,\"ff_k\":16,"
                                "\"att_n_experts\":10,\"att_k\":2,\"group_size\":2}");
    ck_assert_uint_eq(model_count_params(&c4), 243326784u);
    /* The C4 dense 244M: "243.57M" (moeut-spec.md §6.9). */
    ModelConfig c4d = mtu_config("{\"arch\":\"dense\",\"n_tokens\":8000,\"d_model\":1024,\"n_layers\":18,\"n_heads\":16,"
                                 "\"d_ff\":4110}");
    size_t n = model_count_params(&c4d);
    ck_assert_msg(n >= 243565000u && n < 243575000u, "dense C4 count %zu", n);
}
END_TEST

/* The shipped paper run files are complete run configs with the protocol's training settings (dm-math-protocol.md
 * §2, dm-math-training-code.md §A). */
START_TEST(paper_run_files) {
    const char *runs[] = {"dense_qa", "dense_answer", "moeut_qa", "moeut_answer"};
    for (int i = 0; i < 4; i++) {
        char path[256], err[512] = "";
        snprintf(path, sizeof path, "experiments/paper/%s.json", runs[i]);
        cJSON *root = json_load_file(path, JSON_KIND_CONFIG, err, sizeof err);
        ck_assert_msg(root != NULL, "%s", err);
        ModelConfig mc;
        TrainConfig tc;
        ck_assert_msg(run_config_parse(root, path, &mc, &tc, err, sizeof err) == 0, "%s", err);
        int moeut = strncmp(runs[i], "moeut", 5) == 0, answer = strstr(runs[i], "answer") != NULL;
        ck_assert_int_eq(mc.arch, moeut ? ARCH_MOEUT : ARCH_DENSE);
        ck_assert(!mc.lm_head_bias && !mc.out_norm_affine);
        ck_assert_int_eq(tc.loss_on_target_only, answer);
        ck_assert_int_eq(tc.steps, 100000);
        ck_assert_int_eq(tc.batch_size, 64);
        ck_assert_int_eq(tc.n_microbatch, moeut ? 2 : 1);
        ck_assert_int_eq(tc.context, 1024);
        ck_assert(tc.lr == 2.5e-4 && tc.weight_decay == 0.01 && tc.min_lr_multiplier == 0.1 && tc.grad_clip == 0.25);
        ck_assert_int_eq(tc.warmup, 4000);
        ck_assert(tc.adam_beta1 == 0.9 && tc.adam_beta2 == 0.999 && tc.adam_eps == 1e-8);
        ck_assert_int_eq(tc.precision, PRECISION_BF16);
        ck_assert_int_eq(tc.seed, 1);
        ck_assert_int_eq(tc.checkpoint_every, 1000);
        ck_assert_int_eq(tc.log_every, 100);
        const cJSON *ev = cJSON_GetObjectItemCaseSensitive(root, "evaluate");
        ck_assert_int_eq(cJSON_GetObjectItemCaseSensitive(ev, "max_examples_per_set")->valueint, 5000);
        ck_assert_int_eq(cJSON_GetObjectItemCaseSensitive(ev, "greedy_check_examples")->valueint, 200);
        const cJSON *an = cJSON_GetObjectItemCaseSensitive(root, "analyze");
        ck_assert(cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(an, "enabled")));
        if (moeut) {
            ck_assert(mc.n_heads == 4 && mc.d_head == 128 && mc.ff_n_experts == 387 && mc.ff_k == 16);
            ck_assert(mc.att_n_experts == 10 && mc.att_k == 2 && mc.group_size == 2 && mc.ff_expert_size == 128);
            ck_assert(mc.entropy_reg == 0.01 && mc.att_entropy_reg == 0.001);
        } else {
            ck_assert(mc.n_heads == 16 && mc.d_head == 64 && mc.d_ff == 4110);
        }
        ck_assert(mc.n_tokens == 512 && mc.d_model == 1024 && mc.n_layers == 18);
        cJSON_Delete(root);
    }
}
END_TEST

START_TEST(count_matches_created_models) {
    const char *cfgs[] = {
        "{\"arch\":\"dense\",\"n_tokens\":13,\"d_model\":6,\"n_layers\":3,\"n_heads\":2,\"d_head\":5,\"d_ff\":7}",
        "{\"arch\":\"dense\",\"n_tokens\":13,\"d_model\":6,\"n_layers\":1,\"n_heads\":3,\"d_ff\":7,"
        "\"lm_head_bias\":false,\"out_norm_affine\":false}",
        "{\"arch\":\"moeut\",\"n_tokens\":13,\"d_model\":6,\"n_layers\":6,\"n_heads\":2,\"d_head\":4,\"ff_n_experts\":5,"
        "\"ff_expert_size\":3,\"ff_k\":2,\"att_n_experts\":3,\"att_k\":2,\"group_size\":3}",
        "{\"arch\":\"moeut\",\"n_tokens\":13,\"d_model\":6,\"n_layers\":2,\"n_heads\":1,\"ff_n_experts\":4,"
        "\"ff_expert_size\":2,\"ff_k\":1,\"att_n_experts\":2,\"att_k\":1,\"group_size\":1,"
        "\"lm_head_bias\":false,\"out_norm_affine\":false}",
        /* the dense prefix, shared experts and the bias buffer */
        "{\"arch\":\"moeut\",\"n_tokens\":13,\"d_model\":6,\"n_layers\":5,\"n_heads\":2,\"d_head\":4,"
        "\"ff_n_experts\":5,\"ff_expert_size\":3,\"ff_k\":2,\"att_n_experts\":3,\"att_k\":2,\"group_size\":2,"
        "\"n_dense_first\":1,\"d_ff\":11,\"n_shared_experts\":2,\"balance\":\"bias\"}",
        "{\"arch\":\"moeut\",\"n_tokens\":13,\"d_model\":6,\"n_layers\":3,\"n_heads\":1,\"ff_n_experts\":4,"
        "\"ff_expert_size\":2,\"ff_k\":1,\"att_n_experts\":2,\"att_k\":1,\"group_size\":1,\"n_dense_first\":2,"
        "\"lm_head_bias\":false,\"out_norm_affine\":false}",
        /* arch "moe": with and without a dense prefix */
        "{\"arch\":\"moe\",\"n_tokens\":13,\"d_model\":6,\"n_layers\":3,\"n_heads\":2,\"d_head\":4,"
        "\"ff_n_experts\":5,\"ff_expert_size\":3,\"ff_k\":2}",
        "{\"arch\":\"moe\",\"n_tokens\":13,\"d_model\":6,\"n_layers\":3,\"n_heads\":1,\"ff_n_experts\":4,"
        "\"ff_expert_size\":2,\"ff_k\":1,\"n_dense_first\":2,\"d_ff\":7,\"balance\":\"none\","
        "\"lm_head_bias\":false,\"out_norm_affine\":false}",
        /* routing "hash": no expert_sel, no ln2; with a dense prefix and a shared expert */
        "{\"arch\":\"moeut\",\"n_tokens\":13,\"d_model\":6,\"n_layers\":5,\"n_heads\":2,\"d_head\":4,"
        "\"ff_n_experts\":5,\"ff_expert_size\":3,\"ff_k\":1,\"att_n_experts\":3,\"att_k\":2,\"group_size\":2,"
        "\"n_dense_first\":1,\"n_shared_experts\":1,\"balance\":\"none\",\"routing\":\"hash\"}",
        /* the residual MLP beside shared experts and a dense prefix of the default width */
        "{\"arch\":\"moeut\",\"n_tokens\":13,\"d_model\":6,\"n_layers\":3,\"n_heads\":2,\"d_head\":4,"
        "\"ff_n_experts\":5,\"ff_expert_size\":3,\"ff_k\":2,\"att_n_experts\":3,\"att_k\":2,\"group_size\":2,"
        "\"n_dense_first\":1,\"n_shared_experts\":1,\"ff_residual_size\":7}",
    };
    Backend *be = mtu_backend();
    for (size_t i = 0; i < sizeof cfgs / sizeof cfgs[0]; i++) {
        ModelConfig c = mtu_config(cfgs[i]);
        Model *m = model_create(&c, be);
        ck_assert_uint_eq(model_n_params(m), model_count_params(&c));
        /* The registry covers the buffer exactly, in registration order, without gaps: the parameters [0, n_params),
         * then the buffers up to n_state. */
        size_t off = 0;
        int n_buffers = 0;
        for (int t = 0; t < model_n_tensors(m); t++) {
            const ParamTensor *p = model_tensor(m, t);
            ck_assert_uint_eq(p->offset, off);
            size_t numel = 1;
            for (int d = 0; d < p->ndim; d++) numel *= (size_t)p->shape[d];
            ck_assert_uint_eq(p->numel, numel);
            ck_assert(p->buffer == (off >= model_n_params(m)));
            n_buffers += p->buffer;
            off += p->numel;
        }
        ck_assert_uint_eq(off, model_n_state(m));
        ck_assert_int_eq(n_buffers, c.balance == BALANCE_BIAS ? c.group_size : 0);
        ck_assert_uint_eq(model_n_state(m) - model_n_params(m),
                          c.balance == BALANCE_BIAS ? (size_t)c.group_size * c.ff_n_experts : 0);
        /* Wrapper tensors: first the embedding, last the head (then the buffers); optional ones present iff
         * configured. */
        ck_assert_str_eq(model_tensor(m, 0)->name, "embedding.weight");
        const char *last = model_tensor(m, model_n_tensors(m) - 1 - n_buffers)->name;
        ck_assert_str_eq(last, c.lm_head_bias ? "lm_head.bias" : "lm_head.weight");
        ck_assert((model_find_tensor(m, "out_norm.weight") != NULL) == c.out_norm_affine);
        ck_assert((model_find_tensor(m, "out_norm.bias") != NULL) == c.out_norm_affine);
        ck_assert((model_find_tensor(m, "lm_head.bias") != NULL) == c.lm_head_bias);
        ck_assert_ptr_null(model_find_tensor(m, "no.such.tensor"));
        model_free(m);
    }
    backend_destroy(be);
}
END_TEST

START_TEST(dense_tensor_names_and_shapes) {
    ModelConfig c = mtu_config("{\"arch\":\"dense\",\"n_tokens\":13,\"d_model\":6,\"n_layers\":2,\"n_heads\":2,"
                               "\"d_head\":5,\"d_ff\":7}");
    Backend *be = mtu_backend();
    Model *m = model_create(&c, be);
    struct { const char *name; int ndim; int64_t s0, s1; } want[] = {
        {"embedding.weight", 2, 13, 6},
        {"transformer.layers.1.attention.q.weight", 2, 10, 6},
        {"transformer.layers.1.attention.k.weight", 2, 10, 6},
        {"transformer.layers.1.attention.v.weight", 2, 10, 6},
        {"transformer.layers.1.attention.o.weight", 2, 6, 10},
        {"transformer.layers.0.ffn.linear1.weight", 2, 7, 6},
        {"transformer.layers.0.ffn.linear1.bias", 1, 7, 0},
        {"transformer.layers.0.ffn.linear2.weight", 2, 6, 7},
        {"transformer.layers.0.ffn.linear2.bias", 1, 6, 0},
        {"transformer.layers.0.ln1.weight", 1, 6, 0},
        {"transformer.layers.0.ln1.bias", 1, 6, 0},
        {"transformer.layers.1.ln2.weight", 1, 6, 0},
        {"transformer.layers.1.ln2.bias", 1, 6, 0},
        {"out_norm.weight", 1, 6, 0},
        {"out_norm.bias", 1, 6, 0},
        {"lm_head.weight", 2, 13, 6},
        {"lm_head.bias", 1, 13, 0},
    };
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
        const ParamTensor *t = model_find_tensor(m, want[i].name);
        ck_assert_msg(t != NULL, "missing %s", want[i].name);
        ck_assert_int_eq(t->ndim, want[i].ndim);
        ck_assert_int_eq(t->shape[0], want[i].s0);
        if (want[i].ndim == 2) ck_assert_int_eq(t->shape[1], want[i].s1);
    }
    ck_assert_int_eq(model_n_tensors(m), 1 + 2 * 12 + 2 + 2);
    /* Layer 0's tensors come before layer 1's. */
    ck_assert_uint_lt(model_find_tensor(m, "transformer.layers.0.ln2.bias")->offset,
                      model_find_tensor(m, "transformer.layers.1.attention.q.weight")->offset);
    model_free(m);
    backend_destroy(be);
}
END_TEST

/* MoEUT with a dense prefix, shared experts and the bias buffer: names, shapes and the state_dict order (the twin's
 * tests/reference/twin.py is the other side: its fixtures load by these names). */
START_TEST(moeut_switch_tensor_names) {
    ModelConfig c = mtu_config("{\"arch\":\"moeut\",\"n_tokens\":13,\"d_model\":6,\"n_layers\":3,\"n_heads\":2,"
                               "\"d_head\":4,\"ff_n_experts\":5,\"ff_expert_size\":3,\"ff_k\":2,\"att_n_experts\":3,"
                               "\"group_size\":1,\"n_dense_first\":1,\"n_shared_experts\":2,\"balance\":\"bias\"}");
    Backend *be = mtu_backend();
    Model *m = model_create(&c, be);
    struct { const char *name; int ndim; int64_t s0, s1, s2; } want[] = {
        {"transformer.dense_layers.0.attention.q.weight", 2, 8, 6, 0},
        {"transformer.dense_layers.0.ffn.linear1.weight", 2, (2 + 2) * 3, 6, 0}, /* default d_ff (K + K_s) S */
        {"transformer.dense_layers.0.ln2.bias", 1, 6, 0, 0},
        {"transformer.layers.0.ffn.keys", 3, 5, 6, 3},
        {"transformer.layers.0.ffn.shared_keys", 3, 2, 6, 3},
        {"transformer.layers.0.ffn.shared_values", 3, 2, 3, 6},
        {"transformer.layers.0.ffn.expert_bias", 1, 5, 0, 0},
    };
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
        const ParamTensor *t = model_find_tensor(m, want[i].name);
        ck_assert_msg(t != NULL, "missing %s", want[i].name);
        ck_assert_int_eq(t->ndim, want[i].ndim);
        ck_assert_int_eq(t->shape[0], want[i].s0);
        if (want[i].ndim >= 2) ck_assert_int_eq(t->shape[1], want[i].s1);
        if (want[i].ndim == 3) ck_assert_int_eq(t->shape[2], want[i].s2);
    }
    ck_assert_ptr_null(model_find_tensor(m, "transformer.layers.1.ffn.keys")); /* one MoEUT layer (group_size 1) */
    ck_assert_ptr_null(model_find_tensor(m, "transformer.dense_layers.1.ln1.weight"));
    /* order: embedding, dense prefix, MoEUT layers (shared experts after expert_sel, before ln1), head, buffers */
    const char *order[] = {"embedding.weight", "transformer.dense_layers.0.ln2.bias", "transformer.layers.0.ffn.expert_sel",
                           "transformer.layers.0.ffn.shared_keys", "transformer.layers.0.ffn.shared_values",
                           "transformer.layers.0.ln1.weight", "lm_head.bias", "transformer.layers.0.ffn.expert_bias"};
    for (size_t i = 1; i < sizeof order / sizeof order[0]; i++)
        ck_assert_msg(model_find_tensor(m, order[i - 1])->offset < model_find_tensor(m, order[i])->offset, "%s < %s",
                      order[i - 1], order[i]);
    ck_assert(model_find_tensor(m, "transformer.layers.0.ffn.expert_bias")->buffer);
    ck_assert(!model_find_tensor(m, "transformer.layers.0.ffn.shared_keys")->buffer);
    model_free(m);
    backend_destroy(be);
}
END_TEST

#define MOE_BASE                                                                                                     \
    "\"arch\":\"moe\",\"n_tokens\":16,\"d_model\":8,\"n_layers\":3,\"n_heads\":2,\"ff_n_experts\":4,"             \
    "\"ff_expert_size\":12"

/* Arch "moe": its defaults (Switch/Mixtral routing), the keys it takes and the ones it refuses, its values. */
START_TEST(moe_arch_config) {
    ModelConfig c;
    char err[512];
    ck_assert_int_eq(parse("{" MOE_BASE "}", &c, err, sizeof err), 0);
    ck_assert_int_eq(c.arch, ARCH_MOE);
    ck_assert_int_eq(c.ff_k, 2);
    ck_assert_int_eq(c.router, ROUTER_SOFTMAX);
    ck_assert(!c.router_renorm);
    ck_assert(c.routed_scaling_factor == 1.0);
    ck_assert_int_eq(c.balance, BALANCE_SWITCH);
    ck_assert(c.balance_alpha == 0.01);
    ck_assert_int_eq(c.n_dense_first, 0);
    ck_assert(model_config_ffn_balance_coef(&c) == 0.01);
    ck_assert_str_eq(model_arch_name(c.arch), "moe");
    /* every routing key of the interface */
    ck_assert_int_eq(parse("{" MOE_BASE ",\"ff_k\":1,\"router\":\"sigmoid\",\"router_renorm\":true,"
                           "\"routed_scaling_factor\":2.5,\"balance\":\"switch\",\"balance_alpha\":0.1,"
                           "\"n_dense_first\":1,\"d_ff\":10,\"dropout\":0,\"lm_head_bias\":false,"
                           "\"out_norm_affine\":false,\"d_head\":4}",
                           &c, err, sizeof err),
                     0);
    ck_assert_int_eq(c.ff_k, 1);
    ck_assert_int_eq(c.d_ff, 10);
    /* the dense prefix's default width: K * S (the active width of a MoE layer) */
    ck_assert_int_eq(parse("{" MOE_BASE ",\"n_dense_first\":2}", &c, err, sizeof err), 0);
    ck_assert_int_eq(c.d_ff, 2 * 12);
    ck_assert_int_eq(parse("{" MOE_BASE ",\"balance\":\"none\"}", &c, err, sizeof err), 0);
    ck_assert(model_config_ffn_balance_coef(&c) == 0.0);
    /* required keys */
    expect_error("{\"arch\":\"moe\",\"n_tokens\":16,\"d_model\":8,\"n_layers\":3,\"n_heads\":2,\"ff_n_experts\":4}",
                 "exp.json: model.ff_expert_size:", "missing");
    expect_error("{\"arch\":\"moe\",\"n_tokens\":16,\"d_model\":8,\"n_layers\":3,\"n_heads\":2,"
                 "\"ff_expert_size\":4}",
                 "exp.json: model.ff_n_experts:", "missing");
    /* MoEUT-only keys are refused */
    const char *moeut_only[] = {"\"att_n_experts\":2", "\"att_k\":1", "\"group_size\":1", "\"entropy_reg\":0.01",
                                "\"att_entropy_reg\":0.001", "\"n_shared_experts\":1", "\"ff_expert_dropout\":0.1",
                                "\"att_expert_dropout\":0.1", "\"balance_gamma\":0.001"};
    for (size_t i = 0; i < sizeof moeut_only / sizeof moeut_only[0]; i++) {
        char json[512];
        snprintf(json, sizeof json, "{" MOE_BASE ",%s}", moeut_only[i]);
        char key[64];
        snprintf(key, sizeof key, "exp.json: model.%.*s:", (int)(strchr(moeut_only[i] + 1, '"') - moeut_only[i] - 1),
                 moeut_only[i] + 1);
        expect_error(json, key, "\"moe\"");
    }
    /* void or bad values */
    expect_error("{" MOE_BASE ",\"d_ff\":12}", "exp.json: model.d_ff:", "n_dense_first");
    expect_error("{" MOE_BASE ",\"balance\":\"none\",\"balance_alpha\":0.1}", "exp.json: model.balance_alpha:",
                 "no effect");
    expect_error("{" MOE_BASE ",\"balance\":\"entropy\"}", "exp.json: model.balance:", "moe");
    expect_error("{" MOE_BASE ",\"balance\":\"bias\"}", "exp.json: model.balance:", "moe");
    expect_error("{" MOE_BASE ",\"ff_k\":5}", "exp.json: model.ff_k:", "ff_n_experts");
    expect_error("{" MOE_BASE ",\"ff_k\":0}", "exp.json: model.ff_k:", NULL);
    expect_error("{" MOE_BASE ",\"ff_expert_size\":0}", "exp.json: model.ff_expert_size:", NULL);
    expect_error("{" MOE_BASE ",\"n_dense_first\":3}", "exp.json: model.n_dense_first:", "at least one MoE layer");
    expect_error("{" MOE_BASE ",\"n_dense_first\":-1}", "exp.json: model.n_dense_first:", NULL);
    expect_error("{" MOE_BASE ",\"routed_scaling_factor\":0}", "exp.json: model.routed_scaling_factor:", "> 0");
    expect_error("{" MOE_BASE ",\"balance_alpha\":-1}", "exp.json: model.balance_alpha:", ">= 0");
    expect_error("{" MOE_BASE ",\"router\":\"relu\"}", "exp.json: model.router:", "softmax");
    expect_error("{" MOE_BASE ",\"dropout\":0.1}", "exp.json: model.dropout:", NULL);
    expect_error("{" MOE_BASE ",\"ff_n_expert\":4}", "exp.json: model.ff_n_expert:", "did you mean model.ff_n_experts");
    /* and the dense model does not take the routing keys */
    expect_error("{" DENSE_BASE ",\"ff_expert_size\":4}", "exp.json: model.ff_expert_size:", "moe");
    /* serialisation round trip */
    ck_assert_int_eq(parse("{" MOE_BASE ",\"router_renorm\":true,\"n_dense_first\":1}", &c, err, sizeof err), 0);
    cJSON *j = model_config_to_json(&c);
    ModelConfig back;
    ck_assert_int_eq(model_config_from_json(&back, j, "round", err, sizeof err), 0);
    ck_assert_msg(memcmp(&c, &back, sizeof c) == 0, "round trip changed the config");
    ck_assert_ptr_null(cJSON_GetObjectItemCaseSensitive(j, "group_size"));
    ck_assert_ptr_null(cJSON_GetObjectItemCaseSensitive(j, "entropy_reg"));
    cJSON_Delete(j);
}
END_TEST

/* Arch "moe": names, shapes and order of the interface (tests/reference/twin.py's MoELM loads by these names). */
START_TEST(moe_tensor_names) {
    ModelConfig c = mtu_config("{\"arch\":\"moe\",\"n_tokens\":13,\"d_model\":6,\"n_layers\":3,\"n_heads\":2,"
                               "\"d_head\":4,\"ff_n_experts\":5,\"ff_expert_size\":3,\"ff_k\":2,\"n_dense_first\":1,"
                               "\"d_ff\":7}");
    Backend *be = mtu_backend();
    Model *m = model_create(&c, be);
    struct { const char *name; int ndim; int64_t s0, s1, s2; } want[] = {
        {"transformer.dense_layers.0.ffn.linear1.weight", 2, 7, 6, 0},
        {"transformer.layers.0.attention.q.weight", 2, 8, 6, 0},
        {"transformer.layers.1.attention.o.weight", 2, 6, 8, 0},
        {"transformer.layers.1.ffn.expert_sel", 2, 5, 6, 0},
        {"transformer.layers.1.ffn.keys", 3, 5, 6, 3},
        {"transformer.layers.1.ffn.keys_bias", 2, 5, 3, 0},
        {"transformer.layers.1.ffn.values", 3, 5, 3, 6},
        {"transformer.layers.1.ffn.values_bias", 2, 5, 6, 0},
        {"transformer.layers.1.ln1.weight", 1, 6, 0, 0},
        {"transformer.layers.1.ln2.bias", 1, 6, 0, 0},
    };
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
        const ParamTensor *t = model_find_tensor(m, want[i].name);
        ck_assert_msg(t != NULL, "missing %s", want[i].name);
        ck_assert_int_eq(t->ndim, want[i].ndim);
        ck_assert_int_eq(t->shape[0], want[i].s0);
        if (want[i].ndim >= 2) ck_assert_int_eq(t->shape[1], want[i].s1);
        if (want[i].ndim == 3) ck_assert_int_eq(t->shape[2], want[i].s2);
    }
    ck_assert_ptr_null(model_find_tensor(m, "transformer.layers.2.ln1.weight")); /* 2 MoE layers */
    ck_assert_ptr_null(model_find_tensor(m, "transformer.dense_layers.1.ln1.weight"));
    ck_assert_int_eq(model_n_tensors(m), 1 + 12 + 2 * 13 + 2 + 2);
    const char *order[] = {"embedding.weight", "transformer.dense_layers.0.ln2.bias",
                           "transformer.layers.0.attention.o.weight", "transformer.layers.0.ffn.expert_sel",
                           "transformer.layers.0.ffn.keys", "transformer.layers.0.ffn.keys_bias",
                           "transformer.layers.0.ffn.values", "transformer.layers.0.ffn.values_bias",
                           "transformer.layers.0.ln1.weight", "transformer.layers.0.ln2.bias",
                           "transformer.layers.1.attention.q.weight", "lm_head.bias"};
    for (size_t i = 1; i < sizeof order / sizeof order[0]; i++)
        ck_assert_msg(model_find_tensor(m, order[i - 1])->offset < model_find_tensor(m, order[i])->offset, "%s < %s",
                      order[i - 1], order[i]);
    int first = -1;
    ck_assert_int_eq(model_routed_experts(m), 5);
    ck_assert_int_eq(model_routed_applications(m, &first), 2);
    ck_assert_int_eq(first, 1);
    model_free(m);
    backend_destroy(be);
}
END_TEST

/* The residual MLP (DeepSpeed-MoE's Residual-MoE, Snowflake Arctic): ff_residual_size W, default 0 (none, no tensor),
 * in [0, 2^24], MoEUT only; its tensors [C, W] and [W, C] after the shared experts; the dense prefix's default width
 * counts it as active width. */
START_TEST(ff_residual_size_key) {
    ModelConfig c;
    char err[512];
    ck_assert_int_eq(parse("{" MOEUT_BASE ",\"ff_k\":2}", &c, err, sizeof err), 0);
    ck_assert_int_eq(c.ff_residual_size, 0);
    ck_assert_int_eq(parse("{" MOEUT_BASE ",\"ff_k\":2,\"ff_expert_size\":5,\"n_shared_experts\":1,"
                           "\"n_dense_first\":2,\"ff_residual_size\":4}", &c, err, sizeof err), 0);
    ck_assert_int_eq(c.ff_residual_size, 4);
    ck_assert_int_eq(c.d_ff, (2 + 1) * 5 + 4);
    expect_error("{" MOEUT_BASE ",\"ff_k\":2,\"ff_residual_size\":-1}", "exp.json: model.ff_residual_size:",
                 "must be in [0, 16777216], got -1");
    expect_error("{" MOEUT_BASE ",\"ff_k\":2,\"ff_residual_size\":16777217}", "exp.json: model.ff_residual_size:",
                 "got 16777217");
    expect_error("{" MOEUT_BASE ",\"ff_k\":2,\"ff_residual_size\":2.5}", "exp.json: model.ff_residual_size:", NULL);
    expect_error("{" DENSE_BASE ",\"ff_residual_size\":8}", "exp.json: model.ff_residual_size:", "moeut");
    round_trip("{" MOEUT_BASE ",\"ff_k\":1,\"n_shared_experts\":1,\"ff_residual_size\":6}");

    ModelConfig mc = mtu_config("{\"arch\":\"moeut\",\"n_tokens\":13,\"d_model\":6,\"n_layers\":2,\"n_heads\":2,"
                                "\"d_head\":4,\"ff_n_experts\":5,\"ff_expert_size\":3,\"ff_k\":2,\"att_n_experts\":3,"
                                "\"group_size\":2,\"n_shared_experts\":1,\"ff_residual_size\":7}");
    Backend *be = mtu_backend();
    Model *m = model_create(&mc, be);
    for (int l = 0; l < 2; l++) {
        char kn[96], vn[96];
        snprintf(kn, sizeof kn, "transformer.layers.%d.ffn.residual_keys", l);
        snprintf(vn, sizeof vn, "transformer.layers.%d.ffn.residual_values", l);
        const ParamTensor *k = model_find_tensor(m, kn), *v = model_find_tensor(m, vn);
        ck_assert_msg(k != NULL && v != NULL, "missing %s or %s", kn, vn);
        ck_assert(k->ndim == 2 && k->shape[0] == 6 && k->shape[1] == 7 && !k->buffer);
        ck_assert(v->ndim == 2 && v->shape[0] == 7 && v->shape[1] == 6 && !v->buffer);
        /* order: after the shared experts, before ln1 */
        snprintf(vn, sizeof vn, "transformer.layers.%d.ffn.shared_values", l);
        ck_assert(model_find_tensor(m, vn)->offset < k->offset);
        snprintf(vn, sizeof vn, "transformer.layers.%d.ln1.weight", l);
        ck_assert(k->offset < model_find_tensor(m, vn)->offset);
    }
    ck_assert_uint_eq(model_n_params(m), model_count_params(&mc));
    model_free(m);
    mc.ff_residual_size = 0;
    m = model_create(&mc, be);
    ck_assert_ptr_null(model_find_tensor(m, "transformer.layers.0.ffn.residual_keys"));
    model_free(m);
    backend_destroy(be);
}
END_TEST

/* Expert capacity: default 0 (no capacity, order "position"), any finite CF >= 0, the order only with CF > 0. */
START_TEST(ff_capacity_keys) {
    ModelConfig c;
    char err[512];
    ck_assert_int_eq(parse("{" MOEUT_BASE ",\"ff_k\":2}", &c, err, sizeof err), 0);
    ck_assert(c.ff_capacity_factor == 0.0 && c.ff_capacity_order == CAPACITY_POSITION);
    ck_assert_int_eq(parse("{" MOEUT_BASE ",\"ff_k\":2,\"ff_capacity_factor\":1.25}", &c, err, sizeof err), 0);
    ck_assert(c.ff_capacity_factor == 1.25 && c.ff_capacity_order == CAPACITY_POSITION);
    ck_assert_int_eq(parse("{" MOEUT_BASE ",\"ff_k\":2,\"ff_capacity_factor\":1,\"ff_capacity_order\":\"score\"}", &c,
                           err, sizeof err),
                     0);
    ck_assert(c.ff_capacity_factor == 1.0 && c.ff_capacity_order == CAPACITY_SCORE);
    ck_assert_int_eq(parse("{" MOEUT_BASE ",\"ff_k\":2,\"ff_capacity_factor\":0}", &c, err, sizeof err), 0);
    expect_error("{" MOEUT_BASE ",\"ff_k\":2,\"ff_capacity_factor\":-1}", "exp.json: model.ff_capacity_factor:",
                 "finite number >= 0 (0 = no capacity), got -1");
    expect_error("{" MOEUT_BASE ",\"ff_k\":2,\"ff_capacity_factor\":1e999}", "exp.json: model.ff_capacity_factor:",
                 "got inf");
    expect_error("{" MOEUT_BASE ",\"ff_k\":2,\"ff_capacity_factor\":\"1\"}", "exp.json: model.ff_capacity_factor:",
                 "expected a number");
    expect_error("{" MOEUT_BASE ",\"ff_k\":2,\"ff_capacity_order\":\"score\"}", "exp.json: model.ff_capacity_order:",
                 "has no effect with model.ff_capacity_factor 0 (no capacity)");
    expect_error("{" MOEUT_BASE ",\"ff_k\":2,\"ff_capacity_factor\":0,\"ff_capacity_order\":\"position\"}",
                 "exp.json: model.ff_capacity_order:", "no effect");
    expect_error("{" MOEUT_BASE ",\"ff_k\":2,\"ff_capacity_factor\":1,\"ff_capacity_order\":\"random\"}",
                 "exp.json: model.ff_capacity_order:", "random");
    expect_error("{" DENSE_BASE ",\"ff_capacity_factor\":1}", "exp.json: model.ff_capacity_factor:", "moeut");
    ck_assert_int_eq(parse("{" MOEUT_BASE ",\"ff_k\":2}", &c, err, sizeof err), 0);
    c.ff_capacity_factor = NAN;
    ck_assert_int_eq(model_config_validate(&c, err, sizeof err), -1);
    ck_assert_msg(strstr(err, "model.ff_capacity_factor: must be a finite number >= 0") != NULL, "%s", err);
    round_trip("{" MOEUT_BASE ",\"ff_k\":2,\"ff_capacity_factor\":1.5,\"ff_capacity_order\":\"score\"}");
    round_trip("{" MOEUT_BASE ",\"ff_k\":2,\"ff_capacity_factor\":1}");
    /* without a capacity neither key is written: the configs of such models keep their exact bytes */
    ck_assert_int_eq(parse("{" MOEUT_BASE ",\"ff_k\":2}", &c, err, sizeof err), 0);
    cJSON *o = model_config_to_json(&c);
    ck_assert(!cJSON_GetObjectItemCaseSensitive(o, "ff_capacity_factor") &&
              !cJSON_GetObjectItemCaseSensitive(o, "ff_capacity_order"));
    cJSON_Delete(o);
    ck_assert_int_eq(parse("{" MOEUT_BASE ",\"ff_k\":2,\"ff_capacity_factor\":0.5}", &c, err, sizeof err), 0);
    o = model_config_to_json(&c);
    ck_assert(cJSON_GetObjectItemCaseSensitive(o, "ff_capacity_factor") &&
              cJSON_GetObjectItemCaseSensitive(o, "ff_capacity_order"));
    cJSON_Delete(o);
}
END_TEST

/* Pyramid-MoE (DeepSpeed-MoE §4.1): ff_n_experts_per_layer, one E_l per distinct layer, instead of ff_n_experts
 * (which then holds the largest, not written); refused with ff_n_experts too, a wrong length, ff_k above an entry. */
START_TEST(ff_n_experts_per_layer_key) {
#define PYR_BASE                                                                                                    \
    "\"arch\":\"moeut\",\"n_tokens\":13,\"d_model\":6,\"n_layers\":4,\"n_heads\":2,\"d_head\":4,\"ff_expert_size\":3,"  \
    "\"ff_k\":2,\"att_n_experts\":3,\"group_size\":2"
    ModelConfig c;
    char err[512];
    ck_assert_int_eq(parse("{" PYR_BASE ",\"ff_n_experts_per_layer\":[3,7]}", &c, err, sizeof err), 0);
    ck_assert(c.ff_n_experts_per_layer.n == 2 && c.ff_n_experts == 7);
    ck_assert(model_config_ff_experts(&c, 0) == 3 && model_config_ff_experts(&c, 1) == 7);
    cJSON *o = model_config_to_json(&c);
    ck_assert_ptr_null(cJSON_GetObjectItemCaseSensitive(o, "ff_n_experts"));
    const cJSON *a = cJSON_GetObjectItemCaseSensitive(o, "ff_n_experts_per_layer");
    ck_assert(cJSON_IsArray(a) && cJSON_GetArraySize(a) == 2 && cJSON_GetArrayItem(a, 1)->valueint == 7);
    cJSON_Delete(o);
    round_trip("{" PYR_BASE ",\"ff_n_experts_per_layer\":[8,2]}");
    ck_assert_int_eq(parse("{" PYR_BASE ",\"ff_n_experts\":5}", &c, err, sizeof err), 0);
    ck_assert(c.ff_n_experts_per_layer.n == 0 && model_config_ff_experts(&c, 1) == 5);
    expect_error("{" PYR_BASE ",\"ff_n_experts\":5,\"ff_n_experts_per_layer\":[3,7]}", "exp.json: model.ff_n_experts:",
                 "model.ff_n_experts_per_layer");
    expect_error("{" PYR_BASE "}", "exp.json: model.ff_n_experts:", "missing required key");
    /* the switches sized by the one ff_n_experts are refused with a pyramid, naming the other key */
    expect_error("{" PYR_BASE ",\"ff_n_experts_per_layer\":[4,8],\"ff_capacity_factor\":1}",
                 "exp.json: model.ff_n_experts_per_layer:", "not supported together with model.ff_capacity_factor");
    expect_error("{" PYR_BASE ",\"ff_n_experts_per_layer\":[4,8],\"n_group\":2,\"topk_group\":1}",
                 "exp.json: model.ff_n_experts_per_layer:", "not supported together with model.n_group");
    expect_error("{" PYR_BASE ",\"ff_n_experts_per_layer\":[4,8],\"seq_balance_alpha\":0.001}",
                 "exp.json: model.ff_n_experts_per_layer:", "not supported together with model.seq_balance_alpha");
    expect_error("{" PYR_BASE ",\"ff_n_experts_per_layer\":[4,8],\"balance\":\"none\","
                 "\"routing\":\"hash\"}",
                 "exp.json: model.ff_n_experts_per_layer:", "not supported together with model.routing");
    expect_error("{" PYR_BASE ",\"ff_n_experts_per_layer\":[3,7,9]}", "exp.json: model.ff_n_experts_per_layer:",
                 "3 entries, need one per distinct layer (group_size 2)");
    expect_error("{" PYR_BASE ",\"ff_n_experts_per_layer\":[1,7]}", "exp.json: model.ff_k:",
                 "2 is larger than ff_n_experts_per_layer[0] 1");
    expect_error("{" PYR_BASE ",\"ff_n_experts_per_layer\":[0,7]}", "exp.json: model.ff_n_experts_per_layer:",
                 "entry 0 must be in [1, 16777216], got 0");
    expect_error("{" PYR_BASE ",\"ff_n_experts_per_layer\":[]}", "exp.json: model.ff_n_experts_per_layer:",
                 "an empty array");
    expect_error("{" PYR_BASE ",\"ff_n_experts_per_layer\":[3,2.5]}", "exp.json: model.ff_n_experts_per_layer:",
                 "entry 1: expected an integer");
    expect_error("{" PYR_BASE ",\"ff_n_experts_per_layer\":4}", "exp.json: model.ff_n_experts_per_layer:",
                 "expected an array");
    expect_error("{" DENSE_BASE ",\"ff_n_experts_per_layer\":[4]}", "exp.json: model.ff_n_experts_per_layer:", "moeut");
    /* a created pyramid: per-layer shapes, the bias buffer of its layer's size, the count = model_n_params */
    ModelConfig mc = mtu_config("{" PYR_BASE ",\"ff_n_experts_per_layer\":[3,7],\"n_shared_experts\":1,"
                                "\"balance\":\"bias\"}");
    Backend *be = mtu_backend();
    Model *m = model_create(&mc, be);
    const int want_e[2] = {3, 7};
    for (int l = 0; l < 2; l++) {
        const char *suffix[] = {"keys", "values", "expert_sel", "expert_bias"};
        for (int t = 0; t < 4; t++) {
            char name[96];
            snprintf(name, sizeof name, "transformer.layers.%d.ffn.%s", l, suffix[t]);
            const ParamTensor *p = model_find_tensor(m, name);
            ck_assert_msg(p != NULL && p->shape[0] == want_e[l], "%s", name);
        }
    }
    ck_assert_uint_eq(model_n_params(m), model_count_params(&mc));
    ck_assert_int_eq(model_routed_experts(m), 7);
    ck_assert(model_routed_experts_of(m, 0) == 3 && model_routed_experts_of(m, 1) == 7 &&
              model_routed_experts_of(m, 2) == 3 && model_routed_experts_of(m, 3) == 7 && model_routed_experts_of(m, 4) == 0);
    model_free(m);
    backend_destroy(be);
#undef PYR_BASE
}
END_TEST

int main(void) {
    Suite *s = suite_create("model_config");
    TCase *tc = tcase_create("config");
    tcase_add_test(tc, dense_defaults);
    tcase_add_test(tc, moe_structure_switches);
    tcase_add_test(tc, routed_scaling_factor_key);
    tcase_add_test(tc, group_limited_keys);
    tcase_add_test(tc, seq_balance_alpha_key);
    tcase_add_test(tc, routing_key);
    tcase_add_test(tc, moeut_switch_tensor_names);
    tcase_add_test(tc, moeut_defaults_are_reference_ctor);
    tcase_add_test(tc, moeut_default_ff_k_is_8);
    tcase_add_test(tc, errors_name_the_key);
    tcase_add_test(tc, other_arch_keys_rejected);
    tcase_add_test(tc, moeut_values_validated);
    tcase_add_test(tc, to_json_round_trips);
    tcase_add_test(tc, n_rot_rule);
    tcase_add_test(tc, paper_param_counts);
    tcase_add_test(tc, paper_run_files);
    tcase_add_test(tc, moe_variant_switches);
    tcase_add_test(tc, count_matches_created_models);
    tcase_add_test(tc, routing_hash_key);
    tcase_add_test(tc, dense_tensor_names_and_shapes);
    tcase_add_test(tc, moe_arch_config);
    tcase_add_test(tc, moe_tensor_names);
    tcase_add_test(tc, ff_capacity_keys);
    tcase_add_test(tc, ff_residual_size_key);
    tcase_add_test(tc, ff_n_experts_per_layer_key);
    suite_add_tcase(s, tc);
    return run_test_suite(s);
}
