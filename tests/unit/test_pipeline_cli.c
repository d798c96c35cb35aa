/* Command-line parsing: values, defaults, --name=value, and the exit codes of --help (0) and bad input (2),
 * checked in forked children since cli_parse exits. Also a smoke test of the progress reporter. */
#include <check.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "pipeline/base/cli.h"
#include "pipeline/base/progress.h"
#include "tests/unit/suite_runner.h"

static const char *g_src;
static long g_n;
static double g_x;
static bool g_flag;

static void reset(void) {
    g_src = "default";
    g_n = 7;
    g_x = 0.5;
    g_flag = false;
}

static const CliOption OPTS[] = {
    {"source", OPT_STRING, &g_src, "data source (default: default)", false},
    {"n", OPT_INT, &g_n, "count (default 7)", false},
    {"x", OPT_DOUBLE, &g_x, "scale (default 0.5)", false},
    {"flag", OPT_FLAG, &g_flag, "a switch", false},
};
static const CliOption OPTS_REQ[] = {
    {"out", OPT_STRING, &g_src, "output", true},
};
static const CliOption OPTS_EMPTY_OK[] = {
    {"corpus", OPT_STRING_OR_EMPTY, &g_src, "'' = none", false},
};

/* Runs cli_parse in a child with stdout/stderr silenced; returns its exit status (or -1 if it did not exit). */
static int child_status(int argc, char **argv, const CliOption *opts, int n) {
    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        int devnull = open("/dev/null", O_WRONLY);
        dup2(devnull, 1);
        dup2(devnull, 2);
        reset();
        cli_parse(argc, argv, "prog", "summary", opts, n);
        _exit(42); /* parsed without exiting */
    }
    int st = 0;
    waitpid(pid, &st, 0);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

START_TEST(parses_values_and_keeps_defaults) {
    reset();
    char *argv[] = {"prog", "--source", "embedded", "--x=2.5", "--flag", NULL};
    cli_parse(5, argv, "prog", "s", OPTS, 4);
    ck_assert_str_eq(g_src, "embedded");
    ck_assert_int_eq(g_n, 7);
    ck_assert_double_eq(g_x, 2.5);
    ck_assert(g_flag);
}
END_TEST

START_TEST(help_exits_zero) {
    char *argv[] = {"prog", "--help", NULL};
    ck_assert_int_eq(child_status(2, argv, OPTS, 4), 0);
    char *argv2[] = {"prog", "--bogus", "--help", NULL};
    ck_assert_int_eq(child_status(3, argv2, OPTS, 4), 0);
    char *argv3[] = {"prog", "--help", NULL};
    ck_assert_int_eq(child_status(2, argv3, OPTS_REQ, 1), 0); /* help even with required options missing */
}
END_TEST

START_TEST(errors_exit_two) {
    char *unknown[] = {"prog", "--nope", NULL};
    ck_assert_int_eq(child_status(2, unknown, OPTS, 4), 2);
    char *missing_value[] = {"prog", "--n", NULL};
    ck_assert_int_eq(child_status(2, missing_value, OPTS, 4), 2);
    char *bad_int[] = {"prog", "--n", "12x", NULL};
    ck_assert_int_eq(child_status(3, bad_int, OPTS, 4), 2);
    char *bad_double[] = {"prog", "--x=abc", NULL};
    ck_assert_int_eq(child_status(2, bad_double, OPTS, 4), 2);
    char *positional[] = {"prog", "file.txt", NULL};
    ck_assert_int_eq(child_status(2, positional, OPTS, 4), 2);
    char *flag_value[] = {"prog", "--flag=1", NULL};
    ck_assert_int_eq(child_status(2, flag_value, OPTS, 4), 2);
    char *no_required[] = {"prog", NULL};
    ck_assert_int_eq(child_status(1, no_required, OPTS_REQ, 1), 2);
    /* An empty path (an unset shell variable) once trained into "/": "" joined with "/model.safetensors". */
    char *empty_out[] = {"prog", "--out", "", NULL};
    ck_assert_int_eq(child_status(3, empty_out, OPTS_REQ, 1), 2);
    char *empty_eq[] = {"prog", "--source=", NULL};
    ck_assert_int_eq(child_status(2, empty_eq, OPTS, 4), 2);
    char *empty_allowed[] = {"prog", "--corpus", "", NULL};
    ck_assert_int_eq(child_status(3, empty_allowed, OPTS_EMPTY_OK, 1), 42);
    char *ok[] = {"prog", "--n", "-3", NULL};
    ck_assert_int_eq(child_status(3, ok, OPTS, 4), 42);
}
END_TEST

/* A repeatable option collects its values in order; an empty one, a usage error found later, and too many exit 2. */
static CliStringList g_sets;
static const CliOption OPTS_LIST[] = {
    {"set", OPT_STRING_LIST, &g_sets, "KEY=VALUE, repeatable", false},
};

START_TEST(string_list_repeats) {
    memset(&g_sets, 0, sizeof g_sets);
    char *argv[] = {"prog", "--set", "train.lr=1e-3", "--set=train.seed=2", NULL};
    cli_parse(4, argv, "prog", "s", OPTS_LIST, 1);
    ck_assert_int_eq(g_sets.n, 2);
    ck_assert_str_eq(g_sets.items[0], "train.lr=1e-3");
    ck_assert_str_eq(g_sets.items[1], "train.seed=2"); /* only the first '=' separates the option's name */
    char *empty[] = {"prog", "--set", "", NULL};
    ck_assert_int_eq(child_status(3, empty, OPTS_LIST, 1), 2);
    char *many[2 + 2 * (CLI_LIST_MAX + 1)];
    many[0] = "prog";
    for (int i = 0; i <= CLI_LIST_MAX; i++) many[1 + 2 * i] = "--set", many[2 + 2 * i] = "a.b=1";
    many[1 + 2 * (CLI_LIST_MAX + 1)] = NULL;
    ck_assert_int_eq(child_status(1 + 2 * (CLI_LIST_MAX + 1), many, OPTS_LIST, 1), 2);
    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        int devnull = open("/dev/null", O_WRONLY);
        dup2(devnull, 2);
        cli_usage_die("prog", "--set 'x': expected KEY=VALUE");
    }
    int st = 0;
    waitpid(pid, &st, 0);
    ck_assert(WIFEXITED(st) && WEXITSTATUS(st) == 2);
}
END_TEST

START_TEST(progress_counts) {
    Progress p;
    progress_start(&p, "test", 100, "B");
    ck_assert_int_eq(p.total, 100);
    progress_update(&p, 50, "half");
    ck_assert_int_eq(p.done, 50);
    ck_assert_str_eq(p.extra, "half");
    progress_finish(&p);
    double a = now_seconds(), b = now_seconds();
    ck_assert(b >= a);
}
END_TEST

int main(void) {
    Suite *s = suite_create("pipeline_cli");
    TCase *tc = tcase_create("cli");
    tcase_add_test(tc, parses_values_and_keeps_defaults);
    tcase_add_test(tc, help_exits_zero);
    tcase_add_test(tc, errors_exit_two);
    tcase_add_test(tc, string_list_repeats);
    tcase_add_test(tc, progress_counts);
    suite_add_tcase(s, tc);
    return run_test_suite(s);
}
