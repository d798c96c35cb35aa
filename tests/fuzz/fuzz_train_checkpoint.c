/* A training checkpoint directory (runs/EXP/RUN/{state.json, model.safetensors, optim.safetensors},
 * model/training/train_checkpoint.c) as a resume reads it: the input's first byte picks which of the three files it replaces
 * in a copy of a real checkpoint of a tiny MoEUT (0 state.json, 1 optim.safetensors, 2 model.safetensors), the rest
 * of the input is that file. Then train_state_read and train_checkpoint_load (weights, AdamW moments, step, RNG and
 * loader state). FUZZ_WRITE_SEED=DIR writes the three seed files (DIR/state, DIR/optim, DIR/model, each with its
 * selector byte) and exits. */
#include <cjson/cJSON.h>

#include "kernels/backend.h"
#include "model/model.h"
#include "model/optimizer.h"
#include "model/training/train_checkpoint.h"
#include "tests/fuzz/fuzz_common.h"

static Model *g_model;
static AdamW g_opt;
static char g_template[600];
static const char *const FILES[3] = {TRAIN_STATE_FILE, TRAIN_OPTIM_FILE, TRAIN_MODEL_FILE};

static void die_setup(const char *what, const char *err) {
    fprintf(stderr, "fuzz_train_checkpoint: %s: %s\n", what, err);
    exit(1);
}

/* A real checkpoint of the tiny model, written once per process into <scratch>/template. */
static void setup(void) {
    if (g_model) return;
    const char *json = "{\"arch\":\"moeut\",\"n_tokens\":11,\"d_model\":8,\"n_layers\":4,\"n_heads\":2,\"d_head\":4,"
                       "\"ff_n_experts\":5,\"ff_expert_size\":3,\"ff_k\":2,\"att_n_experts\":3,\"att_k\":2,"
                       "\"group_size\":2}";
    cJSON *o = cJSON_Parse(json);
    ModelConfig cfg;
    char err[1024];
    if (!o || model_config_from_json(&cfg, o, "fuzz", err, sizeof err) != 0) die_setup("config", err);
    cJSON_Delete(o);
    Backend *be = backend_cpu_create();
    g_model = model_create(&cfg, be);
    model_init_weights(g_model, 1);
    adamw_init(&g_opt, be, model_n_params(g_model), 0.9, 0.999, 1e-8, 0.01);
    adamw_update(&g_opt, model_params(g_model), model_grads(g_model), 1e-3, 1.0);
    TrainState st;
    memset(&st, 0, sizeof st);
    run_provenance_init(&st.prov);
    st.step = 1;
    st.total_steps = 10;
    st.world_size = 2; /* a checkpoint resumed on 2 ranks at step 1 after 4: a history of two entries */
    world_size_history_start(&st.world_size_history, 4);
    if (world_size_history_continue(&st.world_size_history, 1, 2, err, sizeof err) != 0) die_setup("history", err);
    snprintf(st.config_sha256, sizeof st.config_sha256, "%064d", 0);
    snprintf(st.backend, sizeof st.backend, "cpu");
    snprintf(g_template, sizeof g_template, "%s/template", fuzz_dir());
    if (mkdir_p(g_template, err, sizeof err) != 0) die_setup("mkdir", err);
    if (train_checkpoint_save(g_template, g_model, &g_opt, &st, err, sizeof err) != 0) die_setup("save", err);
}

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    const char *seed_out = getenv("FUZZ_WRITE_SEED");
    if (!seed_out) return 0;
    setup();
    const char *names[3] = {"state", "optim", "model"};
    for (int i = 0; i < 3; i++) {
        char src[700], dst[700], err[512], *buf;
        size_t n;
        snprintf(src, sizeof src, "%s/%s", g_template, FILES[i]);
        snprintf(dst, sizeof dst, "%s/%s", seed_out, names[i]);
        if (read_file_all(src, &buf, &n, err, sizeof err) != 0) die_setup("read", err);
        FILE *f = fopen(dst, "wb");
        if (!f || fputc(i, f) == EOF || fwrite(buf, 1, n, f) != n || fclose(f) != 0) die_setup("write", dst);
        free(buf);
    }
    exit(0);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    setup();
    int which = data[0] % 3;
    char dir[700], path[800], err[4096] = "";
    snprintf(dir, sizeof dir, "%s/ckpt", fuzz_dir());
    for (int i = 0; i < 3; i++) {
        char name[64];
        snprintf(name, sizeof name, "ckpt/%s", FILES[i]);
        if (i == which) {
            fuzz_write_file(name, data + 1, size - 1, path, sizeof path);
        } else {
            char src[700], *buf;
            size_t n;
            snprintf(src, sizeof src, "%s/%s", g_template, FILES[i]);
            if (read_file_all(src, &buf, &n, err, sizeof err) != 0) die_setup("read", err);
            fuzz_write_file(name, (const uint8_t *)buf, n, path, sizeof path);
            free(buf);
        }
    }
    TrainState st;
    err[0] = '\0';
    int rc = train_state_read(dir, &st, err, sizeof err);
    fuzz_check_error(rc, err);
    err[0] = '\0';
    rc = train_checkpoint_load(dir, g_model, &g_opt, &st, err, sizeof err);
    fuzz_check_error(rc, err);
    return 0;
}
