/* Shared by the libFuzzer harnesses (tests/fuzz/fuzz_*.c): the readers under test take paths, so each input is
 * written to a file in one scratch directory per process (removed at exit), and read back through the real reader.
 * A harness must leave no state behind between inputs (LeakSanitizer runs at exit, and a leak per input would be
 * an out-of-memory later): every reader's result is freed whether it succeeded or not. */
#ifndef TESTS_FUZZ_FUZZ_COMMON_H
#define TESTS_FUZZ_FUZZ_COMMON_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "pipeline/base/atomic_file.h"
#include "pipeline/base/log.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static char fuzz_scratch_dir[256];

static void fuzz_remove_scratch(void) {
    if (fuzz_scratch_dir[0]) remove_tree(fuzz_scratch_dir);
}

/* The scratch directory (created on first use, under TMPDIR or /tmp). Errors end the process: they are the test
 * machine's, not the reader's. */
static const char *fuzz_dir(void) {
    if (!fuzz_scratch_dir[0]) {
        const char *tmp = getenv("TMPDIR");
        snprintf(fuzz_scratch_dir, sizeof fuzz_scratch_dir, "%s/dmfuzz.XXXXXX", tmp && tmp[0] ? tmp : "/tmp");
        if (!mkdtemp(fuzz_scratch_dir)) {
            perror("fuzz: mkdtemp");
            abort();
        }
        atexit(fuzz_remove_scratch);
        log_set_verbosity(0); /* readers' info lines would flood the fuzzer's output */
    }
    return fuzz_scratch_dir;
}

/* Writes data[n] to <scratch>/<name> (name may contain one directory level, created) and puts the path in path. */
static void fuzz_write_file(const char *name, const uint8_t *data, size_t n, char *path, size_t cap) {
    snprintf(path, cap, "%s/%s", fuzz_dir(), name);
    char dir[512];
    snprintf(dir, sizeof dir, "%s", path);
    char *slash = strrchr(dir, '/');
    if (slash) *slash = '\0';
    char err[512];
    if (mkdir_p(dir, err, sizeof err) != 0) {
        fprintf(stderr, "fuzz: %s\n", err);
        abort();
    }
    FILE *f = fopen(path, "wb");
    if (!f || (n && fwrite(data, 1, n, f) != n) || fclose(f) != 0) {
        perror(path);
        abort();
    }
}

/* Checks a reader's error contract: on failure it wrote a message. (It may quote control characters from the
 * input; pipeline/base/log.c escapes them when the message is printed, so it stays one line.) */
static void fuzz_check_error(int rc, const char *err) {
    if (rc != 0 && !err[0]) {
        fprintf(stderr, "fuzz: reader failed without an error message\n");
        abort();
    }
}

#endif
