/* safetensors: writer/reader round trip (all dtypes, scalar, metadata, sorted names, padded header), rejection of
 * malformed files built byte by byte (by st_read and by the header-only st_read_header alike), and the check for
 * non-finite values. */
#include <check.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "pipeline/base/atomic_file.h"
#include "pipeline/base/safetensors.h"
#include "tests/unit/suite_runner.h"

static char g_dir[256];
static char g_path[512];

static void setup(void) {
    snprintf(g_dir, sizeof g_dir, "/tmp/test_pipeline_safetensors.%ld", (long)getpid());
    char err[256];
    ck_assert_int_eq(mkdir_p(g_dir, err, sizeof err), 0);
    snprintf(g_path, sizeof g_path, "%s/t.safetensors", g_dir);
}
static void teardown(void) { remove_tree(g_dir); }

START_TEST(round_trip) {
    float a[6] = {1, -2, 3.5f, 4, 5, 6};         // [2,3]
    double b[2] = {0.1, -1e300};                   // [2]
    uint16_t c[3] = {0x3f80, 0xc000, 0x0000};      // bf16: 1, -2, 0
    int32_t d[1] = {-7};                           // scalar []
    int64_t e[2] = {INT64_C(1) << 40, -3};         // [2,1]
    int64_t sa[2] = {2, 3}, sb[1] = {2}, sc[1] = {3}, se[2] = {2, 1};
    StWriter w;
    st_writer_init(&w);
    st_writer_add(&w, "zeta", ST_F32, 2, sa, a);
    st_writer_add(&w, "alpha", ST_F64, 1, sb, b);
    st_writer_add(&w, "mid.bf", ST_BF16, 1, sc, c);
    st_writer_add(&w, "scalar", ST_I32, 0, NULL, d);
    st_writer_add(&w, "ints", ST_I64, 2, se, e);
    st_writer_meta(&w, "step", "12");
    st_writer_meta(&w, "note", "quote \" and \\ ok");
    char err[512] = "";
    ck_assert_msg(st_writer_save(&w, g_path, err, sizeof err) == 0, "%s", err);
    st_writer_free(&w);

    /* Layout: header length multiple of 8, tensors in name order in the data section. */
    char *raw;
    size_t n;
    ck_assert_int_eq(read_file_all(g_path, &raw, &n, err, sizeof err), 0);
    uint64_t hlen = 0;
    for (int i = 7; i >= 0; i--) hlen = (hlen << 8) | (uint8_t)raw[i];
    ck_assert_int_eq(hlen % 8, 0);
    ck_assert_uint_eq(n, 8 + hlen + 16 + 6 + 16 + 4 + 24);
    char *pa = strstr(raw + 8, "\"alpha\""), *pz = strstr(raw + 8, "\"zeta\""), *pi = strstr(raw + 8, "\"ints\"");
    ck_assert(pa && pz && pi && pa < pi && pi < pz);
    ck_assert_ptr_nonnull(strstr(raw + 8, "\"scalar\":{\"dtype\":\"I32\",\"shape\":[]"));
    free(raw);

    StFile f;
    ck_assert_msg(st_read(&f, g_path, err, sizeof err) == 0, "%s", err);
    ck_assert_int_eq(f.n_tensors, 5);
    ck_assert_str_eq(st_meta(&f, "step"), "12");
    ck_assert_str_eq(st_meta(&f, "note"), "quote \" and \\ ok");
    ck_assert_ptr_null(st_meta(&f, "absent"));
    const StTensor *t = st_find(&f, "zeta");
    ck_assert_ptr_nonnull(t);
    ck_assert_int_eq(t->ndim, 2);
    ck_assert_int_eq(t->shape[0], 2);
    ck_assert_int_eq(t->shape[1], 3);
    float fa[6];
    st_to_f32(t, fa);
    ck_assert_mem_eq(fa, a, sizeof a);
    double db[2];
    st_to_f64(st_find(&f, "alpha"), db);
    ck_assert_mem_eq(db, b, sizeof b);
    float fc[3];
    st_to_f32(st_find(&f, "mid.bf"), fc);
    ck_assert_float_eq(fc[0], 1.0f);
    ck_assert_float_eq(fc[1], -2.0f);
    ck_assert_float_eq(fc[2], 0.0f);
    t = st_find(&f, "scalar");
    ck_assert_int_eq(t->ndim, 0);
    ck_assert_uint_eq(t->numel, 1);
    ck_assert_int_eq(t->dtype, ST_I32);
    double dd;
    st_to_f64(t, &dd);
    ck_assert_double_eq(dd, -7.0);
    t = st_find(&f, "ints");
    int64_t back[2];
    memcpy(back, t->data, sizeof back);
    ck_assert_int_eq(back[0], INT64_C(1) << 40);
    ck_assert_int_eq(back[1], -3);
    ck_assert_ptr_null(st_find(&f, "nope"));
    st_free(&f);
}
END_TEST

START_TEST(duplicate_names_refused_by_writer) {
    float a = 1;
    StWriter w;
    st_writer_init(&w);
    st_writer_add(&w, "x", ST_F32, 0, NULL, &a);
    st_writer_add(&w, "x", ST_F32, 0, NULL, &a);
    char err[512] = "";
    ck_assert_int_eq(st_writer_save(&w, g_path, err, sizeof err), -1);
    ck_assert_msg(strstr(err, "duplicate tensor name 'x'"), "%s", err);
    ck_assert(!file_exists(g_path));
    st_writer_free(&w);
}
END_TEST

/* Writes 8-byte length + header + data bytes and returns st_read's result; err gets the message. st_read_header must
 * come to the same verdict with the same message (it checks the same header against the file's size). */
static int read_crafted(const char *header, const void *data, size_t data_len, char *err, size_t errlen) {
    size_t hl = strlen(header);
    size_t total = 8 + hl + data_len;
    uint8_t *buf = malloc(total);
    ck_assert_ptr_nonnull(buf);
    for (int i = 0; i < 8; i++) buf[i] = (uint8_t)((uint64_t)hl >> (8 * i));
    memcpy(buf + 8, header, hl);
    if (data_len) memcpy(buf + 8 + hl, data, data_len);
    ck_assert_int_eq(write_file_atomic(g_path, buf, total, err, errlen), 0);
    free(buf);
    StFile f;
    int rc = st_read(&f, g_path, err, errlen);
    if (rc == 0) st_free(&f);
    char header_err[512] = "";
    int header_rc = st_read_header(&f, g_path, header_err, sizeof header_err);
    if (header_rc == 0) st_free(&f);
    ck_assert_int_eq(header_rc, rc);
    if (rc != 0) ck_assert_str_eq(header_err, err);
    return rc;
}

#define EXPECT_REJECT(header, nbytes, needle)                                                                        \
    do {                                                                                                             \
        char err[512] = "";                                                                                          \
        uint8_t data[64] = {0};                                                                                      \
        ck_assert_int_eq(read_crafted(header, data, nbytes, err, sizeof err), -1);                                   \
        ck_assert_msg(strstr(err, needle) != NULL, "expected '%s' in: %s", needle, err);                             \
        ck_assert_msg(strstr(err, g_path) != NULL, "path missing in: %s", err);                                      \
    } while (0)

START_TEST(crafted_valid_file_accepted) {
    char err[512] = "";
    uint8_t data[12] = {0};
    ck_assert_msg(read_crafted("{\"b\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[8,12]},"
                               "\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}  ",
                               data, 12, err, sizeof err) == 0,
                  "%s", err);
}
END_TEST

START_TEST(malformed_rejected) {
    EXPECT_REJECT("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}", 8, "not valid JSON");
    EXPECT_REJECT("[1,2]", 0, "header does not start with a JSON object");
    EXPECT_REJECT("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}} x", 8, "trailing bytes in the header");
    EXPECT_REJECT("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,16]}}", 8, "out of range");
    EXPECT_REJECT("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[8,0]}}", 8, "out of range");
    EXPECT_REJECT("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
                  "\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[4,12]}}",
                  12, "overlaps");
    EXPECT_REJECT("{\"a\":{\"dtype\":\"F32\",\"shape\":[3],\"data_offsets\":[0,8]}}", 8, "expected 12");
    EXPECT_REJECT("{\"a\":{\"dtype\":\"F64\",\"shape\":[2],\"data_offsets\":[0,8]}}", 8, "expected 16");
    EXPECT_REJECT("{\"a\":{\"dtype\":\"F16\",\"shape\":[4],\"data_offsets\":[0,8]}}", 8, "unsupported dtype F16");
    EXPECT_REJECT("{\"a\":{\"dtype\":\"F32\",\"shape\":[-2],\"data_offsets\":[0,8]}}", 8, "shape[0]");
    EXPECT_REJECT("{\"a\":{\"dtype\":\"F32\",\"shape\":[1.5],\"data_offsets\":[0,8]}}", 8, "shape[0]");
    EXPECT_REJECT("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0]}}", 8, "data_offsets must be");
    EXPECT_REJECT("{\"a\":{\"dtype\":\"F32\",\"shape\":[2]}}", 8, "missing data_offsets");
    EXPECT_REJECT("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8],\"x\":1}}", 8, "unknown key 'x'");
    EXPECT_REJECT("{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}", 8, "hole");
    EXPECT_REJECT("{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}", 8, "trailing bytes after");
    EXPECT_REJECT("{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
                  "\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}",
                  8, "duplicate tensor 'a'");
    EXPECT_REJECT("{\"__metadata__\":{\"k\":1}}", 0, "__metadata__.k is not a string");
    /* a \u0000 would end the C string early: "config\u0000x" would read as "config" */
    EXPECT_REJECT("{\"__metadata__\":{\"config\\u0000x\":\"1\"}}", 0, "holds \\u0000");
}
END_TEST

/* st_read_header reads the header and nothing else: the tensor list and metadata, data pointers NULL, the byte
 * ranges still checked against the file's size. */
START_TEST(header_only_read) {
    float a[4] = {1, 2, 3, 4};
    int64_t sa[1] = {4};
    StWriter w;
    st_writer_init(&w);
    st_writer_add(&w, "a", ST_F32, 1, sa, a);
    st_writer_meta(&w, "config", "{}");
    char err[512] = "";
    ck_assert_msg(st_writer_save(&w, g_path, err, sizeof err) == 0, "%s", err);
    st_writer_free(&w);
    StFile f;
    ck_assert_msg(st_read_header(&f, g_path, err, sizeof err) == 0, "%s", err);
    ck_assert_int_eq(f.n_tensors, 1);
    ck_assert_str_eq(f.tensors[0].name, "a");
    ck_assert_uint_eq(f.tensors[0].numel, 4);
    ck_assert_ptr_null(f.tensors[0].data);
    ck_assert_str_eq(st_meta(&f, "config"), "{}");
    ck_assert_uint_lt(f.size, 8 + 200); /* just the header */
    st_free(&f);
    /* the data cut short: the tensor's range lies past the end of the file */
    char *raw;
    size_t n;
    ck_assert_int_eq(read_file_all(g_path, &raw, &n, err, sizeof err), 0);
    ck_assert_int_eq(write_file_atomic(g_path, raw, n - 4, err, sizeof err), 0);
    free(raw);
    ck_assert_int_eq(st_read_header(&f, g_path, err, sizeof err), -1);
    ck_assert_msg(strstr(err, "tensor 'a': data_offsets [0, 16] out of range (data section is 12 bytes)"), "%s", err);
}
END_TEST

/* st_check_finite names the first non-finite element of any float dtype; integer tensors are not looked at. */
START_TEST(non_finite_values_found) {
    float a[3] = {1, 2, 3};
    double b[2] = {0.5, 0.25};
    uint16_t c[2] = {0x3f80, 0x3f80};
    int32_t d[2] = {-1, 0x7fc00000}; /* an I32 with a NaN's bit pattern is just an integer */
    int64_t s3[1] = {3}, s2[1] = {2};
    char err[512] = "";
    for (int k = 0; k < 5; k++) {
        if (k == 1) a[2] = NAN;
        if (k == 2) a[2] = 3, b[1] = -INFINITY;
        if (k == 3) b[1] = 0.25, c[1] = 0x7f80; /* bf16 +inf */
        if (k == 4) c[1] = 0x7fc1;             /* bf16 NaN */
        StWriter w;
        st_writer_init(&w);
        st_writer_add(&w, "a", ST_F32, 1, s3, a);
        st_writer_add(&w, "b", ST_F64, 1, s2, b);
        st_writer_add(&w, "c", ST_BF16, 1, s2, c);
        st_writer_add(&w, "d", ST_I32, 1, s2, d);
        ck_assert_msg(st_writer_save(&w, g_path, err, sizeof err) == 0, "%s", err);
        st_writer_free(&w);
        StFile f;
        ck_assert_msg(st_read(&f, g_path, err, sizeof err) == 0, "%s", err);
        static const char *const want[] = {NULL, "tensor a: element 2 is NaN", "tensor b: element 1 is infinite",
                                           "tensor c: element 1 is infinite", "tensor c: element 1 is NaN"};
        err[0] = '\0';
        ck_assert_int_eq(st_check_finite(&f, g_path, err, sizeof err), want[k] ? -1 : 0);
        if (want[k]) ck_assert_msg(strstr(err, g_path) == err && strstr(err, want[k]), "%s", err);
        st_free(&f);
    }
}
END_TEST

START_TEST(bad_lengths_rejected) {
    char err[512] = "";
    /* Header length larger than the file. */
    uint8_t buf[16] = {200, 0, 0, 0, 0, 0, 0, 0, '{', '}'};
    ck_assert_int_eq(write_file_atomic(g_path, buf, 10, err, sizeof err), 0);
    StFile f;
    ck_assert_int_eq(st_read(&f, g_path, err, sizeof err), -1);
    ck_assert_msg(strstr(err, "exceeds the file"), "%s", err);
    /* Too short to hold the length. */
    ck_assert_int_eq(write_file_atomic(g_path, buf, 5, err, sizeof err), 0);
    ck_assert_int_eq(st_read(&f, g_path, err, sizeof err), -1);
    ck_assert_msg(strstr(err, "too short"), "%s", err);
    /* Missing file. */
    unlink(g_path);
    ck_assert_int_eq(st_read(&f, g_path, err, sizeof err), -1);
    ck_assert_msg(strstr(err, g_path), "%s", err);
}
END_TEST

int main(void) {
    Suite *s = suite_create("pipeline_safetensors");
    TCase *tc = tcase_create("safetensors");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, round_trip);
    tcase_add_test(tc, duplicate_names_refused_by_writer);
    tcase_add_test(tc, crafted_valid_file_accepted);
    tcase_add_test(tc, malformed_rejected);
    tcase_add_test(tc, bad_lengths_rejected);
    tcase_add_test(tc, header_only_read);
    tcase_add_test(tc, non_finite_values_found);
    suite_add_tcase(s, tc);
    return run_test_suite(s);
}
