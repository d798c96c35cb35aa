/* SHA-256 against the FIPS 180-2 known vectors, streaming in pieces, and over a file. */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "pipeline/base/atomic_file.h"
#include "pipeline/base/sha256.h"
#include "tests/unit/suite_runner.h"

START_TEST(known_vectors) {
    char hex[65];
    sha256_hex("abc", 3, hex);
    ck_assert_str_eq(hex, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
    sha256_hex("", 0, hex);
    ck_assert_str_eq(hex, "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
    const char *two_blocks = "abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq";
    sha256_hex(two_blocks, strlen(two_blocks), hex);
    ck_assert_str_eq(hex, "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
}
END_TEST

START_TEST(streaming_equals_one_shot) {
    /* One million 'a' (the FIPS long vector), fed in uneven pieces. */
    size_t n = 1000000;
    char *buf = malloc(n);
    ck_assert_ptr_nonnull(buf);
    memset(buf, 'a', n);
    Sha256 *s = sha256_new();
    size_t off = 0, step = 1;
    while (off < n) {
        size_t k = step < n - off ? step : n - off;
        sha256_update(s, buf + off, k);
        off += k;
        step = step * 3 + 1;
    }
    char hex[65];
    sha256_final_hex(s, hex);
    ck_assert_str_eq(hex, "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
    free(buf);
}
END_TEST

START_TEST(file_digest) {
    char path[256], err[256];
    snprintf(path, sizeof path, "/tmp/test_pipeline_sha256.%ld", (long)getpid());
    ck_assert_int_eq(write_file_atomic(path, "abc", 3, err, sizeof err), 0);
    char hex[65];
    ck_assert_int_eq(sha256_file_hex(path, hex, err, sizeof err), 0);
    ck_assert_str_eq(hex, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
    unlink(path);
    ck_assert_int_eq(sha256_file_hex(path, hex, err, sizeof err), -1);
    ck_assert_msg(strstr(err, path) != NULL, "message: %s", err);
}
END_TEST

int main(void) {
    Suite *s = suite_create("pipeline_sha256");
    TCase *tc = tcase_create("sha256");
    tcase_add_test(tc, known_vectors);
    tcase_add_test(tc, streaming_equals_one_shot);
    tcase_add_test(tc, file_digest);
    suite_add_tcase(s, tc);
    return run_test_suite(s);
}
