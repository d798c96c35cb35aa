/* The run config (experiments/EXP/RUN.json): JSON parse, then the strict model/train reader and its validation
 * (model/train_config.c, model/model_config.c), as bin/train, evaluate and analyze read it. */
#include <cjson/cJSON.h>

#include "model/train_config.h"
#include "pipeline/base/config.h"
#include "tests/fuzz/fuzz_common.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char path[600], err[4096] = "";
    fuzz_write_file("run.json", data, size, path, sizeof path);
    cJSON *root = json_load_file(path, JSON_KIND_CONFIG, err, sizeof err);
    fuzz_check_error(root ? 0 : -1, err);
    if (!root) return 0;
    ModelConfig mc;
    TrainConfig tc;
    err[0] = '\0';
    int rc = run_config_parse(root, path, &mc, &tc, err, sizeof err);
    fuzz_check_error(rc, err);
    if (rc == 0) (void)model_count_params(&mc);
    cJSON_Delete(root);
    return 0;
}
