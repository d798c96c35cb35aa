/* Dataset manifest (datasets/dm_math_v1.0.json) loading and the fetch output manifest's up-to-date check. */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "datasets/fetch_dataset_manifest.h"
#include "datasets/fetch_output.h"
#include "pipeline/base/atomic_file.h"
#include "pipeline/base/config.h"
#include "tests/unit/suite_runner.h"

static char g_dir[256];

static void setup(void) {
    snprintf(g_dir, sizeof g_dir, "/tmp/test_fetch_manifest.%ld", (long)getpid());
    char err[256];
    ck_assert_int_eq(mkdir_p(g_dir, err, sizeof err), 0);
}
static void teardown(void) { remove_tree(g_dir); }

static int array_len(const cJSON *a) { return cJSON_GetArraySize(a); }

START_TEST(project_manifest_loads) {
    DatasetManifest m;
    char err[512] = "";
    ck_assert_msg(dataset_manifest_load("datasets/dm_math_v1.0.json", &m, err, sizeof err) == 0, "%s", err);
    ck_assert_str_eq(m.url, "https://storage.googleapis.com/mathematics-dataset/mathematics_dataset-v1.0.tar.gz");
    ck_assert_int_eq(m.size, 2333082954LL);
    ck_assert_ptr_null(m.sha256); /* none published */
    ck_assert_int_eq(m.n_train_modules, 56);
    ck_assert_int_eq(array_len(m.extrapolate_modules), 15);
    ck_assert_int_eq(array_len(m.arithmetic_modules), 9);
    ck_assert_int_eq(array_len(m.arithmetic_extrapolate_modules), 6);
    ck_assert_int_eq(array_len(cJSON_GetObjectItem(m.train_modules, "arithmetic")), 9);
    ck_assert_str_eq(m.paper_filter, "arithmetic__.*");
    ck_assert_str_eq(m.embedded_path, "datasets/dm_math_sample.tar.gz");
    ck_assert(is_sha256_hex(m.embedded_sha256));
    dataset_manifest_free(&m);
}
END_TEST

/* Loads the project manifest, applies an edit, saves it to g_dir and returns the load error text. */
static int load_edited(void (*edit)(cJSON *), char *err, size_t errlen) {
    char e2[512];
    cJSON *root = json_load_file("datasets/dm_math_v1.0.json", JSON_KIND_MANIFEST, e2, sizeof e2);
    ck_assert_ptr_nonnull(root);
    edit(root);
    char path[400];
    snprintf(path, sizeof path, "%s/m.json", g_dir);
    ck_assert_int_eq(json_save_file(path, root, e2, sizeof e2), 0);
    cJSON_Delete(root);
    DatasetManifest m;
    int rc = dataset_manifest_load(path, &m, err, errlen);
    if (rc == 0) dataset_manifest_free(&m);
    return rc;
}

static void add_unknown(cJSON *r) { cJSON_AddNumberToObject(r, "mirror", 1); }
static void size_string(cJSON *r) { cJSON_ReplaceItemInObject(r, "size", cJSON_CreateString("big")); }
static void bad_sha(cJSON *r) { cJSON_ReplaceItemInObject(r, "sha256", cJSON_CreateString("abc")); }
static void good_sha(cJSON *r) {
    cJSON_ReplaceItemInObject(r, "sha256", cJSON_CreateString("ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"));
}
static void stray_arith(cJSON *r) { cJSON_AddItemToArray(cJSON_GetObjectItem(r, "arithmetic_modules"), cJSON_CreateString("arithmetic__nope")); }
static void wrong_area(cJSON *r) {
    cJSON_AddItemToArray(cJSON_GetObjectItem(cJSON_GetObjectItem(r, "train_modules"), "algebra"), cJSON_CreateString("numbers__gcd"));
}
static void emb_unknown(cJSON *r) { cJSON_AddStringToObject(cJSON_GetObjectItem(r, "embedded_sample"), "sha1", "x"); }
static void no_url(cJSON *r) { cJSON_DeleteItemFromObject(r, "url"); }

START_TEST(bad_manifests_rejected) {
    char err[512];
    ck_assert_int_eq(load_edited(add_unknown, err, sizeof err), -1);
    ck_assert_msg(strstr(err, "m.json: mirror: unknown key"), "%s", err);
    ck_assert_int_eq(load_edited(size_string, err, sizeof err), -1);
    ck_assert_msg(strstr(err, "size: expected an integer, got a string"), "%s", err);
    ck_assert_int_eq(load_edited(bad_sha, err, sizeof err), -1);
    ck_assert_msg(strstr(err, "sha256: expected 64 hex digits"), "%s", err);
    ck_assert_int_eq(load_edited(good_sha, err, sizeof err), 0);
    ck_assert_int_eq(load_edited(stray_arith, err, sizeof err), -1);
    ck_assert_msg(strstr(err, "'arithmetic__nope' is not in train_modules.arithmetic"), "%s", err);
    ck_assert_int_eq(load_edited(wrong_area, err, sizeof err), -1);
    ck_assert_msg(strstr(err, "train_modules.algebra[8]"), "%s", err);
    ck_assert_int_eq(load_edited(emb_unknown, err, sizeof err), -1);
    ck_assert_msg(strstr(err, "embedded_sample.sha1: unknown key"), "%s", err);
    ck_assert_int_eq(load_edited(no_url, err, sizeof err), -1);
    ck_assert_msg(strstr(err, "missing required key url"), "%s", err);
}
END_TEST

START_TEST(output_manifest_up_to_date) {
    ExtractedFile files[1] = {{"train-easy", "arithmetic__mul.txt", 3, 40, "00"}};
    ExtractedFile corpus[1] = {{"train-easy", "arithmetic__mul.txt", 2, 30, "11"}};
    ExtractResult r = {files, 1, corpus, 1};
    FetchRecord rec = {"embedded", "abcd", 1234, "arithmetic__.*", 10000, NULL, NULL, 0};
    char path[400], err[512];
    snprintf(path, sizeof path, "%s/raw/manifest.json", g_dir);
    ck_assert_int_eq(fetch_output_up_to_date(path, &rec), 0); /* absent */
    ck_assert_int_eq(fetch_output_write(path, &rec, &r, err, sizeof err), 0);
    ck_assert_int_eq(fetch_output_up_to_date(path, &rec), 1);
    FetchRecord other = rec;
    other.filter = ".*";
    ck_assert_int_eq(fetch_output_up_to_date(path, &other), 0);
    other = rec;
    other.archive_sha256 = "abce";
    ck_assert_int_eq(fetch_output_up_to_date(path, &other), 0);
    other = rec;
    other.tokenizer_corpus_pairs = 5;
    ck_assert_int_eq(fetch_output_up_to_date(path, &other), 0);
    other = rec; /* the corpus now wanted from another archive: not what was extracted */
    other.corpus_source = "embedded";
    other.corpus_archive_sha256 = "ef01";
    other.corpus_archive_bytes = 99;
    ck_assert_int_eq(fetch_output_up_to_date(path, &other), 0);
    /* Content check of the record. */
    cJSON *j = json_load_file(path, JSON_KIND_MANIFEST, err, sizeof err);
    ck_assert_ptr_nonnull(j);
    ck_assert_str_eq(cJSON_GetObjectItem(j, "schema")->valuestring, "dm-math-raw");
    const cJSON *f0 = cJSON_GetArrayItem(cJSON_GetObjectItem(j, "files"), 0);
    ck_assert_str_eq(cJSON_GetObjectItem(f0, "split")->valuestring, "train-easy");
    ck_assert_int_eq(cJSON_GetObjectItem(f0, "pairs")->valueint, 3);
    const cJSON *c0 = cJSON_GetArrayItem(cJSON_GetObjectItem(j, "tokenizer_corpus"), 0);
    ck_assert_ptr_null(cJSON_GetObjectItem(c0, "split"));
    ck_assert_int_eq(cJSON_GetObjectItem(c0, "pairs")->valueint, 2);
    ck_assert_ptr_null(cJSON_GetObjectItem(j, "tokenizer_corpus_archive")); /* only with a second archive */
    cJSON_Delete(j);
    /* A corrupt manifest is simply not up to date. */
    ck_assert_int_eq(write_file_atomic(path, "{", 1, err, sizeof err), 0);
    ck_assert_int_eq(fetch_output_up_to_date(path, &rec), 0);
}
END_TEST

/* --tokenizer-corpus-source: the corpus archive is recorded, and the up-to-date check compares its bytes' hash. */
START_TEST(output_manifest_corpus_archive) {
    ExtractedFile files[1] = {{"train-easy", "arithmetic__mul.txt", 3, 40, "00"}};
    ExtractedFile corpus[1] = {{"train-easy", "algebra__linear_1d.txt", 2, 30, "11"}};
    ExtractResult r = {files, 1, corpus, 1};
    FetchRecord rec = {"arith.tar.gz", "abcd", 1234, "arithmetic__.*", 10000, "embedded", "ef01", 99};
    char path[400], err[512];
    snprintf(path, sizeof path, "%s/raw/manifest.json", g_dir);
    ck_assert_int_eq(fetch_output_write(path, &rec, &r, err, sizeof err), 0);
    ck_assert_int_eq(fetch_output_up_to_date(path, &rec), 1);
    FetchRecord other = rec;
    other.corpus_archive_sha256 = "ef02"; /* the corpus archive changed */
    ck_assert_int_eq(fetch_output_up_to_date(path, &other), 0);
    other = rec; /* no second archive any more: the corpus must come from the main one again */
    other.corpus_source = NULL;
    other.corpus_archive_sha256 = NULL;
    other.corpus_archive_bytes = 0;
    ck_assert_int_eq(fetch_output_up_to_date(path, &other), 0);
    other = rec; /* the same bytes under another name are the same input */
    other.corpus_source = "file:///elsewhere/sample.tar.gz";
    ck_assert_int_eq(fetch_output_up_to_date(path, &other), 1);
    cJSON *j = json_load_file(path, JSON_KIND_MANIFEST, err, sizeof err);
    ck_assert_ptr_nonnull(j);
    const cJSON *ca = cJSON_GetObjectItem(j, "tokenizer_corpus_archive");
    ck_assert_ptr_nonnull(ca);
    ck_assert_str_eq(cJSON_GetObjectItem(ca, "source")->valuestring, "embedded");
    ck_assert_str_eq(cJSON_GetObjectItem(ca, "sha256")->valuestring, "ef01");
    ck_assert_int_eq(cJSON_GetObjectItem(ca, "bytes")->valueint, 99);
    ck_assert_str_eq(cJSON_GetObjectItem(j, "source")->valuestring, "arith.tar.gz");
    cJSON_Delete(j);
}
END_TEST

int main(void) {
    Suite *s = suite_create("fetch_manifest");
    TCase *tc = tcase_create("manifest");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, project_manifest_loads);
    tcase_add_test(tc, bad_manifests_rejected);
    tcase_add_test(tc, output_manifest_up_to_date);
    tcase_add_test(tc, output_manifest_corpus_archive);
    suite_add_tcase(s, tc);
    return run_test_suite(s);
}
