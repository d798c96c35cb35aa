/* Checking and recording the initial checkpoint of an upcycled run (see train_init_from.h). */
#include "model/training/train_init_from.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/upcycle.h"
#include "pipeline/base/config.h"
#include "pipeline/base/log.h"
#include "pipeline/base/safetensors.h"
#include "pipeline/base/sha256.h"

/* The config as compact JSON text (every key: model_config_to_json), for an exact comparison. */
static char *config_text(const ModelConfig *mc) {
    cJSON *j = model_config_to_json(mc);
    CHECK_ALLOC(j);
    char *s = cJSON_PrintUnformatted(j);
    CHECK_ALLOC(s);
    cJSON_Delete(j);
    return s;
}

int train_init_from_check(const char *path, const cJSON *run, const ModelConfig *mc, const char *source,
                          RunProvenance *prov, char *err, size_t errlen) {
    const cJSON *section = cJSON_GetObjectItemCaseSensitive(run, "upcycle");
    if (!path && section) {
        set_err(err, errlen, "%s: upcycle: the run starts from converted weights: give the checkpoint bin/upcycle "
                "wrote with --init-from", source);
        return -1;
    }
    if (!path) return 0;
    if (!section) {
        set_err(err, errlen, "--init-from %s: %s has no \"upcycle\" section (only an upcycled run starts from other "
                "weights)", path, source);
        return -1;
    }
    UpcycleOptions want;
    if (upcycle_options_from_json(&want, section, source, err, errlen) != 0) return -1;
    ModelConfig have;
    if (model_read_checkpoint_config(path, &have, err, errlen) != 0) return -1;
    char *a = config_text(&have), *b = config_text(mc);
    int same = strcmp(a, b) == 0;
    cJSON_free(a);
    cJSON_free(b);
    if (!same) {
        set_err(err, errlen, "%s: __metadata__.config differs from the model section of %s (converted for another "
                "config: rerun bin/upcycle)", path, source);
        return -1;
    }
    StFile f;
    if (st_read(&f, path, err, errlen) != 0) return -1;
    int rc = -1;
    cJSON *u = NULL;
    /* A NaN or an infinity in the starting weights would make every step's loss NaN: refused before training. */
    if (st_check_finite(&f, path, err, errlen) != 0) goto done;
    const char *text = st_meta(&f, "upcycle");
    char where[600];
    snprintf(where, sizeof where, "%s: __metadata__", path);
    char upcycle_src[700];
    snprintf(upcycle_src, sizeof upcycle_src, "%s.upcycle", where);
    if (!text) {
        set_err(err, errlen, "%s: missing (not a checkpoint written by bin/upcycle)", upcycle_src);
        goto done;
    }
    if (!(u = json_parse_text(text, strlen(text), JSON_KIND_CONFIG, upcycle_src, err, errlen))) goto done;
    if (run_provenance_read_upcycle(prov, u, where, err, errlen) != 0) goto done;
    if (strcmp(prov->upcycle_from, want.from) != 0 || strcmp(prov->upcycle_method, upcycle_method_name(want.method)) ||
        prov->upcycle_seed != want.seed || prov->upcycle_noise != want.noise) {
        set_err(err, errlen, "%s.upcycle: converted from %s by %s (seed %ld, noise %g), but %s asks for %s by %s "
                "(seed %ld, noise %g): rerun bin/upcycle", where, prov->upcycle_from, prov->upcycle_method,
                prov->upcycle_seed, prov->upcycle_noise, source, want.from, upcycle_method_name(want.method),
                want.seed, want.noise);
        goto done;
    }
    if (strlen(path) >= sizeof prov->init_path) {
        set_err(err, errlen, "--init-from %s: path longer than %zu bytes", path, sizeof prov->init_path - 1);
        goto done;
    }
    snprintf(prov->init_path, sizeof prov->init_path, "%s", path);
    if (sha256_file_hex(path, prov->init_sha256, err, errlen) != 0) goto done;
    rc = 0;
done:
    cJSON_Delete(u);
    st_free(&f);
    return rc;
}
