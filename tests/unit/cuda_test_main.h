/* The start and end of every CUDA unit test's main(): skip visibly (exit 77, "SKIP: ...") where no usable CUDA GPU
 * exists, and run Check suites without fork(), because a CUDA context does not survive fork(). */
#ifndef TESTS_UNIT_CUDA_TEST_MAIN_H
#define TESTS_UNIT_CUDA_TEST_MAIN_H

#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/backend.h"

/* Returns only when the cuda backend can be created (and prints the device); otherwise exits 77 with a SKIP line. */
static inline void cuda_test_require_gpu(void) {
    char err[256];
    Backend *probe = backend_create("cuda", err, sizeof err);
    if (!probe) {
        const char *prefix = "no usable CUDA GPU: ";
        if (strncmp(err, prefix, strlen(prefix)) != 0) { /* e.g. a bad DMMATH_CUDA_* value: a failure, not a skip */
            printf("FAIL: the cuda backend could not be created: %s\n", err);
            exit(EXIT_FAILURE);
        }
        printf("SKIP: no usable CUDA GPU (%s)\n", err + strlen(prefix));
        exit(77);
    }
    printf("cuda device: %s\n", probe->device_name);
    backend_destroy(probe);
}

/* Sets (value != NULL) or unsets var; returns its previous value (malloc'd copy, NULL if it was unset). */
static inline char *cuda_test_swap_env(const char *var, const char *value) {
    const char *old = getenv(var);
    char *saved = old ? strdup(old) : NULL;
    if (value)
        setenv(var, value, 1);
    else
        unsetenv(var);
    return saved;
}

/* A cuda backend created with DMMATH_CUDA_ATTENTION=impl ("auto", "fused", "gemm", "flash") and, unless
 * chunk_pairs is NULL, DMMATH_CUDA_ATTENTION_CHUNK_PAIRS=chunk_pairs; the backend reads them at creation only, and the
 * environment is restored before returning. NULL on failure, with the reason in err. */
static inline Backend *cuda_backend_with_attention(const char *impl, const char *chunk_pairs, char *err,
                                                   size_t errlen) {
    char *old_impl = cuda_test_swap_env("DMMATH_CUDA_ATTENTION", impl);
    char *old_chunk = cuda_test_swap_env("DMMATH_CUDA_ATTENTION_CHUNK_PAIRS", chunk_pairs);
    Backend *be = backend_create("cuda", err, errlen);
    free(cuda_test_swap_env("DMMATH_CUDA_ATTENTION", old_impl));
    free(cuda_test_swap_env("DMMATH_CUDA_ATTENTION_CHUNK_PAIRS", old_chunk));
    free(old_impl), free(old_chunk);
    return be;
}

/* Runs every test of s (and frees it) in this process; EXIT_SUCCESS when all passed. */
static inline int run_cuda_test_suite(Suite *s) {
    SRunner *sr = srunner_create(s);
    srunner_set_fork_status(sr, CK_NOFORK);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}

#endif
