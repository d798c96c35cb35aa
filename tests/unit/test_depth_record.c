/* depth_prompts.json (pipeline/records/depth_prompts_record.h): a record written and read back is the same record;
 * the reader refuses another schema version, unknown and missing keys, vectors or measures in another order, values
 * outside their domain and maps of the wrong shape, each with one line naming the file and the key. */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pipeline/base/log.h"
#include "pipeline/records/depth_prompts_record.h"
#include "pipeline/records/result_record.h"
#include "tests/unit/suite_runner.h"

/* 3 prompts, 2 layers, 2 question bins. */
static void hand_record(DepthPromptsRecord *d) {
    memset(d, 0, sizeof *d);
    snprintf(d->experiment, sizeof d->experiment, "unit");
    snprintf(d->run, sizeof d->run, "dense_qa");
    snprintf(d->arch, sizeof d->arch, "dense");
    snprintf(d->loss_mode, sizeof d->loss_mode, "qa");
    run_provenance_init(&d->prov);
    d->prov.seed = 2;
    snprintf(d->prov.run_config, sizeof d->prov.run_config, "dense_qa");
    snprintf(d->code_version, sizeof d->code_version, "test-version");
    snprintf(d->backend, sizeof d->backend, "cpu");
    snprintf(d->hardware, sizeof d->hardware, "test cpu");
    d->n_layers = 2;
    d->requested = 4;
    d->sample_seed = 20251105ull;
    d->pool[0] = 100;
    d->pool[1] = 80;
    d->map_bins = 2;
    for (int b = 0; b < DEPTH_N_VECTORS; b++) {
        d->mean_map[b] = xcalloc(6, sizeof(double));
        for (int c = 0; c < 6; c++) d->mean_map[b][c] = 0.01 * (c + 1) + 0.1 * b;
    }
    d->n_prompts = 3;
    d->prompts = xcalloc(3, sizeof *d->prompts);
    for (int i = 0; i < 3; i++) {
        DepthPrompt *p = &d->prompts[i];
        p->set = i < 2 ? EVAL_INTERPOLATE : EVAL_EXTRAPOLATE;
        p->index = 10 * i + 3;
        snprintf(p->module, sizeof p->module, "arithmetic__m%d", i);
        p->q_len = 7 + i;
        p->a_len = 1 + i;
        p->correct = i == 1;
        for (int b = 0; b < DEPTH_N_VECTORS; b++) {
            p->value[b][DEPTH_MEASURE_FRACTION] = 0.25 * (b + i % 2);
            p->value[b][DEPTH_MEASURE_CENTRE] = 0.1 + 0.1 * i + 0.01 * b + 1.0 / 300; /* not a short decimal */
        }
    }
}

static void check_same(const DepthPromptsRecord *a, const DepthPromptsRecord *b) {
    ck_assert_str_eq(a->experiment, b->experiment);
    ck_assert_str_eq(a->run, b->run);
    ck_assert_str_eq(a->arch, b->arch);
    ck_assert_str_eq(a->loss_mode, b->loss_mode);
    ck_assert_int_eq(a->prov.seed, b->prov.seed);
    ck_assert_str_eq(a->prov.run_config, b->prov.run_config);
    ck_assert_str_eq(a->code_version, b->code_version);
    ck_assert_str_eq(a->hardware, b->hardware);
    ck_assert(a->n_layers == b->n_layers && a->requested == b->requested && a->sample_seed == b->sample_seed);
    ck_assert(a->pool[0] == b->pool[0] && a->pool[1] == b->pool[1] && a->map_bins == b->map_bins);
    for (int v = 0; v < DEPTH_N_VECTORS; v++)
        for (int c = 0; c < a->n_layers * (a->map_bins + 1); c++) /* 15 significant digits in the file */
            ck_assert(fabs(a->mean_map[v][c] - b->mean_map[v][c]) <= 1e-14 * fabs(a->mean_map[v][c]));
    ck_assert_int_eq(a->n_prompts, b->n_prompts);
    ck_assert(depth_prompts_same_sample(a, b));
    for (int i = 0; i < a->n_prompts; i++) {
        const DepthPrompt *p = &a->prompts[i], *q = &b->prompts[i];
        ck_assert_str_eq(p->module, q->module);
        ck_assert(p->q_len == q->q_len && p->a_len == q->a_len && p->correct == q->correct);
        for (int v = 0; v < DEPTH_N_VECTORS; v++)
            for (int m = 0; m < DEPTH_N_MEASURES; m++)
                ck_assert_msg(fabs(p->value[v][m] - q->value[v][m]) <= 1e-14 * fabs(p->value[v][m]),
                              "prompt %d value %d %d", i, v, m);
    }
}

START_TEST(round_trip) {
    DepthPromptsRecord d, back;
    hand_record(&d);
    cJSON *j = depth_prompts_to_json(&d);
    char *text = cJSON_Print(j);
    cJSON *parsed = cJSON_Parse(text);
    char err[1024] = "";
    ck_assert_msg(depth_prompts_from_json(&back, parsed, "x.json", err, sizeof err) == 0, "%s", err);
    check_same(&d, &back);
    /* another sample (one index differs) is not the same sample */
    back.prompts[2].index++;
    ck_assert(!depth_prompts_same_sample(&d, &back));
    depth_prompts_free(&back);
    cJSON_Delete(parsed);
    free(text);
    cJSON_Delete(j);
    depth_prompts_free(&d);
}
END_TEST

/* The record as JSON, one edit applied by the callback, read back: the error line must contain want. */
static void refused(void (*edit)(cJSON *), const char *want) {
    DepthPromptsRecord d, back;
    hand_record(&d);
    cJSON *j = depth_prompts_to_json(&d);
    edit(j);
    char err[1024] = "";
    ck_assert_msg(depth_prompts_from_json(&back, j, "x.json", err, sizeof err) != 0, "accepted (want \"%s\")", want);
    ck_assert_msg(strstr(err, "x.json") && strstr(err, want), "error \"%s\" does not say \"%s\"", err, want);
    depth_prompts_free(&back);
    cJSON_Delete(j);
    depth_prompts_free(&d);
}

static cJSON *prompt0(cJSON *j) { return cJSON_GetArrayItem(cJSON_GetObjectItem(j, "prompts"), 0); }
static void e_version(cJSON *j) { cJSON_SetNumberValue(cJSON_GetObjectItem(j, "schema_version"), 2); }
static void e_unknown(cJSON *j) { cJSON_AddNumberToObject(j, "extra", 1); }
static void e_missing(cJSON *j) { cJSON_DeleteItemFromObject(prompt0(j), "correct"); }
static void e_order(cJSON *j) {
    const char *swapped[3] = {"eval_mean", "counterfactual", "zero"};
    cJSON_ReplaceItemInObject(j, "vectors", cJSON_CreateStringArray(swapped, 3));
}
static void e_fraction(cJSON *j) {
    cJSON_SetNumberValue(cJSON_GetArrayItem(cJSON_GetObjectItem(prompt0(j), "depth_fraction"), 1), 1.5);
}
static void e_short(cJSON *j) { cJSON_DeleteItemFromArray(cJSON_GetObjectItem(prompt0(j), "depth_centre"), 2); }
static void e_set(cJSON *j) { cJSON_ReplaceItemInObject(prompt0(j), "set", cJSON_CreateString("train")); }
static void e_rows(cJSON *j) {
    cJSON_DeleteItemFromArray(cJSON_GetObjectItem(cJSON_GetObjectItem(j, "mean_maps"), "zero"), 0);
}
static void e_map_value(cJSON *j) {
    cJSON *row = cJSON_GetArrayItem(cJSON_GetObjectItem(cJSON_GetObjectItem(j, "mean_maps"), "eval_mean"), 1);
    cJSON_SetNumberValue(cJSON_GetArrayItem(row, 0), -0.1);
}
static void e_too_many(cJSON *j) {
    cJSON_SetNumberValue(cJSON_GetObjectItem(cJSON_GetObjectItem(j, "sample"), "requested"), 2);
}

START_TEST(bad_records_refused) {
    refused(e_version, "version 2");
    refused(e_unknown, "extra: unknown key");
    refused(e_missing, "prompts[0].correct");
    refused(e_order, "vectors");
    refused(e_fraction, "prompts[0].depth_fraction[1]");
    refused(e_short, "prompts[0].depth_centre");
    refused(e_set, "\"train\" is not an evaluation set");
    refused(e_rows, "mean_maps.zero: 1 rows");
    refused(e_map_value, "mean_maps.eval_mean[1][0]");
    refused(e_too_many, "3 prompts");
}
END_TEST

int main(void) {
    Suite *s = suite_create("depth_record");
    TCase *tc = tcase_create("depth_record");
    tcase_add_test(tc, round_trip);
    tcase_add_test(tc, bad_records_refused);
    suite_add_tcase(s, tc);
    return run_test_suite(s);
}
