/* The end of every unit test's main(): run the Check suite and turn the result into the exit status. */
#ifndef TESTS_UNIT_SUITE_RUNNER_H
#define TESTS_UNIT_SUITE_RUNNER_H

#include <check.h>
#include <stdlib.h>

/* Runs every test of s (and frees it); EXIT_SUCCESS when all passed. */
static inline int run_test_suite(Suite *s) {
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}

#endif
