/* The report's pure pieces on constructed inputs: the verdict rules (each of the three outcomes, both directions,
 * the one-seed and below-paper-scale rules) and the reasons the short answer gives, the config-difference table, and run identity (RUN.seed<S> names,
 * the records' optional seed/run_config/overrides, their agreement with the directory name). */
#include <check.h>
#include <math.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "pipeline/records/config_diff.h"
#include "pipeline/records/run_identity.h"
#include "pipeline/report/verdict.h"
#include "tests/unit/suite_runner.h"

START_TEST(direction_three_outcomes) {
    /* the paper says positive */
    ck_assert_int_eq(verdict_direction(0.01, 0.20, 3, +1), VERDICT_CONSISTENT);
    ck_assert_int_eq(verdict_direction(-0.20, -0.01, 3, +1), VERDICT_CONTRADICTED);
    ck_assert_int_eq(verdict_direction(-0.05, 0.20, 3, +1), VERDICT_NOT_RESOLVED);
    /* the paper says negative: the same intervals, mirrored verdicts */
    ck_assert_int_eq(verdict_direction(0.01, 0.20, 3, -1), VERDICT_CONTRADICTED);
    ck_assert_int_eq(verdict_direction(-0.20, -0.01, 3, -1), VERDICT_CONSISTENT);
    ck_assert_int_eq(verdict_direction(-0.05, 0.20, 3, -1), VERDICT_NOT_RESOLVED);
    /* an interval touching 0 does not exclude it */
    ck_assert_int_eq(verdict_direction(0.0, 0.20, 3, +1), VERDICT_NOT_RESOLVED);
    /* one seed: not resolved whatever the interval (seed variance unmeasured) */
    ck_assert_int_eq(verdict_direction(0.10, 0.20, 1, +1), VERDICT_NOT_RESOLVED);
    ck_assert_int_eq(verdict_direction(0.10, 0.20, VERDICT_MIN_SEEDS, +1), VERDICT_CONSISTENT);
    /* undefined or inverted interval */
    ck_assert_int_eq(verdict_direction(NAN, 0.2, 3, +1), VERDICT_NOT_RESOLVED);
    ck_assert_int_eq(verdict_direction(0.3, 0.2, 3, +1), VERDICT_NOT_RESOLVED);
    ck_assert_str_eq(verdict_label(VERDICT_CONSISTENT), "consistent");
    ck_assert_str_eq(verdict_label(VERDICT_CONTRADICTED), "contradicted");
    ck_assert_str_eq(verdict_label(VERDICT_NOT_RESOLVED), "not resolved at this size");
}
END_TEST

START_TEST(paper_number_rule) {
    const double tokens = PAPER_TOKENS;
    ck_assert(verdict_at_paper_scale(228e6, tokens));
    ck_assert(verdict_at_paper_scale(0.5 * PAPER_PARAMS, 0.5 * PAPER_TOKENS));
    ck_assert(!verdict_at_paper_scale(0.9e6, tokens));      /* the CPU models */
    ck_assert(!verdict_at_paper_scale(228e6, 81920));       /* paper-sized but barely trained */
    /* at the paper's scale: inside / outside the interval */
    ck_assert_int_eq(verdict_paper_number(0.58, 0.66, 0.63, true), VERDICT_CONSISTENT);
    ck_assert_int_eq(verdict_paper_number(0.40, 0.50, 0.63, true), VERDICT_CONTRADICTED);
    ck_assert_int_eq(verdict_paper_number(0.70, 0.80, 0.63, true), VERDICT_CONTRADICTED);
    ck_assert_int_eq(verdict_paper_number(NAN, 0.8, 0.63, true), VERDICT_NOT_RESOLVED);
    /* below it: not resolved, even when the interval excludes the number by far */
    ck_assert_int_eq(verdict_paper_number(0.0, 0.079, 0.41, false), VERDICT_NOT_RESOLVED);
    ck_assert_int_eq(verdict_paper_number(0.38, 0.44, 0.41, false), VERDICT_NOT_RESOLVED);
}
END_TEST

/* The effect-size rule: direction first; a bounded null only off the floor, with seeds, below the paper's effect. */
START_TEST(effect_rule) {
    const double levels_ok[4] = {0.10, 0.12, 0.30, 0.94}, levels_floor[2] = {0.03, 0.20},
                 levels_ceiling[2] = {0.50, 0.97};
    ck_assert(verdict_off_floor(levels_ok, 4));
    ck_assert(!verdict_off_floor(levels_floor, 2));
    ck_assert(!verdict_off_floor(levels_ceiling, 2));
    ck_assert(!verdict_off_floor(levels_ok, 0));
    /* paper +7 points: an interval excluding 0 decides the direction whatever its size */
    ck_assert_int_eq(verdict_effect(0.01, 0.03, 3, 0.07, true), VERDICT_CONSISTENT);
    ck_assert_int_eq(verdict_effect(-0.03, -0.01, 3, 0.07, true), VERDICT_CONTRADICTED);
    /* containing 0, wholly below +7: smaller than the paper's effect, only off the floor and with >= 2 seeds */
    ck_assert_int_eq(verdict_effect(-0.01, 0.02, 3, 0.07, true), VERDICT_SMALLER_THAN_PAPER);
    ck_assert_int_eq(verdict_effect(-0.01, 0.02, 3, 0.07, false), VERDICT_NOT_RESOLVED);
    ck_assert_int_eq(verdict_effect(-0.01, 0.02, 1, 0.07, true), VERDICT_NOT_RESOLVED);
    /* reaching the paper's effect: not resolved */
    ck_assert_int_eq(verdict_effect(-0.01, 0.07, 3, 0.07, true), VERDICT_NOT_RESOLVED);
    ck_assert_int_eq(verdict_effect(-0.01, 0.12, 3, 0.07, true), VERDICT_NOT_RESOLVED);
    /* a negative paper effect mirrors it */
    ck_assert_int_eq(verdict_effect(-0.02, 0.01, 3, -0.05, true), VERDICT_SMALLER_THAN_PAPER);
    ck_assert_int_eq(verdict_effect(-0.06, 0.01, 3, -0.05, true), VERDICT_NOT_RESOLVED);
    ck_assert_int_eq(verdict_effect(NAN, 0.01, 3, 0.07, true), VERDICT_NOT_RESOLVED);
    ck_assert(verdict_below_paper_effect(0.01, 0.03, 0.07));
    ck_assert(!verdict_below_paper_effect(0.01, 0.08, 0.07));
    ck_assert_str_eq(verdict_label(VERDICT_SMALLER_THAN_PAPER), "smaller than the paper's effect");
}
END_TEST

/* Why a claim has its verdict (the short answer's reason): the first rule that leaves it open, and "resolved" exactly
 * when the verdict is not "not resolved". */
START_TEST(verdict_reasons) {
    /* direction: one seed before the interval; an interval across 0 (or undefined) with >= 2 seeds */
    ck_assert_int_eq(verdict_direction_why(0.1, 0.2, 1, +1), VERDICT_WHY_ONE_SEED);
    ck_assert_int_eq(verdict_direction_why(-0.1, 0.2, 3, +1), VERDICT_WHY_INTERVAL);
    ck_assert_int_eq(verdict_direction_why(NAN, NAN, 2, +1), VERDICT_WHY_INTERVAL);
    ck_assert_int_eq(verdict_direction_why(0.1, 0.2, 2, +1), VERDICT_WHY_RESOLVED);
    ck_assert_int_eq(verdict_direction_why(0.1, 0.2, 2, -1), VERDICT_WHY_RESOLVED); /* contradicted */
    /* effect size: one seed, then the floor, then the interval; "smaller than the paper's" is resolved */
    ck_assert_int_eq(verdict_effect_why(-0.01, 0.02, 1, 0.27, true), VERDICT_WHY_ONE_SEED);
    ck_assert_int_eq(verdict_effect_why(-0.01, 0.02, 3, 0.27, false), VERDICT_WHY_FLOOR);
    ck_assert_int_eq(verdict_effect_why(-0.01, 0.30, 3, 0.27, true), VERDICT_WHY_INTERVAL);
    ck_assert_int_eq(verdict_effect_why(-0.01, 0.02, 3, 0.27, true), VERDICT_WHY_RESOLVED);
    ck_assert_int_eq(verdict_effect(-0.01, 0.02, 3, 0.27, true), VERDICT_SMALLER_THAN_PAPER);
    ck_assert_int_eq(verdict_effect_why(0.01, 0.02, 1, 0.27, false), VERDICT_WHY_ONE_SEED);
    /* a paper number: size first; at the paper's scale only an undefined interval leaves it open */
    ck_assert_int_eq(verdict_paper_number_why(0.3, 0.5, 0.41, false), VERDICT_WHY_SIZE);
    ck_assert_int_eq(verdict_paper_number_why(0.3, 0.5, 0.41, true), VERDICT_WHY_RESOLVED);
    ck_assert_int_eq(verdict_paper_number_why(NAN, NAN, 0.41, true), VERDICT_WHY_INTERVAL);
    ck_assert_str_eq(verdict_why_label(VERDICT_WHY_ONE_SEED), "one seed");
    ck_assert_str_eq(verdict_why_label(VERDICT_WHY_SIZE), "below the paper's scale");
    ck_assert_str_eq(verdict_why_label(VERDICT_WHY_FLOOR), "accuracy on the floor");
}
END_TEST

START_TEST(config_differences) {
    cJSON *a = cJSON_Parse("{\"description\":\"a\",\"model\":{\"arch\":\"dense\",\"d_model\":128,\"d_ff\":512},"
                           "\"train\":{\"lr\":0.002,\"seed\":1,\"betas\":[0.9,0.99]}}");
    cJSON *b = cJSON_Parse("{\"description\":\"b\",\"model\":{\"arch\":\"moeut\",\"d_model\":128},"
                           "\"train\":{\"lr\":0.001,\"seed\":1,\"betas\":[0.9,0.99]}}");
    cJSON *c = cJSON_Parse("{\"description\":\"c\",\"model\":{\"arch\":\"moeut\",\"d_model\":128},"
                           "\"train\":{\"lr\":0.002,\"seed\":2,\"betas\":[0.9,0.999]}}");
    ck_assert(a && b && c);
    const cJSON *cfg[4] = {a, b, c, NULL};
    const char *skip[] = {"description", NULL};
    ConfigDiff d;
    config_diff(cfg, 3, skip, &d);
    /* sorted keys: model.arch, model.d_ff (absent in b, c), train.betas, train.lr, train.seed; d_model is equal */
    ck_assert_int_eq(d.n_rows, 5);
    ck_assert_str_eq(d.rows[0].key, "model.arch");
    ck_assert_str_eq(d.rows[0].values[0], "\"dense\"");
    ck_assert_str_eq(d.rows[0].values[2], "\"moeut\"");
    ck_assert_str_eq(d.rows[1].key, "model.d_ff");
    ck_assert_str_eq(d.rows[1].values[0], "512");
    ck_assert(d.rows[1].values[1] == NULL && d.rows[1].values[2] == NULL);
    ck_assert_str_eq(d.rows[2].key, "train.betas");
    ck_assert_str_eq(d.rows[2].values[2], "[0.9,0.999]");
    ck_assert_str_eq(d.rows[3].key, "train.lr");
    ck_assert_str_eq(d.rows[3].values[1], "0.001");
    ck_assert_str_eq(d.rows[4].key, "train.seed");
    config_diff_free(&d);
    /* without the skip list the description differs too; a NULL config has every key absent */
    config_diff(cfg, 3, NULL, &d);
    ck_assert_int_eq(d.n_rows, 6);
    ck_assert_str_eq(d.rows[0].key, "description");
    config_diff_free(&d);
    const cJSON *same[2] = {a, a};
    config_diff(same, 2, NULL, &d);
    ck_assert_int_eq(d.n_rows, 0);
    config_diff_free(&d);
    const cJSON *with_null[2] = {a, NULL};
    config_diff(with_null, 2, skip, &d);
    ck_assert_int_eq(d.n_rows, 6); /* every key of a but the description: arch, d_model, d_ff, lr, seed, betas */
    config_diff_free(&d);
    cJSON_Delete(a);
    cJSON_Delete(b);
    cJSON_Delete(c);
}
END_TEST

START_TEST(run_names) {
    char cfg[64];
    long seed = -7;
    bool suffix = true;
    ck_assert_int_eq(run_name_split("moeut_answer", cfg, sizeof cfg, &seed, &suffix), 0);
    ck_assert_str_eq(cfg, "moeut_answer");
    ck_assert(!suffix && seed == -7);
    ck_assert_int_eq(run_name_split("moeut_answer.seed12", cfg, sizeof cfg, &seed, &suffix), 0);
    ck_assert_str_eq(cfg, "moeut_answer");
    ck_assert(suffix && seed == 12);
    /* not a seed suffix: the whole name is the config */
    const char *names[] = {"x.seed", "x.seed2b", "x.seeds2", ".seed3", "a.seed2.b"};
    for (int i = 0; i < 5; i++) {
        suffix = false;
        run_name_split(names[i], cfg, sizeof cfg, &seed, &suffix);
        ck_assert_msg(!suffix && strcmp(cfg, names[i]) == 0, "%s", names[i]);
    }
    ck_assert_int_eq(run_name_split("abcdef.seed1", cfg, 4, &seed, &suffix), -1);
}
END_TEST

/* CONFIG@VARIANT[.seedS]: the variant is dropped from the config name and kept apart; anything else is a name. */
START_TEST(run_names_with_variants) {
    char cfg[64], var[RUN_VARIANT_LEN + 1], stable[64];
    long seed = -1;
    bool suffix = false;
    ck_assert_int_eq(run_name_split("moeut_answer@0a1b2c3d.seed2", cfg, sizeof cfg, &seed, &suffix), 0);
    ck_assert(suffix && seed == 2);
    ck_assert_str_eq(cfg, "moeut_answer");
    run_name_variant("moeut_answer@0a1b2c3d.seed2", var);
    ck_assert_str_eq(var, "0a1b2c3d");
    ck_assert_int_eq(run_name_stable("moeut_answer@0a1b2c3d.seed2", stable, sizeof stable), 0);
    ck_assert_str_eq(stable, "moeut_answer.seed2");
    ck_assert_int_eq(run_name_split("dense_qa@ffffffff", cfg, sizeof cfg, &seed, &suffix), 0);
    ck_assert_str_eq(cfg, "dense_qa");
    run_name_variant("dense_qa", var);
    ck_assert_str_eq(var, "");
    /* not variants: upper case, 7 digits, nothing before the "@" */
    const char *names[] = {"x@0A1B2C3D", "x@0a1b2c3", "@0a1b2c3d"};
    for (int i = 0; i < 3; i++) {
        run_name_variant(names[i], var);
        ck_assert_msg(var[0] == '\0', "%s", names[i]);
        ck_assert_int_eq(run_name_stable(names[i], stable, sizeof stable), 0);
        ck_assert_str_eq(stable, names[i]);
    }
}
END_TEST

/* The variant key ignores the seed, the description, comments and key order; any other value changes it. */
START_TEST(variant_keys) {
    const char *base = "{\"description\":\"a\",\"model\":{\"d_model\":128,\"arch\":\"moeut\"},"
                       "\"train\":{\"lr\":0.002,\"seed\":1}}";
    const char *same[] = {
        "{\"train\":{\"seed\":7,\"lr\":2e-3},\"model\":{\"arch\":\"moeut\",\"d_model\":128},\"description\":\"b\"}",
        "{\"model\":{\"comment\":\"x\",\"d_model\":128,\"arch\":\"moeut\"},\"train\":{\"lr\":0.002}}",
    };
    const char *other[] = {
        "{\"model\":{\"d_model\":128,\"arch\":\"moeut\"},\"train\":{\"lr\":0.001,\"seed\":1}}",
        "{\"model\":{\"d_model\":128,\"arch\":\"dense\"},\"train\":{\"lr\":0.002,\"seed\":1}}",
        "{\"model\":{\"d_model\":128,\"arch\":\"moeut\"},\"train\":{\"lr\":0.002,\"seed\":1,\"steps\":3}}",
    };
    char k0[RUN_VARIANT_LEN + 1], k[RUN_VARIANT_LEN + 1];
    cJSON *c = cJSON_Parse(base);
    ck_assert_int_eq(run_variant_key(c, k0), 0);
    ck_assert_int_eq((int)strlen(k0), RUN_VARIANT_LEN);
    cJSON_Delete(c);
    for (int i = 0; i < 2; i++) {
        c = cJSON_Parse(same[i]);
        run_variant_key(c, k);
        ck_assert_msg(strcmp(k, k0) == 0, "same[%d]: %s vs %s", i, k, k0);
        cJSON_Delete(c);
    }
    for (int i = 0; i < 3; i++) {
        c = cJSON_Parse(other[i]);
        run_variant_key(c, k);
        ck_assert_msg(strcmp(k, k0) != 0, "other[%d]", i);
        cJSON_Delete(c);
    }
    c = cJSON_Parse("[1]");
    ck_assert_int_eq(run_variant_key(c, k), -1);
    cJSON_Delete(c);
}
END_TEST

START_TEST(record_identity) {
    char err[512], cfgname[64];
    long seed;
    RecordIdentity id;
    cJSON *config = cJSON_Parse("{\"train\":{\"seed\":5}}");
    /* an old record (no fields): the directory suffix, else the config's train.seed */
    cJSON *old = cJSON_Parse("{\"run\":\"dense_qa\"}");
    ck_assert_int_eq(record_identity_read(old, "r.json", &id, err, sizeof err), 0);
    ck_assert(!id.has_seed && !id.has_run_config && !id.has_overrides);
    ck_assert_int_eq(run_identity_resolve("dense_qa", &id, config, "r.json", cfgname, sizeof cfgname, &seed, err,
                                          sizeof err), 0);
    ck_assert(seed == 5 && strcmp(cfgname, "dense_qa") == 0);
    ck_assert_int_eq(run_identity_resolve("dense_qa.seed3", &id, config, "r.json", cfgname, sizeof cfgname, &seed,
                                          err, sizeof err), 0);
    ck_assert(seed == 3 && strcmp(cfgname, "dense_qa") == 0);
    /* a new record: its own fields, checked against the directory name */
    cJSON *rec = cJSON_Parse("{\"seed\":3,\"run_config\":\"dense_qa\",\"overrides\":[\"train.lr=0.001\","
                             "\"train.seed=3\"]}");
    ck_assert_int_eq(record_identity_read(rec, "r.json", &id, err, sizeof err), 0);
    ck_assert(id.has_seed && id.seed == 3 && id.has_overrides);
    ck_assert_str_eq(id.overrides, "train.lr=0.001, train.seed=3");
    ck_assert_int_eq(run_identity_resolve("dense_qa.seed3", &id, config, "r.json", cfgname, sizeof cfgname, &seed,
                                          err, sizeof err), 0);
    ck_assert(seed == 3);
    ck_assert_int_eq(run_identity_resolve("dense_qa.seed4", &id, config, "r.json", cfgname, sizeof cfgname, &seed,
                                          err, sizeof err), -1);
    ck_assert_msg(strstr(err, "r.json: seed is 3, but the directory name \"dense_qa.seed4\" says seed 4"), "%s", err);
    ck_assert_int_eq(run_identity_resolve("moeut_qa.seed3", &id, config, "r.json", cfgname, sizeof cfgname, &seed,
                                          err, sizeof err), -1);
    ck_assert_msg(strstr(err, "run_config is \"dense_qa\""), "%s", err);
    /* wrong types are refused, naming the field */
    cJSON *bad = cJSON_Parse("{\"seed\":\"3\"}");
    ck_assert_int_eq(record_identity_read(bad, "r.json", &id, err, sizeof err), -1);
    ck_assert_msg(strstr(err, "r.json: seed:"), "%s", err);
    cJSON_Delete(bad);
    bad = cJSON_Parse("{\"overrides\":[1]}");
    ck_assert_int_eq(record_identity_read(bad, "r.json", &id, err, sizeof err), -1);
    ck_assert(strstr(err, "overrides"));
    cJSON_Delete(bad);
    cJSON_Delete(rec);
    cJSON_Delete(old);
    cJSON_Delete(config);
}
END_TEST

int main(void) {
    Suite *s = suite_create("verdict");
    TCase *tc = tcase_create("verdict");
    tcase_add_test(tc, direction_three_outcomes);
    tcase_add_test(tc, paper_number_rule);
    tcase_add_test(tc, effect_rule);
    tcase_add_test(tc, verdict_reasons);
    tcase_add_test(tc, config_differences);
    tcase_add_test(tc, run_names);
    tcase_add_test(tc, run_names_with_variants);
    tcase_add_test(tc, variant_keys);
    tcase_add_test(tc, record_identity);
    suite_add_tcase(s, tc);
    return run_test_suite(s);
}
