/* pipeline/records/routing_stats.c: the derived figures for balanced, one-hot, partly unused and empty applications
 * (hand-computed), the JSON round trip, and the strict reader's refusals, each naming the key path. */
#include <check.h>
#include <math.h>
#include <string.h>

#include "pipeline/base/log.h"
#include "pipeline/records/routing_stats.h"
#include "tests/unit/suite_runner.h"

START_TEST(derived_figures) {
    /* E = 4, k = 2, 6 tokens: balanced {3,3,3,3}; one-hot {12,0,0,0} (possible only on paper: k distinct experts per
     * token, but the figures do not care); {6,6,0,0}; empty */
    const int64_t c[16] = {3, 3, 3, 3, 12, 0, 0, 0, 6, 6, 0, 0, 0, 0, 0, 0};
    RoutingStats s;
    routing_stats_from_counts(&s, c, 0, 4, 4, 2, 6);
    const double want[4][3] = {{1, 0, 1}, {4, 0.75, 0}, {2, 0.5, 0.5}, {0, 1, 0}}; /* ln 2 / ln 4 = 0.5 */
    for (int a = 0; a < 4; a++) {
        ck_assert_msg(fabs(s.apps[a].max_over_mean - want[a][0]) < 1e-15, "app %d max/mean %g", a,
                      s.apps[a].max_over_mean);
        ck_assert_msg(fabs(s.apps[a].unused_fraction - want[a][1]) < 1e-15, "app %d unused", a);
        ck_assert_msg(fabs(s.apps[a].entropy - want[a][2]) < 1e-15, "app %d entropy %g", a, s.apps[a].entropy);
    }
    ck_assert_int_eq(s.apps[2].selections, 12);
    ck_assert(routing_stats_load(&s, 2, 1) == 0.5 && routing_stats_load(&s, 3, 0) == 0);
    double m, u, h;
    routing_stats_mean(&s, &m, &u, &h);
    ck_assert(fabs(m - 7.0 / 4) < 1e-15 && fabs(u - 2.25 / 4) < 1e-15 && fabs(h - 1.5 / 4) < 1e-15);
    routing_stats_free(&s);
}
END_TEST

/* Round trip, then each refusal on an altered copy of the written JSON. */
static cJSON *written(void) {
    const int64_t c[6] = {5, 1, 0, 2, 2, 2};
    RoutingStats s;
    routing_stats_from_counts(&s, c, 0, 2, 3, 1, 6);
    cJSON *j = routing_stats_to_json(&s);
    routing_stats_free(&s);
    return j;
}

static void expect_refusal(cJSON *j, const char *needle) {
    RoutingStats s;
    char err[512] = "";
    ck_assert_int_eq(routing_stats_from_json(&s, j, "r.json", "routing", err, sizeof err), -1);
    ck_assert_msg(strstr(err, needle) != NULL, "error \"%s\" does not name \"%s\"", err, needle);
    ck_assert_msg(strncmp(err, "r.json: ", 8) == 0, "error \"%s\" does not start with the file", err);
    cJSON_Delete(j);
}

START_TEST(json_round_trip_and_refusals) {
    cJSON *j = written();
    RoutingStats s;
    char err[512] = "";
    ck_assert_msg(routing_stats_from_json(&s, j, "r.json", "routing", err, sizeof err) == 0, "%s", err);
    ck_assert(s.n_apps == 2 && s.n_experts == 3 && s.k == 1 && s.tokens == 6 && s.counts[0] == 5);
    ck_assert(fabs(s.apps[0].max_over_mean - 2.5) < 1e-15 && fabs(s.apps[1].entropy - 1) < 1e-15);
    routing_stats_free(&s);
    cJSON_Delete(j);

    j = written();
    cJSON_AddNumberToObject(j, "extra", 1);
    expect_refusal(j, "routing.extra: unknown key");

    j = written();
    cJSON *apps = cJSON_GetObjectItem(j, "applications");
    cJSON_DeleteItemFromArray(cJSON_GetObjectItem(cJSON_GetArrayItem(apps, 1), "counts"), 2);
    expect_refusal(j, "routing.applications[1].counts: 2 entries, expected n_experts = 3");

    j = written();
    apps = cJSON_GetObjectItem(j, "applications");
    cJSON_ReplaceItemInArray(cJSON_GetObjectItem(cJSON_GetArrayItem(apps, 0), "counts"), 1, cJSON_CreateNumber(0.5));
    expect_refusal(j, "routing.applications[0].counts[1]: not a non-negative integer");

    j = written();
    apps = cJSON_GetObjectItem(j, "applications");
    cJSON_ReplaceItemInArray(cJSON_GetObjectItem(cJSON_GetArrayItem(apps, 0), "counts"), 1, cJSON_CreateNumber(-1));
    expect_refusal(j, "routing.applications[0].counts[1]: not a non-negative integer");

    j = written();
    cJSON_ReplaceItemInObject(j, "tokens", cJSON_CreateNumber(5)); /* 6 selections with k = 1 need 6 tokens */
    expect_refusal(j, "routing.applications[0].counts: 6 selections, more than k * tokens = 1 * 5");

    j = written();
    apps = cJSON_GetObjectItem(j, "applications");
    cJSON_ReplaceItemInObject(cJSON_GetArrayItem(apps, 1), "entropy", cJSON_CreateNumber(0.9));
    expect_refusal(j, "routing.applications[1].entropy: 0.90000000000000002, but the counts give 0.99");

    j = written();
    cJSON_DeleteItemFromObject(j, "k");
    expect_refusal(j, "missing required key routing.k");
}
END_TEST

/* Expert capacity: "dropped" per application, written with the counts (the kept assignments), read back, and refused
 * when present in some applications only, not an exact count, or over k * tokens with the counts. */
static cJSON *written_dropped(void) {
    const int64_t c[6] = {3, 1, 0, 2, 1, 2}, d[2] = {2, 1};
    RoutingStats s;
    routing_stats_from_counts(&s, c, 1, 2, 3, 2, 6);
    routing_stats_set_dropped(&s, d);
    ck_assert(fabs(routing_stats_dropped_fraction(&s, 0) - 2.0 / 6.0) < 1e-15);
    ck_assert(fabs(routing_stats_dropped_fraction(&s, 1) - 1.0 / 6.0) < 1e-15);
    cJSON *j = routing_stats_to_json(&s);
    routing_stats_free(&s);
    return j;
}

START_TEST(capacity_dropped) {
    cJSON *j = written();
    RoutingStats s;
    char err[512] = "";
    ck_assert_msg(routing_stats_from_json(&s, j, "r.json", "routing", err, sizeof err) == 0, "%s", err);
    ck_assert(s.dropped == NULL && routing_stats_dropped_fraction(&s, 0) == 0.0); /* no capacity: none recorded */
    routing_stats_free(&s);
    cJSON_Delete(j);

    j = written_dropped();
    ck_assert_msg(routing_stats_from_json(&s, j, "r.json", "routing", err, sizeof err) == 0, "%s", err);
    ck_assert(s.dropped != NULL && s.dropped[0] == 2 && s.dropped[1] == 1 && s.first_app == 1);
    ck_assert(fabs(routing_stats_dropped_fraction(&s, 0) - 2.0 / 6.0) < 1e-15);
    cJSON *again = routing_stats_to_json(&s); /* the round trip keeps it */
    ck_assert(cJSON_Compare(j, again, true));
    cJSON_Delete(again);
    routing_stats_free(&s);
    cJSON_Delete(j);

    j = written_dropped();
    cJSON_DeleteItemFromObject(cJSON_GetArrayItem(cJSON_GetObjectItem(j, "applications"), 1), "dropped");
    expect_refusal(j, "routing.applications[1].dropped: missing, unlike applications[0]");
    j = written();
    cJSON_AddNumberToObject(cJSON_GetArrayItem(cJSON_GetObjectItem(j, "applications"), 1), "dropped", 0);
    expect_refusal(j, "routing.applications[1].dropped: present, unlike applications[0]");
    j = written_dropped();
    cJSON_ReplaceItemInObject(cJSON_GetArrayItem(cJSON_GetObjectItem(j, "applications"), 0), "dropped",
                              cJSON_CreateNumber(1.5));
    expect_refusal(j, "routing.applications[0].dropped: not a non-negative integer");
    j = written_dropped();
    cJSON_ReplaceItemInObject(cJSON_GetArrayItem(cJSON_GetObjectItem(j, "applications"), 0), "dropped",
                              cJSON_CreateNumber(9)); /* 4 kept + 9 dropped > k * tokens = 12 */
    expect_refusal(j, "routing.applications[0].counts: 4 selections + 9 dropped, more than k * tokens = 2 * 6");
}
END_TEST

/* A pyramid (model.ff_n_experts_per_layer): application 0 has 2 experts, application 1 has 4 (the record's E); each
 * application's figures use its own E_a, its counts array has E_a entries and says "n_experts"; a uniform model's
 * record has no per-application key (older records read as E_a = E). */
START_TEST(per_application_experts) {
    const int64_t c[8] = {3, 3, 0, 0, 6, 0, 0, 0}; /* stride 4; app 0: {3,3} balanced over its 2 */
    const int app_e[2] = {2, 4};
    RoutingStats s;
    routing_stats_from_counts_per_app(&s, c, 1, 2, 4, app_e, 1, 6);
    ck_assert(routing_stats_app_experts(&s, 0) == 2 && routing_stats_app_experts(&s, 1) == 4);
    ck_assert(s.apps[0].max_over_mean == 1 && s.apps[0].unused_fraction == 0 && fabs(s.apps[0].entropy - 1) < 1e-15);
    ck_assert(s.apps[1].max_over_mean == 4 && s.apps[1].unused_fraction == 0.75 && s.apps[1].entropy == 0);
    cJSON *j = routing_stats_to_json(&s);
    routing_stats_free(&s);
    const cJSON *a0 = cJSON_GetArrayItem(cJSON_GetObjectItem(j, "applications"), 0);
    ck_assert(cJSON_GetObjectItem(a0, "n_experts")->valueint == 2 &&
              cJSON_GetArraySize(cJSON_GetObjectItem(a0, "counts")) == 2);
    char err[512] = "";
    ck_assert_msg(routing_stats_from_json(&s, j, "r.json", "routing", err, sizeof err) == 0, "%s", err);
    ck_assert(s.n_experts == 4 && routing_stats_app_experts(&s, 0) == 2 && routing_stats_app_experts(&s, 1) == 4);
    ck_assert(s.apps[0].max_over_mean == 1 && s.counts[4] == 6 && s.counts[2] == 0);
    routing_stats_free(&s);
    /* an application's E_a outside [k, n_experts], or counts of another length: refused */
    cJSON *a1 = cJSON_GetArrayItem(cJSON_GetObjectItem(j, "applications"), 1);
    cJSON_ReplaceItemInObject(a1, "n_experts", cJSON_CreateNumber(5));
    ck_assert_int_eq(routing_stats_from_json(&s, j, "r.json", "routing", err, sizeof err), -1);
    ck_assert_msg(strstr(err, "routing.applications[1].n_experts: 5, expected k (1) to the record's n_experts (4)"),
                  "%s", err);
    cJSON_ReplaceItemInObject(a1, "n_experts", cJSON_CreateNumber(3));
    ck_assert_int_eq(routing_stats_from_json(&s, j, "r.json", "routing", err, sizeof err), -1);
    ck_assert_msg(strstr(err, "routing.applications[1].counts: 4 entries, expected n_experts = 3"), "%s", err);
    cJSON_Delete(j);
    /* all E_a = E: the uniform record, without the per-application key */
    const int same[2] = {4, 4};
    routing_stats_from_counts_per_app(&s, c, 0, 2, 4, same, 1, 6);
    ck_assert_ptr_null(s.app_experts);
    j = routing_stats_to_json(&s);
    ck_assert_ptr_null(cJSON_GetObjectItem(cJSON_GetArrayItem(cJSON_GetObjectItem(j, "applications"), 0), "n_experts"));
    cJSON_Delete(j);
    routing_stats_free(&s);
}
END_TEST

int main(void) {
    Suite *s = suite_create("routing_stats");
    TCase *tc = tcase_create("routing_stats");
    tcase_add_test(tc, derived_figures);
    tcase_add_test(tc, json_round_trip_and_refusals);
    tcase_add_test(tc, capacity_dropped);
    tcase_add_test(tc, per_application_experts);
    suite_add_tcase(s, tc);
    return run_test_suite(s);
}
