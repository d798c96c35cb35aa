/* world_size_history (model/training/world_size_history.h): the ranks of each part of a run, kept across elastic
 * resumes. A change of the number of ranks adds an entry at the step it begins; an entry that trained no step is
 * replaced (and dropped when the number returns to the one before); the reader accepts only a history that could
 * have been written (starting at 0, increasing steps up to the checkpoint's, a change per entry, ending with the
 * recorded world_size) and reads an absent one as world_size ranks from step 0; the JSON round-trips. */
#include <check.h>
#include <stdio.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "model/training/world_size_history.h"
#include "tests/unit/suite_runner.h"

static void expect(const WorldSizeHistory *h, int n, const long (*eras)[2]) {
    ck_assert_int_eq(h->n, n);
    for (int i = 0; i < n; i++) {
        ck_assert_int_eq(h->era[i].from_step, eras[i][0]);
        ck_assert_int_eq(h->era[i].world_size, eras[i][1]);
    }
}

START_TEST(changes_are_recorded_at_their_step) {
    WorldSizeHistory h;
    char err[256];
    world_size_history_start(&h, 4);
    ck_assert_int_eq(world_size_history_continue(&h, 10, 4, err, sizeof err), 0); /* same W: nothing new */
    ck_assert_int_eq(world_size_history_continue(&h, 20, 2, err, sizeof err), 0);
    ck_assert_int_eq(world_size_history_continue(&h, 30, 1, err, sizeof err), 0);
    expect(&h, 3, (const long[][2]){{0, 4}, {20, 2}, {30, 1}});
    /* resumed at 30 again with 2 ranks: the 1-rank part trained nothing, so it goes, and 2 ranks continue from 20 */
    ck_assert_int_eq(world_size_history_continue(&h, 30, 2, err, sizeof err), 0);
    expect(&h, 2, (const long[][2]){{0, 4}, {20, 2}});
    ck_assert_int_eq(world_size_history_continue(&h, 20, 8, err, sizeof err), 0); /* replaces the empty part */
    expect(&h, 2, (const long[][2]){{0, 4}, {20, 8}});
    world_size_history_start(&h, 1);
    ck_assert_int_eq(world_size_history_continue(&h, 0, 2, err, sizeof err), 0); /* stopped before step 1 */
    expect(&h, 1, (const long[][2]){{0, 2}});
}
END_TEST

START_TEST(a_full_history_refuses_another_change) {
    WorldSizeHistory h;
    char err[256] = "";
    world_size_history_start(&h, 1);
    for (long i = 1; i < WORLD_SIZE_HISTORY_MAX; i++)
        ck_assert_int_eq(world_size_history_continue(&h, i, 1 + i % 2, err, sizeof err), 0);
    ck_assert_int_eq(h.n, WORLD_SIZE_HISTORY_MAX);
    ck_assert_int_eq(world_size_history_continue(&h, 100, 4, err, sizeof err), -1);
    ck_assert_ptr_nonnull(strstr(err, "continue it with 2 rank(s)"));
    ck_assert_int_eq(world_size_history_continue(&h, 100, 2, err, sizeof err), 0); /* the same W still resumes */
}
END_TEST

static int read_text(const char *text, long step, long world_size, WorldSizeHistory *h, char *err, size_t n) {
    cJSON *v = text ? cJSON_Parse(text) : NULL;
    ck_assert(!text || v);
    int rc = world_size_history_read(v, "state.json", step, world_size, h, err, n);
    cJSON_Delete(v);
    return rc;
}

START_TEST(json_round_trip_and_absent) {
    WorldSizeHistory h, back;
    char err[256];
    world_size_history_start(&h, 4);
    ck_assert_int_eq(world_size_history_continue(&h, 20, 2, err, sizeof err), 0);
    cJSON *o = cJSON_CreateObject();
    world_size_history_to_json(o, &h);
    char *text = cJSON_PrintUnformatted(o);
    ck_assert_str_eq(text, "{\"world_size_history\":[{\"from_step\":0,\"world_size\":4},"
                           "{\"from_step\":20,\"world_size\":2}]}");
    ck_assert_int_eq(world_size_history_read(cJSON_GetObjectItem(o, "world_size_history"), "s", 25, 2, &back, err,
                                             sizeof err), 0);
    expect(&back, 2, (const long[][2]){{0, 4}, {20, 2}});
    cJSON_free(text);
    cJSON_Delete(o);
    ck_assert_int_eq(read_text(NULL, 7, 3, &back, err, sizeof err), 0); /* older records: W from step 0 */
    expect(&back, 1, (const long[][2]){{0, 3}});
    char t[WORLD_SIZE_HISTORY_MAX * 40 + 8] = "[";
    for (int i = 0; i < WORLD_SIZE_HISTORY_MAX; i++)
        snprintf(t + strlen(t), sizeof t - strlen(t), "%s{\"from_step\":%d,\"world_size\":%d}", i ? "," : "", i,
                 1 + i % 2);
    strcat(t, "]");
    ck_assert_int_eq(read_text(t, 100, 2, &back, err, sizeof err), 0); /* the most it holds */
    ck_assert_int_eq(back.n, WORLD_SIZE_HISTORY_MAX);
}
END_TEST

START_TEST(impossible_histories_are_refused) {
    const struct {
        const char *text, *message;
    } bad[] = {
        {"[]", "world_size_history: expected an array of 1 to 64 entries"},
        {"{}", "world_size_history: expected an array"},
        {"[3]", "world_size_history[0]: expected an object"},
        {"[{\"from_step\":1,\"world_size\":2}]", "world_size_history[0].from_step: 1, expected 0"},
        {"[{\"from_step\":0,\"world_size\":0}]", "world_size_history[0].world_size: 0, expected >= 1"},
        {"[{\"from_step\":0,\"world_size\":4},{\"from_step\":0,\"world_size\":2}]",
         "world_size_history[1].from_step: 0, expected a step after the entry before"},
        {"[{\"from_step\":0,\"world_size\":4},{\"from_step\":11,\"world_size\":2}]",
         "world_size_history[1].from_step: 11, expected a step after the entry before and <= step"},
        {"[{\"from_step\":0,\"world_size\":2},{\"from_step\":5,\"world_size\":2}]",
         "world_size_history[1].world_size: 2, expected >= 1 and a change from the entry before"},
        {"[{\"from_step\":0,\"world_size\":4}]", "world_size_history ends with 4 rank(s), but world_size is 2"},
        {"[{\"from_step\":0,\"world_size\":2,\"ranks\":2}]", "world_size_history[0].ranks: unknown key"},
        {"[{\"from_step\":0}]", "world_size_history[0].world_size"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        WorldSizeHistory h;
        char err[256] = "";
        ck_assert_int_eq(read_text(bad[i].text, 10, 2, &h, err, sizeof err), -1);
        ck_assert_msg(strstr(err, bad[i].message) && strncmp(err, "state.json: ", 12) == 0, "%s: got \"%s\"",
                      bad[i].text, err);
    }
}
END_TEST

static Suite *world_size_history_suite(void) {
    Suite *s = suite_create("world_size_history");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, changes_are_recorded_at_their_step);
    tcase_add_test(tc, a_full_history_refuses_another_change);
    tcase_add_test(tc, json_round_trip_and_absent);
    tcase_add_test(tc, impossible_histories_are_refused);
    suite_add_tcase(s, tc);
    return s;
}

int main(void) { return run_test_suite(world_size_history_suite()); }
