/* read_file_limited (pipeline/base/limits.h): a file larger than its kind's bound is refused before anything is
 * allocated for it (sparse files: their size costs no disk), naming the file, the size and the bound; json_load_file
 * applies the JSON bound. */
#include <check.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "pipeline/base/atomic_file.h"
#include "pipeline/base/config.h"
#include "pipeline/base/limits.h"
#include "tests/unit/suite_runner.h"

static void sparse_file(const char *path, unsigned long long bytes) {
    int fd = open(path, O_CREAT | O_TRUNC | O_WRONLY, 0644);
    ck_assert_int_ge(fd, 0);
    ck_assert_int_eq(ftruncate(fd, (off_t)bytes), 0);
    close(fd);
}

START_TEST(over_the_bound_is_refused_before_reading) {
    char path[128], err[512] = "";
    snprintf(path, sizeof path, "/tmp/test_read_limited.%ld.json", (long)getpid());
    sparse_file(path, LIMIT_JSON_FILE_BYTES + 1);
    char *data = (char *)1;
    size_t n = 7;
    ck_assert_int_eq(read_file_limited(path, LIMIT_JSON_FILE_BYTES, "JSON file", &data, &n, err, sizeof err), -1);
    ck_assert_ptr_null(data);
    char want[256];
    snprintf(want, sizeof want, "%s: %llu bytes, more than the 16 MiB a JSON file may hold", path,
             (unsigned long long)LIMIT_JSON_FILE_BYTES + 1);
    ck_assert_str_eq(err, want);
    err[0] = '\0';
    ck_assert_ptr_null(json_load_file(path, JSON_KIND_RECORD, err, sizeof err));
    snprintf(want, sizeof want, "%s: %llu bytes, more than the 8 MiB a JSON file (a record) may hold", path,
             (unsigned long long)LIMIT_JSON_FILE_BYTES + 1);
    ck_assert_str_eq(err, want);
    /* At the bound: read (a sparse file reads as NUL bytes, which json_load_file then refuses as not text). */
    sparse_file(path, 16);
    ck_assert_int_eq(read_file_limited(path, 16, "JSON file", &data, &n, err, sizeof err), 0);
    ck_assert_uint_eq(n, 16);
    free(data);
    unlink(path);
}
END_TEST

int main(void) {
    Suite *s = suite_create("read_limited");
    TCase *tc = tcase_create("read_limited");
    tcase_add_test(tc, over_the_bound_is_refused_before_reading);
    suite_add_tcase(s, tc);
    return run_test_suite(s);
}
