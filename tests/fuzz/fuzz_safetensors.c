/* Safetensors checkpoints (model.safetensors, model/model_checkpoint.c): the config stored in the header, then a
 * load into a tiny MoEUT of fixed shape (names, dtypes F32/F64/BF16, shapes, offsets all come from the input).
 * FUZZ_WRITE_SEED=PATH writes that tiny model's own checkpoint (the seed corpus file) and exits. */
#include <cjson/cJSON.h>

#include "kernels/backend.h"
#include "model/model.h"
#include "tests/fuzz/fuzz_common.h"

static Model *g_model;

static Model *tiny_model(void) {
    if (g_model) return g_model;
    const char *json = "{\"arch\":\"moeut\",\"n_tokens\":11,\"d_model\":8,\"n_layers\":4,\"n_heads\":2,\"d_head\":4,"
                       "\"ff_n_experts\":5,\"ff_expert_size\":3,\"ff_k\":2,\"att_n_experts\":3,\"att_k\":2,"
                       "\"group_size\":2}";
    cJSON *o = cJSON_Parse(json);
    ModelConfig cfg;
    char err[512];
    if (!o || model_config_from_json(&cfg, o, "fuzz", err, sizeof err) != 0) abort();
    cJSON_Delete(o);
    g_model = model_create(&cfg, backend_cpu_create());
    model_init_weights(g_model, 1);
    return g_model;
}

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    const char *seed_out = getenv("FUZZ_WRITE_SEED");
    if (seed_out) {
        char err[512];
        if (model_save_safetensors(tiny_model(), seed_out, err, sizeof err) != 0) {
            fprintf(stderr, "%s\n", err);
            exit(1);
        }
        exit(0);
    }
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char path[600], err[4096] = "";
    fuzz_write_file("model.safetensors", data, size, path, sizeof path);
    ModelConfig cfg;
    int rc = model_read_checkpoint_config(path, &cfg, err, sizeof err);
    fuzz_check_error(rc, err);
    if (rc == 0) (void)model_count_params(&cfg);
    err[0] = '\0';
    rc = model_load_safetensors(tiny_model(), path, err, sizeof err);
    fuzz_check_error(rc, err);
    return 0;
}
