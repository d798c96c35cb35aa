/* The manifests of the data stages, from the same input: the dataset manifest (datasets/dm_math_v1.0.json, or
 * --manifest, read by fetch: datasets/fetch_dataset_manifest.c), and fetch's own OUT/manifest.json as fetch's
 * up-to-date check reads it (datasets/fetch_output.c) and as tokenize reads it to check its inputs
 * (datasets/raw_inputs.c). */
#include "datasets/fetch_dataset_manifest.h"
#include "datasets/fetch_output.h"
#include "datasets/raw_inputs.h"
#include "tests/fuzz/fuzz_common.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char path[600], err[4096] = "";
    fuzz_write_file("manifest.json", data, size, path, sizeof path);
    DatasetManifest m;
    memset(&m, 0, sizeof m);
    int rc = dataset_manifest_load(path, &m, err, sizeof err);
    fuzz_check_error(rc, err);
    if (rc == 0) dataset_manifest_free(&m);
    FetchRecord rec = {"embedded", "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef", 1234,
                       "arithmetic__.*", 10000, NULL, NULL, 0};
    (void)fetch_output_up_to_date(path, &rec);
    char raw_path[600];
    fuzz_write_file("raw/manifest.json", data, size, raw_path, sizeof raw_path);
    char raw_dir[600];
    snprintf(raw_dir, sizeof raw_dir, "%s/raw", fuzz_dir());
    err[0] = '\0';
    rc = tokenize_check_fetch_manifest(raw_dir, err, sizeof err);
    fuzz_check_error(rc, err);
    return 0;
}
