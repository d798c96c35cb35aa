/* The progress line's numbers: rates as people read them (no "0 steps/s" on a slow run), durations, and a rate and
 * time left measured from the first update (a resumed run's earlier steps do not count as done by this process). */
#include <check.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "pipeline/base/progress.h"
#include "tests/unit/suite_runner.h"

static const char *rate(double per_s, const char *unit) {
    static char buf[64];
    progress_format_rate(buf, sizeof buf, per_s, unit);
    return buf;
}

static const char *duration(double s) {
    static char buf[64];
    progress_format_duration(buf, sizeof buf, s);
    return buf;
}

START_TEST(rates_read_well) {
    ck_assert_str_eq(rate(250.4, "steps"), "250 steps/s");
    ck_assert_str_eq(rate(12.34, "steps"), "12.3 steps/s");
    ck_assert_str_eq(rate(3.44, "steps"), "3.4 steps/s");
    ck_assert_str_eq(rate(1.0, "steps"), "1.0 steps/s");
    /* below one per second: the time one step takes, never "0 steps/s" */
    ck_assert_str_eq(rate(0.31, "steps"), "3.2 s/step");
    ck_assert_str_eq(rate(0.05, "steps"), "20 s/step");
    ck_assert_str_eq(rate(0.004, "steps"), "4.2 min/step");
    ck_assert_str_eq(rate(0.5, "examples"), "2.0 s/example");
    ck_assert_str_eq(rate(0.5, "ex"), "2.0 s/ex");
    ck_assert_str_eq(rate(0.5, ""), "2.0 s/unit");
    ck_assert_str_eq(rate(1.5 * 1048576.0, "B"), "1.5 MiB/s");
    ck_assert_str_eq(rate(500, "B"), "500 B/s");
    ck_assert_str_eq(rate(0.2, "B"), "0 B/s");
    ck_assert_str_eq(rate(0, "steps"), "-");
    ck_assert_str_eq(rate(-1, "steps"), "-");
}
END_TEST

START_TEST(durations_read_well) {
    ck_assert_str_eq(duration(0), "0 s");
    ck_assert_str_eq(duration(44.6), "45 s");
    ck_assert_str_eq(duration(89), "89 s");
    ck_assert_str_eq(duration(600), "10 min");
    ck_assert_str_eq(duration(4000), "67 min");
    ck_assert_str_eq(duration(8400), "2 h 20 min");
    ck_assert_str_eq(duration(-5), "0 s");
}
END_TEST

/* Runs the reporter with stderr redirected to a file and returns what it printed. */
static void captured_line(char *out, size_t n, void (*body)(Progress *)) {
    char path[] = "/tmp/test_progress_XXXXXX";
    int fd = mkstemp(path);
    ck_assert(fd >= 0);
    fflush(stderr);
    int saved = dup(STDERR_FILENO);
    ck_assert(dup2(fd, STDERR_FILENO) >= 0);
    Progress p;
    progress_start(&p, "train", 400, "steps");
    p.is_tty = 0; /* the plain line, whatever the test's stderr is */
    body(&p);
    fflush(stderr);
    dup2(saved, STDERR_FILENO);
    close(saved);
    FILE *f = fopen(path, "r");
    ck_assert(f != NULL);
    size_t len = fread(out, 1, n - 1, f);
    out[len] = '\0';
    fclose(f);
    close(fd);
    unlink(path);
}

static void resumed_slow_run(Progress *p) {
    progress_update(p, 100, NULL); /* resumed at step 100: the measurement starts here */
    p->base_s -= 10.0;             /* as if 10 s went by for the next 3 steps */
    progress_update(p, 103, "loss 2.5000");
    progress_finish(p);
}

START_TEST(rate_and_time_left_from_this_session) {
    char line[512];
    captured_line(line, sizeof line, resumed_slow_run);
    /* 3 steps in 10 s: 3.3 s/step (not 103 steps in 10 s), 297 steps left: 990 s, about 17 min */
    ck_assert_msg(strcmp(line, "train: 103 steps/400 steps (25.8%) 3.3 s/step, 17 min left | loss 2.5000\n") == 0,
                  "got: %s", line);
}
END_TEST

static void nothing_done_yet(Progress *p) {
    progress_update(p, 0, NULL);
    progress_finish(p);
}

START_TEST(no_rate_before_progress) {
    char line[512];
    captured_line(line, sizeof line, nothing_done_yet);
    ck_assert_msg(strcmp(line, "train: 0 steps/400 steps (0.0%) -\n") == 0, "got: %s", line);
}
END_TEST

int main(void) {
    Suite *s = suite_create("pipeline_progress");
    TCase *tc = tcase_create("progress");
    tcase_add_test(tc, rates_read_well);
    tcase_add_test(tc, durations_read_well);
    tcase_add_test(tc, rate_and_time_left_from_this_session);
    tcase_add_test(tc, no_rate_before_progress);
    suite_add_tcase(s, tc);
    return run_test_suite(s);
}
