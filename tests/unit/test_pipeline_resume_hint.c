/* The continue command an interrupted bin/train prints: the make command the user typed (RESUME=0 turned into
 * RESUME=auto), else its own command line quoted for a shell with --auto-resume added. */
#include <check.h>
#include <string.h>

#include "pipeline/base/resume_hint.h"
#include "tests/unit/suite_runner.h"

static const char *hint(int argc, char *const *argv, const char *repro, bool resumes, bool under_make, int world) {
    static char buf[4096];
    const ResumeHintInput in = {argc, argv, repro, resumes, under_make, world};
    resume_hint(buf, sizeof buf, &in);
    return buf;
}

static const char *quoted(const char *s) {
    static char buf[256];
    buf[0] = '\0';
    ck_assert(shell_quote_append(buf, sizeof buf, s));
    return buf;
}

START_TEST(quotes_only_what_needs_it) {
    ck_assert_str_eq(quoted("runs/ci/dense_qa"), "runs/ci/dense_qa");
    ck_assert_str_eq(quoted("--set"), "--set");
    ck_assert_str_eq(quoted("train.lr=1e-3"), "train.lr=1e-3");
    ck_assert_str_eq(quoted("my runs/x"), "'my runs/x'");
    ck_assert_str_eq(quoted("it's"), "'it'\\''s'");
    ck_assert_str_eq(quoted("$HOME"), "'$HOME'");
    ck_assert_str_eq(quoted("a*"), "'a*'");
    ck_assert_str_eq(quoted(""), "''");
    char small[6] = "";
    ck_assert(!shell_quote_append(small, sizeof small, "too long"));
}
END_TEST

START_TEST(make_command_as_typed) {
    ck_assert_str_eq(hint(0, NULL, "make reproduce EXPERIMENT=ci SET=\"train.lr=1e-3 train.warmup=2\"", true, true, 1),
                     "rerun `make reproduce EXPERIMENT=ci SET=\"train.lr=1e-3 train.warmup=2\"` to continue from the "
                     "checkpoint");
    /* RESUME=0 would start over: the same command with RESUME=auto (a RESUME= inside a quoted SET stays) */
    ck_assert_str_eq(hint(0, NULL, "make train RUN=dense_qa RESUME=0 SET='x=RESUME=0'", false, true, 1),
                     "rerun `make train RUN=dense_qa SET='x=RESUME=0' RESUME=auto` to continue from the checkpoint "
                     "(RESUME=0 starts over)");
    /* an empty REPRO_COMMAND is no command */
    char *argv[] = {"bin/train", "--config", "c.json", "--auto-resume", NULL};
    ck_assert_str_eq(hint(4, argv, "", true, false, 1), "continue with `bin/train --config c.json --auto-resume`");
}
END_TEST

START_TEST(own_command_line) {
    char *argv[] = {"bin/train", "--config", "experiments/ci/dense_qa.json", "--out", "my runs/x", "--set",
                    "train.note=it's", NULL};
    ck_assert_str_eq(hint(7, argv, NULL, false, false, 1),
                     "continue with `bin/train --config experiments/ci/dense_qa.json --out 'my runs/x' --set "
                     "'train.note=it'\\''s' --auto-resume`");
    char *resumed[] = {"bin/train", "--out", "r", "--resume", NULL};
    ck_assert_str_eq(hint(4, resumed, NULL, true, false, 1), "continue with `bin/train --out r --resume`");
    ck_assert_str_eq(hint(4, resumed, NULL, true, true, 2),
                     "continue with `mpirun -np 2 bin/train --out r --resume` (or rerun the make command that "
                     "started it)");
    ck_assert_str_eq(hint(3, argv, NULL, false, true, 1),
                     "continue with `bin/train --config experiments/ci/dense_qa.json --auto-resume` (or rerun the make "
                     "command that started it with RESUME=auto; RESUME=0 starts over)");
}
END_TEST

int main(void) {
    Suite *s = suite_create("pipeline_resume_hint");
    TCase *tc = tcase_create("resume_hint");
    tcase_add_test(tc, quotes_only_what_needs_it);
    tcase_add_test(tc, make_command_as_typed);
    tcase_add_test(tc, own_command_line);
    suite_add_tcase(s, tc);
    return run_test_suite(s);
}
