/* Archive extraction (datasets/archive_extract.c) of a hostile .tar.gz or .tar: traversal, links, devices, huge or
 * malformed members, bombs, overlong names. Every input is extracted with the filter '.*' and a tokenizer corpus
 * into a fresh directory, removed afterwards. A decompression bomb must stop at the extractor's own bound, not at the
 * fuzzer's memory or time limit. */
#include "datasets/archive_extract.h"
#include "tests/fuzz/fuzz_common.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char path[600], out[700], err[4096] = "";
    fuzz_write_file("a.tar.gz", data, size, path, sizeof path);
    snprintf(out, sizeof out, "%s/out", fuzz_dir());
    remove_tree(out);
    ExtractOptions o = {path, out, ".*", 10, (int64_t)size, 0, 0, NULL, NULL}; /* 0, NULL: the default caps */
    ExtractResult r;
    memset(&r, 0, sizeof r);
    int rc = dm_extract_archive(&o, &r, err, sizeof err);
    fuzz_check_error(rc, err);
    if (rc == 0) dm_extract_result_free(&r);
    remove_tree(out);
    return 0;
}
