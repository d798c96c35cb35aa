/* The data config (experiments/EXP/data.json): its "tokenize" section (datasets/tokenize_config.c) and its "fetch"
 * section (datasets/fetch_config.c), both strict readers of the same file. */
#include "datasets/fetch_config.h"
#include "datasets/tokenizer_stage.h"
#include "tests/fuzz/fuzz_common.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char path[600], err[4096] = "";
    fuzz_write_file("data.json", data, size, path, sizeof path);
    TokenizeConfig tc;
    tokenize_config_defaults(&tc);
    int rc = tokenize_config_load(path, &tc, err, sizeof err);
    fuzz_check_error(rc, err);
    FetchConfig fc;
    memset(&fc, 0, sizeof fc);
    err[0] = '\0';
    rc = fetch_config_load(path, &fc, err, sizeof err);
    fuzz_check_error(rc, err);
    fetch_config_free(&fc);
    return 0;
}
