/* JSON readers in bounded memory (pipeline/base/limits.h): for each kind of JSON file, the worst files its limits admit
 * (the most values in the fewest bytes; one string as long as the byte limit) are loaded in a child process, whose
 * peak resident memory must stay under the kind's bound, 2 * max_bytes + 80 * max_values plus the process's own
 * baseline; one value or one byte more is refused before parsing, naming the file, the count and the limit. */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include "pipeline/base/atomic_file.h"
#include "pipeline/base/config.h"
#include "pipeline/base/limits.h"
#include "tests/unit/suite_runner.h"

/* Under AddressSanitizer every allocation carries redzones and quarantine: the bound is the release build's. */
#if defined(__SANITIZE_ADDRESS__)
#define UNDER_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define UNDER_ASAN 1
#endif
#endif
#ifndef UNDER_ASAN
#define UNDER_ASAN 0
#endif

static char g_path[128];

/* "[0,0,...,0]" with exactly `values` values (the array and values - 1 zeros) padded with spaces to `bytes`. */
static void write_many_values(uint64_t values, uint64_t bytes) {
    FILE *f = fopen(g_path, "w");
    ck_assert_ptr_nonnull(f);
    uint64_t written = 0;
    fputc('[', f);
    written++;
    for (uint64_t i = 0; i + 1 < values; i++) {
        fputs(i ? ",0" : "0", f);
        written += i ? 2 : 1;
    }
    fputc(']', f);
    written++;
    for (; written < bytes; written++) fputc(' ', f);
    ck_assert_int_eq(fclose(f), 0);
}

/* One string filling the byte limit: "xxxx...". */
static void write_long_string(uint64_t bytes) {
    FILE *f = fopen(g_path, "w");
    ck_assert_ptr_nonnull(f);
    fputc('"', f);
    for (uint64_t i = 0; i + 2 < bytes; i++) fputc('x', f);
    fputc('"', f);
    ck_assert_int_eq(fclose(f), 0);
}

/* Peak RSS (KiB) of a child that loads g_path as `kind` (load = 0: a child that only starts and exits, the
 * baseline); *loaded says whether the load succeeded. */
static long child_peak_kib(JsonKind kind, int load, int *loaded) {
    int fds[2];
    ck_assert_int_eq(pipe(fds), 0);
    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        close(fds[0]);
        char ok = 0, err[512];
        if (load) {
            cJSON *j = json_load_file(g_path, kind, err, sizeof err);
            ok = j != NULL;
            cJSON_Delete(j);
        }
        if (write(fds[1], &ok, 1) != 1) _exit(3);
        _exit(0);
    }
    close(fds[1]);
    char ok = 0;
    ck_assert_int_eq(read(fds[0], &ok, 1), 1);
    close(fds[0]);
    int status = 0;
    struct rusage ru;
    ck_assert_int_eq(wait4(pid, &status, 0, &ru), pid);
    ck_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    *loaded = ok;
    return ru.ru_maxrss;
}

START_TEST(worst_files_stay_under_their_bound) {
    snprintf(g_path, sizeof g_path, "/tmp/test_json_limits.%ld.json", (long)getpid());
    int loaded = 0;
    const long base_kib = child_peak_kib(JSON_KIND_CONFIG, 0, &loaded);
    for (int k = 0; k < JSON_KIND_N; k++) {
        const JsonLimit *lim = &JSON_LIMITS[k];
        const double bound_kib = (2.0 * (double)lim->max_bytes + 80.0 * (double)lim->max_values) / 1024.0;
        /* the most values the kind admits, in the fewest bytes */
        ck_assert_uint_le(2 * lim->max_values + 1, lim->max_bytes);
        write_many_values(lim->max_values, 2 * lim->max_values + 1);
        long peak = child_peak_kib((JsonKind)k, 1, &loaded);
        ck_assert_msg(loaded, "%s: the file at the value limit was refused", lim->name);
        if (!UNDER_ASAN)
            ck_assert_msg((double)(peak - base_kib) <= bound_kib, "%s: %llu values: peak %ld KiB over the baseline "
                          "%ld, bound %.0f KiB", lim->name, (unsigned long long)lim->max_values, peak - base_kib,
                          base_kib, bound_kib);
        printf("%s: %llu values in %llu bytes: peak %ld KiB above baseline (bound %.0f KiB)\n", lim->name,
               (unsigned long long)lim->max_values, (unsigned long long)(2 * lim->max_values + 1), peak - base_kib,
               bound_kib);
        /* one value more: refused before parsing, naming the count and the limit */
        write_many_values(lim->max_values + 1, 2 * lim->max_values + 3);
        char err[512], want[256];
        ck_assert_ptr_null(json_load_file(g_path, (JsonKind)k, err, sizeof err));
        snprintf(want, sizeof want, "%llu JSON values, more than the %llu %s may hold",
                 (unsigned long long)lim->max_values + 1, (unsigned long long)lim->max_values, lim->name);
        ck_assert_msg(strstr(err, want) && strstr(err, g_path), "%s", err);
        /* a string as long as the byte limit */
        write_long_string(lim->max_bytes);
        peak = child_peak_kib((JsonKind)k, 1, &loaded);
        ck_assert_msg(loaded, "%s: the string at the byte limit was refused", lim->name);
        if (!UNDER_ASAN)
            ck_assert_msg((double)(peak - base_kib) <= bound_kib, "%s: %llu-byte string: peak %ld KiB, bound %.0f KiB",
                          lim->name, (unsigned long long)lim->max_bytes, peak - base_kib, bound_kib);
        printf("%s: one %llu-byte string: peak %ld KiB above baseline (bound %.0f KiB)\n", lim->name,
               (unsigned long long)lim->max_bytes, peak - base_kib, bound_kib);
        /* one byte more: refused by size */
        write_long_string(lim->max_bytes + 1);
        ck_assert_ptr_null(json_load_file(g_path, (JsonKind)k, err, sizeof err));
        ck_assert_msg(strstr(err, "bytes, more than the"), "%s", err);
    }
    unlink(g_path);
}
END_TEST

START_TEST(value_count_is_an_upper_bound) {
    /* commas and brackets inside strings (escaped quotes included) are not values */
    const char *t = "{\"a,[{\": [1, 2, {\"b\": \"x\\\",y\"}], \"c\": null}";
    /* values: the object, the array, 1, 2, the inner object, "x\",y", null = 7 */
    ck_assert_uint_ge(json_count_values(t, strlen(t)), 7);
    ck_assert_uint_le(json_count_values(t, strlen(t)), 8);
    ck_assert_uint_eq(json_count_values("[]", 2), 2); /* an upper bound: the empty array counts its would-be slot */
    ck_assert_uint_eq(json_count_values("3", 1), 1);
}
END_TEST

int main(void) {
    Suite *s = suite_create("json_limits");
    TCase *tc = tcase_create("json_limits");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, worst_files_stay_under_their_bound);
    tcase_add_test(tc, value_count_is_an_upper_bound);
    suite_add_tcase(s, tc);
    return run_test_suite(s);
}
